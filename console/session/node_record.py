"""What the session writes into the incident about a node besides its memory: the console's own
diagnosis (its findings, each with the evidence it rested on), the node's facts (driver, GPU
model and count, kernel, whether it is a simulated demo node) and the workload that holds its
GPUs (per owner, Slurm job and container: the holders' commands) — so that the postmortem can
say them (console/incident/diagnosis_story.py, console/incident/facts.py). Pure — snapshots in,
JSON-able dicts out; bounded (a finding's PIDs, its evidence, the workload's groups are cut) —
but for ``read_kernel``, which asks the node (``uname -r``, bounded in time).
"""
from __future__ import annotations

import asyncio
from typing import Any, Mapping, Sequence

from console.diagnosis import roles
from console.model import Finding, NodeSnapshot, severity_rank
from console.sources.base import Source
from console.sources.slurm_parse import job_of_cgroup

#: a finding below this severity is not recorded unless it has a next step (an info that only
#: describes, e.g. a GPU's clocks, is not)
RECORDED_SEVERITY = "low"
#: at most this many PIDs per finding, evidence values of this many characters, findings per entry
MAX_PIDS = 16
MAX_VALUE_CHARS = 300
MAX_FINDINGS = 12
#: how long the kernel's version may take to read
KERNEL_READ_S = 3.0
#: at most this many workload groups (owner, job, container), commands per group
MAX_GROUPS = 8
MAX_COMMANDS = 4


def _evidence(evidence: Mapping[str, Any]) -> dict[str, Any]:
    """A finding's evidence, bounded: its scalar values and lists of scalars (cut), the nested
    records (every process's details) left to the check entries that keep them."""
    out: dict[str, Any] = {}
    for key, value in list(evidence.items())[:24]:
        if value is None or isinstance(value, (bool, int, float)):
            out[str(key)[:60]] = value
        elif isinstance(value, str):
            out[str(key)[:60]] = value[:MAX_VALUE_CHARS]
        elif isinstance(value, (list, tuple)) and all(isinstance(v, (str, int, float, bool)) for v in value):
            out[str(key)[:60]] = [v[:MAX_VALUE_CHARS] if isinstance(v, str) else v for v in list(value)[:MAX_PIDS]]
    return out


def finding_record(f: Finding) -> dict[str, Any]:
    return {"kind": f.kind, "severity": f.severity, "summary": f.summary[:MAX_VALUE_CHARS * 2],
            "pids": list(f.pids[:MAX_PIDS]), "npids": len(f.pids), "gpus": list(f.gpus),
            "evidence": _evidence(f.evidence), "rung": f.rung}


def recorded(snap: NodeSnapshot) -> list[Finding]:
    """The findings worth a line in the incident, the worst first."""
    floor = severity_rank(RECORDED_SEVERITY)
    kept = [f for f in snap.findings if severity_rank(f.severity) >= floor or f.rung]
    return sorted(kept, key=lambda f: -severity_rank(f.severity))[:MAX_FINDINGS]


def signature(findings: Sequence[Finding]) -> frozenset[tuple[str, str]]:
    """What makes a change worth recording: a kind appears or goes, or its severity changes
    (counts and durations that move every poll do not)."""
    return frozenset((f.kind, f.severity) for f in findings)


def change_text(node: str, findings: Sequence[Finding], before: frozenset[tuple[str, str]]) -> str:
    """"findings on gpu07: zombie (high), d-state (critical) new; reset-blocker gone"."""
    now = signature(findings)
    new = [f"{k} ({s})" for k, s in sorted(now - before, key=lambda x: (-severity_rank(x[1]), x[0]))]
    gone = sorted({k for k, _ in before} - {k for k, _ in now})
    parts = ([", ".join(new) + " new"] if new else []) + ([", ".join(gone) + " gone"] if gone else [])
    return f"findings on {node}: " + ("; ".join(parts) or "unchanged")


def facts(snap: NodeSnapshot, *, kernel: str | None, demo: bool) -> dict[str, Any]:
    models: dict[str, int] = {}
    for g in snap.gpus:
        models[g.name] = models.get(g.name, 0) + 1
    out: dict[str, Any] = {"hostname": snap.hostname, "driver": snap.driver_version, "kernel": kernel,
                           "gpus": [{"model": m, "count": n} for m, n in models.items()],
                           "gpu_count": len(snap.gpus)}
    if demo:
        out["demo"] = True
    return {k: v for k, v in out.items() if v is not None}


def workload(snap: NodeSnapshot) -> list[dict[str, Any]]:
    """The GPU holders that are a workload (not the node's own programs, not this console),
    grouped by owner, Slurm job and container: their commands and how many processes."""
    own = set(snap.own_pids)
    groups: dict[tuple, dict[str, Any]] = {}
    for p in snap.holders:
        role = roles.role_of(p, own=p.pid in own)
        if role.kind not in (roles.WORKLOAD, roles.UNCONFIRMED):
            continue
        cg = p.cgroup
        job = job_of_cgroup(cg.path) if cg is not None else None
        container = (f"{cg.runtime} {cg.container_id[:12]}" if cg is not None and cg.runtime and cg.container_id
                     else None)
        pod = cg.pod_uid if cg is not None else None
        key = (p.user, job, container, pod)
        group = groups.setdefault(key, {"user": p.user, "job": job, "container": container, "pod": pod,
                                        "commands": [], "pids": 0, "parent": None})
        group["pids"] += 1
        command = (p.cmdline or p.name)[:MAX_VALUE_CHARS]
        if command not in group["commands"] and len(group["commands"]) < MAX_COMMANDS:
            group["commands"].append(command)
        group.setdefault("ppids", set()).add(p.ppid)
    out = []
    for g in list(groups.values())[:MAX_GROUPS]:
        ppids = g.pop("ppids")
        parent = snap.proc(next(iter(ppids))) if len(ppids) == 1 else None
        if parent is not None and parent.pid > 1 and not parent.is_gpu_holder:   # one launcher for them all
            g["parent"] = {"pid": parent.pid, "user": parent.user,
                           "command": (parent.cmdline or parent.name)[:MAX_VALUE_CHARS]}
        out.append({k: v for k, v in g.items() if v is not None})
    return out


async def read_kernel(source: Source | None) -> str | None:
    """The node's kernel release (``uname -r``); None when it cannot be read in KERNEL_READ_S."""
    if source is None:
        return None
    try:
        result = await asyncio.wait_for(source.run("uname -r", timeout=KERNEL_READ_S), KERNEL_READ_S)
    except Exception:  # noqa: BLE001 - a fact not read is left out, never a failed reading
        return None
    text = result.stdout.strip() if result.ok else ""
    return text.splitlines()[0][:80] if text else None


def demo_source(source: Source | None) -> bool:
    """The built-in simulated node (TARGET ``demo``/``demo:NAME``)."""
    return getattr(source, "kind", "") == "sim"


def recorded_fields(snap: NodeSnapshot, *, kernel: str | None, demo: bool) -> dict[str, Any]:
    """The ``facts``, ``workload`` and ``findings`` of a node's first reading (docs/timeline.md)."""
    return {"facts": facts(snap, kernel=kernel, demo=demo), "workload": workload(snap),
            "findings": [finding_record(f) for f in recorded(snap)]}
