"""How the main screen's rows are shared between its panels: by what each holds and what the
terminal has, so the findings — the console's guidance — never hide behind empty space.

Each panel says how many lines would show all it holds (``need``), the least it keeps however
tight the terminal (``least``; never more than it needs) and the share of the room it may take
before the panels after it have had theirs. Rooms are filled in order of importance; what is
left over goes to one panel (the findings: room for the next finding). Pure: no Textual here.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence


@dataclass(frozen=True)
class Panel:
    name: str
    need: int           # lines that show everything it holds (borders and header included)
    least: int          # lines it keeps however tight (capped at need)
    share: float = 1.0  # most of the room it takes in the first round
    #: on a terminal too small for every panel's least, this panel gives up lines first, down to
    #: ``floor`` (None: it gives up only in turn, from the last panel up)
    floor: int | None = None


def fit(room: int, panels: Sequence[Panel], rest: str | None = None) -> dict[str, int]:
    """Heights (lines) per panel name, summing to ``room`` when ``rest`` names a panel.

    1. every panel gets ``min(need, least)``;
    2. in order, each grows toward its need, up to ``share`` of the room;
    3. in order, each grows to its need;
    4. what is left goes to ``rest``.
    A terminal too small for every panel's least: a panel with a ``floor`` gives up lines first
    (down to it), then the last panels (to 1).
    """
    room = max(0, room)
    got = {p.name: max(0, min(p.need, p.least)) for p in panels}
    over = sum(got.values()) - room
    for p in panels:
        if over > 0 and p.floor is not None and got[p.name] > p.floor:
            give = min(over, got[p.name] - max(1, p.floor))
            got[p.name] -= give
            over -= give
    for p in reversed(panels):
        if over <= 0:
            break
        give = min(over, got[p.name] - 1)
        if give > 0:
            got[p.name] -= give
            over -= give
    left = room - sum(got.values())
    for cap_of in (lambda p: min(p.need, max(got[p.name], int(p.share * room))), lambda p: p.need):
        for p in panels:
            if left <= 0:
                break
            more = max(0, min(cap_of(p) - got[p.name], left))
            got[p.name] += more
            left -= more
    if rest is not None and left > 0 and rest in got:
        got[rest] += left
    return got
