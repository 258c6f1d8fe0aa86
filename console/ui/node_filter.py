"""`/` on the node table: which nodes a filter keeps, and what the table's title says of the
ones it hides (those failing or with a next step counted: a filter must not hide them unsaid)."""
from __future__ import annotations

from typing import Mapping, Sequence

from console.actions.ladder import top_step
from console.model import NodeSnapshot
from console.textsafe import printable


def node_matches(name: str, snap: NodeSnapshot | None, text_filter: str) -> bool:
    """A part of the node's name, of its error, or of one of its findings' kinds (``/zombie``:
    the nodes with zombies), in any case."""
    needle = text_filter.strip().lower()
    if not needle or needle in name.lower():
        return True
    if snap is None:
        return False
    return needle in (snap.error or "").lower() or any(needle in f.kind.lower() for f in snap.findings)


def counts(snaps: Sequence[NodeSnapshot | None]) -> str:
    """", 1 failing, 3 with a next step": what the hidden nodes need (empty when nothing)."""
    failing = sum(1 for s in snaps if s is not None and s.error)
    stepped = sum(1 for s in snaps if s is not None and not s.error and top_step(s.findings) is not None)
    return (f", {failing} failing" if failing else "") + (f", {stepped} with a next step" if stepped else "")


def node_filter_title(names: Sequence[str], shown: Sequence[str], snapshots: Mapping[str, NodeSnapshot | None],
                      text_filter: str) -> str:
    """``nodes: 3 of 12 match “gpu0” — 9 hidden, 4 with a next step (esc clears)``; empty with no filter."""
    if not text_filter.strip():
        return ""
    kept = set(shown)
    hidden = [n for n in names if n not in kept]
    line = f"nodes: {len(shown)} of {len(names)} match “{printable(text_filter.strip(), 20)}”"
    if hidden:
        line += f" — {len(hidden)} hidden" + counts([snapshots.get(n) for n in hidden])
    return line + " (esc clears)"
