"""The one interface every node kind implements: local, simulated and SSH."""
from __future__ import annotations

import abc
import logging

from console.clock import REAL_CLOCK, Clock
from console.model import CommandResult, NodeSnapshot
from console.probe import DEFAULT_COMMAND_TIMEOUT_S, DEFAULT_PROBE_TIMEOUT_S, guarded_kill_command

log = logging.getLogger("gpu_incident.commands")


def logged(node: str, result: CommandResult) -> CommandResult:
    """Record a command and its outcome in the --debug-log; returns the result unchanged."""
    log.debug("%s: %s -> rc=%s in %.0f ms%s", node, result.command, result.rc,
              result.duration_s * 1000, f" ({result.error})" if result.error else "")
    return result



class Source(abc.ABC):
    """A node. ``poll`` never raises: every failure becomes ``NodeSnapshot.error``."""

    #: "local", "sim" or "ssh"
    kind: str = "?"
    #: the node's time (console/clock.py): a simulated node's own, else the machine's
    clock: Clock = REAL_CLOCK
    #: the deadline of one poll: reading and parsing (a shell source's own; cli --probe-timeout)
    probe_timeout: float = DEFAULT_PROBE_TIMEOUT_S
    #: every process in full in its readings (True), or only those a verdict rests on, with the
    #: count of all (False: a node not on screen, in a console of many: Session.view). A source
    #: that cannot tell keeps every process
    detail: bool = True

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

    def whole_is_fresh(self) -> bool:
        """Did the last poll read every process (or one a moment before it)? A source that
        reads everything every poll always did."""
        return True

    def request_whole(self) -> None:
        """Read every process at the next poll, not only what the probe watches (the operator
        looks at all of them, or is about to confirm an action). A source that reads everything
        every poll has nothing to do."""

    # ---- the console's own nvidia-smi loops (console/probe_loop.py): a shell source runs them;
    # ---- a source without loops has none to stop
    @property
    def loop_pids(self) -> tuple[int, ...]:
        """The console's own nvidia-smi loops on the node, while they run."""
        return ()

    def loop_stop_commands(self, snap: NodeSnapshot | None) -> tuple[str, ...]:
        """The commands that stop the loops now (none without loops)."""
        return ()

    def pause_loop(self) -> None:
        """Start no loop until ``resume_loop`` (an action must not meet the console's own NVML handle)."""

    def resume_loop(self) -> None:
        """Loops may start again."""

    async def signal(self, pid: int, signame: str, *, start_ticks: int | None = None,
                     create_time: float | None = None) -> CommandResult:
        """Send a signal to one process, refusing if the PID was reused.

        The default renders a guarded shell line (start time from
        /proc/PID/stat field 22 compared before `kill`); local overrides with
        psutil/pidfd.
        """
        if int(pid) <= 1:
            return logged(self.name, CommandResult(
                command=f"kill -s {signame} {pid}", rc=3,
                stderr=f"refused: PID {pid} is init or a process group, never signalled by this console"))
        if start_ticks is None:
            return logged(self.name, CommandResult(
                command=f"kill -s {signame} {pid}", rc=3,
                stderr=f"refused: the start time of PID {pid} is unknown, so a reused PID could not "
                       "be told apart (PID-reuse guard)"))
        return await self.run(guarded_kill_command(pid, signame, start_ticks))

    async def close(self) -> None:
        """Release connections/handles (NVML before a local reset)."""
