"""A stalled event loop (a huge render, a slow callback) never turns into a false node error:
probe deadlines are charged with the probe's own time, not with loop lag (console/clock.py)."""
from __future__ import annotations

import asyncio
import time

import pytest

from console.clock import timeout_ignoring_stalls
from console.model import CommandResult, NodeSnapshot
from console.monitor import bounded_poll
from console.sources.base import Source
from console.sources.sim import SimSource


class RoundTrips(SimSource):
    """The simulated seed node behind a network: the answer comes in three short round trips,
    so a poll is in flight for a while (as over SSH, where output arrives in chunks)."""

    def __init__(self) -> None:
        super().__init__(name="far", scenario="seed")
        self.in_flight = asyncio.Event()

    async def _exec(self, script: str, timeout: float) -> CommandResult:
        self.in_flight.set()
        for _ in range(3):
            await asyncio.sleep(0.02)
        return await super()._exec(script, timeout)


class Hung(Source):
    kind = "sim"

    async def poll(self) -> NodeSnapshot:
        await asyncio.Event().wait()
        raise AssertionError("unreachable")

    async def run(self, command: str, timeout: float = 0) -> CommandResult:
        return CommandResult(command=command, rc=0)


async def stall_when(event: asyncio.Event, seconds: float) -> None:
    """Hold the event loop, as a synchronous callback does, once ``event`` is set."""
    await event.wait()
    time.sleep(seconds)


async def test_a_fast_poll_in_flight_across_a_stalled_loop_is_not_a_timed_out_node():
    src = RoundTrips()
    deadline = 0.3
    stall = asyncio.create_task(stall_when(src.in_flight, 3 * deadline))   # longer than the deadline
    snap = await bounded_poll(src, deadline)
    await stall
    assert snap.error is None, snap.error
    assert len(snap.gpus) == 8 and snap.processes


async def test_a_hung_poll_still_times_out():
    snap = await bounded_poll(Hung("stuck"), 0.2)
    assert snap.error is not None and "timed out" in snap.error


async def test_timeout_ignoring_stalls_charges_the_work_not_the_stall():
    with pytest.raises(TimeoutError):
        async with timeout_ignoring_stalls(0.1) as t:
            await asyncio.Event().wait()
    assert t.expired
    async with timeout_ignoring_stalls(0.2) as t:
        await asyncio.sleep(0.01)
        time.sleep(0.5)                  # the loop is held, longer than the whole deadline
        await asyncio.sleep(0.01)
    assert not t.expired


async def test_an_ssh_probe_in_flight_across_a_stalled_loop_is_answered(sshd, tmp_path, ssh_home):
    from console.sources.ssh.options import SshOptions
    from console.sources.ssh.source import SshSource
    node = sshd.nodes[0]
    node.smi.set()
    opts = SshOptions(known_hosts=str(sshd.write_known_hosts(tmp_path / "known_hosts")),
                      identity=(str(sshd.keys.client_key),), connect_timeout=5.0)
    src = SshSource(node.target, opts, probe_timeout=2.0)
    try:
        first = await src.poll()                     # connected, the shell open
        assert first.error is None, first.error
        poll = asyncio.create_task(src.poll())
        while not src._probe_lock.locked() and not poll.done():
            await asyncio.sleep(0)                   # until the probe is on the wire
        time.sleep(3.0)                              # the loop held past the 2 s probe deadline
        snap = await poll
        assert snap.error is None, snap.error
        assert snap.gpus
    finally:
        await src.close()
