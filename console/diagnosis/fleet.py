"""Which fleet nodes are suspect, and why. Pure: a FleetSnapshot in, the same with each node's
``suspicion`` and ``suspicion_rank`` set and the nodes sorted, out.

The rule (docs/fleet.md): a GPU is suspect when
- it held more than HELD_FLOOR_MIB of memory at 0 % utilisation for the whole window (the
  source's ``idle_held_mib``: min_over_time(FB_USED) where max_over_time(GPU_UTIL) is 0, and
  the series is at least as old as the window), or
- it reported an Xid in the window (``last_xid`` non-zero), named from the Xid catalogue
  (console/diagnosis/xid.py).

A node's rank is its worst GPU's: a critical or high Xid (reset, reboot) 3, memory held at 0 %
2, any other Xid 1, nothing 0. Nodes come suspects first (higher rank first), then by hostname.
The suspicion text names the GPUs and how much: "GPU 3: 71.2 GiB held at 0% for 10 min"; GPUs
with the same words share them, the amount said per GPU ("GPUs 0-3: 86.0 GiB each at 0% for 5 s").

For ``snapshot --json`` and ``--fail-on``, ``fleet_findings`` states the same as findings: an
``idle-memory`` finding (high) per node with memory held at 0 %, an ``xid`` finding per Xid code
with the catalogue's severity.
"""
from __future__ import annotations

import dataclasses
from typing import Iterable

from console.diagnosis.xid import UNKNOWN, XIDS
from console.model import Finding, FleetGpu, FleetNode, FleetSnapshot
from console.sources.prometheus.queries import IDLE_FLOOR_MIB

#: memory at or below this (MiB) is what an idle GPU keeps anyway (driver, persistence mode): the
#: source's idle query leaves such GPUs out already
HELD_FLOOR_MIB = IDLE_FLOOR_MIB
RANK_XID_SEVERE, RANK_HELD, RANK_XID = 3, 2, 1
#: at most this many groups of GPUs are named in one node's suspicion line (then "and N more GPUs")
NAMED_GROUPS = 3


def window_words(seconds: float | None) -> str:
    """600 -> "10 min", 5 -> "5 s", 9000 -> "2.5 h"."""
    if seconds is None:
        return "the window"
    if seconds < 120:
        return f"{seconds:g} s"
    if seconds < 2 * 3600:
        return f"{seconds / 60:.3g} min"
    return f"{seconds / 3600:.3g} h"


def _gib(mib: float) -> str:
    return f"{mib / 1024:.1f} GiB"


def _gpu_label(g: FleetGpu) -> str:
    if g.index is not None:
        return str(g.index)
    return g.uuid or "?"


def gpu_list(labels: list[str]) -> str:
    """["0", "1", "2", "5"] -> "GPUs 0-2, 5"; one -> "GPU 3"."""
    if len(labels) == 1:
        return f"GPU {labels[0]}"
    out: list[str] = []
    run: list[int] = []

    def flush() -> None:
        if run:
            out.append(f"{run[0]}-{run[-1]}" if len(run) > 2 else ", ".join(map(str, run)))
            run.clear()
    for label in labels:
        if label.isdecimal() and (not run or int(label) == run[-1] + 1):
            run.append(int(label))
            continue
        flush()
        if label.isdecimal():
            run.append(int(label))
        else:
            out.append(label)
    flush()
    return "GPUs " + ", ".join(out)


def idle_held(g: FleetGpu) -> float | None:
    """MiB held at 0 % for the whole window above the floor, else None."""
    if g.idle_held_mib is not None and g.idle_held_mib > HELD_FLOOR_MIB:
        return g.idle_held_mib
    return None


#: the words after a GPU's held memory; a group of GPUs sharing them says "each" instead (the
#: amount is per GPU, not the group's total; as short, so the table's column keeps its width)
_HELD = " held at 0%"


def _group_words(words: str, gpus: int) -> str:
    return words.replace(_HELD, " each at 0%", 1) if gpus > 1 else words


def gpu_suspicion(g: FleetGpu, window_s: float | None) -> tuple[int, str] | None:
    """(rank, words without the GPU's name) for one GPU, or None when nothing is suspect."""
    parts: list[str] = []
    rank = 0
    held = idle_held(g)
    if held is not None:
        parts.append(f"{_gib(held)}{_HELD} for {window_words(window_s)}")
        rank = RANK_HELD
    if g.last_xid:
        info = XIDS.get(g.last_xid, UNKNOWN)
        parts.append(f"Xid {g.last_xid} ({info.title})")
        rank = max(rank, RANK_XID_SEVERE if info.severity in ("high", "critical") else RANK_XID)
    if not parts:
        return None
    return rank, ", ".join(parts)


def node_suspicion(node: FleetNode, window_s: float | None) -> FleetNode:
    groups: dict[str, tuple[int, list[str]]] = {}
    for g in node.gpus:
        found = gpu_suspicion(g, window_s)
        if found is not None:
            rank, words = found
            groups.setdefault(words, (rank, []))[1].append(_gpu_label(g))
    if not groups:
        return dataclasses.replace(node, suspicion=None, suspicion_rank=0)
    ordered = sorted(groups.items(), key=lambda kv: -kv[1][0])        # stable: GPU order within a rank
    text = "; ".join(f"{gpu_list(labels)}: {_group_words(words, len(labels))}" for words, (_r, labels) in ordered[:NAMED_GROUPS])
    rest = sum(len(labels) for _w, (_r, labels) in ordered[NAMED_GROUPS:])
    if rest:
        text += f"; and {rest} more GPU{'s' if rest != 1 else ''}"
    return dataclasses.replace(node, suspicion=text, suspicion_rank=max(r for r, _ in groups.values()))


def rank_nodes(nodes: Iterable[FleetNode]) -> tuple[FleetNode, ...]:
    """Suspects first (higher rank first), then by hostname."""
    return tuple(sorted(nodes, key=lambda n: (-n.suspicion_rank, n.hostname)))


def assess(snapshot: FleetSnapshot) -> FleetSnapshot:
    """The snapshot with every node's suspicion set, suspects first."""
    judged = (node_suspicion(n, snapshot.window_s) for n in snapshot.nodes)
    return dataclasses.replace(snapshot, nodes=rank_nodes(judged))


def suspects(snapshot: FleetSnapshot) -> list[FleetNode]:
    return [n for n in snapshot.nodes if n.suspicion_rank > 0]


def fleet_findings(node: FleetNode, window_s: float | None) -> list[Finding]:
    """The node's suspicion as findings (``snapshot --json``, ``--fail-on``)."""
    out: list[Finding] = []
    held = [(g, idle_held(g)) for g in node.gpus]
    held = [(g, mib) for g, mib in held if mib is not None]
    if held:
        labels = [_gpu_label(g) for g, _ in held]
        total = sum(mib for _, mib in held)
        out.append(Finding(
            kind="idle-memory", severity="high",
            summary=(f"{gpu_list(labels)} held {_gib(total)}{' in all' if len(held) > 1 else ''} at 0% "
                     f"utilisation for {window_words(window_s)}"),
            next_step="Open the node (SSH) to see who holds the memory: a hung job, an orphan, a zombie",
            gpus=tuple(g.index for g, _ in held if g.index is not None),
            reason="memory held with zero utilisation for the whole window",
            evidence={"held_mib": {_gpu_label(g): mib for g, mib in held}, "window_s": window_s}))
    by_code: dict[int, list[FleetGpu]] = {}
    for g in node.gpus:
        if g.last_xid:
            by_code.setdefault(g.last_xid, []).append(g)
    for code, gpus in sorted(by_code.items()):
        info = XIDS.get(code, UNKNOWN)
        out.append(Finding(
            kind="xid", severity=info.severity,
            summary=f"{gpu_list([_gpu_label(g) for g in gpus])}: Xid {code} ({info.title})",
            next_step=info.meaning, gpus=tuple(g.index for g in gpus if g.index is not None),
            reason="DCGM_FI_DEV_XID_ERRORS in the window", evidence={"xid": code}))
    return out
