"""The action layer: plans as the operator sees them, guarded execution, verification, timeline.

Simulated nodes run on a FakeClock (90 s of driver teardown pass in microseconds); the
PID-reuse guard is also exercised on a real child process through LocalSource.
"""
from __future__ import annotations

import asyncio
import dataclasses
import subprocess

import pytest

from console.actions.ladder import RELOAD_DRIVER_COMMAND
from console.actions.plan import ActionPolicy, plan_action
from console.actions.run import execute
from console.diagnosis import diagnose
from console.monitor import NodeMonitor, diagnosed
from console.actions.ladder import top_step
from console.diagnosis.who import holder_pids
from console.clock import FakeClock
from console.sim.scenarios import RESET_GPU, SEED_USED_MIB
from console.sim.state import ALIVE
from console.sources.local.source import LocalSource
from console.sources.sim import SimSource
from console.incident.timeline import Timeline, load
from console.model import TimelineEntry
from fake_pynvml import FakeNvml, eight_gpus

SEED_TARGETS = (72169, 72230, 72294, 72358, 72422, 72486, 72550, 72614, 72678)


@pytest.fixture
def timeline(tmp_path):
    tl = Timeline(tmp_path / "incident.jsonl", by="ops@console")
    yield tl
    tl.close()


async def sim(scenario: str):
    clock = FakeClock()
    source = SimSource(scenario=scenario, clock=clock)
    snap = diagnosed(await source.poll())
    return source, clock, snap


def node_state(source: SimSource):
    """Everything a signal, a reset or a stop could change on the simulated node."""
    node = source.node
    return ([(p.pid, p.phase, p.start, tuple(p.fds)) for p in node.procs.values()],
            [(c.gpu, c.mib, tuple(sorted(c.holders))) for c in node.contexts],
            [(g.index, g.persistence, g.stuck_mib) for g in node.gpus])


def seed_plan(snap):
    holder = next(f for f in snap.findings if f.kind == "holder")
    assert holder.pids == SEED_TARGETS          # the launcher and its eight schedulers
    return plan_action(snap, "sigkill", pids=holder.pids)


# ---------------------------------------------------------------- plans

async def test_seed_sigkill_plan_shows_the_exact_kill_line_and_nine_targets():
    _, _, snap = await sim("seed")
    plan = seed_plan(snap)
    assert plan.title == "SIGKILL 9 processes"
    assert plan.commands == ("kill -s KILL " + " ".join(map(str, SEED_TARGETS)),)
    assert [tg.pid for tg in plan.targets] == list(SEED_TARGETS)
    tp0 = plan.targets[1]
    assert (tp0.user, tp0.name, tp0.cmdline, dict(tp0.gpu_memory_mib)) == (
        "root", "sglang::scheduler_TP0", "sglang::scheduler_TP0", {"0": 76105})
    assert tp0.state in "RS" and tp0.start_ticks == snap.proc(72230).start_ticks
    assert plan.gpus == tuple(range(8))
    assert plan.memory_before == {str(i): SEED_USED_MIB[i] for i in range(8)}
    assert plan.destructive and plan.typed_confirmation is None and plan.refusals == ()


async def test_plan_refuses_pid_1_own_session_kernel_threads_and_the_gone_with_reasons():
    _, _, snap = await sim("seed")
    own = snap.own_pids[0]
    plan = plan_action(snap, "sigkill", pids=(1, own, 1102, 99999, 72230))
    assert plan.commands == ("kill -s KILL 72230",)
    assert [tg.pid for tg in plan.targets] == [72230]
    assert plan.refusals == ("PID 1 (init) is never signalled",
                             f"PID {own} is this console or the session it runs in",
                             "PID 1102 is a kernel thread",
                             "PID 99999 is gone (not in the latest snapshot)")
    only_protected = plan_action(snap, "sigterm", pids=(1, own))
    assert only_protected.commands == () and only_protected.targets == ()


async def test_a_plan_with_nothing_left_to_run_is_refused_and_writes_nothing(timeline):
    source, clock, snap = await sim("seed")
    plan = plan_action(snap, "sigkill", pids=(1, snap.own_pids[0]))
    out = await execute(plan, source, timeline=timeline, clock=clock)
    assert out.status == "refused" and "PID 1 (init) is never signalled" in out.refused
    assert timeline.entries == []


async def test_kill_holders_lists_each_holder_by_pid_and_leaves_persistenced_to_clear_blockers():
    _, _, snap = await sim("hidden-holders")
    plan = plan_action(snap, "kill-holders", gpus=(0,))
    assert plan.commands == ("kill -s KILL 39021 39024",)
    assert plan.title == "SIGKILL 2 holders of GPU 0"
    assert list(plan.gpus) == [0] and [tg.pid for tg in plan.targets] == holder_pids(snap, (0,))
    assert any("1563" in r and "clear-blockers (B)" in r for r in plan.refusals)
    for rung in ("sigterm", "sigkill", "kill-holders", "clear-blockers", "reset", "reload-driver", "reboot"):
        for line in plan_action(snap, rung, pids=(39021,), gpus=(0,)).commands:
            assert "fuser" not in line and "pkill" not in line and "killall" not in line


async def test_kill_holders_in_a_container_refuses_host_pids_it_cannot_see():
    _, _, snap = await sim("container")
    plan = plan_action(snap, "kill-holders", gpus=(0,))
    assert plan.commands == ("kill -s KILL 23",)
    assert any(r.startswith("PID 2841917 is listed by the driver but not visible here") for r in plan.refusals)
    # a host PID that happens to be a different process here (the entrypoint shell) is never hit
    clash = dataclasses.replace(snap, driver_processes=tuple(
        dataclasses.replace(d, pid=7, local=False) for d in snap.driver_processes))
    plan = plan_action(clash, "kill-holders", gpus=(0,))
    assert plan.commands == ("kill -s KILL 23",)
    assert any("the PID 7 here is a different process and is left alone" in r for r in plan.refusals)


async def test_reboot_and_driver_reload_are_typed_by_node_name(timeline):
    source, clock, snap = await sim("seed")
    reboot = plan_action(snap, "reboot")
    assert reboot.commands == ("systemctl reboot",) and reboot.typed_confirmation == "demo"
    reload = plan_action(snap, "reload-driver")
    assert reload.commands == (RELOAD_DRIVER_COMMAND,) and reload.typed_confirmation == "demo"
    assert any("modprobe -r refuses" in n for n in reload.notes)
    for typed in (None, "", "demo2"):
        out = await execute(reboot, source, timeline=timeline, clock=clock, typed=typed)
        assert out.status == "refused" and "type the node's name (demo)" in out.refused
    assert source.node.down_until is None and timeline.entries == []
    out = await execute(reboot, source, timeline=timeline, clock=clock, typed="demo")
    assert source.node.down_until is not None                # the simulated node went down
    assert out.status == "unsettled" and "the node is going down" in out.outcome_entry.text
    assert out.entry.command == "systemctl reboot" and out.outcome_entry.gpu_memory_after is None
    await out.watch.wait()                                   # it boots again 60 s later, memory free
    [obs] = out.watch.observations
    assert obs.action == out.entry.seq and obs.text.startswith("GPUs 0-7 freed 594.6 GiB 6")
    assert obs.text.endswith("s after the reboot")
    with pytest.raises(ValueError, match="wait-and-reread"):
        plan_action(snap, "wait")


# ---------------------------------------------------------------- the seed: SIGKILL, then 90 s of teardown

async def test_seed_sigkill_action_then_its_outcome_after_the_window_then_an_observation(timeline):
    source, clock, snap = await sim("seed")
    monitor = NodeMonitor(source)
    plan = seed_plan(snap)
    t0 = clock.now()
    out = await execute(plan, source, timeline=timeline, monitor=monitor, clock=clock)

    assert clock.now() - t0 == pytest.approx(10.0)          # the outcome: when the first window passed
    entry, outcome = out.entry, out.outcome_entry
    assert entry.kind == "action" and entry.node == "demo" and entry.by == "ops@console"
    assert entry.command == plan.commands[0] and entry.rc is None and entry.text == "SIGKILL 9 processes"
    assert [tg["pid"] for tg in entry.targets] == list(SEED_TARGETS)
    assert entry.targets[1] == {"pid": 72230, "start_ticks": snap.proc(72230).start_ticks,
                                "create_time": snap.proc(72230).create_time, "name": "sglang::scheduler_TP0"}
    assert entry.gpu_memory_before == plan.memory_before and entry.freed_mib is None
    assert outcome.kind == "observation" and outcome.outcome is True and outcome.action == entry.seq
    assert outcome.rc == 0 and outcome.freed_mib == 0 and outcome.seconds_to_free is None
    assert outcome.gpu_memory_after == outcome.gpu_memory_before == plan.memory_before
    assert "nothing freed on GPUs 0-7" in outcome.text and "8 <defunct> with threads in D state" in outcome.text
    assert out.status == "unsettled" and set(out.fates.zombies) == set(SEED_TARGETS[1:])

    # diagnosis knows the teardown window: it says wait, not "SIGKILL again"
    assert [(a.rung, a.ts, a.pids) for a in monitor.actions] == [("sigkill", t0, SEED_TARGETS)]
    later = await source.poll()
    assert top_step(diagnose(later, (), monitor.actions)).rung == "wait"

    await out.watch.wait()
    [obs] = out.watch.observations
    assert obs.kind == "observation" and obs.action == entry.seq and obs.outcome is None
    assert 90 <= obs.seconds_to_free <= 92
    assert obs.text.startswith("GPUs 0-7 freed 594.6 GiB 9") and "s after SIGKILL" in obs.text
    assert obs.freed_mib == sum(SEED_USED_MIB) - 8 * 4
    on_disk, warnings = load(timeline.path)
    assert [(e.kind, e.outcome) for e in on_disk] == [("action", None), ("observation", True),
                                                      ("observation", None)] and not warnings
    assert [e.seq for e in on_disk] == [1, 2, 3] and on_disk[0].ts <= on_disk[1].ts <= on_disk[2].ts


async def test_gpus_freed_at_different_times_each_get_an_observation(timeline):
    source, clock, snap = await sim("seed")
    source.node.procs[72230].teardown_s = 30.0               # TP0's context goes first
    out = await execute(seed_plan(snap), source, timeline=timeline, clock=clock)
    await out.watch.wait()
    first, last = out.watch.observations
    assert first.text.startswith("GPU 0 freed 74.3 GiB 3") and "GPUs 1-7 still hold 520.3 GiB" in first.text
    assert first.action == last.action == out.entry.seq and first.seconds_to_free == 30
    assert last.text.startswith("GPUs 0-7 freed 594.6 GiB 9") and last.seconds_to_free >= 90


async def test_nothing_back_by_the_deadline_is_said_in_an_observation(timeline):
    source, clock, snap = await sim("seed")
    out = await execute(seed_plan(snap), source, timeline=timeline, clock=clock, deadline_s=60)
    await out.watch.wait()
    [obs] = out.watch.observations
    assert obs.action == out.entry.seq and obs.freed_mib == 0 and obs.seconds_to_free is None
    assert obs.text == ("GPUs 0-7 still hold 594.6 GiB 60 s after SIGKILL; "
                        "targets 8 <defunct> with threads in D state, 1 gone")


async def test_watch_cancel_stops_without_writing(timeline):
    source, clock, snap = await sim("seed")
    out = await execute(seed_plan(snap), source, timeline=timeline, clock=clock)
    out.watch.cancel()
    await out.watch.wait()
    assert out.watch.done and out.watch.observations == []
    assert [(e.kind, e.outcome) for e in timeline.entries] == [("action", None), ("observation", True)]


async def test_cancel_inside_the_window_writes_the_outcome_with_what_was_seen(timeline):
    source, clock, snap = await sim("seed")
    reads = 0
    stall = asyncio.Event()

    async def read():
        nonlocal reads
        reads += 1
        if reads > 4:
            await stall.wait()
        return await source.poll()

    task = asyncio.create_task(execute(seed_plan(snap), source, timeline=timeline, clock=clock, read=read))
    while reads <= 4:
        await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    action, entry = timeline.entries
    assert action.kind == "action" and entry.action == action.seq and entry.outcome is True
    assert entry.kind == "observation" and entry.rc == 0 and entry.freed_mib == 0
    assert entry.gpu_memory_after == entry.gpu_memory_before
    assert "cancelled after 4 s" in entry.text


# ---------------------------------------------------------------- graceful, read-only, dry-run

async def test_graceful_sigterm_is_verified_freed_within_the_window(timeline):
    source, clock, snap = await sim("graceful")
    holder = next(f for f in snap.findings if f.kind == "holder")
    plan = plan_action(snap, "sigterm", pids=holder.pids)
    assert plan.commands == ("kill -s TERM 65102 65163 65227",) and plan.gpus == (0, 1)
    t0 = clock.now()
    out = await execute(plan, source, timeline=timeline, clock=clock, hypothesis=7)
    entry = out.outcome_entry
    assert out.status == "settled" and out.watch is None and out.entry.hypothesis == 7
    assert 2 <= entry.seconds_to_free <= 3 and clock.now() - t0 == pytest.approx(entry.seconds_to_free)
    total = sum(plan.memory_before.values())
    assert entry.freed_mib == total - 8 and entry.gpu_memory_after == {"0": 4, "1": 4}
    assert "GPUs 0-1 freed 138.7 GiB in 3 s" in entry.text and "all gone" in entry.text


async def test_sigterm_to_the_parent_alone_covers_the_gpus_its_children_hold(timeline):
    """demo:graceful: SIGTERM only the launcher (its workers hold the memory): before/after and
    what was freed cover every GPU the target's descendants hold."""
    source, clock, snap = await sim("graceful")
    holder = next(f for f in snap.findings if f.kind == "holder")
    parent = holder.pids[0]
    assert not snap.proc(parent).gpu_memory_mib
    plan = plan_action(snap, "sigterm", pids=[parent])
    assert plan.commands == (f"kill -s TERM {parent}",)
    assert plan.gpus == (0, 1) and sum(plan.memory_before.values()) > 138 * 1024
    out = await execute(plan, source, timeline=timeline, clock=clock)
    assert out.status == "settled" and out.freed_mib > 138 * 1024, out.text
    assert "freed 138.7 GiB" in out.text


async def test_read_only_refuses_signals_nothing_and_records_the_refusal(timeline):
    source, clock, snap = await sim("seed")
    monitor = NodeMonitor(source)
    before = node_state(source)
    out = await execute(seed_plan(snap), source, policy=ActionPolicy(read_only=True), timeline=timeline,
                        monitor=monitor, clock=clock)
    assert out.status == "refused" and out.refused.startswith("read-only: SIGKILL 9 processes on demo")
    assert node_state(source) == before and monitor.actions == []
    assert not any("kill" in cmd for _, cmd in source.node.history)
    [entry] = timeline.entries
    assert entry.kind == "action" and entry.rc is None and entry.text == "[read-only] refused: SIGKILL 9 processes"
    assert entry.command.startswith("kill -s KILL 72169") and entry.output.startswith("read-only:")


async def test_dry_run_records_the_commands_with_rc_null_and_changes_nothing(timeline):
    source, clock, snap = await sim("reset-required")
    before = node_state(source)
    plan = plan_action(snap, "clear-blockers", gpus=(RESET_GPU,))
    out = await execute(plan, source, policy=ActionPolicy(dry_run=True), timeline=timeline, clock=clock)
    assert out.status == "dry-run" and node_state(source) == before
    [entry] = timeline.entries
    assert entry.command == "systemctl stop nvidia-persistenced\nnvidia-smi -pm 0 -i 3"
    assert entry.rc is None and entry.text.startswith("[dry-run]")


async def test_a_disk_that_fills_after_the_action_was_sent_does_not_hide_what_it_did():
    class FillsAfterTheFirstEntry:
        writes = 0

        def append(self, kind, text="", **kw):
            self.writes += 1
            if self.writes > 1:
                raise OSError(28, "No space left on device")
            return TimelineEntry(ts="t", seq=1, by="ops", kind=kind, text=text)
    source, clock, snap = await sim("graceful")
    plan = plan_action(snap, "sigterm", pids=(65102,))
    out = await execute(plan, source, timeline=FillsAfterTheFirstEntry(), clock=clock)
    assert out.status == "settled" and out.signalled == (65102,) and out.entry.seq == 1
    assert out.outcome_entry is None
    assert out.timeline_error == "timeline not written: [Errno 28] No space left on device"


# ---------------------------------------------------------------- PID reuse

async def test_pid_reused_since_the_plan_is_refused_for_that_target_only(timeline):
    source, clock, snap = await sim("seed")
    plan = plan_action(snap, "sigkill", pids=(72742, 72230))      # detokenizer, TP0
    node = source.node
    clock.advance(30)                                             # the detokenizer exits; a new one gets its PID
    node.procs.pop(72742)
    node.add_proc(pid=72742, ppid=1, comm="bash", args="-bash", user="alice", uid=1002)
    out = await execute(plan, source, timeline=timeline, clock=clock, verify_window_s=0, deadline_s=0)
    assert out.rc == 3 and out.outcome_entry.rc == 3 and out.signalled == (72230,)
    assert "kill -s KILL 72742: refused: PID 72742 is no longer the same process" in out.outcome_entry.output
    assert "refused for PID 72742" in out.outcome_entry.text
    assert node.procs[72742].phase == ALIVE and node.procs[72742].user == "alice"
    assert node.procs[72230].phase != ALIVE


@pytest.fixture
def sleeper():
    child = subprocess.Popen(["sleep", "60"])
    yield child
    if child.poll() is None:
        child.kill()
    child.wait()


async def test_real_process_guard_refuses_a_wrong_start_time_and_kills_with_the_right_one(sleeper, timeline):
    source = LocalSource("local", nvml_module=FakeNvml(eight_gpus()[:1]), dmesg_command=("true",))
    try:
        snap = await source.poll()
        plan = plan_action(snap, "sigkill", pids=(sleeper.pid,))
        assert plan.commands == (f"kill -s KILL {sleeper.pid}",) and plan.targets[0].create_time
        stale = dataclasses.replace(plan, targets=(dataclasses.replace(
            plan.targets[0], create_time=plan.targets[0].create_time - 5),))
        clock = FakeClock()
        out = await execute(stale, source, timeline=timeline, clock=clock, verify_window_s=0, deadline_s=0)
        assert out.rc == 3 and out.signalled == () and out.status == "failed"
        assert sleeper.poll() is None                              # still running
        out = await execute(plan, source, timeline=timeline, clock=clock, verify_window_s=5)
        assert out.rc == 0 and out.signalled == (sleeper.pid,)
        assert sleeper.wait(5) == -9
        assert [e.rc for e in timeline.entries if e.outcome] == [3, 0]
    finally:
        await source.close()


# ---------------------------------------------------------------- holders, blockers, reset

async def test_kill_holders_frees_the_hidden_holders_memory(timeline):
    source, clock, snap = await sim("hidden-holders")
    plan = plan_action(snap, "kill-holders", gpus=(0, 1, 2, 3))
    assert len(plan.targets) == 8 and plan.expected_mib == {}      # the driver lists none of them
    out = await execute(plan, source, timeline=timeline, clock=clock)
    assert out.status == "settled" and out.rc == 0
    assert all(v <= 1024 for v in out.outcome_entry.gpu_memory_after.values())
    assert out.outcome_entry.freed_mib == sum(plan.memory_before.values()) - 4 * 4
    assert out.outcome_entry.seconds_to_free is not None and out.outcome_entry.seconds_to_free <= 1


async def test_clear_blockers_then_reset_frees_the_gpu_that_needed_it(timeline):
    source, clock, snap = await sim("reset-required")
    early = plan_action(snap, "reset", gpus=(RESET_GPU,))
    assert any("clear them first (B)" in n for n in early.notes)
    clear = plan_action(snap, "clear-blockers", gpus=(RESET_GPU,))
    assert clear.commands == ("systemctl stop nvidia-persistenced", "nvidia-smi -pm 0 -i 3")
    assert [tg.pid for tg in clear.targets] == [1563]
    out = await execute(clear, source, timeline=timeline, clock=clock)
    assert out.status == "settled" and out.rc == 0 and "blockers gone" in out.text

    snap = await source.poll()
    reset = plan_action(snap, "reset", gpus=(RESET_GPU,))
    assert reset.commands == ("nvidia-smi -r -i 3",) and reset.notes == ()
    out = await execute(reset, source, timeline=timeline, clock=clock)
    assert out.status == "settled" and out.rc == 0 and "successfully reset" in out.output
    assert "done: GPU 00000000:41:00.0 reset" in out.text
    assert out.outcome_entry.gpu_memory_after["3"] <= 1024 and out.outcome_entry.freed_mib >= 60000
    assert [e.kind for e in timeline.entries] == ["action", "observation", "action", "observation"]


async def test_reset_on_the_seed_is_refused_by_the_driver_and_recorded_with_rc_255(timeline):
    source, clock, snap = await sim("seed")
    monitor = NodeMonitor(source)
    plan = plan_action(snap, "reset", gpus=(0,))
    assert any("the reset refuses while any does" in n for n in plan.notes)
    t0 = clock.now()
    out = await execute(plan, source, timeline=timeline, monitor=monitor, clock=clock)
    assert out.status == "failed" and out.watch is None and clock.now() == t0   # nothing to wait for
    assert out.outcome_entry.rc == 255 and "In use by another client" in out.outcome_entry.output
    assert "failed (rc 255): GPU 00000000:01:00.0 not reset: In use by another client" in out.outcome_entry.text
    assert monitor.actions == []          # a refused reset is not a reset diagnosis should wait on


async def test_local_reset_releases_nvml_before_the_command_and_resumes_after(timeline):
    nv = FakeNvml(eight_gpus()[:1])
    source = LocalSource("local", nvml_module=nv, dmesg_command=("true",))
    seen = []
    real_run = source.run

    async def run(command, timeout=30.0):
        seen.append((command, source.nvml_paused, nv.shutdowns))
        return await real_run("true", timeout)
    source.run = run
    try:
        snap = await source.poll()
        assert nv.initialized == 1
        plan = plan_action(snap, "reset", gpus=(0,))
        await execute(plan, source, timeline=timeline, clock=FakeClock(), verify_window_s=0, deadline_s=0)
        assert seen == [("nvidia-smi -r -i 0", True, 1)]
        assert source.nvml_paused is False
        assert (await source.poll()).gpus and nv.initialized == 2   # NVML opened again for the next poll
    finally:
        await source.close()


async def test_one_worker_killed_names_only_the_gpu_that_came_back(timeline):
    """The schedulers hold every /dev/nvidiaN; killing TP0 frees GPU 0 alone and says so."""
    source, clock, snap = await sim("seed")
    plan = plan_action(snap, "sigkill", pids=(72230,))
    out = await execute(plan, source, timeline=timeline, monitor=NodeMonitor(source), clock=clock)
    await out.watch.wait()
    [obs] = out.watch.observations
    assert obs.text.startswith("GPU 0 freed 74.3 GiB"), obs.text


# ---------------------------------------------------------------- record before effect (real processes)

def local_source():
    return LocalSource("local", nvml_module=FakeNvml(eight_gpus()[:1]), dmesg_command=("true",))


async def test_the_action_entry_is_on_disk_before_the_signal_is_sent(sleeper, timeline):
    source = local_source()
    on_disk_at_send = []
    real_signal = source.signal

    async def signal(pid, sig, **guard):
        on_disk_at_send.append(load(timeline.path)[0])      # what a reader of the file sees now
        return await real_signal(pid, sig, **guard)
    source.signal = signal
    try:
        snap = await source.poll()
        plan = plan_action(snap, "sigterm", pids=(sleeper.pid,))
        out = await execute(plan, source, timeline=timeline, clock=FakeClock(), verify_window_s=5, hypothesis=3)
        assert sleeper.wait(5) == -15                          # the signal was sent …
        [[action]] = on_disk_at_send                           # … after its entry was on disk
        assert action.kind == "action" and action.command == f"kill -s TERM {sleeper.pid}"
        assert action.rc is None and action.hypothesis == 3 and action.text == "SIGTERM 1 process"
        [target] = action.targets
        assert target["pid"] == sleeper.pid and target["name"] == "sleep"
        assert target["create_time"] == plan.targets[0].create_time
        entries, warnings = load(timeline.path)
        assert not warnings and entries[0] == action == out.entry
        outcome = entries[1]
        assert outcome == out.outcome_entry and outcome.kind == "observation" and outcome.outcome is True
        assert outcome.action == action.seq and outcome.rc == 0
        assert outcome.output == "sent SIGTERM to 1 of 1" and "sent to 1 of 1" in outcome.text
        assert action.ts <= outcome.ts and action.seq < outcome.seq
    finally:
        await source.close()


async def test_a_full_disk_refuses_the_action_and_leaves_the_target_untouched(sleeper, timeline, monkeypatch):
    import errno
    import os
    source = local_source()
    try:
        snap = await source.poll()
        plan = plan_action(snap, "sigkill", pids=(sleeper.pid,))
        before = timeline.path.read_bytes()
        real_write = os.write

        def enospc_on_the_incident_file(fd, data):
            if fd == timeline._fd:
                raise OSError(errno.ENOSPC, "No space left on device")
            return real_write(fd, data)
        monkeypatch.setattr(os, "write", enospc_on_the_incident_file)
        out = await execute(plan, source, timeline=timeline, clock=FakeClock(), verify_window_s=0, deadline_s=0)
        monkeypatch.setattr(os, "write", real_write)
        assert out.status == "refused" and out.signalled == () and out.results == ()
        assert out.refused == "the timeline could not record it (No space left on device): nothing was sent"
        assert out.text == f"SIGKILL 1 process: refused: {out.refused}"
        assert out.timeline_error == "timeline not written: [Errno 28] No space left on device"
        assert sleeper.poll() is None                              # still running
        assert timeline.path.read_bytes() == before and timeline.entries == []
    finally:
        await source.close()


@pytest.mark.parametrize("how", ["deleted", "replaced"])
async def test_a_deleted_or_replaced_timeline_refuses_the_action(sleeper, timeline, how):
    """`rm <id>.jsonl` (or another file moved over it) mid-incident: the action is refused and
    said so, never recorded into a file nobody will read."""
    import os
    source = local_source()
    try:
        snap = await source.poll()
        plan = plan_action(snap, "sigterm", pids=(sleeper.pid,))
        if how == "deleted":
            os.unlink(timeline.path)
        else:
            other = timeline.path.with_name("other.jsonl")
            other.write_text("")
            os.replace(other, timeline.path)
        out = await execute(plan, source, timeline=timeline, clock=FakeClock(), verify_window_s=0, deadline_s=0)
        assert out.status == "refused" and out.results == ()
        word = "was deleted" if how == "deleted" else "was replaced by another file"
        assert f"incident.jsonl {word}" in out.refused and "nothing was sent" in out.refused
        assert sleeper.poll() is None                              # still running
    finally:
        await source.close()


async def test_quitting_mid_verification_still_leaves_the_action_and_its_outcome(sleeper, timeline):
    """The console is stopped while it verifies a SIGTERM: the file has the action and what was seen."""
    source = local_source()
    try:
        snap = await source.poll()
        plan = plan_action(snap, "sigterm", pids=(sleeper.pid,))
        verifying = asyncio.Event()

        async def read():
            verifying.set()
            await asyncio.Event().wait()         # the node does not answer before the quit
        task = asyncio.create_task(execute(plan, source, timeline=timeline, read=read, clock=FakeClock()))
        await verifying.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert sleeper.wait(5) == -15
        action, outcome = load(timeline.path)[0]
        assert action.kind == "action" and [t["pid"] for t in action.targets] == [sleeper.pid]
        assert outcome.outcome is True and outcome.action == action.seq and outcome.rc == 0
        assert "cancelled after" in outcome.text and outcome.gpu_memory_after is None
    finally:
        await source.close()


async def test_a_sigkill_sent_while_a_sigterm_is_verified_is_recorded_before_the_sigterm_outcome(timeline):
    """The seed, SIGTERM then SIGKILL: the file (and the postmortem) say SIGKILL came before
    the <defunct> workers were seen, and the SIGTERM's block says what was sent meanwhile."""
    from console.incident.export import as_markdown
    source, clock, snap = await sim("seed")
    gate = asyncio.Event()
    reads = 0

    async def gated_read():
        nonlocal reads
        reads += 1
        await gate.wait()
        return await source.poll()
    term = asyncio.create_task(execute(plan_action(snap, "sigterm", pids=SEED_TARGETS), source,
                                       timeline=timeline, clock=clock, read=gated_read, deadline_s=0))
    while not reads:
        await asyncio.sleep(0)
    kill = await execute(seed_plan(snap), source, timeline=timeline, clock=clock, verify_window_s=0, deadline_s=0)
    gate.set()
    term = await term
    entries, _ = load(timeline.path)
    assert [(e.seq, e.kind, e.action) for e in entries] == [
        (1, "action", None), (2, "action", None), (3, "observation", 2), (4, "observation", 1)]
    assert entries[0].command.startswith("kill -s TERM") and entries[1].command.startswith("kill -s KILL")
    assert "8 <defunct>" in term.outcome_entry.text and term.outcome_entry.seq == 4
    assert kill.entry.seq == 2 and entries[1].ts <= entries[3].ts
    md = as_markdown(entries, incident_id="seed")
    blocks = md.split("### #")[1:]
    assert [b.split(" ", 1)[0] for b in blocks] == ["1", "2"]          # one block per action
    assert "sent meanwhile: #2 SIGKILL 9 processes" in blocks[0]
