"""What the incident cost: per GPU, the memory it held from the first reading that showed it held
to the first that showed it back (console/incident/readings.py: every reading at its moment), as
GPU-hours (the hours it was held); the total; and Slurm's part where the timeline has it (memory
× time is left out: beside GPU-hours it told a reader nothing more). Pure: reads timeline entries
only. Memory is said with the console's one rule (console/diagnosis/text.py ``mib``).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from console import rungs
from console.diagnosis import text as t
from console.incident.readings import readings, when
from console.incident.summary import BUSY_MIB, duration, offset
from console.incident.verdicts import action_rung
from console.model import TimelineEntry


@dataclass(frozen=True)
class Held:
    node: str | None
    gpu: int
    mib: int                 # what it held at the first reading that showed it held
    since: float             # epoch seconds
    until: float             # the reading that showed it back, else the incident's last entry
    freed: bool

    @property
    def hours(self) -> float:
        return max(0.0, self.until - self.since) / 3600


def held(entries: Sequence[TimelineEntry]) -> list[Held]:
    """Per node and GPU, its first time held (a GPU freed and then used again is a new job, not
    this incident); in node, then GPU order."""
    last = max((w for w in (when(e) for e in entries) if w is not None), default=None)
    open_: dict[tuple[str | None, int], tuple[int, float]] = {}
    done: dict[tuple[str | None, int], Held] = {}
    for r in readings(entries):
        for key, used in r.memory.items():
            if not str(key).isdecimal() or used is None:
                continue
            where = (r.node, int(key))
            if where in done:
                continue
            if where not in open_ and used > BUSY_MIB:
                open_[where] = (used, r.t)
            elif where in open_ and used <= BUSY_MIB:
                mib, since = open_.pop(where)
                done[where] = Held(r.node, int(key), mib, since, r.t, True)
    for (node, gpu), (mib, since) in open_.items():
        done[(node, gpu)] = Held(node, gpu, mib, since, max(last or since, since), False)
    return sorted(done.values(), key=lambda h: (h.node or "", h.gpu))


def gpu_hours(hours: float) -> str:
    return "0" if hours <= 0 else "< 0.01" if hours < 0.005 else f"{hours:.2f}"


def slurm_lines(entries: Sequence[TimelineEntry], origin: float) -> list[str]:
    """Slurm's part: the drains and resumes sent (the timeline records no job list)."""
    sent = [(e, at) for e in entries if e.kind == "action" and rungs.of(action_rung(e)).through_slurm
            and (at := when(e)) is not None]
    if not sent:
        return ["Jobs affected: not recorded (no Slurm action was sent; the timeline holds no job list)."]
    return ["Slurm: " + "; ".join(f"{e.text} at {offset(at - origin)} (#{e.seq})" for e, at in sent)
            + " (the timeline holds no job list)."]


def impact_lines(entries: Sequence[TimelineEntry], start: float | None) -> list[str]:
    """The postmortem's Impact section (its lines, heading included). ``start``: the moment T+
    counts from (the incident's first entry)."""
    out = ["## Impact", ""]
    spans = held(entries)
    if not spans:
        return out + ["No reading showed a GPU holding more than 1 GiB.", ""] + slurm_lines(entries, start or 0.0) + [""]
    origin = start if start is not None else min(h.since for h in spans)
    out += ["Memory held per GPU, from the first reading that showed it held to the first that showed it "
            "back at or under 1 GiB (GPU-hours: the hours it was held).", "",
            "| Node | GPUs | Held | From | Until | For | GPU-hours |",
            "|---|---|---|---|---|---|---|"]
    rows: dict[tuple, list[Held]] = {}
    for h in spans:          # one row for GPUs that read the same, to the rounding
        until = offset(h.until - origin) + ("" if h.freed else " (still held at the last entry)")
        cells = (h.node or "-", t.mib(h.mib), offset(h.since - origin), until, duration(h.until - h.since),
                 gpu_hours(h.hours))
        rows.setdefault(cells, []).append(h)
    for (node, mib, since, until, span, hours), group in rows.items():
        each = " each" if len(group) > 1 else ""
        out.append(f"| {node} | {t.gpus([h.gpu for h in group])} | {mib}{each} | {since} | {until} | {span} "
                   f"| {hours}{each} |")
    total_mib = sum(h.mib for h in spans)
    total_h = sum(h.hours for h in spans)
    out.append(f"| **Total** | {t.plural(len(spans), 'GPU')} | {t.mib(total_mib)} | | | "
               f"{duration(max(h.until for h in spans) - min(h.since for h in spans))} | "
               f"{gpu_hours(total_h)} |")
    return out + [""] + slurm_lines(entries, origin) + [""]
