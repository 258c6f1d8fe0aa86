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
