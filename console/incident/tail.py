"""Incremental reader of a growing incident file (JSON lines). Free of Textual.

`TimelineTail.poll()` returns what was appended since the last call: complete
lines only; a partial last line stays pending until its newline arrives. A
truncated, rewritten, replaced or deleted file is noticed and reported in one
line, and reading starts again from the file's beginning. Nothing raises: a bad
line becomes a warning, an unreadable file becomes a notice.

`read_all()` reads a finished file the same way (for replay): a partial last
line that does not parse is the torn last line, skipped with a warning.
"""
from __future__ import annotations

import json
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path

from console.clock import REAL_CLOCK, Clock
from console.model import TimelineEntry
from console.incident.timeline import entry_from_dict

READ_LIMIT = 4 << 20        # bytes read per poll; `more` says when there is more waiting
MAX_LINE = 16 << 20         # a line longer than this is skipped (a binary file, a runaway writer)
HEAD_BYTES = 64             # first bytes remembered to notice a file rewritten in place
TORN_AFTER_S = 5.0          # a partial last line older than this gets one warning


@dataclass
class TailUpdate:
    """What one poll found."""
    entries: list[TimelineEntry] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    notice: str | None = None    # one line when the file's state changed (deleted, truncated, back, …)
    reset: bool = False          # reading started again from the beginning of the file
    missing: bool = False        # the file is not there (or not readable) right now
    more: bool = False           # the read limit was reached: poll again at once


def parse_line(raw: bytes) -> TimelineEntry | None:
    """One complete line -> an entry, or None when it is not one (never raises)."""
    try:
        data = json.loads(raw.decode("utf-8"))
        if not isinstance(data, dict):
            return None
        return entry_from_dict(data)
    except (ValueError, TypeError, UnicodeDecodeError, RecursionError):
        return None


class TimelineTail:
    """Follows one incident file by path. Not thread-safe: poll from one thread at a time."""

    def __init__(self, path: str | os.PathLike[str], *, read_limit: int = READ_LIMIT,
                 max_line: int = MAX_LINE, torn_after: float = TORN_AFTER_S,
                 clock: Clock = REAL_CLOCK) -> None:
        self.path = Path(path)
        self.name = self.path.name
        self.read_limit = max(1, read_limit)
        self.max_line = max(1, max_line)
        self.torn_after = torn_after
        self.clock = clock
        self._ident: tuple[int, int] | None = None   # (st_dev, st_ino) of the file being read
        self._state = "new"                          # new | ok | missing | unreadable
        self._restart()

    def _restart(self) -> None:
        self.offset = 0                  # bytes of the file consumed (pending included)
        self.line_no = 0                 # complete lines consumed
        self._pending = b""
        self._head = b""
        self._skipping = False           # inside an over-long line: drop bytes until its newline
        self._pending_since: float | None = None
        self._torn_warned = False

    @property
    def pending_bytes(self) -> int:
        """Bytes of a partial last line waiting for their newline."""
        return len(self._pending)

    # ------------------------------------------------------------------ polling
    def poll(self) -> TailUpdate:
        update = TailUpdate()
        try:
            self._poll(update)
        except OSError as exc:          # vanished or became unreadable between two calls
            self._unavailable(update, "unreadable", f"cannot read {self.name}: {exc.strerror or exc}")
        except Exception as exc:  # noqa: BLE001 - a follower must keep running whatever the file holds
            update.warnings.append(f"{self.name}: read failed ({type(exc).__name__}); retrying")
        return update

    def _unavailable(self, update: TailUpdate, state: str, line: str) -> None:
        update.missing = True
        if self._state != state:
            update.notice = line
        self._state = state

    def _poll(self, update: TailUpdate) -> None:
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            seen = self._state in ("ok", "unreadable")
            self._unavailable(update, "missing",
                              f"{self.name} was deleted — what was read stays; waiting for it to come back"
                              if seen else f"{self.name} does not exist — waiting for it")
            return
        if not stat.S_ISREG(st.st_mode):
            self._unavailable(update, "unreadable", f"{self.name} is not a regular file — waiting")
            return
        with open(self.path, "rb") as fh:
            st = os.fstat(fh.fileno())
            ident = (st.st_dev, st.st_ino)
            came_back = self._state in ("missing", "unreadable")
            reason = None
            if self._state == "missing" and self._ident is not None:
                reason = "was re-created"    # a new file by definition, even on a reused inode
            elif self._ident is not None and ident != self._ident:
                reason = "was replaced"
            elif st.st_size < self.offset:
                reason = "was truncated"
            elif self._head and os.pread(fh.fileno(), len(self._head), 0) != self._head:
                reason = "was truncated or rewritten"
            if reason is not None:
                self._restart()
                update.reset = True
                update.notice = f"{self.name} {reason} — reading it again from the start"
            if came_back:
                update.notice = (f"{self.name} is back" if self._state == "missing"
                                 else f"{self.name} is readable again") + (
                                     " — reading it from the start" if reason else "")
            self._ident = ident
            self._state = "ok"
            fh.seek(self.offset)
            data = fh.read(self.read_limit)
        update.more = len(data) == self.read_limit
        self._consume(data, update)

    def _consume(self, data: bytes, update: TailUpdate) -> None:
        if self.offset < HEAD_BYTES:
            self._head += data[: HEAD_BYTES - self.offset]
        self.offset += len(data)
        if not data:
            self._check_torn(update)
            return
        if self._skipping:
            cut = data.find(b"\n")
            if cut < 0:
                return
            self._skipping = False
            self.line_no += 1
            data = data[cut + 1:]
        lines = (self._pending + data).split(b"\n")
        self._pending = lines.pop()
        for raw in lines:
            self.line_no += 1
            self._take(raw, update)
        if len(self._pending) > self.max_line:
            update.warnings.append(f"{self.name}: line {self.line_no + 1} longer than "
                                   f"{self.max_line} bytes skipped")
            self._pending = b""
            self._skipping = True
        self._pending_since = self.clock.monotonic() if self._pending else None
        self._torn_warned = False

    def _take(self, raw: bytes, update: TailUpdate) -> None:
        if not raw.strip():
            return
        entry = parse_line(raw)
        if entry is None:
            update.warnings.append(f"{self.name}: unreadable line {self.line_no} skipped")
        else:
            update.entries.append(entry)

    def _check_torn(self, update: TailUpdate) -> None:
        if (self._pending and not self._torn_warned and self._pending_since is not None
                and self.clock.monotonic() - self._pending_since >= self.torn_after):
            self._torn_warned = True
            update.warnings.append(f"{self.name}: last line incomplete for {self.torn_after:g} s "
                                   "(torn write?) — waiting for its newline")

    def finish(self) -> TailUpdate:
        """The file is complete: a pending last line is taken if it parses, else it is torn."""
        update = TailUpdate()
        pending, self._pending = self._pending, b""
        if pending.strip():
            entry = parse_line(pending)
            if entry is None:
                update.warnings.append(f"{self.name}: torn last line skipped")
            else:
                update.entries.append(entry)
        return update


def read_all(path: str | os.PathLike[str]) -> tuple[list[TimelineEntry], list[str]]:
    """Every entry of a finished incident file and the warnings (bad lines, torn last line).

    Raises FileNotFoundError / ValueError with one clear line when the file cannot be read.
    """
    check_readable(path)
    tail = TimelineTail(path)
    entries: list[TimelineEntry] = []
    warnings: list[str] = []
    while True:
        update = tail.poll()
        entries += update.entries
        warnings += update.warnings
        if update.missing:
            raise ValueError(update.notice or f"cannot read {path}")
        if not update.more:
            break
    last = tail.finish()
    return entries + last.entries, warnings + last.warnings


def check_readable(path: str | os.PathLike[str]) -> None:
    """Raise FileNotFoundError / ValueError (one line) unless ``path`` is a readable regular file."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise FileNotFoundError(f"no such timeline file: {path}") from None
    except OSError as exc:
        raise ValueError(f"cannot read {path}: {exc.strerror or exc}") from None
    if stat.S_ISDIR(st.st_mode):
        raise ValueError(f"{path} is a directory, not a timeline file")
    if not stat.S_ISREG(st.st_mode):
        raise ValueError(f"{path} is not a regular file")
    try:
        with open(path, "rb"):
            pass
    except OSError as exc:
        raise ValueError(f"cannot read {path}: {exc.strerror or exc}") from None
