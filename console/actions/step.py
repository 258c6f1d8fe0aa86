"""A finding's next step, the way the console takes it (``x`` on a finding, the palette, tests).

Waiting is the wait-and-reread check (read-only: nothing runs on the node but reads and a
sleep); every other rung is an ``ActionPlan`` that the console shows in Confirm and then hands
to ``execute`` (console/actions/run.py). There is no other way of carrying out a rung::

    step = step_for(finding, snap)
    if step.check is not None:               # ("wait-and-reread", {"seconds": 30})
        await run_check(source, step.check[0], snap, **step.check[1])
    else:                                    # Confirm shows step.plan, then
        await execute(step.plan, source, ...)

A step may be a check whose answer makes the plan (``Step.then``): the MPS rung ``mps-clients``
asks the control daemon for the server's clients (read-only), and ``after_check`` turns the
answer into the terminate_client plan Confirm shows (console/actions/mps.py)::

    result = await run_check(source, *step.check)
    plan, why = after_check(step, latest_snapshot, result.data)    # plan None: why says so
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping

from console import rungs
from console.actions import mps
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
    then: str | None = None     # after the check: the rung its answer is planned into (after_check)


def wait_seconds(finding: Finding, default: int = WAIT_CHECK_S) -> int:
    """How long a finding's wait runs: the length its evidence suggests, within 1..300 s."""
    asked = finding.evidence.get("wait_s") if finding.evidence else None
    return max(1, min(int(asked or default), MAX_WAIT_CHECK_S))


def step_for(finding: Finding, snap: NodeSnapshot, *, wait_default: int = WAIT_CHECK_S) -> Step | None:
    """What taking this finding's next step means; None when it proposes no rung."""
    if finding.rung is None:
        return None
    r = rungs.of(finding.rung)
    pids, gpus = step_args(finding)
    if r.check is not None and r.then is None:      # a wait
        return Step(finding, check=(r.check, {"seconds": wait_seconds(finding, wait_default)}))
    if r.check is not None:      # ask the control daemon (read-only), then plan from its answer
        return Step(finding, check=(r.check, {"server": pids[0]}), then=r.then) if pids else None
    planned = _FROM_FINDING.get(r.plans)
    if planned is not None:
        return Step(finding, plan=planned(finding, snap, gpus))
    return Step(finding, plan=plan_action(snap, finding.rung, pids=pids, gpus=gpus))


#: the families planned from the finding itself rather than from plan_action (rungs.Rung.plans)
_FROM_FINDING: dict[str, Callable[[Finding, NodeSnapshot, tuple[int, ...]], ActionPlan]] = {
    # MPS stops through its control daemon, every client with it
    "mps-quit": lambda finding, snap, gpus: mps.plan_quit(snap),
    # exactly what the finding names B stopped
    "restore": lambda finding, snap, gpus: plan_restore(snap, tuple(finding.evidence.get("commands", ())), gpus),
}


def after_check(step: Step, snap: NodeSnapshot, data: Mapping[str, Any], *,
                chosen: tuple[int, ...] = ()) -> tuple[ActionPlan | None, str]:
    """The plan a step's check leads to (``Step.then``), from the check's parsed answer and the
    latest reading; None and why when the answer leads to none. ``chosen``: PIDs the operator
    tagged or selected (an MPS step ends those of the server's clients)."""
    if step.then is None or step.check is None:
        return None, "this step has no plan after its check"
    server = int(step.check[1]["server"])
    return mps.plan_after_check(snap, server, data, chosen=chosen)
