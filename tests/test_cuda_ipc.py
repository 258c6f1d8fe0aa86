"""CUDA IPC (causes from the field, 3: LMCache/LMCache#4014): memory a process exported and
another imported stays charged to the importer once the exporter dies. The console tells it from
the driver's list (the exporter gone, the importer's share grown by as much on the same GPU, the
GPU's memory not back) and moves the next step to the importer — never the dead PID."""
from __future__ import annotations

from console.actions.ladder import commands_for, step_args
from console.diagnosis import diagnose
from console.model import DriverProc, Gpu, NodeSnapshot, Proc

T0 = 1_800_000_000.0


def proc(pid, name, *, state="S", ppid=1):
    return Proc(pid=pid, ppid=ppid, state=state, user="alice", name=name, cmdline=f"python3 {name}.py",
                create_time=T0 - 3600 + pid, start_ticks=pid * 100)


def node(t, charged, used, procs):
    """``charged``: {pid: MiB} on GPU 0 as the driver lists it; ``used``: GPU 0's memory."""
    return NodeSnapshot(
        name="gpu07", taken_at=t,
        gpus=(Gpu(index=0, uuid="GPU-0", name="NVIDIA H100", bus_id="00000000:18:00.0", memory_used_mib=used,
                  memory_total_mib=81559, utilization_pct=0),),
        processes=(Proc(pid=1, ppid=0, state="S", user="root", name="systemd", cmdline="/sbin/init", start_ticks=1),
                   *procs),
        driver_processes=tuple(DriverProc(pid=p, gpu_index=0, gpu_uuid="GPU-0", used_memory_mib=m, name="python3")
                               for p, m in charged.items()))


SERVER, CLIENT = proc(4100, "lmcache_server"), proc(4200, "vllm_client")


def test_a_server_that_kept_a_dead_clients_memory_is_the_next_step_not_the_dead_pid():
    before = node(T0, {4100: 2_000, 4200: 30_000}, 32_500, [SERVER, CLIENT])
    after = node(T0 + 1, {4100: 32_000}, 32_500, [SERVER])          # the client is gone, its share moved
    f, = [f for f in diagnose(after, [before]) if f.kind == "cuda-ipc"]
    assert f.severity == "high" and f.pids == (4100,) and f.gpus == (0,)
    assert f.summary.startswith("PID 4100 (lmcache_server) took over 29.3 GiB on GPU 0 when PID 4200 "
                                "(vllm_client) exited")
    assert "CUDA IPC" in f.summary and "ipc_collect" in f.next_step
    assert f.rung == "sigterm" and commands_for(f.rung, after, *step_args(f)) == ["kill -s TERM 4100"]
    later = node(T0 + 30, {4100: 32_000}, 32_500, [SERVER])            # still within the history: still said
    assert [f.kind for f in diagnose(later, [before, after])].count("cuda-ipc") == 1


def test_a_zombie_exporter_counts_as_gone():
    before = node(T0, {4100: 2_000, 4200: 30_000}, 32_500, [SERVER, CLIENT])
    after = node(T0 + 1, {4100: 32_000}, 32_500, [SERVER, proc(4200, "vllm_client", state="Z")])
    assert [f.kind for f in diagnose(after, [before])].count("cuda-ipc") == 1


def test_what_is_not_a_handoff():
    before = node(T0, {4100: 2_000, 4200: 30_000}, 32_500, [SERVER, CLIENT])
    cases = {
        "the memory came back": node(T0 + 1, {4100: 2_000}, 2_500, [SERVER]),
        "the exporter still runs": node(T0 + 1, {4100: 32_000}, 32_500, [SERVER, CLIENT]),
        "the importer grew by another amount": node(T0 + 1, {4100: 7_000}, 32_500, [SERVER]),
        "the importer is gone too": node(T0 + 1, {}, 32_500, []),
    }
    for why, after in cases.items():
        assert "cuda-ipc" not in [f.kind for f in diagnose(after, [before])], why
    released = node(T0 + 2, {4100: 2_000}, 2_500, [SERVER])          # ipc_collect: it let go since
    handed = node(T0 + 1, {4100: 32_000}, 32_500, [SERVER])
    assert "cuda-ipc" not in [f.kind for f in diagnose(released, [before, handed])]


async def test_the_demo_scenario_hands_the_memory_over_and_sigterm_of_the_importer_frees_it():
    """demo:cuda-ipc: the worker crashes 8 s in; the console names the server, and following its
    step (SIGTERM the importer) brings the memory back."""
    from console.clock import FakeClock
    from console.monitor import NodeMonitor
    from console.sim.scenarios import IPC_HANDOFF_S, IPC_SERVER_PID
    from console.sources.sim import SimSource
    from tests.sim_fixtures import take_step
    clock = FakeClock()
    src = SimSource(name="demo", scenario="cuda-ipc", clock=clock)
    monitor = NodeMonitor(src, interval=3600)
    first = await monitor.poll_once()
    assert "cuda-ipc" not in [f.kind for f in first.findings]
    clock.advance(IPC_HANDOFF_S + 1)
    snap = await monitor.poll_once()
    f, = [f for f in snap.findings if f.kind == "cuda-ipc"]
    assert f.pids == (IPC_SERVER_PID,) and "45.0 GiB on GPU 0" in f.summary and f.rung == "sigterm"
    assert await take_step(src, snap, f, monitor)
    for _ in range(10):
        clock.advance(1.0)
        snap = await monitor.poll_once()
        if src.node.memory_freed():
            break
    assert src.node.memory_freed() and snap.gpu(0).memory_used_mib < 1024
