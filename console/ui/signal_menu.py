"""The signal menu (htop's F9): any signal of console/actions/ladder.py's SIGNALS for the
selected/tagged processes, SIGTERM first. The choice goes through Confirm and the action layer
like `t` and `k` (the exact `kill -s SIG PIDS` line, the PID-reuse guard, the timeline)."""
from __future__ import annotations

from typing import Sequence

from rich.text import Text
from textual.widgets.option_list import Option

from console.actions.ladder import SIGNALS
from console.ui import keys
from console.ui.option_menu import OptionMenu

WHAT = {
    "TERM": "ask them to exit (clean exits free memory fastest)",
    "INT": "interrupt, as Ctrl-C in their terminal",
    "HUP": "hang up (many servers reload or exit)",
    "QUIT": "quit and dump core",
    "USR1": "user signal 1 (some servers dump their state)",
    "USR2": "user signal 2",
    "ABRT": "abort and dump core",
    "CONT": "continue stopped processes",
    "STOP": "stop (pause) them; cannot be caught",
    "TSTP": "stop as Ctrl-Z would",
    "KILL": "kill: cannot be caught, no clean-up",
}


class SignalMenu(OptionMenu):
    """Dismisses with the chosen signal's name ("TERM"), or None; SIGTERM first."""
    BINDINGS = keys.bindings("signal-menu")
    menu_id = "signals"

    def __init__(self, pids: Sequence[int], node: str) -> None:
        super().__init__()
        self._pids, self._node = list(pids), node

    def heading(self) -> str:
        shown = " ".join(map(str, self._pids[:8])) + (" …" if len(self._pids) > 8 else "")
        return f"Send a signal to PID {shown} on {self._node}"

    def hint_text(self) -> str:
        return "enter chooses (Confirm shows the exact line first), escape cancels"

    def options(self) -> list[Option]:
        out = []
        for sig in SIGNALS:
            label = Text(f"SIG{sig:<6} ", style="bold")
            label.append(WHAT.get(sig, ""))
            out.append(Option(label, id=sig))
        return out
