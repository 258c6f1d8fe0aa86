"""What the follower (`follow ID --live`, console/ui/mirror_view.py) shows of the person who
drives: their open Confirm (what is about to run, on what: read-only here), how it ended, the
follower's own keys on its help screen, and its findings panel's title.

Every text from the state file is untrusted: built from ``printable`` pieces into rich Text.
"""
from __future__ import annotations

import datetime as dt
from typing import Sequence

from rich.text import Text

from console.incident.pending import Closed, Pending, outcome_words
from console.ui import keys, tables
from console.ui.text import printable

#: how long the follower's status line says how the driver's last Confirm ended
CLOSED_SHOWN_S = 60.0
#: the lines the open Confirm takes at most above the follower's panels (commands, targets)
CONFIRM_LINES = 6


def confirm_text(p: Pending, width: int, lines: int = CONFIRM_LINES) -> Text:
    """The driver's open Confirm, read-only: who is about to run what on which node, the exact
    commands, the targets; each line cut with "…" at ``width``."""
    width = max(20, width)
    out: list[Text] = []
    head = Text(no_wrap=True)
    head.append(" CONFIRM OPEN ", style="bold reverse")
    head.append(f" {printable(p.by, 40)} is about to run ", style="bold")
    head.append(printable(p.title, 60), style="bold yellow")
    head.append(f" on {printable(p.node, 40)}", style="bold")
    head.append(" — not run yet: speak up now (read-only here)", style="yellow")
    if p.mode:
        head.append(f" [{p.mode}]", style="dim")
    out.append(head)
    room = max(2, lines - 1)
    commands = list(p.commands)
    shown_commands = commands[:max(1, room - 1)] if p.targets else commands[:room]
    for command in shown_commands:
        out.append(Text("  $ " + printable(command), style="bold", no_wrap=True))
    if len(commands) > len(shown_commands):
        out[-1].append(f"  (+{len(commands) - len(shown_commands)} more)", style="dim")
    if p.targets:
        count = p.target_count
        line = Text(f"  {count} target{'s' if count != 1 else ''}: ", style="bold", no_wrap=True)
        parts = []
        for t in p.targets:
            mib = f" {t.gpu_mib} MiB" if t.gpu_mib else ""
            parts.append(f"{t.pid} {printable(t.user, 12)} {printable(t.state, 1)} {printable(t.name, 40)}{mib}")
        line.append(" · ".join(parts))
        out.append(line)
    for line in out:
        line.truncate(width, overflow="ellipsis")
    return Text("\n").join(out[:lines])


def closed_words(c: Closed) -> str:
    """"alice@vm cancelled SIGKILL 9 processes on demo (12:03:04): nothing ran" — the answer
    first: a split pane's status line is cut at its end."""
    did, result = outcome_words(c)
    when = dt.datetime.fromtimestamp(c.at).strftime("%H:%M:%S")
    return (f"{printable(c.by, 40)} {did} {printable(c.title, 60)} on {printable(c.node, 40)} ({when})"
            + (f": {result}" if result else ""))


def help_rows(followers_keys: Sequence[str]) -> list[tuple[str, str]]:
    """The follower's keys, from the key table: moving, looking, its own words (h, n), quitting.
    None of the driver's acting keys: here they only say who drives."""
    rows: list[tuple[str, str]] = [("↑ ↓", "move"), ("pgup pgdn", "a page up, down"),
                                   ("tab", "switch panel (GPUs, processes, findings, entries)"),
                                   ("enter", "everything about the row (read-only: no next step here)")]
    rows += [(keys.key_of(k.id), k.help) for k in keys.KEYS if k.scope == "tables"]
    rows.append(("", "your words, into the incident under your name"))
    rows += [(keys.key_of(k.id), k.help + " (recorded as yours; the driver's screen shows it)")
             for k in keys.KEYS if k.id in followers_keys]
    rows.append(("", "this view"))
    rows += [(keys.key_of(k.id), k.help) for k in keys.KEYS if k.scope in ("follow", "follow-live")]
    rows.append(("", "read-only"))
    rows.append(("t k F R B", "and x w c v D U, space, F9: the driver's keys — here they say who drives "
                              "this incident, and nothing is sent"))
    return rows


def findings_title(findings, count: int) -> str:
    """"findings: 3, 1 in view (↓)" where the panel shows fewer than it holds (as the driver's)."""
    title = f"findings: {count}"
    height = findings.size.height
    if count and height and findings.row_count:
        shown = tables.rows_in_view(findings, height)
        if shown < findings.row_count:
            below = findings.scroll_y < findings.max_scroll_y or findings.max_scroll_y == 0
            more = ("↑" if findings.scroll_y > 0 else "") + ("↓" if below else "")
            title += f", {shown} in view" + (f" ({more})" if more else "")
    return title + " (enter: details)"
