"""Diagnosis at scale: the engine's compacted history gives exactly the findings the full
snapshots give, and big nodes with history are diagnosed in turn without caches thrashing.

Figures (time per diagnose, bytes per node of history) are printed, not asserted; run
``python tests/test_diagnose_perf.py`` for the full measurement (100 nodes, 1000 processes).
"""
from __future__ import annotations

import collections
import dataclasses
import gc
import sys
import time
import tracemalloc
from pathlib import Path

import pytest
from hypothesis import HealthCheck, assume, given
from hypothesis import strategies as st

if __name__ == "__main__":      # run as a script: the package lives one level up
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.fuzzing import examples
from console.diagnosis import who  # noqa: E402
from console.diagnosis import DEFAULT_GHOST_THRESHOLD_MIB, diagnose  # noqa: E402
from console.diagnosis.context import Situation  # noqa: E402
from console.diagnosis.history import PARENT, STREAKS, History  # noqa: E402
from console.actions.ladder import step_args, top_step  # noqa: E402
from console.rungs import proposable  # noqa: E402

RUNGS = proposable()
from console.actions.plan import plan_action  # noqa: E402
from console.model import ActionRecord, DriverProc, Gpu, NodeSnapshot, Proc, ThreadInfo  # noqa: E402
from console.clock import FakeClock  # noqa: E402
from console.sim.scenarios import scenario_names  # noqa: E402
from console.sources.sim import SimSource  # noqa: E402
from tests.sim_fixtures import take_step  # noqa: E402

T0 = 1_800_000_000.0


def situation(snap: NodeSnapshot, history) -> Situation:
    return Situation.build(snap, history, (), None, DEFAULT_GHOST_THRESHOLD_MIB)


def streaks(snap: NodeSnapshot, history) -> dict:
    """Situation.since for every process of ``snap``, every streak and every parent seen."""
    sit = situation(snap, history)
    parents = {p.ppid for p in snap.processes} | {1}
    return {(p.pid, what, pp): sit.since(p.pid, what, pp)
            for p in snap.processes for what in STREAKS for pp in (parents if what == PARENT else (None,))}


# ---------------------------------------------------------------- every scenario, scripted

# seconds the fake clock moves between polls: ordinary polls, a long look away (past twice the
# teardown window), and a few in between
GAPS = (1.0, 1.0, 7.0, 1.0, 45.0, 1.0, 2.0, 130.0, 1.0, 260.0, 1.0, 1.0)


@pytest.mark.parametrize("keep", [300, 5])
@pytest.mark.parametrize("scenario", scenario_names())
async def test_compacted_history_gives_the_same_findings_as_the_full_snapshots(scenario, keep):
    """Follow the advice on each simulated scenario, polling in between at uneven gaps, with a
    timed-out probe now and then: at every poll diagnose() over the engine's History equals
    diagnose() over the full snapshots it was made from (the last ``keep`` of them)."""
    clock = FakeClock()
    src = SimSource(name="demo", scenario=scenario, clock=clock)
    full: collections.deque[NodeSnapshot] = collections.deque(maxlen=keep)
    compact = History(keep)
    actions: list[ActionRecord] = []
    compared = 0
    for step in range(28):
        if step % 9 == 4:       # a probe that timed out: kept, but no streak counts it
            snap = NodeSnapshot(name="demo", taken_at=clock.now(), error="probe timed out after 15 s")
        else:
            snap = dataclasses.replace(await src.poll(), taken_at=clock.now())
        want = diagnose(snap, list(full), actions)
        got = diagnose(snap, compact, actions)
        assert got == want, (scenario, step)
        assert streaks(snap, compact) == streaks(snap, list(full)), (scenario, step)
        compared += len(want)
        snap = dataclasses.replace(snap, findings=want)
        full.append(snap)
        compact.append(snap)
        top = top_step(want)
        if top is not None and step % 3 != 2:
            pids, gpus = step_args(top)
            at = clock.now()
            await take_step(src, snap, top)
            if top.rung != "wait":
                actions.append(ActionRecord(rung=top.rung, ts=at, node="demo", pids=pids, gpus=gpus))
        clock.advance(GAPS[step % len(GAPS)])
    assert compared > 0
    assert len(compact) == len(full) == min(keep, 28)


# ---------------------------------------------------------------- any sequence of polls

_PIDS = st.sampled_from([1, 5, 9, 40, 41, 42])
_PROC = st.builds(
    Proc, pid=_PIDS, ppid=st.sampled_from([1, 5, 9]), state=st.sampled_from("RSDZ"), user=st.just("u"),
    name=st.sampled_from(["python3", "nv-hostengine", "bash"]), cmdline=st.sampled_from(["", "python3 x.py"]),
    start_ticks=st.sampled_from([None, 100, 200]), create_time=st.sampled_from([None, 5.0]),
    gpu_memory_mib=st.dictionaries(st.sampled_from(["0", "1"]), st.none() | st.integers(0, 9000), max_size=1),
    device_files=st.lists(st.sampled_from(["/dev/nvidia0", "/dev/nvidia1", "/dev/nvidiactl"]),
                          max_size=2).map(tuple),
    d_threads=st.lists(st.builds(ThreadInfo, tid=st.integers(1, 99), state=st.just("D"),
                                 wchan=st.sampled_from(["uvm_va_space_destroy", "io_schedule"])),
                       max_size=1).map(tuple))
# memory figures near each other, so that what is unaccounted crosses the ghost threshold often
_DP = st.builds(DriverProc, pid=_PIDS, gpu_index=st.none() | st.integers(0, 1),
                gpu_uuid=st.sampled_from(["GPU-0", "GPU-1"]), used_memory_mib=st.sampled_from([None, 0, 500, 1000]),
                name=st.sampled_from(["", "python3"]))


@st.composite
def polls(draw):
    """A node's polls in time order: processes come, go, change state and parent; PIDs are
    reused; the clock jumps; probes fail."""
    out = []
    t = T0
    for _ in range(draw(st.integers(1, 9))):
        t += draw(st.sampled_from([0.5, 1.0, 1.0, 14.0, 100.0, 241.0]))
        gpus = tuple(Gpu(index=i, uuid=f"GPU-{i}", name="g", bus_id=f"00000000:{0x18 + i:02X}:00.0",
                         memory_used_mib=draw(st.sampled_from([None, 0, 1500, 2000, 2500, 3000, 30000])),
                         memory_total_mib=81559, memory_reserved_mib=draw(st.sampled_from([None, 0, 400, 600])))
                     for i in range(2))
        out.append(NodeSnapshot(
            name=draw(st.sampled_from(["demo"] * 7 + ["other"])), taken_at=t,
            error=draw(st.sampled_from([None] * 5 + ["probe timed out after 15 s"])),
            gpus=gpus, processes=tuple(draw(st.lists(_PROC, max_size=7))),
            driver_processes=tuple(draw(st.lists(_DP, max_size=4))),
            kernel_log=tuple(draw(st.lists(st.sampled_from([
                "[9.0] NVRM: Xid (PCI:0000:18:00): 79, GPU has fallen off the bus.",
                "[9.5] NVRM: Xid (PCI:0000:19:00): 43, pid=40, name=python3, Ch 00000010"]), max_size=2)))))
    return out


@examples(200, suppress_health_check=[HealthCheck.too_slow])
@given(polls(), st.lists(st.builds(ActionRecord, rung=st.sampled_from(RUNGS), ts=st.floats(T0, T0 + 900),
                                   node=st.just("demo"), pids=st.lists(_PIDS, max_size=2).map(tuple),
                                   gpus=st.lists(st.integers(0, 1), max_size=1).map(tuple)), max_size=3),
       st.sampled_from([300, 2]))
def test_any_sequence_of_polls_gives_the_same_answers_compacted(seq, actions, keep):
    *before, snap = seq
    snap = dataclasses.replace(snap, name="demo")
    full: collections.deque[NodeSnapshot] = collections.deque(maxlen=keep)
    compact = History(keep)
    for h in before:
        full.append(h)
        compact.append(h)
    assert diagnose(snap, compact, actions) == diagnose(snap, list(full), actions)
    assert streaks(snap, compact) == streaks(snap, list(full))


@examples(150, suppress_health_check=[HealthCheck.too_slow])
@given(polls())
def test_situation_finds_the_holders_the_action_layer_would_target(seq):
    """What diagnosis calls the holders of some GPUs is what `F` on them would signal (less the
    processes whose start time is unknown, which the PID-reuse guard refuses)."""
    snap = dataclasses.replace(seq[-1], own_pids=(9,))
    assume(len({p.pid for p in snap.processes}) == len(snap.processes))    # as in any real /proc
    sit = situation(snap, ())
    for gpus in ((), (0,), (1,), (0, 1), (5,)):
        plan = plan_action(snap, "kill-holders", gpus=gpus)
        guarded = {p for p in sit.holder_pids(gpus)
                   if snap.proc(p).start_ticks is not None or snap.proc(p).create_time is not None}
        assert {t.pid for t in plan.targets} == guarded
        assert not {9, 1} & set(sit.holder_pids(gpus))
        for p in snap.processes:
            assert sit.gpus_of(p) == who.device_gpus(p) | who.driver_gpus(snap, p.pid) | {
                int(k) for k in p.gpu_memory_mib if str(k).isdigit()}


def test_ghost_memory_counts_back_over_the_compacted_history_with_the_drivers_reservation():
    """Unaccounted memory is what the driver neither lists nor reserves: a poll where the
    reservation covered it ends the streak, in the digest as in the full snapshot."""
    def poll(t: float, used: int, reserved: int) -> NodeSnapshot:
        gpu = Gpu(index=0, uuid="GPU-0", name="g", bus_id="00000000:18:00.0", memory_used_mib=used,
                  memory_total_mib=81559, memory_reserved_mib=reserved, utilization_pct=int(t) % 100)
        return NodeSnapshot(name="demo", taken_at=t, gpus=(gpu,),
                            driver_processes=(DriverProc(7, 0, "GPU-0", 250, "a"), DriverProc(8, None, "GPU-0", 250, "b")))
    polls_ = [poll(T0, 3000, 400), poll(T0 + 1, 2100, 600), poll(T0 + 2, 3000, 400), poll(T0 + 3, 3000, 400)]
    hist = History()
    for s in polls_[:3]:
        hist.append(s)
    want = diagnose(polls_[3], polls_[:3])
    ghost = next(f for f in want if f.kind == "ghost-memory")
    assert ghost.since == T0 + 2 and ghost.evidence["ghost_mib"] == 2100
    assert diagnose(polls_[3], hist) == want


def test_a_history_handed_over_as_a_copy_or_out_of_order_is_not_trusted_for_streaks():
    """Streaks come from History's own tracks only when they describe the polls before the
    snapshot: a poll of the past, or a history of another node, starts every streak now."""
    z = Proc(pid=40, ppid=5, state="Z", user="u", name="python3", cmdline="", start_ticks=100)
    polls_ = [NodeSnapshot(name="demo", taken_at=T0 + k, processes=(z,)) for k in range(5)]
    hist = History()
    for s in polls_[:4]:
        hist.append(s)
    assert situation(polls_[4], hist).since(40, "zombie") == T0
    assert situation(dataclasses.replace(polls_[4], taken_at=T0 + 2), hist).since(40, "zombie") == T0 + 2
    assert situation(dataclasses.replace(polls_[4], name="other"), hist).since(40, "zombie") == T0 + 4
    hist.append(polls_[1])          # the clock went back: the history starts again
    assert len(hist) == 1 and situation(polls_[4], hist).since(40, "zombie") == T0 + 1


# ---------------------------------------------------------------- big nodes

def big_node(name: str, tick: int, *, processes: int = 1000, holders: int = 64, gpus: int = 8) -> NodeSnapshot:
    """A loaded node as a parse gives it (fresh objects every call): ``holders`` GPU processes
    among ``processes`` — a quarter orphaned, a quarter holding devices unlisted, some zombies
    stuck in the driver, the rest a job under a shell — and memory no one accounts for."""
    uuid = [f"GPU-{name}-{g}" for g in range(gpus)]
    procs = [Proc(pid=1, ppid=0, state="S", user="root", name="systemd", cmdline="/sbin/init", start_ticks=1),
             Proc(pid=100, ppid=1, state="S", user="u", name="bash", cmdline="-bash", start_ticks=100)]
    dps: list[DriverProc] = []
    used = [500] * gpus
    pid = 1000
    for k in range(holders):
        g, kind, mib = k % gpus, k % 16, 1000 + (k * 37 + tick * 5) % 300
        devs = ("/dev/nvidiactl", f"/dev/nvidia{g}")
        if kind < 4:
            p = Proc(pid=pid, ppid=1, state="S", user="u", name=f"worker{k}", cmdline=f"worker --rank {k}",
                     start_ticks=pid, gpu_memory_mib={str(g): mib}, device_files=devs)
        elif kind < 8:
            p = Proc(pid=pid, ppid=100, state="S", user="u", name=f"probe{k}", cmdline=f"probe.py {k}",
                     start_ticks=pid, device_files=devs)
        elif kind == 8:
            p = Proc(pid=pid, ppid=100, state="Z", user="u", name=f"dead{k}", cmdline="", start_ticks=pid,
                     gpu_memory_mib={str(g): mib}, device_files=devs,
                     d_threads=(ThreadInfo(pid + 1, "D", "uvm_va_space_destroy"),))
        else:
            p = Proc(pid=pid, ppid=100, state="R" if (k + tick) % 3 else "S", user="u", name=f"train{k}",
                     cmdline=f"python train.py --rank {k}", start_ticks=pid, gpu_memory_mib={str(g): mib},
                     device_files=devs)
        procs.append(p)
        if p.gpu_memory_mib:
            dps.append(DriverProc(pid, g, uuid[g], mib, p.name))
            used[g] += mib
        pid += 7
    while len(procs) < processes:
        procs.append(Proc(pid=pid, ppid=1 if pid % 5 == 0 else 100, state="S" if (pid + tick) % 9 else "R",
                          user="u", name=f"svc{pid}", cmdline=f"/usr/bin/svc --id {pid}", start_ticks=pid,
                          num_threads=(pid + tick) % 4 + 1))
        pid += 3
    used[-1] += 20000
    return NodeSnapshot(
        name=name, taken_at=T0 + tick, processes=tuple(procs), driver_processes=tuple(dps), hostname=name,
        gpus=tuple(Gpu(index=g, uuid=uuid[g], name="H100", bus_id=f"00000000:{0x18 + g:02X}:00.0",
                       memory_used_mib=used[g], memory_total_mib=81559, utilization_pct=(tick + g) % 100)
                   for g in range(gpus)),
        kernel_log=("[100.0] NVRM: Xid (PCI:0000:1b:00): 43, pid=1007, name=x, Ch 00000010",), own_pids=(99999,))


def history_bytes(polls: int, **kw) -> tuple[int, int]:
    """(bytes a History of ``polls`` polls of a big node holds, bytes of one full snapshot)."""
    gc.collect()
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        one = big_node("n", 0, **kw)
        full = tracemalloc.get_traced_memory()[0] - base
        del one
        hist = History()
        for k in range(polls):
            hist.append(big_node("n", k, **kw))
        gc.collect()
        kept = tracemalloc.get_traced_memory()[0] - base
    finally:
        tracemalloc.stop()
    return kept, full


@pytest.mark.heavy      # several seconds: the second pass of .ci/run
def test_a_big_nodes_history_holds_digests_not_process_tables():
    kept, full = history_bytes(60)
    print(f"\nhistory of 60 polls of a 1000-process node: {kept / 1e6:.2f} MB (one full snapshot: {full / 1e6:.2f} MB)")
    assert kept < 4 * full          # the old deque held 60 full snapshots here


def test_ten_big_nodes_with_history_diagnosed_in_turn():
    """Scale smoke: ten 1000-process nodes, each with a minute of history, diagnosed in turn
    (as the engine does): every node keeps its findings; the figures are printed."""
    nodes = [f"n{i}" for i in range(10)]
    ticks = [big_node("n", k) for k in range(61)]
    hists = {n: History() for n in nodes}
    for k in range(60):
        for n in nodes:
            hists[n].append(dataclasses.replace(ticks[k], name=n))
    took = []
    first = None
    for n in nodes:
        snap = dataclasses.replace(ticks[60], name=n)
        started = time.perf_counter()
        fs = diagnose(snap, hists[n])
        took.append((time.perf_counter() - started) * 1000)
        kinds = [(f.kind, f.severity, f.since) for f in fs]
        assert first is None or kinds == first
        first = kinds
    assert {"zombie", "orphan", "hidden-holder", "holder"} <= {k for k, _, _ in first}
    zombie = next(s for k, _, s in first if k == "zombie")
    assert zombie == T0                        # stuck since the first poll kept
    print(f"\ndiagnose, 10 nodes x 1000 processes with 60 polls of history, in turn: "
          f"median {sorted(took)[5]:.1f} ms, max {max(took):.1f} ms")


# ---------------------------------------------------------------- the full measurement

def measure(nodes: int = 100, polls: int = 300, holders=(64, 512)) -> None:  # pragma: no cover - a script
    for h in holders:
        ticks = [big_node("n", k, holders=h) for k in range(polls + 2)]
        hists = {f"n{i}": History() for i in range(nodes)}
        for k in range(polls):
            for name, hist in hists.items():
                hist.append(dataclasses.replace(ticks[k], name=name))
        del ticks[:polls]
        gc.collect()
        for r, tick in enumerate(ticks):
            diag = append = 0.0
            for name, hist in hists.items():
                snap = dataclasses.replace(tick, name=name)
                t0 = time.perf_counter()
                fs = diagnose(snap, hist)
                t1 = time.perf_counter()
                hist.append(dataclasses.replace(snap, findings=fs))
                diag, append = diag + t1 - t0, append + time.perf_counter() - t1
            print(f"{h} holders, round {r}: {nodes} nodes diagnosed in turn in {diag:.2f} s "
                  f"({diag / nodes * 1000:.1f} ms/node) + history append {append / nodes * 1000:.2f} ms/node")
    kept, full = history_bytes(polls)
    print(f"history of {polls} polls, 1000 processes: {kept / 1e6:.2f} MB per node "
          f"(one full snapshot {full / 1e6:.2f} MB; {polls} of them {polls * full / 1e6:.0f} MB)")


if __name__ == "__main__":  # pragma: no cover
    measure()
