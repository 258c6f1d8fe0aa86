"""The loop-mode nvidia-smi's output (console/probe_loop.py) read into samples. Pure.

Each probe brings what the two loops wrote since the last one: CSV lines that start with the
sample's timestamp (``2026/12/02 01:43:19.123, …``), maybe a line cut short at the end (kept
for the next probe). A sample is the lines of one timestamp. The GPU loop writes a line per GPU
every interval; its newest sample counts once the next has begun or it has as many lines as the
one before (the probe may have read it half-written). The compute-apps loop writes nothing
while no process runs: its sample for a GPU sample at T is its lines stamped within half an
interval of T, and none at all when it wrote nothing that recent — "no process", known from
the GPU loop's clock, not guessed from silence alone.

What the console then parses is the plain query text (the timestamp taken off): the same
parsers as the per-poll calls (console/sources/parse.py).
"""
from __future__ import annotations

import calendar
import re
from dataclasses import dataclass, field

#: samples kept per loop (the newest; a probe reads about one)
KEEP = 4
#: a line longer than this is not a query line (a wedged tool's flood): dropped
LINE_MAX = 4096
#: what a probe may bring of one loop at most (LOOP_MS 1000 at 1 Hz is ~1 KB for 8 GPUs)
TEXT_MAX = 1 << 20

_STAMP = re.compile(r"(\d{4})/(\d\d)/(\d\d) (\d\d):(\d\d):(\d\d)(?:\.(\d{1,9}))?, ")


def stamp_of(line: str) -> tuple[float, str] | None:
    """(seconds, the rest of the line) of a timestamped query line, else None."""
    m = _STAMP.match(line)
    if m is None:
        return None
    y, mo, d, h, mi, s = (int(x) for x in m.groups()[:6])
    if not (1 <= mo <= 12 and 1 <= d <= 31 and h < 24 and mi < 60 and s < 62):
        return None
    frac = m.group(7) or "0"
    t = calendar.timegm((y, mo, d, h, mi, s, 0, 0, 0)) + int(frac) / 10 ** len(frac)
    return t, line[m.end():]


@dataclass
class Stream:
    rest: str = ""                                     # a line not ended yet
    samples: list[tuple[float, list[str]]] = field(default_factory=list)   # oldest first
    noise: list[str] = field(default_factory=list)     # lines that are not samples (errors)

    def feed(self, text: str, gap_s: float) -> None:
        text = self.rest + text[:TEXT_MAX]
        lines = text.split("\n")
        self.rest = lines.pop()[:LINE_MAX]
        self.noise = []
        for line in lines:
            got = stamp_of(line[:LINE_MAX]) if len(line) <= LINE_MAX else None
            if got is None:
                if line.strip():
                    self.noise.append(line[:200])
                continue
            t, body = got
            if self.samples and abs(t - self.samples[-1][0]) < gap_s:
                self.samples[-1][1].append(body)
            else:
                self.samples.append((t, [body]))
        del self.samples[:-KEEP]


@dataclass
class LoopState:
    """Kept per probe shell (the source's parse cache)."""
    interval_s: float = 1.0
    gpu: Stream = field(default_factory=Stream)
    apps: Stream = field(default_factory=Stream)
    #: the newest whole GPU sample: (timestamp, lines), and the apps lines that go with it
    sample: tuple[float, list[str], list[str]] | None = None

    def feed(self, gpu_text: str, apps_text: str) -> bool:
        """Take a probe's loopg and loopa texts; True when a newer whole sample came."""
        gap = self.interval_s / 3
        self.gpu.feed(gpu_text, gap)
        self.apps.feed(apps_text, gap)
        for t, lines in self._whole_newest_first():
            if self.sample is not None and t <= self.sample[0]:
                return False
            apps = self._apps_at(t)
            if not apps and self._apps_before(t) and (t, lines) == self.gpu.samples[-1]:
                # processes a sample ago and none yet at the newest: the apps loop may not have
                # written it yet; the sample before decides, the next probe tells
                continue
            self.sample = (t, list(lines), apps)
            return True
        return False

    def _apps_at(self, t: float) -> list[str]:
        return [body for at, bodies in self.apps.samples if abs(at - t) <= self.interval_s / 2 for body in bodies]

    def _apps_before(self, t: float) -> bool:
        return any(t - 1.5 * self.interval_s <= at < t - self.interval_s / 2 for at, _ in self.apps.samples)

    def _whole_newest_first(self) -> list[tuple[float, list[str]]]:
        """The GPU samples that are whole, newest first: every one but the newest, which is
        whole once it has as many lines as the one before it (the probe may have read it
        half-written)."""
        samples = self.gpu.samples
        if not samples:
            return []
        out = list(reversed(samples[:-1]))
        last = samples[-1]
        before = len(samples[-2][1]) if len(samples) >= 2 else (len(self.sample[1]) if self.sample else None)
        if before is not None and len(last[1]) >= before:
            out.insert(0, last)
        return out

    def texts(self) -> tuple[str, str] | None:
        """The newest whole sample as the per-poll queries' text (GPU, apps), or None."""
        if self.sample is None:
            return None
        _t, gpu, apps = self.sample
        return "".join(x + "\n" for x in gpu), "".join(x + "\n" for x in apps)


def parse_loop_state(text: str) -> tuple[str, tuple[int, ...]]:
    """The loop section: (what happened: running, started, died+started, failed, or "" for
    nothing readable; the PIDs of the loops running now)."""
    what, pids = "", ()
    for line in text.splitlines():
        words = line.split()
        if not words:
            continue
        if words[0] == "failed":
            return "failed", ()
        if words[0] in ("running", "started", "died") and all(w.isascii() and w.isdecimal() and len(w) < 10
                                                            for w in words[1:3]):
            found = tuple(int(w) for w in words[1:3] if int(w) > 1)
            if words[0] == "died":
                what = "died"
                continue
            what = "died+started" if what == "died" and words[0] == "started" else words[0]
            pids = found
    return what, pids
