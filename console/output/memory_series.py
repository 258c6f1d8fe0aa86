"""Per-GPU memory over the incident, and the moments of actions on it. Pure; no Textual.

The console's sparklines (console/ui/memory_chart.py), the follower's mirror and the
postmortem's SVG chart (console/output/memory_svg.py) draw the same data:

- ``MemoryTrail``: per node, every poll's per-GPU memory used, kept for the whole incident
  (thinned to at most ``MAX_POINTS`` by dropping every other old point, the newest kept);
- the timeline's own readings when no trail was kept (console/incident/readings.py, made a
  series by console/ui/postmortem.py);
- ``columns`` / ``spark``: a series cut into as many columns as there is room for, drawn
  with block characters on a fixed scale (0 to the GPU's total memory: a GPU stuck at 76 GiB
  all along is a full bar, never an empty baseline), with the actions' columns marked.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, Mapping, Sequence

from console import rungs
from console.model import ActionRecord, NodeSnapshot

MAX_POINTS = 720
BARS = " ▁▂▃▄▅▆▇█"

@dataclass(frozen=True)
class Mark:
    t: float
    rung: str
    label: str = ""
    end: float | None = None          # a wait: it lasted from ``t`` to ``end``

    @property
    def letter(self) -> str:
        """The rung's letter (rungs.Rung.letter: the key that sends it); * for one this version does not know."""
        return rungs.BY_ID[self.rung].letter if rungs.known(self.rung) else "*"


@dataclass(frozen=True)
class MemorySeries:
    """``points``: (time, {gpu: MiB used}) oldest first; ``totals``: {gpu: MiB}; ``marks``: actions."""
    points: tuple[tuple[float, Mapping[int, int | None]], ...] = ()
    totals: Mapping[int, int | None] = field(default_factory=dict)
    marks: tuple[Mark, ...] = ()

    @property
    def gpus(self) -> tuple[int, ...]:
        found = set(self.totals)
        for _, read in self.points:
            found |= set(read)
        return tuple(sorted(found))

    @property
    def start(self) -> float | None:
        times = [t for t, _ in self.points] + [m.t for m in self.marks]
        return min(times) if times else None

    @property
    def end(self) -> float | None:
        times = [t for t, _ in self.points] + [m.t for m in self.marks]
        return max(times) if times else None

    def scale(self, gpu: int) -> int:
        """The MiB a full bar stands for: the GPU's total, else the most it ever held."""
        total = self.totals.get(gpu)
        if total:
            return total
        return max([read.get(gpu) or 0 for _, read in self.points] + [1])


class MemoryTrail:
    """One node's per-GPU memory, poll by poll, for the whole incident (bounded)."""

    def __init__(self, max_points: int = MAX_POINTS) -> None:
        self.max_points = max(4, max_points)
        self.points: list[tuple[float, dict[int, int | None]]] = []
        self.totals: dict[int, int | None] = {}

    def add(self, snap: NodeSnapshot) -> None:
        """A poll's reading (a poll that read no GPU adds nothing)."""
        if snap.error is not None and not snap.gpus:
            return
        read = {g.index: g.memory_used_mib for g in snap.gpus}
        if not read:
            return
        self.totals.update({g.index: g.memory_total_mib for g in snap.gpus})
        if self.points and snap.taken_at <= self.points[-1][0]:
            return
        self.add_reading(snap.taken_at, read)

    def add_reading(self, t: float, read: Mapping[int, int | None]) -> None:
        """A reading at ``t`` (a poll's, or one an incident's timeline held from before this
        console: console/session/feed.py); one older than the last is not taken."""
        if not read or (self.points and t <= self.points[-1][0]):
            return
        self.points.append((t, read if isinstance(read, dict) else dict(read)))
        if len(self.points) > self.max_points:        # thin the older half, keep the newest as they are
            half = len(self.points) // 2
            self.points = self.points[:half:2] + self.points[half:]

    def series(self, actions: Iterable[ActionRecord] = ()) -> MemorySeries:
        return MemorySeries(points=tuple(self.points), totals=dict(self.totals), marks=marks_of(actions))

    def as_data(self) -> dict:
        """Plain data for a JSON file: {"points": [[t, {"0": MiB}]], "totals": {"0": MiB}}."""
        return {"points": [[t, {str(k): v for k, v in read.items()}] for t, read in self.points],
                "totals": {str(k): v for k, v in self.totals.items()}}


def marks_of(actions: Iterable[ActionRecord]) -> tuple[Mark, ...]:
    return tuple(Mark(a.ts, a.rung) for a in actions)


def series_from_data(data: Mapping, marks: Sequence[Mark] = ()) -> MemorySeries:
    """``MemoryTrail.as_data()`` read back (from a state file): bad values are skipped."""
    points = []
    for item in data.get("points", ()) if isinstance(data, Mapping) else ():
        if not (isinstance(item, (list, tuple)) and len(item) == 2 and isinstance(item[1], Mapping)):
            continue
        t, read = item
        if isinstance(t, (int, float)) and not isinstance(t, bool):
            points.append((float(t), _gpu_map(read)))
    totals = _gpu_map(data.get("totals", {})) if isinstance(data, Mapping) else {}
    return MemorySeries(points=tuple(sorted(points, key=lambda p: p[0])), totals=totals, marks=tuple(marks))


def _gpu_map(read: Mapping) -> dict[int, int | None]:
    out: dict[int, int | None] = {}
    for k, v in read.items():
        if str(k).isdecimal() and (v is None or (isinstance(v, int) and not isinstance(v, bool))):
            out[int(k)] = v
    return out


def columns(series: MemorySeries, width: int) -> tuple[dict[int, list[int | None]], list[list[Mark]]]:
    """The series cut into ``width`` columns of equal time: per GPU the last reading in (or
    before) each column — memory stays where it was until read again — and the marks per column.
    A single reading fills the width (it is all that is known so far)."""
    width = max(1, width)
    per: dict[int, list[int | None]] = {g: [None] * width for g in series.gpus}
    marks: list[list[Mark]] = [[] for _ in range(width)]
    start, end = series.start, series.end
    if start is None or end is None:
        return per, marks
    span = end - start

    def col(t: float) -> int:
        return 0 if span <= 0 else max(0, min(width - 1, int((t - start) / span * width)))
    at: list[dict[int, int | None]] = [{} for _ in range(width)]
    for t, read in series.points:
        at[col(t)].update(read)
    last: dict[int, int | None] = {}
    for c in range(width):
        last.update(at[c])
        for g in per:
            per[g][c] = last.get(g)
    for m in series.marks:
        marks[col(m.t)].append(m)
    return per, marks


def spark(values: Sequence[int | None], scale: int) -> str:
    """Block characters on a fixed scale (0..``scale`` MiB: ▁ is free, █ is full); a column
    with no reading yet is a space."""
    return "".join(" " if v is None else BARS[max(1, min(8, round(max(v, 0) / max(scale, 1) * 8)))]
                   for v in values)
