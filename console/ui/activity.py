"""What the console says as it works — an action's progress and outcome, a check running, a
key pressed in the wrong place — in one line above the footer, most recent first, instead of
toasts over the findings. Every line is kept (``m`` shows them all); action outcomes are in the
incident's timeline as well. Only errors also pop up, briefly, at the top right."""
from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass
from typing import Callable, Sequence

from rich.text import Text

from console.clock import REAL_CLOCK, Clock
from console.ui.text import printable

SEVERITY_STYLE = {"error": "bold red", "warning": "yellow", "information": ""}
#: lines kept for the history screen
HISTORY = 500


@dataclass(frozen=True)
class StatusMessage:
    at: float           # epoch seconds
    text: str
    severity: str = "information"


def clock_time(at: float) -> str:
    return time.strftime("%H:%M:%S", time.localtime(at))


class Activity:
    def __init__(self, clock: Clock = REAL_CLOCK) -> None:
        self.clock = clock
        self._said: deque[StatusMessage] = deque(maxlen=HISTORY)

    def add(self, text: object, severity: str = "information") -> StatusMessage:
        said = StatusMessage(self.clock.now(), printable(text, keep="\n").replace("\n", " — "), severity)
        self._said.append(said)
        return said

    @property
    def latest(self) -> StatusMessage | None:
        return self._said[-1] if self._said else None

    def history(self) -> list[StatusMessage]:
        """Most recent first."""
        return list(reversed(self._said))


def line(said: StatusMessage | None, idle: str = "", running: Sequence[str] = ()) -> Text:
    """The status line: the latest message, with its time (never parsed as markup). Work that
    runs now (a wait's progress, whole) comes first while it runs; the latest message after it."""
    out = Text(overflow="ellipsis")
    for work in running:
        out.append("⏳ " + printable(work) + "  ", style="bold cyan")
    if said is None and running:
        return out
    if said is None:
        out.append(printable(idle), style="dim")
        return out
    out.append(clock_time(said.at) + " ", style="dim")
    out.append(said.text, style=SEVERITY_STYLE.get(said.severity, ""))
    return out


#: what a line too long for its rows ends with: the whole of it is in m
WHOLE_IN_M = " (m: whole)"


def fit(text: Text, width: int, lines: int) -> Text:
    """``text`` as it fits ``lines`` rows of ``width`` cells when wrapped (words are not split
    across rows, so a row may hold less: one cell in eight is left for that); longer, cut with a
    mark that says the whole is in m."""
    room = lines * width - (lines - 1) * max(1, width // 8)
    if text.cell_len <= room:
        return text
    out = text.copy()
    out.truncate(max(1, room - len(WHOLE_IN_M)), overflow="ellipsis")      # ends with …
    out.append(WHOLE_IN_M, style="dim")
    return out


def history_text(said: list[StatusMessage], header: Sequence[str] = ()) -> Text:
    out = Text()
    out.append("Messages, most recent first\n\n", style="bold")
    for line in header:     # a node's error (✖) stands out: its remedy is what to act on
        out.append(printable(line) + "\n", style="bold red" if line.startswith("✖") else "dim")
    if header:
        out.append("\n")
    for s in said:
        out.append(clock_time(s.at) + "  ", style="dim")
        out.append(s.text + "\n", style=SEVERITY_STYLE.get(s.severity, ""))
    if not said:
        out.append("nothing yet\n", style="dim")
    return out


class Work:
    """Work in progress (a check running, a wait's progress) and results that wait for an open
    window to close. ``lines()``: what runs, one line each, whole ("demo: wait-and-reread: 15 of
    86 s, …"; the activity line and the follower's live state); ``status(line)`` appends the
    short forms and the first waiting result to the status line at the top."""

    def __init__(self) -> None:
        self._running: dict[str, tuple[str, str]] = {}        # key -> (whole, short)
        self.waiting: list[tuple[str, Callable[[], None]]] = []   # (headline, show), oldest first

    def set(self, key: str, text: str | None, short: str | None = None) -> None:
        """``text`` None: that work is done."""
        if text is None:
            self._running.pop(key, None)
        else:
            self._running[key] = (text, short or text)

    def lines(self) -> list[str]:
        try:           # also read from the engine's thread (the follower's state)
            return [text for text, _short in list(self._running.values())]
        except RuntimeError:      # changed while read: the next write has it
            return []

    def status(self, line: Text) -> None:
        for _text, short in list(self._running.values()):
            line.append("  ⏳ " + printable(short, 40), style="bold cyan")
        if self.waiting:
            more = f" (+{len(self.waiting) - 1})" if len(self.waiting) > 1 else ""
            line.append(f"  ✔ {printable(self.waiting[0][0], 70)} — shown when this window closes" + more,
                        style="bold green")
