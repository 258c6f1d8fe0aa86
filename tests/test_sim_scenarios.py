"""Every scenario's physics under a fake clock: what each rung of the ladder does and when memory returns."""
import pytest

from console.clock import FakeClock
from console.sim.node import SimNode
from console.sim.scenarios import CONTAINER_HOST_PIDS, SCENARIOS, scenario_names
from console import rungs
from console import probe
from console.sources.sim import SimSource, parse_demo_target

#: what an operator types to list the processes (the simulator answers it as ps does)
PS = "timeout 10 ps -eo pid=,user:32=,args="


async def sh(node, cmd, timeout=600.0):
    return await node.exec(cmd, timeout)


async def used(node):
    r = await sh(node, "nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits")
    assert r.rc == 0, r
    return [int(x) for x in r.stdout.split()]


def make(name):
    clock = FakeClock()
    return SimNode(name, clock=clock), clock


def test_registry_names_and_ground_truth_are_complete():
    assert scenario_names() == ["seed", "slow-teardown", "renamed-workers", "hidden-holders", "container",
                                "reset-required", "remap-pending", "cuda-ipc", "mps", "graceful"]
    for name, sc in SCENARIOS.items():
        gt = SimNode(name, clock=FakeClock()).ground_truth
        assert gt is sc.truth and gt.root_cause and gt.end_state
        assert gt.shortest_path and set(gt.shortest_path) <= set(rungs.proposable()) | {"mps-terminate"}


def test_demo_targets():
    assert parse_demo_target("demo") == "seed"
    assert parse_demo_target("demo:container") == "container"
    assert parse_demo_target("gpu01") is None and parse_demo_target("local") is None
    with pytest.raises(ValueError) as exc:
        parse_demo_target("demo:nope")
    assert "nope" in str(exc.value) and "slow-teardown" in str(exc.value) and "\n" not in str(exc.value)
    with pytest.raises(ValueError):
        SimNode("nope")


@pytest.mark.parametrize("name", list(SCENARIOS))
async def test_every_scenario_polls_cleanly_and_is_stuck_at_start(name):
    clock = FakeClock()
    src = SimSource(scenario=name, clock=clock)
    snap = await src.poll()
    assert snap.error is None and len(snap.gpus) == 8
    if name == "remap-pending":      # no memory held: a row remap waits for a reset (test_memory_repair.py)
        assert src.node.memory_freed() and [g.index for g in snap.gpus if g.memory_repair.remap_pending] == [2]
    else:
        assert max(g.memory_used_mib for g in snap.gpus) > 40000
        assert not src.node.memory_freed()
    assert snap.processes and snap.own_pids


async def test_slow_teardown_frees_26s_after_sigkill_and_escalating_inside_the_window_is_useless():
    node, clock = make("slow-teardown")
    ranks = (await sh(node, "pgrep -f 'train.py --config'")).stdout.split()
    ranks = [p for p in ranks if node.proc(int(p)).comm == "python3"]
    assert len(ranks) == 4
    r = await sh(node, f"kill -s TERM {' '.join(ranks)}; sleep 10")
    assert (await used(node))[:4] == [88211, 88207, 88207, 88163]        # SIGTERM handlers never run
    await sh(node, f"kill -9 {' '.join(ranks)}")
    t0 = clock.now()
    await sh(node, "sleep 5")
    assert (await used(node))[:4] == [88211, 88207, 88207, 88163]
    r = await sh(node, "fuser -k /dev/nvidia*; nvidia-smi -r -i 0")
    assert "In use by another client" in r.stdout and r.rc == 255
    clock.advance(t0 + 25 - clock.now())
    assert (await used(node))[:4] != [4, 4, 4, 4]
    clock.advance(1.5)
    assert await used(node) == [4] * 8 and node.memory_freed()


async def test_renamed_workers_are_orphans_python3_misses_them_sigterm_frees():
    node, clock = make("renamed-workers")
    r = await sh(node, "ps -eo pid=,ppid=,comm=,args= | grep VLLM")
    rows = [ln.split() for ln in r.stdout.splitlines()]
    assert sorted(row[3] for row in rows) == ["VLLM::EngineCore"] + [f"VLLM::Worker_TP{i}" for i in range(4)]
    assert all(row[1] == "1" for row in rows)
    assert {row[2] for row in rows} == {"VLLM::EngineCor", "VLLM::Worker_TP"}       # comm is cut to 15 chars
    miss = await sh(node, "pkill python3; echo rc=$?; sleep 3")
    assert "rc=1" in miss.stdout and (await used(node))[:4] == [88101, 88097, 88097, 88097]
    pids = [row[0] for row in rows]
    await sh(node, f"kill -s TERM {' '.join(pids)}")
    t0 = clock.now()
    await sh(node, "sleep 3")
    assert node.memory_freed() and clock.now() - t0 <= 3
    assert "VLLM" not in (await sh(node, "ps -eo args=")).stdout
    assert "oom-killer" in (await sh(node, "dmesg")).stdout


async def test_hidden_holders_memory_without_listed_process_freed_only_by_killing_device_holders():
    node, clock = make("hidden-holders")
    apps = await sh(node, probe.timed(probe.QUERY_APPS))
    assert apps.rc == 0 and apps.stdout == ""
    assert [u > 50000 for u in await used(node)] == [True] * 4 + [False] * 4
    fds = await sh(node, "gi_k=whole\n" + probe.fds_command())          # a whole probe's walk
    assert fds.stdout.endswith("\0") and "\n" not in fds.stdout     # find -printf '%h %l\0'
    holders = sorted({int(rec.split("/")[2]) for rec in fds.stdout.split("\0")[:-1]})
    workers = [p for p in holders if node.proc(p).comm == "pt_data_worker"]
    assert len(workers) == 8
    # the usual pattern kills nothing: the workers are not called python3
    await sh(node, "pkill -9 python3; sleep 5")
    assert not node.memory_freed()
    await sh(node, f"kill -s TERM {' '.join(map(str, workers[:7]))}; sleep 2")
    assert (await used(node))[:4] == [4, 4, 4, 51190]        # GPU 3 still has one holder
    await sh(node, f"kill -s TERM {workers[7]}; sleep 1")
    assert node.memory_freed()


async def test_container_driver_pids_absent_holders_found_through_device_files():
    node, clock = make("container")
    apps = await sh(node, probe.timed(probe.QUERY_APPS))
    listed = [int(ln.split(",")[0]) for ln in apps.stdout.splitlines()]
    assert listed == list(CONTAINER_HOST_PIDS)
    assert "[Not Found]" in apps.stdout
    stat = await sh(node, probe.STAT)
    ps = await sh(node, PS)
    for pid in listed:
        assert f"\n{pid} (" not in "\n" + stat.stdout and f" {pid} " not in ps.stdout
    kill = await sh(node, f"kill -9 {listed[0]}")
    assert kill.rc == 1 and kill.stderr == "sh: 1: kill: No such process\n"
    meta = await sh(node, probe.META)
    own_ns = meta.stdout.splitlines()[5]
    assert own_ns != "pid:[4026531836]"
    walk = await sh(node, f"gi_k=whole\n{probe.fds_command()}\n{probe.pidns_command()}")   # pidns: the walk's holders
    pidns = walk.stdout.rsplit("\0", 1)[-1]
    assert pidns == f"/proc/23/ns {own_ns}\n/proc/24/ns {own_ns}\n"
    assert "Operation not permitted" in (await sh(node, probe.XID)).stdout
    assert (await sh(node, "systemctl stop nvidia-persistenced")).rc == 1
    await sh(node, "kill -s TERM 23 24; sleep 2")
    assert node.memory_freed()


async def test_reset_required_blocked_by_persistenced_then_succeeds():
    node, clock = make("reset-required")
    xid = (await sh(node, probe.XID)).stdout.splitlines()
    codes = [ln.split("): ")[1].split(",")[0] for ln in xid]
    assert codes == ["119", "119", "154"] and all("PCI:0000:41:00" in ln for ln in xid)
    assert "GSP" in xid[0] and "GPU Reset Required" in xid[-1]
    assert (await sh(node, probe.timed(probe.QUERY_APPS))).stdout == ""
    assert (await used(node))[3] == 61447
    refused = await sh(node, "nvidia-smi -r -i 3")
    assert refused.rc == 255 and refused.stdout.startswith(
        "The following GPUs could not be reset:\n  GPU 00000000:41:00.0: In use by another client\n\n1 device is")
    stop = await sh(node, "systemctl stop nvidia-persistenced; systemctl is-active nvidia-persistenced")
    assert stop.stdout == "inactive\n" and stop.rc == 3
    pm = await sh(node, "nvidia-smi --query-gpu=persistence_mode --format=csv,noheader -i 3")
    assert pm.stdout == "Disabled\n"
    ok = await sh(node, "nvidia-smi -r -i 3")
    assert ok.rc == 0 and ok.stdout.startswith("GPU 00000000:41:00.0 was successfully reset.")
    assert node.memory_freed() and (await used(node))[3] == 4


async def test_reset_required_persistence_off_for_one_gpu_is_enough():
    node, clock = make("reset-required")
    r = await sh(node, "nvidia-smi -pm 0 -i 3")
    assert r.stdout == "Disabled persistence mode for GPU 00000000:41:00.0.\nAll done.\n" and r.rc == 0
    assert (await sh(node, "nvidia-smi -r -i 3")).rc == 0
    assert node.memory_freed()


async def test_killing_processes_does_not_help_reset_required():
    node, clock = make("reset-required")
    await sh(node, "pkill -9 python3; fuser -k -TERM /dev/nvidia3; sleep 30")
    assert (await used(node))[3] == 61447


async def test_graceful_sigterm_frees_everything_within_3s():
    node, clock = make("graceful")
    assert ":30000 " in (await sh(node, "ss -ltn")).stdout
    r = await sh(node, "pgrep -f sglang.launch_server")
    launcher = r.stdout.split()[0]
    await sh(node, f"kill -s TERM {launcher}; sleep 1")
    assert not node.memory_freed()
    await sh(node, "sleep 2")
    assert node.memory_freed()
    assert ":30000 " not in (await sh(node, "ss -ltn")).stdout
    assert "sglang" not in (await sh(node, "ps -eo args=")).stdout


async def test_reboot_drops_the_connection_then_the_node_comes_back_clean():
    node, clock = make("reset-required")
    r = await sh(node, "systemctl reboot")
    assert r.rc is None and "unreachable" in r.error
    clock.advance(30)
    down = await SimSource(node=node).poll()
    assert down.error and "unreachable" in down.error
    clock.advance(31)
    snap = await SimSource(node=node).poll()
    assert snap.error is None and node.memory_freed()
    assert all(g.memory_used_mib == 4 for g in snap.gpus) and snap.kernel_log == ()
    assert snap.proc(1).name == "systemd" and float((await sh(node, "cat /proc/uptime")).stdout.split()[0]) < 5


async def test_renamed_workers_follow_their_engine_core_when_it_is_killed():
    node, clock = make("renamed-workers")
    engine = (await sh(node, "pgrep -x VLLM::EngineCor")).stdout.split()
    assert len(engine) == 1
    await sh(node, f"kill -9 {engine[0]}; sleep 1")
    assert not node.memory_freed()
    await sh(node, "sleep 2")
    assert node.memory_freed()


async def test_a_failing_consumer_does_not_stop_polling_and_poll_soon_is_not_lost():
    import asyncio

    from console.monitor import NodeMonitor
    from console.clock import FakeClock
    from console.sources.sim import SimSource
    seen = []

    def consumer(snap):
        seen.append(snap)
        if len(seen) == 1:
            raise RuntimeError("a UI bug")
    monitor = NodeMonitor(SimSource(scenario="graceful", clock=FakeClock()), interval=3600, on_update=consumer)
    monitor.start()
    try:
        for _ in range(200):
            if seen:
                break
            await asyncio.sleep(0.01)
        monitor.poll_soon()          # the next poll comes now, not in an hour
        for _ in range(200):
            if len(seen) >= 2:
                break
            await asyncio.sleep(0.01)
        assert len(seen) >= 2
    finally:
        await monitor.stop()


async def test_driver_reload_is_refused_while_held_and_clears_a_stuck_gpu_once_free():
    from console.actions.ladder import RELOAD_DRIVER_COMMAND
    from console.clock import FakeClock
    from console.sources.sim import SimSource
    src = SimSource(scenario="reset-required", clock=FakeClock())
    r = await src.run(RELOAD_DRIVER_COMMAND)
    assert r.rc == 1 and "is in use" in r.stderr            # nvidia-persistenced holds the devices
    assert (await src.run("systemctl stop nvidia-persistenced")).rc == 0
    r = await src.run(RELOAD_DRIVER_COMMAND)
    assert r.rc == 0, r.stderr
    snap = await src.poll()
    assert snap.error is None and snap.gpu(3).memory_used_mib < 1024
    assert src.node.memory_freed()
