"""The real console as a person runs it, for `gpu-incident bench`: a subprocess on a
pseudo-terminal of a fixed size, its screen output read as it comes, keys typed into it.

``Terminal.start(argv, cols, rows)`` runs ``argv`` on a new pty (its own session); a reader
thread keeps every chunk of output with the time it arrived. ``wait_text(pattern)`` waits
for text to appear on the screen after a given point: escape sequences are dropped first
(what remains of a frame is the text of the lines it redraws, each line's cells in order),
so "the frame that shows X" is the chunk that completes X. Stopped by its PID only.
"""
from __future__ import annotations

import bisect
import fcntl
import os
import re
import signal
import struct
import subprocess
import termios
import threading
import time
from typing import Sequence

import psutil

#: CSI (colours, cursor moves, modes), OSC (titles), and the two-byte escapes
_ESCAPES = re.compile(rb"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[@-Z\\-_78=>]")
#: an escape sequence cut at the end of a chunk (kept for the next one)
_PARTIAL = re.compile(rb"\x1b(?:\[[0-?]*[ -/]*|\][^\x07\x1b]*)?$")
STOP_TIMEOUT_S = 5.0


class Terminal:
    def __init__(self, proc: subprocess.Popen, master: int) -> None:
        self.proc = proc
        self.master = master
        self._lock = threading.Condition()
        self._text = bytearray()          # the output with escape sequences dropped
        self._ends: list[int] = []        # len(_text) after each chunk ...
        self._times: list[float] = []     # ... and when that chunk came
        self._raw_tail = b""
        self.bytes_read = 0
        self.closed = False
        self._reader = threading.Thread(target=self._read, name="bench-pty", daemon=True)
        self._reader.start()

    @classmethod
    def start(cls, argv: Sequence[str], *, cols: int, rows: int, env: dict[str, str],
              cwd: str | None = None) -> "Terminal":
        master, slave = os.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
        env = {**env, "TERM": "xterm-256color", "COLUMNS": str(cols), "LINES": str(rows)}
        try:
            proc = subprocess.Popen(list(argv), stdin=slave, stdout=slave, stderr=slave, env=env, cwd=cwd,
                                    start_new_session=True, close_fds=True)
        finally:
            os.close(slave)
        return cls(proc, master)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def _read(self) -> None:
        while True:
            try:
                chunk = os.read(self.master, 1 << 16)
            except OSError:
                chunk = b""
            now = time.perf_counter()
            if not chunk:
                with self._lock:
                    self.closed = True
                    self._lock.notify_all()
                return
            data = self._raw_tail + chunk
            cut = _PARTIAL.search(data)
            self._raw_tail = data[cut.start():] if cut else b""
            if cut:
                data = data[:cut.start()]
            with self._lock:
                self.bytes_read += len(chunk)
                self._text += _ESCAPES.sub(b"", data)
                self._ends.append(len(self._text))
                self._times.append(now)
                self._lock.notify_all()

    def position(self) -> int:
        """Where the screen text is now: ``wait_text(..., since=position())`` sees only what
        is drawn after this moment."""
        with self._lock:
            return len(self._text)

    def wait_text(self, pattern: bytes | re.Pattern, timeout: float, since: int = 0
                  ) -> tuple[float, re.Match | None]:
        """(the time the chunk completing a match arrived, the match) for the first match of
        ``pattern`` in what was drawn after ``since``; (now, None) on timeout or exit."""
        rx = pattern if isinstance(pattern, re.Pattern) else re.compile(re.escape(pattern))
        deadline = time.monotonic() + timeout
        with self._lock:
            while True:
                m = rx.search(self._text, since)
                if m is not None:
                    return self._arrival(m.end()), m
                left = deadline - time.monotonic()
                if left <= 0 or self.closed:
                    return time.perf_counter(), None
                self._lock.wait(min(left, 0.05))

    def _arrival(self, end: int) -> float:
        i = bisect.bisect_left(self._ends, end)
        return self._times[i] if i < len(self._times) else time.perf_counter()

    def trim(self) -> None:
        """Forget what was drawn so far (long runs)."""
        with self._lock:
            self._text = bytearray()
            self._ends, self._times = [], []

    def text(self, since: int = 0) -> str:
        with self._lock:
            return self._text[since:].decode("utf-8", "replace")

    def send(self, data: bytes) -> float:
        """Type ``data``; returns the moment it was written."""
        t = time.perf_counter()
        os.write(self.master, data)
        return t

    def process(self) -> psutil.Process:
        return psutil.Process(self.proc.pid)

    def stop(self) -> int | None:
        """SIGTERM, then SIGKILL after STOP_TIMEOUT_S: only this PID (and its own children)."""
        if self.proc.poll() is None:
            try:
                kids = psutil.Process(self.proc.pid).children(recursive=True)
            except psutil.NoSuchProcess:
                kids = []
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(STOP_TIMEOUT_S)
            for k in kids:
                try:
                    k.kill()
                except psutil.NoSuchProcess:
                    pass
        try:
            os.close(self.master)
        except OSError:
            pass
        self._reader.join(2)
        return self.proc.returncode
