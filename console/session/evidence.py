"""The evidence a headless caller keeps before anyone acts (the gate on a failed node, the watch
on a new cause): the snapshot's GPU-related processes (with the node's facts, its workload and
the findings, as the session records a first reading: console/session/node_record.py), the
findings with their next steps, and
the read-only checks that keep what a kill would destroy — who holds the device files, the
states and wchan of every holder, zombie and process in D, where the biggest holders wait
(kernel stack where root), the kernel log's NVRM lines, and `nvidia-smi -q` (the driver's whole
report, capped). Bounded: at most EVIDENCE_PIDS
processes, EVIDENCE_STACKS stacks, each check within EVIDENCE_TIMEOUT_S.
"""
from __future__ import annotations

import asyncio
import json
from typing import Any

from console.checks.registry import run_check
from console.diagnosis import who
from console.incident.log import IncidentLog
from console.model import NodeSnapshot, TimelineEntry, severity_rank
from console.output.json import node_json
from console.session import node_record
from console.sources.base import Source
from console.textsafe import one_line

#: the snapshot kept as evidence (its GPU-related processes), cut at this many characters
SNAPSHOT_CHARS = 20000
#: how long one evidence check may take before it is given up
EVIDENCE_TIMEOUT_S = 20.0
#: at most this many processes' states, and this many holders' stacks, go into the evidence
EVIDENCE_PIDS = 64
EVIDENCE_STACKS = 3


def checks_for(snap: NodeSnapshot) -> list[tuple[str, dict[str, Any]]]:
    """The read-only checks to run on this node, with their parameters."""
    holders = who.holder_candidates(snap)
    daemons = [p.pid for p in holders if who.blocker_daemon(p) is not None]
    listed = {d.pid for d in snap.driver_processes_here()}
    stuck = [p.pid for p in snap.processes if p.state in ("Z", "D") or p.threads_in_d]
    first = [p.pid for p in holders if p.pid not in daemons] + sorted(listed) + stuck + daemons
    pids = list(dict.fromkeys(first))[:EVIDENCE_PIDS]
    checks: list[tuple[str, dict[str, Any]]] = [("holders", {})]
    if pids:
        checks.append(("states", {"pids": pids}))
    biggest = sorted((p for p in holders if p.state != "Z" and p.pid not in daemons),
                     key=lambda p: -p.gpu_memory_total_mib)
    checks += [("stack", {"pid": p.pid}) for p in biggest[:EVIDENCE_STACKS]]
    checks.append(("kernel-log", {}))
    checks.append(("smi-report", {}))
    return checks


def gpu_related(snap: NodeSnapshot) -> dict[str, Any]:
    """The snapshot as `snapshot --json` writes a node, with only its GPU-related processes."""
    doc = node_json(snap)
    doc["processes"] = [p for p in doc["processes"] if p.get("gpu_memory_mib") or p.get("holds_devices")
                        or p.get("state") in ("Z", "D") or p.get("threads_in_d")]
    return doc


async def record(log: IncidentLog, source: Source | None, node: str, snap: NodeSnapshot | None, *, hypothesis: str,
                 seen: str) -> list[str]:
    """Into ``log``: the hypothesis, what was seen, the findings, the checks. Returns the
    entries written ("#7 states"); never raises for node trouble."""
    written: list[str] = []

    def kept(entry: TimelineEntry | None, what: str) -> None:
        if entry is not None:
            written.append(f"#{entry.seq} {what}")
    kept(log.hypothesis(node, hypothesis), "hypothesis")
    if snap is None or snap.error is not None:
        kept(log.observation(node, seen), "reading")
        return written
    recorded = node_record.recorded_fields(snap, kernel=await node_record.read_kernel(source),
                                           demo=node_record.demo_source(source))
    memory = {str(g.index): g.memory_used_mib for g in snap.gpus}       # what was stuck, for the summary
    kept(log.observation(node, seen, output=json.dumps(gpu_related(snap), indent=1)[:SNAPSHOT_CHARS],
                         gpu_memory_before=memory, **recorded), "snapshot")
    for f in sorted(snap.findings, key=lambda f: -severity_rank(f.severity)):
        kept(log.note(node, f"finding {f.severity} {f.kind}: {f.summary} — next: {f.next_step}"), f.kind)
    if source is None:
        return written
    for name, params in checks_for(snap):
        try:
            result = await asyncio.wait_for(run_check(source, name, snap, **params), EVIDENCE_TIMEOUT_S)
        except (asyncio.TimeoutError, ValueError) as exc:
            log.note(node, f"evidence {name} not taken: {one_line(exc, 120) or type(exc).__name__}")
            continue
        kept(log.record_check(result), name)
    return written
