"""The driving console's open Confirm, for a follower: what is about to run and on what, and then
whether it ran or was cancelled — the moment a second person should speak up.

The driving console puts it in its live state (console/incident/mirror.py, fields ``confirm``
and ``confirm_closed``) while the Confirm is open and after it closes; the follower (`follow ID
--live`) shows it read-only. Nothing here runs anything: it is a description of a plan.

    "confirm": {"by", "node", "title", "rung", "mode", "commands": [...], "notes": [...],
                "targets": [{"pid", "user", "state", "name", "cmdline", "gpu_mib"}], "opened_at"}
    "confirm_closed": {"by", "node", "title", "answer": "run" | "cancelled", "mode", "at"}

``mode`` is "read-only" or "dry-run" where the console runs so (the answer then records, not runs).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping

from console.actions.plan import ActionPlan

#: at most this many targets travel to the follower (a Confirm of 2,000 processes says how many)
TARGET_LIMIT = 50
ANSWERS = ("run", "cancelled")


@dataclass(frozen=True)
class Target:
    pid: int
    user: str
    state: str
    name: str
    cmdline: str
    gpu_mib: int | None


@dataclass(frozen=True)
class Pending:
    """A Confirm open on the driving console."""
    by: str
    node: str
    title: str
    rung: str
    commands: tuple[str, ...]
    targets: tuple[Target, ...]
    target_count: int
    notes: tuple[str, ...]
    mode: str | None
    opened_at: float


@dataclass(frozen=True)
class Closed:
    """How the last Confirm ended: ``answer`` "run" (y, or the node's name typed) or "cancelled"."""
    by: str
    node: str
    title: str
    answer: str
    mode: str | None
    at: float


def opened(plan: ActionPlan, *, by: str, mode: str | None, now: float) -> dict[str, Any]:
    """The ``confirm`` field for ``plan`` as Confirm shows it."""
    return {"by": by, "node": plan.node, "title": plan.title, "rung": plan.rung, "mode": mode,
            "commands": list(plan.commands), "notes": list(plan.notes), "target_count": len(plan.targets),
            "targets": [{"pid": t.pid, "user": t.user, "state": t.state, "name": t.name, "cmdline": t.cmdline,
                         "gpu_mib": t.gpu_total_mib} for t in plan.targets[:TARGET_LIMIT]],
            "opened_at": now}


def closed(pending: Mapping[str, Any], answer: str, now: float) -> dict[str, Any]:
    """The ``confirm_closed`` field once the Confirm ``pending`` was answered."""
    if answer not in ANSWERS:
        raise ValueError(f"unknown answer {answer!r}")
    return {"by": pending.get("by"), "node": pending.get("node"), "title": pending.get("title"),
            "answer": answer, "mode": pending.get("mode"), "at": now}


# ---------------------------------------------------------------- the follower's side
def _str(value: Any, default: str = "") -> str:
    return value if isinstance(value, str) else default


def _time(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError("not a time")
    return float(value)


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def parse_pending(data: Any) -> Pending | None:
    """The ``confirm`` field read back; None for anything that is not one (a state from a
    console before this field, or a malformed one: the follower shows no Confirm)."""
    if not isinstance(data, Mapping):
        return None
    try:
        targets = tuple(Target(pid=_int(t.get("pid")) or 0, user=_str(t.get("user"), "?"), state=_str(t.get("state"), "?"),
                               name=_str(t.get("name"), "?"), cmdline=_str(t.get("cmdline")),
                               gpu_mib=_int(t.get("gpu_mib")))
                        for t in data.get("targets") or () if isinstance(t, Mapping))
        count = _int(data.get("target_count"))
        return Pending(by=_str(data.get("by"), "?"), node=_str(data.get("node"), "?"), title=_str(data.get("title"), "?"),
                       rung=_str(data.get("rung")),
                       commands=tuple(c for c in data.get("commands") or () if isinstance(c, str)),
                       targets=targets, target_count=count if count is not None else len(targets),
                       notes=tuple(n for n in data.get("notes") or () if isinstance(n, str)),
                       mode=data.get("mode") if isinstance(data.get("mode"), str) else None,
                       opened_at=_time(data.get("opened_at")))
    except (TypeError, ValueError, AttributeError):
        return None


def parse_closed(data: Any) -> Closed | None:
    if not isinstance(data, Mapping) or data.get("answer") not in ANSWERS:
        return None
    try:
        return Closed(by=_str(data.get("by"), "?"), node=_str(data.get("node"), "?"), title=_str(data.get("title"), "?"),
                      answer=data["answer"], mode=data.get("mode") if isinstance(data.get("mode"), str) else None,
                      at=_time(data.get("at")))
    except (TypeError, ValueError):
        return None


def outcome_words(c: Closed) -> tuple[str, str]:
    """What became of it, in words: (what the person did, what that did) — ("ran", "") for a
    Confirm answered y, ("cancelled", "nothing ran"), ("confirmed", "refused: read-only")."""
    if c.answer == "cancelled":
        return "cancelled", "nothing ran"
    if c.mode == "read-only":
        return "confirmed", "refused (read-only): nothing ran"
    if c.mode == "dry-run":
        return "confirmed", "recorded, not run (dry-run)"
    return "ran", "sent"
