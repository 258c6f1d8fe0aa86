"""How a simulated command line ends other than by returning: the shell raises these and
the commands (console/sim/cmd_*.py) raise them too, so they live apart from both."""
from __future__ import annotations


class Deadline(Exception):
    """A sleep ran into the innermost deadline (a ``timeout`` or the exec's own)."""

    def __init__(self, deadline: float) -> None:
        super().__init__(deadline)
        self.deadline = deadline


class Rebooting(Exception):
    """The command line rebooted the node: the connection drops."""


class ShellExit(Exception):
    def __init__(self, code: int) -> None:
        super().__init__(code)
        self.code = code
