"""A finding's next step, the way the console takes it (``x`` on a finding, the palette, tests).

Waiting is the wait-and-reread check (read-only: nothing runs on the node but reads and a
sleep); every other rung is an ``ActionPlan`` that the console shows in Confirm and then hands
to ``execute`` (console/actions/run.py). There is no other way of carrying out a rung::

    step = step_for(finding, snap)
    if step.check is not None:               # ("wait-and-reread", {"seconds": 30})
        await run_check(source, step.check[0], snap, **step.check[1])
    else:                                    # Confirm shows step.plan, then
        await execute(step.plan, source, ...)
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from console.actions.ladder import step_args
from console.actions.plan import ActionPlan, plan_action, plan_restore
from console.model import Finding, NodeSnapshot

WAIT_CHECK_S = 5            # a wait with no length of its own (the `w` key's default too)
MAX_WAIT_CHECK_S = 300      # a finding never asks the operator to watch a blank wait for longer


@dataclass(frozen=True)
class Step:
    finding: Finding
    check: tuple[str, Mapping[str, Any]] | None = None   # a wait: (check name, its parameters)
    plan: ActionPlan | None = None                         # any other rung


def wait_seconds(finding: Finding, default: int = WAIT_CHECK_S) -> int:
    """How long a finding's wait runs: the length its evidence suggests, within 1..300 s."""
    asked = finding.evidence.get("wait_s") if finding.evidence else None
    return max(1, min(int(asked or default), MAX_WAIT_CHECK_S))


def step_for(finding: Finding, snap: NodeSnapshot, *, wait_default: int = WAIT_CHECK_S) -> Step | None:
    """What taking this finding's next step means; None when it proposes no rung."""
    if finding.rung is None:
        return None
    if finding.rung == "wait":
        return Step(finding, check=("wait-and-reread", {"seconds": wait_seconds(finding, wait_default)}))
    pids, gpus = step_args(finding)
    if finding.rung == "restore":          # exactly what the finding names B stopped
        return Step(finding, plan=plan_restore(snap, tuple(finding.evidence.get("commands", ())), gpus))
    return Step(finding, plan=plan_action(snap, finding.rung, pids=pids, gpus=gpus))
