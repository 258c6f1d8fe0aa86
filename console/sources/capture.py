"""A probe's output read under byte caps (probe.ProbeLimits), whatever the transport.

A node that floods (an nvidia-smi printing without end, a table bigger than any node has)
costs the console at most ``probe_bytes`` of buffer: the reader stops at the first section
over ``section_bytes`` or the whole probe over ``probe_bytes`` and says "too much output";
the sections that arrived whole before that one are still parsed.
"""
from __future__ import annotations

from dataclasses import dataclass

from console.probe import MIB, ProbeLimits


@dataclass(frozen=True)
class ProbeOutput:
    """What came back from one probe."""
    data: bytes = b""           # all of it, or the whole sections that came before the cut
    error: str | None = None    # no usable answer (unreachable, …) or "too much output (…)"
    timed_out: bool = False     # the read deadline passed: ``data`` is what arrived by then


class TooMuchOutput(Exception):
    """A section or the whole probe went over its cap; str() is the node's error line."""


def _mib(n: int) -> str:
    return f"{n / MIB:.1f}".removesuffix(".0")


class Capture:
    """Collects a probe's output chunk by chunk (bytes): knows when the last section ended,
    and refuses a section or a probe over its cap (TooMuchOutput from ``feed``)."""

    def __init__(self, mark: str, last_section: str, limits: ProbeLimits) -> None:
        self._mark = mark.encode()
        self._end = f"{mark} end {last_section} ".encode()
        self._limits = limits
        self._chunks: list[bytes] = []
        self._total = 0
        self._tail = b""
        self._keep = len(self._end) + 64
        self._section_at = 0        # where the last marker seen starts (the current section)
        self.complete = False

    @property
    def size(self) -> int:
        return self._total

    def feed(self, chunk: bytes) -> bool:
        """Add what was read; True once the last section's end marker (and its newline) came.
        A chunk may hold many sections (a transport that answers at once): each is measured."""
        if not chunk:
            return self.complete
        hay = self._tail + chunk
        base = self._total - len(self._tail)          # where hay starts in the whole output
        self._chunks.append(chunk)
        self._total += len(chunk)
        at = hay.find(self._mark)
        while at >= 0:
            start = base + at
            if start > self._section_at:
                self._check(start, start)
                self._section_at = start
            at = hay.find(self._mark, at + len(self._mark))
        self._check(self._total, self._total)
        end = hay.find(self._end)
        if end >= 0 and hay.find(b"\n", end) >= 0:
            self.complete = True
            return True
        self._tail = hay[-self._keep:]
        return False

    def _check(self, upto: int, total: int) -> None:
        """The section open since the last marker, read up to ``upto``; the probe, ``total``."""
        if upto - self._section_at > self._limits.section_bytes:
            raise TooMuchOutput(f"too much output ({_mib(upto - self._section_at)} MiB in probe section "
                                f"'{self._section_name()}'; cap {_mib(self._limits.section_bytes)} MiB per section)")
        if total > self._limits.probe_bytes:
            raise TooMuchOutput(f"too much output ({_mib(total)} MiB in one probe; cap "
                                f"{_mib(self._limits.probe_bytes)} MiB)")

    def data(self) -> bytes:
        """Everything read so far."""
        return b"".join(self._chunks)

    def before_cut(self) -> bytes:
        """What came before the section that was cut (its begin marker excluded)."""
        return self.data()[:self._section_at]

    def _section_name(self) -> str:
        head = self.data()[self._section_at:self._section_at + len(self._mark) + 64]
        words = head[len(self._mark):].split(b"\n", 1)[0].split()
        if len(words) == 2 and words[0] == b"begin":
            return words[1].decode("ascii", "replace")
        return "?"
