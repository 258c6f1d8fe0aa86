"""The one interface every node kind implements: local, simulated and SSH."""
from __future__ import annotations

import abc

from ..model import CommandResult, NodeSnapshot

DEFAULT_PROBE_TIMEOUT_S = 10.0
DEFAULT_COMMAND_TIMEOUT_S = 30.0


class Source(abc.ABC):
    """A node. ``poll`` never raises: every failure becomes ``NodeSnapshot.error``."""

    #: "local", "sim" or "ssh"
    kind: str = "?"

    def __init__(self, name: str) -> None:
        self.name = name

    @abc.abstractmethod
    async def poll(self) -> NodeSnapshot:
        """One reading of the node (GPUs, processes, holders); never raises."""

    @abc.abstractmethod
    async def run(self, command: str, timeout: float = DEFAULT_COMMAND_TIMEOUT_S) -> CommandResult:
        """Run a POSIX shell command line on the node; never raises.

        Checks and actions use this; the command text is exactly what the
        operator is shown.
        """

    async def signal(self, pid: int, signame: str, *, start_ticks: int | None = None,
                     create_time: float | None = None) -> CommandResult:
        """Send a signal to one process, refusing if the PID was reused.

        The default renders a guarded shell line (start time from
        /proc/PID/stat field 22 compared before `kill`); local overrides with
        psutil/pidfd.
        """
        from .probe import guarded_kill_command
        return await self.run(guarded_kill_command(pid, signame, start_ticks))

    async def close(self) -> None:
        """Release connections/handles (NVML before a local reset)."""
