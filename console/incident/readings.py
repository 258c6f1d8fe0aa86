"""The memory readings an incident's timeline holds, each at its moment, and the moments of its
actions and waits. Pure: reads timeline entries only. The postmortem's impact (how long each GPU
was held), its chart (console/ui/postmortem.py draws these) and its record use them.

- an action's "before" is at its ``ts`` (the moment it was sent);
- an outcome's or a later observation's "after" at the moment it says memory came back (its
  action's ``ts`` + ``seconds_to_free``), else at its own ``ts`` (its "before" is its action's);
- a check's "before" at its start and its "after" at its ``ts``; a wait (wait-and-reread) adds
  every read it made, at its start + the read's offset (its ``::t=S::`` line; its start is its
  ``ts`` less its last read's offset, as it is recorded right after that read);
- an observation's own reading (the first reading of a node, the last when the console stopped)
  at its ``ts``.

``memory_text`` writes a reading with the GPUs that read the same grouped: "GPU0 76109 MiB,
GPUs 1-6 76113 MiB each, GPU7 76069 MiB" (exact MiB: the record keeps what was read).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

from console.checks import parse as check_parse
from console.diagnosis import text as t
from console.incident.summary import parse_ts
from console.model import TimelineEntry

WAIT = "wait-and-reread"
#: an action recorded and never sent (its title says so): no moment of its own
NOT_SENT = ("[read-only]", "[dry-run]")

Memory = Mapping[str, "int | None"]


@dataclass(frozen=True)
class Reading:
    t: float                     # epoch seconds
    node: str | None
    memory: Memory               # {"0": MiB used, ...}
    seq: int                     # the entry it comes from


@dataclass(frozen=True)
class Moment:
    """An action sent (``end`` None) or a wait (from ``t`` to ``end``)."""
    t: float
    end: float | None
    entry: TimelineEntry

    @property
    def is_wait(self) -> bool:
        return self.end is not None


def when(e: TimelineEntry) -> float | None:
    at = parse_ts(e.ts)
    return at.timestamp() if at is not None else None


def is_wait(e: TimelineEntry) -> bool:
    return e.kind == "check" and e.text.startswith(WAIT + ":")


def wait_reads(e: TimelineEntry) -> list[tuple[float, dict[str, int | None]]]:
    """A wait's reads, each at its moment (epoch seconds); [] for anything else."""
    end = when(e)
    if not is_wait(e) or end is None or not e.output:
        return []
    reads = check_parse.parse_reads(e.output)
    if not reads:
        return []
    start = end - reads[-1][0]
    return [(start + at, read) for at, read in reads]


def wait_span(e: TimelineEntry) -> tuple[float, float] | None:
    """(start, end) of a wait; a wait whose reads cannot be read is a moment at its ``ts``."""
    end = when(e)
    if not is_wait(e) or end is None:
        return None
    reads = wait_reads(e)
    return (reads[0][0], end) if reads else (end, end)


def readings(entries: Sequence[TimelineEntry]) -> list[Reading]:
    """Every reading the timeline holds, oldest first (see the module)."""
    sent = {e.seq: e for e in entries if e.kind == "action" and isinstance(e.seq, int)}   # a file may hold anything
    out: list[Reading] = []
    for e in entries:
        at = when(e)
        if at is None:
            continue
        reads = wait_reads(e)
        for moment, read in reads:
            out.append(Reading(moment, e.node, read, e.seq))
        if e.gpu_memory_before and not reads and not isinstance(e.action, int):   # an outcome's is its action's
            out.append(Reading(at, e.node, e.gpu_memory_before, e.seq))
        if e.gpu_memory_after and not reads:
            action = sent.get(e.action) if isinstance(e.action, int) else None
            back = when(action) if action is not None else None
            if back is not None and e.seconds_to_free is not None and back + e.seconds_to_free <= at:
                at = back + e.seconds_to_free
            out.append(Reading(at, e.node, e.gpu_memory_after, e.seq))
    return sorted(out, key=lambda r: r.t)


def moments(entries: Sequence[TimelineEntry]) -> list[Moment]:
    """The actions sent and the waits, in time order."""
    out = []
    for e in entries:
        at = when(e)
        if at is None:
            continue
        if e.kind == "action" and not e.text.startswith(NOT_SENT):
            out.append(Moment(at, None, e))
        span = wait_span(e)
        if span is not None:
            out.append(Moment(span[0], span[1], e))
    return sorted(out, key=lambda m: m.t)


def gpu_groups(values: Mapping[str, object]) -> list[tuple[list[int], object]]:
    """GPUs grouped by equal value, each group in the order of its first GPU: [([1, 2], v), ...]."""
    groups: dict[object, list[int]] = {}
    for key in sorted((k for k in values if str(k).isdecimal()), key=int):
        groups.setdefault(values[key], []).append(int(key))
    return sorted(((gpus, value) for value, gpus in groups.items()), key=lambda g: g[0][0])


def gpu_label(gpus: Sequence[int]) -> str:
    """"GPU0" / "GPUs 1-6" (the record's spelling of one GPU, the console's of several)."""
    return f"GPU{gpus[0]}" if len(gpus) == 1 else t.gpus(gpus)


def memory_text(memory: Memory | None) -> str:
    """"GPU0 76109 MiB, GPUs 1-6 76113 MiB each, GPU7 76069 MiB"; "" for no reading."""
    if not memory:
        return ""
    odd = [f"{k} {'?' if v is None else v} MiB" for k, v in memory.items() if not str(k).isdecimal()]
    return ", ".join([f"{gpu_label(gpus)} {'?' if v is None else v} MiB" + (" each" if len(gpus) > 1 else "")
                      for gpus, v in gpu_groups(memory)] + odd)


def wait_table(e: TimelineEntry) -> list[str]:
    """A wait's raw output as lines people read: one per read, its offset then its memory (GPUs
    that read the same grouped), instead of a ``::t=S::`` frame of one line per GPU. A read that
    does not parse, and any line outside a frame, is kept as it came. [] when no read parsed."""
    if not is_wait(e) or not e.output:
        return []
    return reads_table(e.output)


def reads_table(output: str) -> list[str]:
    """wait_table of a wait's raw output (a check's result window has no timeline entry yet)."""
    if not check_parse.parse_reads(output):
        return []
    out: list[str] = []
    frame: list[str] | None = None
    at = ""

    def close() -> None:
        if frame is None:
            return
        read = memory_text(check_parse.parse_memory_read("\n".join(frame)))
        rest = " / ".join(ln for ln in frame if ln.strip() and not check_parse.parse_memory_read(ln))   # kept as it came
        out.append(f"{at:>6} s  " + ("; ".join(x for x in (read, rest) if x) or "no output"))
    for line in output.splitlines():
        m = check_parse._READ_AT_RE.match(line.strip())      # the wait's framing (console/checks/parse.py)
        if line.startswith("[…"):                   # the record's own mark (cut here): as it is
            close()
            frame = None
            out.append(line)
        elif m:
            close()
            frame, at = [], m.group(1)
        elif frame is None:
            out.append(line)
        else:
            frame.append(line)
    close()
    return out

