"""What an incident's timeline says was done to a node, as the ActionRecords diagnosis reasons
with (teardown windows, what B stopped and is still off): a console that continues an incident
(`--incident ID`) starts from them, not from nothing — else it forgets that B stopped
nvidia-persistenced (or the fabric manager, or nv-hostengine) and never offers to restore it.

Only actions that ran: an `action` entry with its rung (files written before the field have none:
nothing is rebuilt from a title), not a dry run or a refusal, whose outcome has an exit status.
"""
from __future__ import annotations

from typing import Sequence

from console import rungs
from console.incident.readings import when
from console.model import ActionRecord, TimelineEntry


def applied(entries: Sequence[TimelineEntry], node: str) -> list[ActionRecord]:
    """The rungs the timeline says were applied to ``node``, oldest first."""
    outcome_of = {e.action: e for e in entries if e.kind == "observation" and e.outcome and e.action is not None}
    out = []
    for e in entries:
        if e.kind != "action" or e.node != node or not isinstance(e.rung, str) or not e.rung:
            continue
        if e.text.startswith(("[dry-run]", "[read-only]")):
            continue
        result = outcome_of.get(e.seq)
        at = when(e)
        if result is None or result.rc is None or at is None:
            continue
        targets = [t for t in (e.targets or ()) if isinstance(t, dict) and isinstance(t.get("pid"), int)]
        family = tuple((t["pid"], None, str(t.get("name") or "")) for t in targets)
        pids = tuple(t["pid"] for t in targets) if rungs.of(e.rung).signal else ()
        gpus = tuple(g for g in (e.gpus or ()) if isinstance(g, int) and not isinstance(g, bool))
        out.append(ActionRecord(rung=e.rung, ts=at, node=node, pids=pids, gpus=gpus, family=family))
    return out
