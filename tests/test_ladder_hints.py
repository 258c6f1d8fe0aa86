"""What the ladder tells the operator on the way: B says it touches every GPU, a reset after B
says how to restore what B stopped, and F says why each target is a holder of the GPU."""
from __future__ import annotations

from console.actions.plan import plan_action
from console.actions.run import execute
from console.clock import FakeClock
from console.monitor import NodeMonitor, diagnosed
from console.sim.scenarios import RESET_GPU
from console.sources.sim import SimSource


async def sim(scenario: str):
    clock = FakeClock()
    source = SimSource(scenario=scenario, clock=clock)
    return source, clock, diagnosed(await source.poll())


async def test_b_says_stopping_the_daemon_affects_every_gpu_and_a_reset_after_it_says_how_to_restore():
    source, clock, snap = await sim("reset-required")
    monitor = NodeMonitor(source)
    clear = plan_action(snap, "clear-blockers", gpus=(RESET_GPU,))
    assert any("stopping nvidia-persistenced affects every GPU on demo, not only GPU 3" in n for n in clear.notes)
    from console.ui.confirm import plan_text
    assert "affects every GPU" in plan_text(clear, read_only=False, dry_run=False).plain
    await execute(clear, source, clock=clock, monitor=monitor)
    reset = plan_action(diagnosed(await source.poll()), "reset", gpus=(RESET_GPU,))
    out = await execute(reset, source, clock=clock, monitor=monitor)
    assert out.status == "settled" and out.rc == 0
    # the same lines the restore x offers next will run (B turned persistence mode off on GPU 3)
    assert ("persistence mode and nvidia-persistenced still off since B: once the GPU is healthy, restore them "
            "with `nvidia-smi -pm 1 -i 3`, `systemctl start nvidia-persistenced`") in out.text


async def test_a_reset_with_no_b_before_it_suggests_nothing():
    source, clock, snap = await sim("reset-required")
    monitor = NodeMonitor(source)
    monitor.actions.clear()
    source.node.gpus[RESET_GPU].persistence = False
    out = await execute(plan_action(snap, "reset", gpus=(RESET_GPU,)), source, clock=clock, monitor=monitor)
    assert "restore" not in out.text


async def test_f_on_gpu_3_targets_gpu_3s_holder_and_leaves_the_others_jobs_alone():
    """The seed: every scheduler has /dev/nvidia3 open (CUDA opens every device file), but only
    TP3's memory is on GPU 3. F on GPU 3 kills TP3; the seven others are left alone, and Confirm
    says why (on a shared node they are other jobs)."""
    _, _, snap = await sim("seed")
    plan = plan_action(snap, "kill-holders", gpus=(3,))
    assert plan.commands == ("kill -s KILL 72422",) and plan.title == "SIGKILL 1 holder of GPU 3"
    assert {t.pid: t.why for t in plan.targets} == {72422: "holds /dev/nvidia3; listed by the driver on GPU 3 (74.3 GiB)"}
    left = next(r for r in plan.refusals if r.startswith("7 processes"))
    assert "memory is on GPUs 0-2, 4-7" in left and "72230" in left and "left alone" in left
    from console.ui.confirm import plan_text
    text = plan_text(plan, read_only=False, dry_run=False).plain
    assert "↳ holds /dev/nvidia3" in text and "left alone" in text


async def test_f_on_a_gpu_says_when_a_holder_reaches_other_gpus():
    """A hidden holder of GPU 0 (no driver entry) whose children hold memory on GPUs 0-1: the
    title says how far the kill goes and a note names it before anyone confirms."""
    import dataclasses
    _, _, snap = await sim("graceful")
    launcher = snap.proc(65102)
    with_files = dataclasses.replace(launcher, device_files=("/dev/nvidia0",))
    snap = dataclasses.replace(snap, processes=tuple(with_files if p.pid == 65102 else p for p in snap.processes))
    plan = plan_action(snap, "kill-holders", gpus=(0,))
    assert 65102 in [t.pid for t in plan.targets]
    assert plan.title.endswith("(affects GPUs 0-1)"), plan.title
    assert any(n.startswith("PID 65102 (") and "also holds memory on GPU 1" in n for n in plan.notes)
