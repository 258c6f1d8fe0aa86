"""Fleet nodes (read through Prometheus) in `snapshot`'s schema: JSON nodes and report lines.

A fleet node is a node entry like any other (``name``, ``error``, ``warnings``, ``probe_ms``,
``gpus``, ``processes``, ``findings``) plus ``source`` (the fleet target), ``suspicion`` (null,
or why), ``suspicion_rank`` and ``ssh_destination`` (where the per-node console would connect;
null when the Hostname is no plain host name). Prometheus knows no processes: ``processes`` is
[]. Per GPU, ``name`` is dcgm-exporter's ``modelName``; added: ``last_xid``, ``pod``,
``idle_held_mib``. A fleet source that failed as a whole is one entry named after the target,
with its ``error``.
"""
from __future__ import annotations

from typing import Any, Callable

from console.diagnosis.fleet import fleet_findings
from console.model import FleetGpu, FleetNode, FleetSnapshot, severity_rank
from console.output.json import finding_json
from console.textsafe import printable


def _num(v: float | None) -> float | int | None:
    if v is None:
        return None
    return int(v) if float(v).is_integer() else round(v, 3)


def fleet_gpu_json(g: FleetGpu) -> dict[str, Any]:
    return {"index": g.index, "uuid": g.uuid, "name": g.model, "bus_id": None,
            "memory_used_mib": _num(g.memory_used_mib), "memory_total_mib": _num(g.memory_total_mib),
            "utilization_pct": _num(g.utilization_pct), "last_xid": g.last_xid, "pod": g.pod,
            "idle_held_mib": _num(g.idle_held_mib)}


def fleet_node_json(n: FleetNode, snap: FleetSnapshot, destination: Callable[[str], str | None]) -> dict[str, Any]:
    return {"name": n.hostname, "error": None, "warnings": [], "probe_ms": None,
            "source": snap.source, "hostname": n.hostname, "suspicion": n.suspicion,
            "suspicion_rank": n.suspicion_rank, "ssh_destination": destination(n.hostname),
            "gpus": [fleet_gpu_json(g) for g in n.gpus], "processes": [],
            "findings": [finding_json(f) for f in fleet_findings(n, snap.window_s)]}


def fleet_nodes_json(snap: FleetSnapshot, destination: Callable[[str], str | None]) -> list[dict[str, Any]]:
    """The snapshot's nodes in its order (suspects first once assessed); a failed round is one
    entry with the error."""
    if snap.error is not None:
        return [{"name": snap.source, "error": snap.error, "warnings": list(snap.warnings),
                 "probe_ms": snap.query_ms, "source": snap.source, "suspicion": None, "suspicion_rank": 0,
                 "gpus": [], "processes": [], "findings": []}]
    nodes = [fleet_node_json(n, snap, destination) for n in snap.nodes]
    if snap.warnings and nodes:
        nodes[0]["warnings"] = [f"{snap.source}: {w}" for w in snap.warnings]
    return nodes


def fleet_report(snap: FleetSnapshot, width: int = 100) -> str:
    """Plain-text lines: one per node (suspects first, with why), then the GPUs of suspects."""
    head = printable(snap.source)
    if snap.error is not None:
        return f"{head}: ✖ {printable(snap.error)}\n\n"
    ms = f", query {snap.query_ms:.0f} ms" if snap.query_ms is not None else ""
    lines = [f"{head}: {len(snap.nodes)} nodes, {sum(1 for n in snap.nodes if n.suspicion_rank)} suspect{ms}"]
    lines += [f"  ⚠ {printable(w, width)}" for w in snap.warnings]
    for n in snap.nodes:
        used = sum(g.memory_used_mib or 0 for g in n.gpus)
        total = sum(g.memory_total_mib or 0 for g in n.gpus)
        lines.append(f"  {printable(n.hostname, 48)}: {len(n.gpus)} GPUs, {used:.0f} / {total:.0f} MiB used")
        if n.suspicion:
            for f in sorted(fleet_findings(n, snap.window_s), key=lambda f: -severity_rank(f.severity)):
                lines.append(f"    {f.severity.upper():<8} {f.kind}: {printable(f.summary, width)}")
    lines.append("")
    return "\n".join(lines) + "\n"
