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
    assert ("persistence mode and nvidia-persistenced still off since B: once the GPU is healthy, restore them "
            "with `nvidia-smi -pm 1`, `systemctl start nvidia-persistenced`") in out.text


async def test_a_reset_with_no_b_before_it_suggests_nothing():
    source, clock, snap = await sim("reset-required")
    monitor = NodeMonitor(source)
    monitor.actions.clear()
    source.node.gpus[RESET_GPU].persistence = False
    out = await execute(plan_action(snap, "reset", gpus=(RESET_GPU,)), source, clock=clock, monitor=monitor)
    assert "restore" not in out.text


async def test_f_on_gpu_3_says_why_each_target_holds_gpu_3():
    """The seed: F on GPU 3 lists the eight schedulers; seven have their memory on other GPUs
    and are holders of GPU 3 because each has /dev/nvidia3 open."""
    _, _, snap = await sim("seed")
    plan = plan_action(snap, "kill-holders", gpus=(3,))
    why = {t.pid: t.why for t in plan.targets}
    assert len(why) == 8
    assert why[72422] == "holds /dev/nvidia3; listed by the driver on GPU 3 (74.3 GiB)"
    assert why[72230] == "holds /dev/nvidia3; its memory: 74.3 GiB on GPU 0"
    from console.ui.confirm import plan_text
    text = plan_text(plan, read_only=False, dry_run=False).plain
    assert text.count("↳ holds /dev/nvidia3") == 8 and "its memory: 74.3 GiB on GPU 7" in text
