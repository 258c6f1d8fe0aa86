"""The signal menu (htop's F9): any signal of console/actions/ladder.py's SIGNALS for the
selected/tagged processes, SIGTERM first. The choice goes through Confirm and the action layer
like `t` and `k` (the exact `kill -s SIG PIDS` line, the PID-reuse guard, the timeline)."""
from __future__ import annotations

from typing import Sequence

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import OptionList
from textual.widgets.option_list import Option

from console.actions.ladder import SIGNALS
from console.ui.text import LiteralOptionList, LiteralStatic, literal
from console.ui import keys

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


class SignalMenu(ModalScreen[str | None]):
    """Dismisses with the chosen signal's name ("TERM"), or None."""
    BINDINGS = keys.bindings("signal-menu")

    def __init__(self, pids: Sequence[int], node: str) -> None:
        super().__init__()
        self._pids, self._node = list(pids), node

    def compose(self) -> ComposeResult:
        shown = " ".join(map(str, self._pids[:8])) + (" …" if len(self._pids) > 8 else "")
        with Vertical(classes="prompt"):
            yield LiteralStatic(literal(f"Send a signal to PID {shown} on {self._node}", "bold"))
            yield LiteralStatic(literal("enter chooses (Confirm shows the exact line first), escape cancels", "dim"))
            options = []
            for sig in SIGNALS:
                label = Text(f"SIG{sig:<6} ", style="bold")
                label.append(WHAT.get(sig, ""))
                options.append(Option(label, id=sig))
            yield LiteralOptionList(*options, id="signals")

    def on_mount(self) -> None:
        menu = self.query_one("#signals", OptionList)
        menu.highlighted = 0            # SIGTERM
        menu.focus()

    @on(OptionList.OptionSelected)
    def _chosen(self, event: OptionList.OptionSelected) -> None:
        self.dismiss(event.option.id)

    def action_cancel(self) -> None:
        self.dismiss(None)
