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


class KeptShellSim:
    """Mixin for a SimSource whose probes go to one long-lived shell, as over SSH: its variables
    (the listing, the scope) live from probe to probe, so the probe has its two speeds (light,
    whole) and leaves out the sticky sections, as the console's kept shell does."""

    def _shell_token(self):
        if not hasattr(self, "_kept_env"):
            self._kept_env: dict[str, str] = {}
        return self._kept_env

    async def _exec(self, script, timeout):
        return await self.node.exec(script, timeout, self._shell_token())


def kept_shell_sim(**kw):
    """A SimSource talking to one long-lived shell (KeptShellSim)."""
    from console.sources.sim import SimSource

    class KeptSim(KeptShellSim, SimSource):
        pass
    return KeptSim(**kw)
