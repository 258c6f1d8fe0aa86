"""Samples and their summary for `gpu-incident bench`: one ``Result`` per measured thing."""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Sequence


def percentile(samples: Sequence[float], q: float) -> float:
    """The q-th percentile (0..100) with linear interpolation between closest ranks."""
    if not samples:
        raise ValueError("no samples")
    xs = sorted(samples)
    if len(xs) == 1:
        return xs[0]
    pos = (len(xs) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


@dataclass
class Result:
    """What one measurement found: ``samples`` in ``unit`` (ms unless said otherwise)."""
    name: str
    about: str
    samples: list[float]
    unit: str = "ms"
    cpu_ms: float | None = None          # this process's CPU time over the whole measurement
    extra: dict = field(default_factory=dict)

    def as_dict(self) -> dict:
        xs = self.samples
        doc = {"name": self.name, "unit": self.unit,
               "p50": _round(percentile(xs, 50)), "p95": _round(percentile(xs, 95)),
               "max": _round(max(xs)), "n": len(xs), "mean": _round(sum(xs) / len(xs)),
               "about": self.about}
        if self.cpu_ms is not None:
            doc["cpu_ms"] = _round(self.cpu_ms)
        doc.update(self.extra)
        return doc


def _round(x: float) -> float:
    return round(x, 3)


class Stopwatch:
    """Wall (perf_counter) and this process's CPU (process_time) since it was made."""

    def __init__(self) -> None:
        self.wall0 = time.perf_counter()
        self.cpu0 = time.process_time()

    @property
    def wall_ms(self) -> float:
        return (time.perf_counter() - self.wall0) * 1000.0

    @property
    def cpu_ms(self) -> float:
        return (time.process_time() - self.cpu0) * 1000.0
