"""How long the memory was held, as a reader of the postmortem means it: from the first reading
that showed it held to the reading that showed it back — "at least" when it was already held at
the console's first reading of the node (it was held before anyone looked) — and, apart, from
the action that freed it. Not from the console's start: a console started an hour into an
incident would otherwise call it a minute. Pure: reads timeline entries only
(console/incident/impact.py: every GPU's span).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from console.incident.impact import held
from console.incident.readings import readings
from console.incident.summary import BUSY_MIB, Summary, duration, offset
from console.model import TimelineEntry


@dataclass(frozen=True)
class Freeing:
    first_held: float | None       # epoch seconds: the first reading that showed memory held
    held_at_first: bool            # that was the node's first reading: held before it (at least)
    freed: float | None            # the reading that showed every stuck GPU back (None: not yet)

    @property
    def seconds(self) -> float | None:
        if self.first_held is None or self.freed is None:
            return None
        return max(0.0, self.freed - self.first_held)


def freeing(entries: Sequence[TimelineEntry]) -> Freeing:
    spans = held(entries)
    if not spans:
        return Freeing(None, False, None)
    first = min(spans, key=lambda h: h.since)
    earlier = [r for r in readings(entries) if r.node == first.node and r.t < first.since
               and isinstance(r.memory.get(str(first.gpu)), int)]
    held_at_first = not any((r.memory.get(str(first.gpu)) or 0) <= BUSY_MIB for r in earlier)
    freed = max(h.until for h in spans) if all(h.freed for h in spans) else None
    return Freeing(first.since, held_at_first, freed)


def first_held_text(f: Freeing, start: float | None) -> str:
    """"T+0:00, already held at the console's first reading of the node"."""
    if f.first_held is None:
        return "no reading showed a GPU holding more than 1 GiB"
    at = offset(f.first_held - start) if start is not None else "?"
    return at + (", already held at the console's first reading of the node" if f.held_at_first else "")


def time_to_free_text(f: Freeing, s: Summary, start: float | None) -> str:
    """The headline's "Time to free": from the first held reading (at least…) and, apart, from
    the action that freed it (never less than the time since that action: an outcome that says
    how long after its action the memory came back is believed over its own timestamp)."""
    if (f.seconds is None or f.first_held is None) and s.state == "resolved" and s.after_action_s is not None:
        return (f"{'at once' if s.after_action_s < 1 else duration(s.after_action_s)} after the action that freed "
                "it; what is still in use is running work")
    if f.seconds is None or f.first_held is None:
        return "not freed (no reading showed the memory back)"
    seconds = f.seconds
    if s.time_to_free_s is not None and start is not None:
        seconds = max(seconds, s.time_to_free_s - (f.first_held - start))
    out = (f"{'at least ' if f.held_at_first else ''}{duration(seconds)} held, from the first reading that "
           "showed it held" + (" (it was held before the console looked)" if f.held_at_first else ""))
    if s.after_action_s is not None:
        out += ("; at once after the action that freed it" if s.after_action_s < 1
                else f"; {duration(s.after_action_s)} from the action that freed it")
    return out
