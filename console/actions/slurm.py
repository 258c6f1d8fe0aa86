"""The Slurm rungs: drain the node before reset or reboot, resume it after a verified recovery.

::

    drain    scontrol update NodeName=N State=DRAIN Reason="gpu-incident <incident-id>: <finding kind>"
    resume   scontrol update NodeName=N State=RESUME

They are actions like every other rung: ``plan_drain``/``plan_resume`` build an ``ActionPlan``
(Confirm shows its exact line), ``execute`` (console/actions/run.py) records it before it is
sent, refuses it under ``--read-only`` and records only under ``--dry-run``; the command runs
where the operator's Slurm client works (console/sources/slurm.py: this machine as an argv
list, or the controller host over SSH), never on the GPU node. Verification reads
``scontrol show node -o N`` back: DRAIN in its state after a drain, gone after a resume.

The reason is built from the incident ID and the finding kind only — never from text a node
produced — each checked against a narrow charset (console/sources/slurm_parse.py), and it is
one argument. Resume is offered only after a verified recovery: the node answered, every GPU
is back at or under who.FREED_MIB, and no finding of high severity or worse is left.
"""
from __future__ import annotations

from typing import Iterable

from console.actions.plan import VERIFY_WINDOW_S, ActionPlan
from console.diagnosis import text as t
from console.diagnosis.who import FREED_MIB
from console.model import CommandResult, Finding, NodeSnapshot, severity_rank
from console import rungs
from console.sources import slurm_parse as sp
from console.sources.slurm import SlurmClient
from console.sources.slurm_parse import SlurmNode
from console.textsafe import one_line

#: a finding at or above this severity keeps the node out of service (no resume)
BLOCKS_RESUME = "high"


def recovery(snap: NodeSnapshot | None) -> str | None:
    """None when the node has verifiably recovered; else why not (one line)."""
    if snap is None:
        return "no reading of the node yet"
    if snap.error is not None:
        return f"the node did not answer its last reading ({snap.error})"
    if not snap.gpus:
        return "the last reading lists no GPU"
    held = [g for g in snap.gpus if g.memory_used_mib is None or g.memory_used_mib > FREED_MIB]
    if held:
        used = sum(g.memory_used_mib or 0 for g in held)
        return f"{t.gpus([g.index for g in held])} still {t.verb(len(held), 'holds', 'hold')} {t.mib(used)}"
    bad = [f for f in snap.findings if severity_rank(f.severity) >= severity_rank(BLOCKS_RESUME)]
    if bad:
        kinds = ", ".join(dict.fromkeys(f.kind for f in bad))
        return f"{t.plural(len(bad), 'finding')} of high severity or worse left ({kinds})"
    return None


#: findings that never name a drain when another finding is there (the node's own daemons, restores)
NOT_DRAIN_REASONS = ("reset-blocker", "blockers-off")


def reason_finding(snap: NodeSnapshot | None, chosen: Finding | None = None) -> Finding | None:
    """The finding a drain names: the one chosen (highlighted), else the node's most severe."""
    if chosen is not None:
        return chosen
    if snap is None or not snap.findings:
        return None
    # what blocks a reset is never why a node is drained, while anything else is there
    causes = [f for f in snap.findings if f.kind not in NOT_DRAIN_REASONS] or list(snap.findings)
    return max(causes, key=lambda f: severity_rank(f.severity))   # first of the most severe


def drain_first(rung: str | None, node: SlurmNode | None) -> bool:
    """A reset/reboot is about to be offered on a node Slurm still schedules onto."""
    return rungs.of(rung).drain_first and node is not None and node.error is None and not node.drained


def _plan(node: str, rung: str, title: str, argv: tuple[str, ...], *, notes: Iterable[str] = (),
          refusals: Iterable[str] = (), snap: NodeSnapshot | None = None) -> ActionPlan:
    return ActionPlan(node=node, rung=rung, title=title, commands=(sp.shell_line(argv),) if argv else (),
                      refusals=tuple(refusals), notes=tuple(notes), destructive=True,
                      taken_at=snap.taken_at if snap is not None else None,
                      deadline_s=VERIFY_WINDOW_S, verify_s=VERIFY_WINDOW_S)


def plan_drain(node: str, slurm_name: str, incident_id: str, finding: Finding | None, *,
               where: str = "this machine", state: SlurmNode | None = None,
               snap: NodeSnapshot | None = None) -> ActionPlan:
    """Drain ``slurm_name`` with the reason ``gpu-incident <incident_id>: <finding kind>``.
    A plan without commands (and with the reason in ``refusals``) when the reason cannot be
    built: no finding, no incident, or a word outside the charset."""
    title = f"Drain {slurm_name} in Slurm"
    where_note = f"scontrol runs on {where} (the Slurm client), not on the node"
    if finding is None:
        return _plan(node, "drain", title, (), refusals=("no finding on this node to name as the drain reason",),
                     snap=snap)
    if not incident_id:
        return _plan(node, "drain", title, (), refusals=("no incident file: the drain reason names the incident",),
                     snap=snap)
    try:
        argv = sp.drain_argv(slurm_name, sp.drain_reason(incident_id, finding.kind))
    except ValueError as exc:
        return _plan(node, "drain", title, (), refusals=(str(exc),), snap=snap)
    notes = [where_note, "Slurm starts no new job here; running jobs go on (DRAINING) until they end"]
    if state is not None and state.drained:
        notes.append(f"{slurm_name} is already {state.state}: the reason is replaced")
    return _plan(node, "drain", title, argv, notes=notes, snap=snap)


def ours(state: SlurmNode | None, incident_id: str | None) -> bool:
    """Slurm holds the node out for this incident (its reason is the drain this console sent)."""
    if state is None or not incident_id or not state.reason:
        return False
    return state.reason.startswith(f"{sp.REASON_PREFIX} {incident_id}:")


def plan_resume(node: str, slurm_name: str, snap: NodeSnapshot | None, *, where: str = "this machine",
                state: SlurmNode | None = None, incident_id: str | None = None) -> ActionPlan:
    """Return ``slurm_name`` to service: only after a verified recovery (``recovery``), only when
    Slurm holds it out (DRAIN or DOWN), and only when it holds it out for this incident (the
    reason is this incident's drain: a drain for a broken PSU is an admin's to lift, not ours);
    else a plan without commands that says why."""
    title = f"Resume {slurm_name} in Slurm"
    why = recovery(snap)
    if why is not None:
        return _plan(node, "resume", title, (), snap=snap,
                     refusals=(f"resume comes after a verified recovery: {why}",))
    if state is not None and state.error is None and not ({"DRAIN", "DOWN", "FAIL"} & set(state.flags)):
        return _plan(node, "resume", title, (), snap=snap,
                     refusals=(f"{slurm_name} is {state.state} in Slurm: nothing to resume",))
    if state is not None and state.error is None and not ours(state, incident_id):
        reason = state.reason or "no reason given"
        return _plan(node, "resume", title, (), snap=snap, refusals=(
            f"{slurm_name} is {state.state} for another reason ({one_line(reason, 120)}), not this "
            f"incident's drain: lift it by hand once that cause is known to be gone",))
    notes = [f"scontrol runs on {where} (the Slurm client), not on the node",
             "the node is back in service: Slurm schedules jobs on it again"]
    return _plan(node, "resume", title, sp.resume_argv(slurm_name), notes=notes, snap=snap)


def settled(rung: str, reading: object) -> bool:
    """Has the Slurm state the rung was after come? (A reading is a SlurmNode.)"""
    if not isinstance(reading, SlurmNode) or reading.error is not None:
        return False
    return reading.drained == (rungs.of(rung).settles_on == "slurm-drained")


def state_line(plan: ActionPlan, reading: object, elapsed: float, done: bool) -> str:
    """What the read-back said: 'demo is IDLE+DRAIN (Reason …)' / 'demo still IDLE after 10 s'."""
    if not isinstance(reading, SlurmNode):
        return f"Slurm's state not read back in {elapsed:.0f} s"
    if reading.error is not None:
        return f"Slurm's state not read back: {reading.error}"
    reason = f" (reason: {reading.reason})" if reading.reason and reading.drained else ""
    if done:
        return f"scontrol show node: {reading.name} is {reading.state}{reason}"
    return f"scontrol show node: {reading.name} still {reading.state}{reason} after {elapsed:.0f} s"


class SlurmActionSource:
    """What ``execute`` needs to carry out a Slurm rung: ``run`` through the Slurm client, and a
    re-read that is the node's Slurm state (``scontrol show node -o``)."""
    kind = "slurm"

    def __init__(self, client: SlurmClient, node: str, slurm_name: str) -> None:
        self.client = client
        self.name = node
        self.slurm_name = sp.node_name(slurm_name)
        self.clock = client.clock
        self.probe_timeout = client.timeout

    async def run(self, line: str, timeout: float | None = None) -> CommandResult:
        return await self.client.run(line, min(timeout or self.client.timeout, self.client.timeout))

    async def poll(self) -> SlurmNode:
        return await self.client.node(self.slurm_name)

    async def signal(self, pid: int, signame: str, *, start_ticks: int | None = None,
                     create_time: float | None = None) -> CommandResult:
        """A Slurm rung signals no process (its plan has none): refused, nothing is sent."""
        return CommandResult(command=f"kill -s {signame} {pid}", rc=3,
                             stderr="refused: a Slurm action signals no process")

    async def close(self) -> None:
        """Nothing of its own to let go of: the Slurm client is its caller's."""
