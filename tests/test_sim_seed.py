"""The seed scenario, as the operator in the story lived it: hung SGLang, SIGKILL, memory that stays."""
import pytest

from console.sim.scenarios import SEED_LAUNCH
from console import probe
from console.sources.sim import SimSource
from tests.sim_fixtures import sh  # the clock and node fixtures come from there too

SEED_CHECK = "sleep 5; nvidia-smi --query-gpu=index,memory.used --format=csv,noheader"
SEED_OUTPUT = ("0, 76109 MiB\n1, 76113 MiB\n2, 76113 MiB\n3, 76113 MiB\n4, 76113 MiB\n5, 76113 MiB\n"
               "6, 76113 MiB\n7, 76069 MiB\n")
STORY_KILL = ("kill -9 72169; sleep 2; pkill -9 -f sglang; sleep 2; pkill -9 python3; sleep 3; "
              "fuser -k /dev/nvidia* 2>/dev/null; sleep 2; "
              "nvidia-smi --query-gpu=index,memory.used --format=csv,noheader")



async def scheduler_pids(node):
    r = await sh(node, "pgrep -f 'sglang::scheduler_TP'")
    return [int(x) for x in r.stdout.split()]


async def test_poll_shows_eight_gpus_at_the_seed_numbers_held_by_sglang(clock):
    src = SimSource(clock=clock)
    snap = await src.poll()
    assert snap.error is None, snap.error
    assert [g.memory_used_mib for g in snap.gpus] == [76109, 76113, 76113, 76113, 76113, 76113, 76113, 76069]
    assert {g.name for g in snap.gpus} == {"NVIDIA RTX PRO 6000 Blackwell Server Edition"}
    assert {g.memory_total_mib for g in snap.gpus} == {97887}
    launcher = snap.proc(72169)
    assert launcher.cmdline == SEED_LAUNCH and launcher.ppid == 1 and launcher.name == "python3"
    holders = [p for p in snap.processes if p.gpu_memory_mib]
    assert sorted(p.cmdline for p in holders) == [f"sglang::scheduler_TP{i}" for i in range(8)]
    assert all(p.ppid == 72169 and p.name == "sglang::schedul" and p.state in "RS" for p in holders)
    assert any(p.cmdline == "sglang::detokenizer" for p in snap.processes)
    # the driver accounts for (almost) all of it: ghost memory is a few MiB per GPU at most
    for g in snap.gpus:
        listed = sum(p.gpu_memory_mib.get(str(g.index)) or 0 for p in holders)
        assert 0 <= g.memory_used_mib - listed <= 8
    assert snap.own_pids and snap.proc(snap.own_pids[0]).name == "sh"
    assert snap.driver_version == "580.95.05"


async def test_port_8000_never_listens_and_schedulers_burn_cpu(node, clock):
    r = await sh(node, "ss -ltnp")
    assert ":8000 " not in r.stdout and ":22 " in r.stdout
    before = await sh(node, "ps -o time= -p 72230")
    clock.advance(600)
    after = await sh(node, "ps -o time= -p 72230")
    assert before.stdout != after.stdout
    assert "01:27" in before.stdout            # ~87 minutes of CPU time, as strace showed


async def test_sigterm_is_ignored(node, clock):
    pids = await scheduler_pids(node)
    r = await sh(node, f"kill -s TERM 72169 {' '.join(map(str, pids))}; sleep 10; {probe.QUERY_MEMORY}")
    assert r.rc == 0 and r.stdout == SEED_OUTPUT
    assert all(node.proc(pid).alive for pid in pids + [72169])


async def test_sigkill_leaves_defunct_workers_stuck_in_the_driver_and_a_5s_wait_shows_nothing(node):
    await sh(node, "kill -9 72169")
    r = await sh(node, SEED_CHECK)
    assert r.rc == 0 and r.stdout == SEED_OUTPUT          # the seed's moment
    ps = await sh(node, "ps -eo pid=,user:32=,args=")
    defunct = [ln for ln in ps.stdout.splitlines() if "<defunct>" in ln]
    assert len(defunct) == 8 and all("[sglang::schedul] <defunct>" in ln for ln in defunct)
    assert "72169" not in ps.stdout.split()
    pids = [int(ln.split()[0]) for ln in defunct]
    for pid in pids:
        stat = (await sh(node, f"cat /proc/{pid}/stat")).stdout
        fields = stat[stat.rindex(")") + 2:].split()
        assert fields[0] == "Z" and fields[1] == "1" and fields[17] == "2"   # reparented to init, 2 threads
        tasks = (await sh(node, f"cat /proc/{pid}/task/*/stat")).stdout.splitlines()
        states = sorted(t[t.rindex(")") + 2] for t in tasks)
        assert states == ["D", "Z"]
    d = await sh(node, probe.DSTATE)
    assert len(d.stdout.split("\0")[:-1]) == 8 and "_nv043417rm" in d.stdout    # NUL-terminated records


async def test_killing_holders_and_reset_change_nothing_then_the_driver_finishes(node, clock):
    r = await sh(node, STORY_KILL)
    assert r.stdout.endswith(SEED_OUTPUT)
    killed_at = clock.now() - 9
    assert (await sh(node, SEED_CHECK)).stdout == SEED_OUTPUT
    f = await sh(node, "fuser -k /dev/nvidia*; sleep 1; " + probe.QUERY_MEMORY)
    assert f.stdout.endswith(SEED_OUTPUT)
    reset = await sh(node, "nvidia-smi -r -i 3")
    assert reset.rc == 255 and "In use by another client" in reset.stdout and "00000000:41:00.0" in reset.stdout
    clock.advance(killed_at + 85 - clock.now())
    assert not node.memory_freed()
    clock.advance(6)                                # ~90 s after the SIGKILL
    out = await sh(node, probe.QUERY_MEMORY)
    assert out.stdout == "".join(f"{i}, 4 MiB\n" for i in range(8))
    assert node.memory_freed()
    ps = await sh(node, "ps -eo pid=,user:32=,args=")
    assert "defunct" not in ps.stdout and "sglang" not in ps.stdout   # init reaped them


async def test_seed_ground_truth(node):
    gt = node.ground_truth
    assert gt.shortest_path == ("sigkill", "wait")
    assert "90" in gt.root_cause and gt.end_state == "memory freed on all GPUs"
    with pytest.raises(Exception):
        gt.root_cause = "x"


async def test_snapshots_are_stamped_with_the_simulated_clock(clock):
    src = SimSource(clock=clock)
    first = await src.poll()
    clock.advance(120)
    second = await src.poll()
    assert first.taken_at == pytest.approx(clock.now() - 120) and second.taken_at == pytest.approx(clock.now())
    launcher = second.proc(72169)
    assert second.taken_at - launcher.create_time == pytest.approx(92 * 60 + 120, abs=0.05)
