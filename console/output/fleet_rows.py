"""What the fleet table shows, computed from FleetSnapshots. Pure: no Textual here.

One row per node: its GPUs, memory used/total (GiB, summed over its GPUs), utilisation (the
mean over the GPUs that report it), the last Xid any GPU reported, and why it is suspect.
Suspects first (``FleetNode.suspicion_rank``, higher first), then by hostname. Values a
source did not have are None and show as "-", never as 0.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

from console.diagnosis.fleet import rank_nodes
from console.model import FleetNode, FleetSnapshot


@dataclass(frozen=True)
class FleetRow:
    hostname: str
    gpus: int
    used_gib: float | None
    total_gib: float | None
    util_pct: float | None
    last_xid: int | None
    suspicion: str | None


def fleet_order(nodes: Sequence[FleetNode]) -> list[FleetNode]:
    """Suspects first (higher rank first), then by hostname (console/diagnosis/fleet.py's order)."""
    return list(rank_nodes(nodes))


def matching(nodes: Sequence[FleetNode], text: str) -> list[FleetNode]:
    """The nodes whose hostname contains ``text`` (case-insensitive; empty: all)."""
    needle = text.strip().casefold()
    if not needle:
        return list(nodes)
    return [n for n in nodes if needle in n.hostname.casefold()]


def _finite(values) -> list[float]:
    return [float(v) for v in values if v is not None and math.isfinite(v)]


def fleet_row(node: FleetNode) -> FleetRow:
    used = _finite(g.memory_used_mib for g in node.gpus)
    total = _finite(g.memory_total_mib for g in node.gpus)
    util = _finite(g.utilization_pct for g in node.gpus)
    xids = [g.last_xid for g in node.gpus if g.last_xid]
    return FleetRow(hostname=node.hostname, gpus=len(node.gpus),
                    used_gib=sum(used) / 1024 if used else None,
                    total_gib=sum(total) / 1024 if total else None,
                    util_pct=sum(util) / len(util) if util else None,
                    last_xid=max(xids) if xids else None,
                    suspicion=node.suspicion)


def gib_text(used: float | None, total: float | None) -> str:
    """"612/640": whole GiB (rounded), "-" for what is missing."""
    def one(v: float | None) -> str:
        return "-" if v is None else f"{v:.0f}"
    return f"{one(used)}/{one(total)}"


def pct_text(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}%"


def age_text(seconds: float) -> str:
    """How old data is, as a person says it: "just now", "12 s ago", "3 min ago", "2 h ago"."""
    if not math.isfinite(seconds) or seconds < 1:
        return "just now"
    if seconds < 120:
        return f"{seconds:.0f} s ago"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min ago"
    return f"{seconds / 3600:.0f} h ago"


@dataclass(frozen=True)
class FleetView:
    """What the fleet screen draws: the nodes of the last round that returned any (``shown``),
    and the latest round (``latest``) — when it failed, the table keeps ``shown``'s nodes
    marked stale."""
    shown: FleetSnapshot | None
    latest: FleetSnapshot | None

    @property
    def stale(self) -> bool:
        return (self.latest is not None and self.shown is not None and self.latest is not self.shown)

    @property
    def nodes(self) -> tuple[FleetNode, ...]:
        return self.shown.nodes if self.shown is not None else ()

    @property
    def error(self) -> str | None:
        return self.latest.error if self.latest is not None else None


def next_view(view: FleetView, snap: FleetSnapshot) -> FleetView:
    """A round came in: it replaces the table when it returned nodes or did not fail; a failed
    round without nodes keeps the table's nodes (stale) and says why."""
    if snap.nodes or not snap.error or not view.nodes:
        return FleetView(shown=snap, latest=snap)
    return FleetView(shown=view.shown, latest=snap)


def suspects(nodes: Sequence[FleetNode]) -> int:
    return sum(1 for n in nodes if n.suspicion)


def opened_text(node: FleetNode, source: str) -> str:
    """The timeline's line when a node is opened from the fleet: from where, and why it was
    suspect (or that it was not)."""
    why = f"suspect: {node.suspicion}" if node.suspicion else "not suspect"
    return f"opened {node.hostname} from the fleet ({source}): {why}"
