"""Which fleet nodes are suspect, and why. Pure: a FleetSnapshot in, the same with each node's
``suspicion`` and ``suspicion_rank`` set and the nodes sorted, out.

The rule (README "Fleet"): a GPU is suspect when
- it held more than HELD_FLOOR_MIB of memory at 0 % utilisation for the whole window (the
  source's ``idle_held_mib``: min_over_time(FB_USED) where max_over_time(GPU_UTIL) is 0, and
  the series is at least as old as the window), or
- it reported an Xid in the window (``last_xid`` non-zero), named from the Xid catalogue
  (console/diagnosis/xid.py).

A node's rank is its worst GPU's: a critical or high Xid (reset, reboot) 3, memory held at 0 %
2, any other Xid 1, nothing 0. Nodes come suspects first (higher rank first), then by hostname.
The suspicion text names the GPUs and how much: "GPU 3: 71.2 GiB held at 0% for 10 min".
"""
from __future__ import annotations

import dataclasses
from typing import Iterable

from console.diagnosis.xid import XIDS, UNKNOWN
from console.model import FleetGpu, FleetNode, FleetSnapshot

#: memory at or below this (MiB) is what an idle GPU keeps anyway (driver, persistence mode)
HELD_FLOOR_MIB = 1024
RANK_XID_SEVERE, RANK_HELD, RANK_XID = 3, 2, 1
#: at most this many GPUs are named in one node's suspicion line (then "and N more")
NAMED_GPUS = 4


def window_words(seconds: float | None) -> str:
    """600 -> "10 min", 5 -> "5 s", 5400 -> "1.5 h"."""
    if seconds is None:
        return "the window"
    if seconds < 120:
        return f"{seconds:g} s"
    if seconds < 2 * 3600:
        return f"{seconds / 60:.3g} min"
    return f"{seconds / 3600:.3g} h"


def _gib(mib: float) -> str:
    return f"{mib / 1024:.1f} GiB"


def _gpu_name(g: FleetGpu) -> str:
    if g.index is not None:
        return f"GPU {g.index}"
    return f"GPU {g.uuid}" if g.uuid else "GPU ?"


def gpu_suspicion(g: FleetGpu, window_s: float | None) -> tuple[int, str] | None:
    """(rank, words) for one GPU, or None when nothing about it is suspect."""
    parts: list[str] = []
    rank = 0
    if g.idle_held_mib is not None and g.idle_held_mib > HELD_FLOOR_MIB:
        parts.append(f"{_gib(g.idle_held_mib)} held at 0% for {window_words(window_s)}")
        rank = RANK_HELD
    if g.last_xid:
        info = XIDS.get(g.last_xid, UNKNOWN)
        parts.append(f"Xid {g.last_xid} ({info.title})")
        rank = max(rank, RANK_XID_SEVERE if info.severity in ("high", "critical") else RANK_XID)
    if not parts:
        return None
    return rank, f"{_gpu_name(g)}: {', '.join(parts)}"


def node_suspicion(node: FleetNode, window_s: float | None) -> FleetNode:
    found = [s for s in (gpu_suspicion(g, window_s) for g in node.gpus) if s is not None]
    if not found:
        return dataclasses.replace(node, suspicion=None, suspicion_rank=0)
    rank = max(r for r, _ in found)
    ordered = [w for _, w in sorted(found, key=lambda rw: -rw[0])]     # stable: by GPU within a rank
    text = "; ".join(ordered[:NAMED_GPUS])
    if len(ordered) > NAMED_GPUS:
        text += f"; and {len(ordered) - NAMED_GPUS} more GPUs"
    return dataclasses.replace(node, suspicion=text, suspicion_rank=rank)


def rank_nodes(nodes: Iterable[FleetNode]) -> tuple[FleetNode, ...]:
    """Suspects first (higher rank first), then by hostname."""
    return tuple(sorted(nodes, key=lambda n: (-n.suspicion_rank, n.hostname)))


def assess(snapshot: FleetSnapshot) -> FleetSnapshot:
    """The snapshot with every node's suspicion set, suspects first."""
    judged = (node_suspicion(n, snapshot.window_s) for n in snapshot.nodes)
    return dataclasses.replace(snapshot, nodes=rank_nodes(judged))


def suspects(snapshot: FleetSnapshot) -> list[FleetNode]:
    return [n for n in snapshot.nodes if n.suspicion_rank > 0]
