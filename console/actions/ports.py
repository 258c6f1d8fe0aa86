"""What ``execute`` (console/actions/run.py) needs of the things it is handed, and nothing more.

Structural types (``typing.Protocol``): the concrete classes satisfy them without naming them —
``console.sources.base.Source`` (and ``SlurmActionSource``) is an ``ActionSource``,
``console.incident.timeline.Timeline`` a ``TimelineWriter`` (the incident layer sits above this
one: actions never import it), ``console.monitor.NodeMonitor`` an ``ActionSink``, and the clocks
of console/clock.py a ``Clock``. A test's fake need only have these members.
"""
from __future__ import annotations

from typing import Any, Awaitable, Callable, MutableSequence, Protocol, runtime_checkable

from console.clock import Clock
from console.model import ActionRecord, CommandResult, NodeSnapshot, TimelineEntry
from console.sources.slurm_parse import SlurmNode

#: what re-reading the target of an action gives: the node's snapshot, or for a Slurm rung the
#: node's Slurm state (``scontrol show node``)
Reading = NodeSnapshot | SlurmNode
Reader = Callable[[], Awaitable[Reading]]


class ActionSource(Protocol):
    """Where a plan's commands run and its signals go; re-read with ``poll``."""

    @property
    def clock(self) -> Clock: ...

    #: the deadline of one re-read (seconds)
    @property
    def probe_timeout(self) -> float: ...

    async def poll(self) -> Reading: ...

    async def run(self, command: str, timeout: float, /) -> CommandResult: ...

    async def signal(self, pid: int, signame: str, /, *, start_ticks: int | None,
                     create_time: float | None) -> CommandResult: ...

    async def close(self) -> None: ...


@runtime_checkable
class NvmlHolder(Protocol):
    """A source that is an NVML client itself (console/sources/local): it lets go of the driver
    (``nvml_paused``) while a reset or a driver reload runs."""
    nvml_paused: bool


class TimelineWriter(Protocol):
    """The incident's timeline, as far as an action writes it (one entry per call)."""

    def append(self, kind: str, text: str = ..., *, node: str | None = ...,
               **fields: Any) -> TimelineEntry: ...


class ActionSink(Protocol):
    """Who must know an action was sent: diagnosis judges teardown windows by ``actions``;
    ``poll_soon`` shows the effect at once."""

    @property
    def actions(self) -> MutableSequence[ActionRecord]: ...

    def poll_soon(self) -> None: ...


__all__ = ["ActionSink", "ActionSource", "Clock", "NvmlHolder", "Reader", "Reading", "TimelineWriter"]
