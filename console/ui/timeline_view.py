"""`gpu-incident replay FILE` and `gpu-incident follow FILE`: read-only views of a timeline.

Replay steps through a recorded incident (hypotheses show their verdict as of the
current step); follow tails another console's incident file live. Neither can write:
no Timeline is opened, the file is only ever opened for reading, and the command
palette (which can save screenshots) is off. Every entry field is untrusted and is
rendered literally (``[bold]`` and escape codes are shown, never interpreted).
"""
from __future__ import annotations

import asyncio
import datetime as dt
import time
from pathlib import Path
from typing import Sequence

from rich.text import Text
from textual import events, on
from textual.app import App, ComposeResult
from textual.containers import VerticalScroll
from textual.widgets import DataTable

from console.ui.footer import QuietFooter
from console.ui.theme_install import install_themes
from console.model import TimelineEntry
from console.incident import consoles
from console.incident.summary import parse_ts
from console.incident.tail import TimelineTail, check_readable, read_all
from console.incident.timeline import hypothesis_numbers
from console.ui.text import LiteralNotify, LiteralStatic, LiteralTable, printable
from console.ui import keys
from console.ui.timeline_render import (  # the pure helpers are public here too
    POLL_S, COLUMNS, elapsed_seconds, elapsed_text, _key, verdicts_as_of, hypothesis_state, row_cells, detail, hypotheses_line, short_path)


#: how often a follower looks whether the consoles on the incident are still there
CONSOLES_CHECK_S = 1.0


def local_hhmm(ts: object) -> str:
    """An entry's ts as this machine's HH:MM (the follower's clock, as "stopped at" is)."""
    when = parse_ts(ts)
    return when.astimezone().strftime("%H:%M") if when is not None else "?"


class _TimelineViewApp(LiteralNotify, App[int]):
    CSS_PATH = "timeline_view.tcss"
    ENABLE_COMMAND_PALETTE = False      # the palette can save screenshots: a viewer writes nothing

    def __init__(self, theme_name: str | None = None) -> None:
        super().__init__()
        self.theme_warnings = install_themes(self, theme_name)

    def compose(self) -> ComposeResult:
        yield LiteralStatic(id="tv-header")
        yield LiteralStatic(id="tv-notice")
        yield LiteralTable(id="tv-list", cursor_type="row", zebra_stripes=False)
        with VerticalScroll(id="tv-detail"):
            yield LiteralStatic(id="tv-detail-body")
        yield QuietFooter()

    @property
    def table(self) -> DataTable:
        return self.query_one("#tv-list", DataTable)

    def _what_width(self) -> int:
        fixed = sum(w + 2 for _, _, w in COLUMNS) + 2 + 1   # cell padding, own padding, scrollbar
        return max(12, self.size.width - fixed)

    def _setup_table(self) -> None:
        table = self.table
        for label, key, width in COLUMNS:
            table.add_column(Text(label), key=key, width=width)
        table.add_column(Text("what"), key="what", width=self._what_width())
        for w in self.theme_warnings:
            self.notify(w, severity="warning")

    def _header_width(self) -> int:
        return max(20, self.size.width - 2)

    def _set_header(self, line: Text) -> None:
        line.no_wrap = True
        line.truncate(self._header_width(), overflow="ellipsis")
        self.query_one("#tv-header", LiteralStatic).update(line)

    def _set_notice(self, text: str) -> None:
        notice = self.query_one("#tv-notice", LiteralStatic)
        line = Text("⚠ " + printable(text), style="bold yellow", no_wrap=True) if text else Text("")
        line.truncate(self._header_width(), overflow="ellipsis")
        notice.update(line)
        notice.display = bool(text)

    def _show_detail(self, body: Text) -> None:
        self.query_one("#tv-detail-body", LiteralStatic).update(body)
        self.query_one("#tv-detail", VerticalScroll).scroll_home(animate=False)

    def action_quit(self) -> None:  # type: ignore[override]
        self.exit(0)


# ---------------------------------------------------------------- replay
class ReplayApp(_TimelineViewApp):
    """Step through a recorded incident. Starts at step 1 with every entry so far listed."""

    TITLE = "gpu-incident replay"
    BINDINGS = keys.bindings("replay")

    def __init__(self, entries: Sequence[TimelineEntry], warnings: Sequence[str] = (), *,
                 source: str = "", theme_name: str | None = None) -> None:
        super().__init__(theme_name)
        self.entries = list(entries)
        self.load_warnings = list(warnings)
        self.source = source
        self.step = 1 if self.entries else 0      # 1-based; 0 only for an empty incident
        self.show_all = True                      # True: entries 1..step listed; False: this step only
        self._shown: list[str] = []               # state cell text of each listed row (to update in place)

    @classmethod
    def from_file(cls, path: str, theme_name: str | None = None) -> "ReplayApp":
        entries, warnings = read_all(path)
        if not entries and warnings:
            raise ValueError(f"{path}: not an incident timeline (no readable entries)")
        return cls(entries, warnings, source=path, theme_name=theme_name)

    @property
    def total(self) -> int:
        return len(self.entries)

    def on_mount(self) -> None:
        self._setup_table()
        self.table.can_focus = False
        self.query_one("#tv-detail", VerticalScroll).focus()
        self._set_notice("; ".join(self.load_warnings))
        self._render()

    def action_step(self, delta: int) -> None:
        self._go(self.step + delta)

    def action_jump(self, where: int) -> None:
        self._go(1 if where == 0 else self.total)

    def action_toggle_mode(self) -> None:
        self.show_all = not self.show_all
        self._render()

    def _go(self, step: int) -> None:
        step = max(1, min(self.total, step)) if self.total else 0
        if step != self.step:
            self.step = step
            self._render()

    @on(DataTable.RowHighlighted, "#tv-list")
    def _keep_cursor_on_step(self, event: DataTable.RowHighlighted) -> None:
        """The list's cursor marks the step; a mouse click does not move the replay."""
        if self.step and self.table.cursor_row != self.step - 1:
            self.table.move_cursor(row=self.step - 1, animate=False)

    def _render(self) -> None:
        self._render_header()
        self._sync_rows()
        table = self.table
        table.display = self.show_all
        self.query_one("#tv-detail").set_class(not self.show_all, "-full")
        self._show_detail(detail(self.entries, self.step - 1, self.step))

    def _render_header(self) -> None:
        line = Text(no_wrap=True, overflow="ellipsis")
        line.append(f"step {self.step}/{self.total}", style="bold")
        line.append("  " + elapsed_text(elapsed_seconds(self.entries, self.step - 1)), style="bold")
        line.append("  " + ("all so far" if self.show_all else "this step"), style="dim")
        hyps = hypotheses_line(self.entries, self.step)
        if hyps:
            line.append("  ")
            line.append_text(hyps)
        line.append("  replay " + short_path(self.source, 24), style="dim")
        self._set_header(line)

    def _sync_rows(self) -> None:
        table = self.table
        wanted = self.step
        while len(self._shown) > wanted:
            table.remove_row(f"e{len(self._shown) - 1}")
            self._shown.pop()
        verdicts = verdicts_as_of(self.entries, self.step)
        width = self._what_width()
        numbers = hypothesis_numbers(self.entries)

        def state_of(e: TimelineEntry) -> str:
            ref = _key(e.seq)
            found = verdicts.get(ref) if ref is not None else None
            return found[0] if found else "open"

        for i, e in enumerate(self.entries[:len(self._shown)]):
            if e.kind == "hypothesis" and self._shown[i] != state_of(e):
                self._shown[i] = state_of(e)
                table.update_cell(f"e{i}", "what", row_cells(e, self._shown[i], width, numbers)[-1])
        for i in range(len(self._shown), wanted):
            e = self.entries[i]
            state = state_of(e) if e.kind == "hypothesis" else ""
            table.add_row(*row_cells(e, state or None, width, numbers), key=f"e{i}")
            self._shown.append(state)
        if self.step:
            table.move_cursor(row=self.step - 1, animate=False)


# ---------------------------------------------------------------- follow
class FollowApp(_TimelineViewApp):
    """Read-only live view of an incident file another console is writing."""

    TITLE = "gpu-incident follow"
    BINDINGS = keys.bindings("follow")

    def __init__(self, path: str, *, poll_interval: float = POLL_S, theme_name: str | None = None,
                 tail: TimelineTail | None = None) -> None:
        super().__init__(theme_name)
        self.path = path
        self.poll_interval = poll_interval
        self.tail = tail or TimelineTail(path)
        self.entries: list[TimelineEntry] = []
        self.warnings: list[str] = []
        self.notice = ""
        self.unseen = 0               # entries that arrived while the user was scrolled up
        self._seen: set[str] = set()  # identities of entries shown (a re-read file adds no duplicates)
        self._busy = False
        self._pinned = True           # following the newest entry
        self._highlighted_row = -1    # the row the last highlight event was for
        #: the ts since which every console still attached by the entries is gone (its process on
        #: this host ended without "console stopped": console/incident/consoles.py), else None
        self.console_gone_since: str | None = None
        self.consoles: list[consoles.Attached] = []
        self._consoles_checked = float("-inf")

    @property
    def incident_id(self) -> str:
        from console.incident.timeline import SUFFIX
        return Path(self.path).name.removesuffix(SUFFIX)

    def subject(self) -> str:
        """What the header names: the incident (never a path's tail: a split pane cut it to
        "…/incidents/2026…"); the live follower adds the node in view."""
        return f"incident {printable(self.incident_id, 40)}"

    def reader(self) -> str:
        """After "read-only" in the header: who this view writes as (the live follower's h and n)."""
        return ""

    def on_resize(self, _event: events.Resize) -> None:
        self.call_after_refresh(self._fit_what)

    def _fit_what(self) -> None:
        """The "what" column takes the width the pane has now (it kept the width of the pane it
        was opened in: 30 characters and 20 blank beside them after a widening)."""
        if not self.is_running or not self.query("#tv-list"):
            return
        table, width = self.table, self._what_width()
        column = table.columns.get("what")         # type: ignore[call-overload]
        if column is None or column.width == width:
            return
        column.width = width
        numbers = hypothesis_numbers(self.entries)
        for i, e in enumerate(self.entries):
            state = hypothesis_state(self.entries, len(self.entries), e.seq) if e.kind == "hypothesis" else None
            table.update_cell(f"e{i}", "what", row_cells(e, state, width, numbers)[-1], update_width=True)
        self._render_header()

    def on_mount(self) -> None:
        self._setup_table()
        self.table.focus()
        self.watch(self.table, "scroll_y", self._scrolled, init=False)
        self._render_header()
        self._set_notice("")
        self._show_detail(Text("waiting for entries…", style="dim"))
        self.set_interval(self.poll_interval, self.poll_now)
        self.call_later(self.poll_now)

    async def poll_now(self) -> None:
        """Read what was appended (in a thread: a slow disk never freezes the screen)."""
        if self._busy:
            return
        self._busy = True
        try:
            for _ in range(16):
                update = await asyncio.to_thread(self.tail.poll)
                self._apply(update.entries, update.warnings, update.notice)
                if not update.more:
                    break
            self.check_consoles()
            self._fit_what()          # the list's width settles a layout after a resize: looked at each poll
        finally:
            self._busy = False

    def check_consoles(self, force: bool = False) -> None:
        """Is a console that started on the incident, and never said it stopped, still there?
        (at most once a second; a console that died without a word writes nothing to notice)"""
        now = time.monotonic()
        if not force and now - self._consoles_checked < CONSOLES_CHECK_S:
            return
        self._consoles_checked = now
        self.consoles = consoles.attached(self.entries)
        since = consoles.gone_since(self.consoles)
        if since != self.console_gone_since:
            self.console_gone_since = since
            if self.is_running and self.query("#tv-header"):
                self._render_header()

    def _at_last_row(self) -> bool:
        table = self.table
        return table.row_count == 0 or table.cursor_row >= table.row_count - 1

    def _following(self) -> bool:
        """New entries scroll into view unless the user moved up or scrolled up."""
        return self._pinned and self._at_last_row()

    def _settle(self) -> None:
        if self._pinned and self.query("#tv-list"):    # the user may have scrolled up since the rows came
            self.table.scroll_end(animate=False, immediate=True)

    def _scrolled(self, old: float, new: float) -> None:
        # wheel or scrollbar up: stop following. Only End (or moving the cursor to the last row)
        # follows again: a scroll back down may be the table's own (it brings its cursor into
        # view after a refresh), and must not undo the operator's scroll up
        if new < old and new < self.table.max_scroll_y:
            self._pinned = False

    def _apply(self, entries: list[TimelineEntry], warnings: list[str], notice: str | None) -> None:
        if not self.is_running or not self.query("#tv-list"):
            return          # a read that lands while the view closes
        changed = False
        if notice:                            # stays until the file's state changes again
            self.notice = dt.datetime.now().strftime("%H:%M:%S ") + notice
            changed = True
        if warnings:
            self.warnings += warnings
            changed = True
        fresh = []
        for e in entries:
            ident = repr(e)
            if ident not in self._seen:
                self._seen.add(ident)
                fresh.append(e)
        if fresh:
            follow = self._following()
            table = self.table
            width = self._what_width()
            start = len(self.entries)
            self.entries += fresh
            numbers = hypothesis_numbers(self.entries)
            for i, e in enumerate(fresh, start):
                state = hypothesis_state(self.entries, len(self.entries), e.seq) if e.kind == "hypothesis" else None
                table.add_row(*row_cells(e, state, width, numbers), key=f"e{i}")
            self._refresh_hypotheses(fresh, width)
            if follow:
                table.move_cursor(row=table.row_count - 1, animate=False)
                self.call_after_refresh(self._settle)
                self.unseen = 0
            else:
                self.unseen += len(fresh)
            changed = True
        if changed:
            self._render_header()
            line = self.notice
            if self.warnings:
                count = len(self.warnings)
                last = self.warnings[-1]
                line = (line + "  ·  " if line else "") + (f"{count} warnings, last: {last}" if count > 1 else last)
            self._set_notice(line)

    def _refresh_hypotheses(self, fresh: list[TimelineEntry], width: int) -> None:
        """A verdict that arrived closes its hypothesis' row."""
        closed = {_key(e.hypothesis) for e in fresh if e.kind == "verdict"} - {None}
        if not closed:
            return
        numbers = hypothesis_numbers(self.entries)
        for i, e in enumerate(self.entries):
            if e.kind == "hypothesis" and _key(e.seq) in closed:
                state = hypothesis_state(self.entries, len(self.entries), e.seq)
                self.table.update_cell(f"e{i}", "what", row_cells(e, state, width, numbers)[-1])

    def _render_header(self) -> None:
        rest = Text(f"  {len(self.entries)} entries")
        if self.entries:
            rest.append("  " + elapsed_text(elapsed_seconds(self.entries, len(self.entries) - 1)), style="dim")
        if self.unseen:
            rest.append(f"  {self.unseen} new ↓ (end)", style="bold yellow")
        if self.console_gone_since is not None:
            rest.append(f"  console gone since {local_hhmm(self.console_gone_since)}", style="bold yellow")
        tail = " — read-only" + self.reader()
        budget = self._header_width() - len("following ") - len(tail) - len(rest.plain)
        line = Text(f"following {printable(self.subject(), max(12, budget))}{tail}", style="bold")
        line.append_text(rest)
        self._set_header(line)

    @on(DataTable.RowHighlighted, "#tv-list")
    def _highlighted(self, event: DataTable.RowHighlighted) -> None:
        if not self.query("#tv-list"):
            return                         # the view is closing
        index = self.table.cursor_row      # now, not when the event was posted
        if 0 <= index < len(self.entries):
            self._show_detail(detail(self.entries, index, len(self.entries), "so far"))
        if index == self._highlighted_row:
            return                         # a late event for a row already seen: not a move
        self._highlighted_row = index
        self._pinned = self._at_last_row()
        if self._pinned and self.unseen:
            self.unseen = 0
            self._render_header()

    def action_help(self) -> None:
        """?: this view's keys, from the key table, and the command that shows the driver's panels."""
        from console.ui.app import HelpScreen
        rows = [("↑ ↓", "move"), ("pgup pgdn", "a page up, down")]
        rows += [(keys.key_of(k.id), k.help) for k in keys.KEYS if k.scope == "follow"]
        rows.append(("", "the same panels as the driver (GPUs, processes, findings, its open Confirm): "
                         f"gpu-incident follow {self.subject_id()} --live"))
        self.push_screen(HelpScreen(rows))

    def subject_id(self) -> str:
        from pathlib import Path
        return Path(self.path).stem

    def action_follow_tail(self) -> None:
        table = self.table
        if table.row_count:
            table.move_cursor(row=table.row_count - 1, animate=False)
        table.scroll_end(animate=False)
        self._pinned = True
        self.unseen = 0
        self._render_header()


# ---------------------------------------------------------------- entry points for the CLI
def run_replay(path: str, theme: str | None = None) -> int:
    """`gpu-incident replay FILE`. FileNotFoundError / ValueError (one line) before any UI starts."""
    app = ReplayApp.from_file(str(path), theme)
    app.run()
    return app.return_code or 0


def run_follow(path: str, theme: str | None = None) -> int:
    """`gpu-incident follow FILE`. FileNotFoundError / ValueError (one line) before any UI starts."""
    check_readable(path)
    app = FollowApp(str(path), theme_name=theme)
    app.run()
    return app.return_code or 0
