"""Diagnosis: a node snapshot (with its recent history and the actions taken) -> findings.

Pure: no clock, no I/O.  Every finding carries a one-line summary, the evidence (PIDs,
GPUs, MiB, since when), and a next step that follows the evidence — an imperative line
with its reason plus the ladder rung (``Finding.rung``) that carries it out.  The rules
for choosing the rung live in console/diagnosis/advice.py; the kinds in
console/diagnosis/processes.py, console/diagnosis/node.py and console/diagnosis/repair.py (row
remapping and page retirement).

To act on a finding: console/actions/step.py (``step_for``): the same path the console takes.
"""
from __future__ import annotations

import dataclasses
from typing import Callable, Sequence

from console import rungs
from console.diagnosis import text as t
from console.diagnosis import fabric, gpu_health, ipc, node, processes, repair, respawn
from console.diagnosis.context import Situation
from console.model import FINDING_KINDS, SEVERITIES, ActionRecord, Finding, NodeSnapshot, severity_rank

#: within one severity, the order findings are shown (cause before consequence)
KIND_ORDER = ("driver-error", "probe-hung", "recovery-action", "firmware-boot", "fabric-not-ready", "row-remap-failure", "xid",
              "row-remap-pending", "retired-pages-pending", "respawn", "cuda-ipc", "zombie", "d-state", "foreign-pid", "hidden-holder",
              "orphan", "ghost-memory", "mps-server", "reset-blocker", "holder", "latched-utilisation", "gpu-health", "blockers-off")
DEFAULT_GHOST_THRESHOLD_MIB = 1024


def diagnose(snap: NodeSnapshot, history: Sequence[NodeSnapshot] = (),
             actions: Sequence[ActionRecord] = (), *, now: float | None = None,
             ghost_threshold_mib: int = DEFAULT_GHOST_THRESHOLD_MIB,
             between: Callable[[], None] = lambda: None) -> tuple[Finding, ...]:
    """Findings for one snapshot, most severe first.

    ``history``: earlier snapshots of the same node (any order; others are ignored), or the
    engine's compacted ``diagnosis.history.History`` of them, which gives the same findings.
    ``actions``: rungs applied to the node (ladder timing: teardown windows, SIGTERM grace).
    ``now``: the time the advice is for (default ``snap.taken_at``). ``between`` is called
    between the long phases (the engine waits there while a key is answered: the monitor passes
    console/turns.py ``pause``, as it does to the parser); it changes nothing of the result.
    """
    findings: list[Finding] = []
    findings += node.probe_hung(snap, history)
    findings += node.driver_errors(snap)
    findings += node.gone_gpus(snap)            # off the bus: rev ff, missing from the list, NVRM lines
    if snap.error is None or snap.processes:
        # Zombies, threads in D and Xid lines matter most when the driver does not answer
        # (a hung nvidia-smi leaves its callers in D): they are read even then.
        sit = Situation.build(snap, history, actions, now, ghost_threshold_mib)
        findings += node.recovery_actions(sit)
        findings += node.reset_required(sit)
        findings += node.hung_task_reports(sit)
        findings += node.firmware_boot(sit)
        findings += node.xids(sit)
        findings += processes.zombies(sit)
        findings += processes.dstate(sit)
        findings += processes.orphans(sit)      # device files and parents: no driver needed
        findings += respawn.respawns(sit)       # a parent that started again what was killed
        between()
    if snap.error is None:
        ghosts = node.ghost_memory(sit)
        ghost_gpus = {g for f in ghosts for g in f.gpus}
        foreign = processes.foreign_pids(sit)
        # the host-side holders of a container's GPUs are named by the foreign-pid finding
        named = {pid for f in foreign for pid in f.evidence.get("targets", ())}
        findings += processes.hidden_holders(sit, ghost_gpus, named)
        findings += foreign
        findings += ipc.handoffs(sit)           # an importer kept what a dead exporter shared
        findings += fabric.fabric(sit)          # NVLink fabric not set up by the fabric manager
        findings += ghosts
        between()
        mps = processes.mps_servers(sit)        # its clients are named there, not as plain holders
        covered = {pid for f in findings + mps for pid in f.pids} | {
            pid for f in findings for pid in f.evidence.get("targets", ())} | {
            pid for f in mps for pid in f.evidence.get("clients", ())}
        findings += processes.holders(sit, covered)
        findings += mps
        findings += node.latched_utilisation(sit)
        findings += gpu_health.gpu_health(sit)     # hot while idle, a narrow PCIe link: hardware
        findings += repair.memory_repair(sit)     # a pending remap wants a reset: before reset_blockers
        findings += node.reset_blockers(sit)      # last: knows which GPUs the advice wants reset
        findings += node.blockers_off(sit)        # ... and so does this: restore once none is
    return tuple(one_step_each(sorted(findings, key=_order)))


def one_step_each(findings: Sequence[Finding]) -> list[Finding]:
    """The findings as the operator reads them, most severe first: memory no listed process
    accounts for folds into the hidden holders that explain it (one cause, one finding), and a
    finding whose next step is one already given above says so instead of repeating it word for
    word (its rung stays: x on it takes the same step)."""
    hidden = [f for f in findings if f.kind == "hidden-holder" and f.severity == "high" and f.rung is not None]
    folded: dict[int, int] = {}          # the hidden holders' finding (its index) -> the MiB it explains
    out: list[Finding] = []
    for f in findings:
        explained = next((h for h in hidden if f.kind == "ghost-memory" and f.rung == h.rung
                          and set(f.gpus) <= set(h.gpus) and set(_targets(f)) <= set(_targets(h))), None)
        if explained is None:
            out.append(f)
        else:
            i = findings.index(explained)
            folded[i] = folded.get(i, 0) + int(f.evidence.get("ghost_mib") or 0)
    for i, mib in folded.items():
        h = findings[i]
        j = out.index(h)
        out[j] = dataclasses.replace(h, summary=f"{h.summary} ({t.mib(mib)})", evidence={**h.evidence, "ghost_mib": mib})
    given: dict[tuple, Finding] = {}
    for i, f in enumerate(out):
        if f.rung is None:
            continue
        key = (f.rung, tuple(sorted(_targets(f))), tuple(f.gpus))
        first = given.setdefault(key, f)
        if first is not f:
            out[i] = dataclasses.replace(f, next_step=f"The step of the {first.kind} finding above: "
                                                      f"{f.reason.rstrip('.')}.")
    return out


def _targets(f: Finding) -> tuple[int, ...]:
    """What the finding's step acts on (as console/actions/ladder.py step_args hands it over)."""
    if not rungs.of(f.rung).on_processes:
        return ()
    return tuple(f.evidence.get("targets") or f.pids)


def _order(f: Finding) -> tuple:
    kind = KIND_ORDER.index(f.kind) if f.kind in KIND_ORDER else len(KIND_ORDER)
    return (-severity_rank(f.severity), kind, -(f.evidence.get("mib") or f.evidence.get("ghost_mib") or 0),
            f.gpus, f.pids)


def worst_severity(findings: Sequence[Finding]) -> str | None:
    """The highest severity among the findings, or None when there are none."""
    ranks = [severity_rank(f.severity) for f in findings if severity_rank(f.severity) >= 0]
    return SEVERITIES[max(ranks)] if ranks else None


def fails(findings: Sequence[Finding], severity: str) -> bool:
    """True when any finding is at least ``severity`` (for `snapshot --fail-on`).

    Raises ValueError for a word that is not one of model.SEVERITIES (the CLI turns it into exit 2).
    """
    if severity not in SEVERITIES:
        raise ValueError(f"unknown severity {severity!r}; one of {', '.join(SEVERITIES)}")
    worst = worst_severity(findings)
    return worst is not None and severity_rank(worst) >= severity_rank(severity)


__all__ = ["diagnose", "worst_severity", "fails", "FINDING_KINDS", "KIND_ORDER", "DEFAULT_GHOST_THRESHOLD_MIB"]
