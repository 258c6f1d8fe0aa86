"""Which consoles are on an incident, and whether each is still alive.

A console writes "console started watching …" when it starts and "console stopped" when it
stops (by ``q``; by SIGHUP or SIGTERM, "console stopped (SIGTERM)"). Its start entry
carries ``console``: ``{"pid", "host", "start_ticks"}`` (``identity``), the process that
writes the incident — so a console that died without a word (SIGKILL, an OOM kill, a power
cut) is told apart from one still attached: on this host, a PID that is gone (or now belongs to
another process: its start time differs) is a console gone, since the last entry it wrote.

``timeline list`` and the follower (`gpu-incident follow ID`, ``--live``) show "console gone
since HH:MM" instead of "console attached" (console/incident/summary.py, console/ui/mirror_view.py).
A console on another host cannot be checked from here: it stays "attached" (the follower also
goes by the age of its live state). Files written before the field: as before, by count.
"""
from __future__ import annotations

import os
import socket
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

from console.model import TimelineEntry

CONSOLE_STARTED = "console started watching "
CONSOLE_STOPPED = "console stopped"


def identity() -> dict[str, Any]:
    """This process, as a console's start entry names it (the ``console`` field)."""
    pid = os.getpid()
    return {"pid": pid, "host": socket.gethostname(), "start_ticks": start_ticks(pid)}


def start_ticks(pid: int) -> int | None:
    """/proc/PID/stat field 22 (the process's start, in clock ticks since boot); None where
    there is no /proc or the process is gone."""
    stat = _stat(pid)
    return stat[1] if stat is not None else None


def _stat(pid: int) -> tuple[str, int] | None:
    """(state, start ticks) of a process from /proc, or None."""
    try:
        with open(f"/proc/{int(pid)}/stat", "rb") as f:
            raw = f.read()
    except (OSError, ValueError):
        return None
    rest = raw[raw.rfind(b")") + 2:].split()     # the comm may hold spaces and parentheses
    try:
        return rest[0].decode("ascii", "replace"), int(rest[19])
    except (IndexError, ValueError):
        return None


def process_alive(pid: int, ticks: int | None = None) -> bool:
    """Is process ``pid`` (started at ``ticks``, when known) still there? A zombie, or a PID
    taken by a process that started at another time, is gone."""
    if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass                                   # there, another user's
    except OSError:
        return False
    stat = _stat(pid)
    if stat is None:
        return True                            # no /proc to say more: the PID exists
    state, now_ticks = stat
    if state in ("Z", "X"):
        return False
    return ticks is None or now_ticks == ticks


def is_start(e: TimelineEntry) -> bool:
    return e.kind == "note" and e.node is None and e.text.startswith(CONSOLE_STARTED)


def is_stop(e: TimelineEntry) -> bool:
    """"console stopped", or "console stopped (SIGTERM)" (a signal handled as q)."""
    return (e.kind == "note" and e.node is None
            and (e.text == CONSOLE_STOPPED or e.text.startswith(CONSOLE_STOPPED + " (")))


def _ident(e: TimelineEntry) -> tuple[int, str] | None:
    c = e.console
    if not isinstance(c, Mapping):
        return None
    pid, host = c.get("pid"), c.get("host")
    if not isinstance(pid, int) or isinstance(pid, bool) or not isinstance(host, str):
        return None
    return pid, host


@dataclass(frozen=True)
class Attached:
    """A console that started on the incident and has not said it stopped."""
    start: TimelineEntry
    pid: int | None = None
    host: str | None = None
    gone: bool = False                 # its process on this host is known to be gone
    last_seen: str | None = None       # the ts of the last entry it wrote (gone: since when)


def unmatched(entries: Sequence[TimelineEntry]) -> list[TimelineEntry]:
    """The start entries of consoles that did not say they stopped: a stop naming a console
    (its ``console`` field) closes that one's start; one that names none (files written before
    the field) the oldest start still open."""
    open_: list[TimelineEntry] = []
    for e in entries:
        if is_start(e):
            open_.append(e)
        elif is_stop(e) and open_:
            ident = _ident(e)
            match = next((s for s in open_ if ident is not None and _ident(s) == ident), None)
            if match is None:
                match = next((s for s in open_ if _ident(s) is None or ident is None), open_[0])
            open_.remove(match)
    return open_


def attached(entries: Sequence[TimelineEntry], *, host: str | None = None,
             alive: Callable[[int, int | None], bool] = process_alive) -> list[Attached]:
    """Every console still attached by the entries, each checked where it can be: one on this
    host (``host``: socket.gethostname()) whose process is gone is ``gone``."""
    here = socket.gethostname() if host is None else host
    out = []
    for start in unmatched(entries):
        ident = _ident(start)
        pid, where = ident if ident is not None else (None, None)
        gone = False
        if pid is not None and where == here:
            ticks = start.console.get("start_ticks") if isinstance(start.console, Mapping) else None
            gone = not alive(pid, ticks if isinstance(ticks, int) and not isinstance(ticks, bool) else None)
        last = start.ts
        for e in entries:
            if e.seq > start.seq and e.by == start.by and not is_start(e):
                last = e.ts
        out.append(Attached(start, pid, where, gone, last))
    return out


def gone_since(consoles: Sequence[Attached]) -> str | None:
    """The ts since which every attached console is gone (its last entry), or None when one is
    still (or may be) attached, or none is."""
    if not consoles or not all(c.gone for c in consoles):
        return None
    return max((c.last_seen or c.start.ts) for c in consoles)


def attached_elsewhere(entries: Sequence[TimelineEntry], *, host: str | None = None,
                       alive: Callable[[int, int | None], bool] = process_alive,
                       me: tuple[int, str] | None = None) -> bool:
    """Is a console other than this process still (or maybe still) attached? One whose process
    on this host is gone is not; nor is this very process (``me``: its PID and host), so the
    postmortem exported from the live console (its ``e``) does not say "a console is still
    attached" of the console that writes it."""
    here = socket.gethostname() if host is None else host
    me = me if me is not None else (os.getpid(), here)
    return any(not c.gone and (c.pid, c.host) != me for c in attached(entries, host=here, alive=alive))
