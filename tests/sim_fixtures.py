"""Shared fixtures for simulator tests: a fake clock and the seed node on it."""
import pytest

from console.clock import FakeClock
from console.sim.node import SimNode


@pytest.fixture
def clock():
    return FakeClock()


@pytest.fixture
def node(clock):
    return SimNode("seed", clock=clock)


async def sh(node, cmd, timeout=600.0):
    """Run shell text on a simulated node (time is the node's fake clock)."""
    return await node.exec(cmd, timeout)


async def take_step(source, snap, finding, monitor=None):
    """A finding's next step the way the console takes it (console/actions/step.py), Confirm
    answered yes: the wait-and-reread check, or plan -> execute -> verify. The background watch
    after the first verification window is stopped (it would move a fake clock on its own)."""
    from console.actions.run import execute
    from console.actions.step import step_for
    from console.checks.registry import run_check
    step = step_for(finding, snap)
    assert step is not None, finding
    if step.check is not None:
        name, params = step.check
        return await run_check(source, name, snap, **params)
    outcome = await execute(step.plan, source, monitor=monitor)
    if outcome.watch is not None:
        outcome.watch.cancel()
    return outcome
