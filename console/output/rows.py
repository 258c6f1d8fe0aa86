"""What the tables show, computed from snapshots. Pure: no Textual here, so it is unit-testable."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import NamedTuple, Sequence

from console.diagnosis.history import memo
from console.model import NodeSnapshot, Proc

#: the most process rows a table holds at once. A node may run 100,000 processes (a real kernel
#: allows ~4M PIDs); the table shows the first PROC_ROW_LIMIT in a stable order, GPU-related
#: trees first, and one more row saying how many are not shown; `/` filters all of them. The
#: process panel draws only the rows in view (console/ui/virtual_table.py), so a real-size node's
#: 2,000 processes are all there; what the limit bounds is the walk of the tree (~2 ms a 1,000).
PROC_ROW_LIMIT = 5000
#: ancestors walked up from one process (a corrupt table may have a cycle)
MAX_DEPTH = 64


def fmt_mib(value: int | None) -> str:
    return "N/A" if value is None else f"{value}MiB"


class ProcRow(NamedTuple):
    """One row of the process panel. A tuple, not a dataclass: a real-size node's view makes
    2,000 of them, and a frozen dataclass's constructor cost ``a`` 8 ms of a key's frame."""
    key: str            # "node:pid"
    node: str
    proc: Proc
    depth: int


@dataclass(frozen=True)
class ProcView:
    """The rows of one node's process table: at most ``limit`` of the ``matched`` processes the
    view holds (``total`` on the node)."""
    rows: tuple[ProcRow, ...]
    matched: int
    total: int

    @property
    def hidden(self) -> int:
        return self.matched - len(self.rows)


def interesting(snap: NodeSnapshot) -> set[int]:
    """PIDs worth showing by default: GPU holders, zombies, threads in D, and their ancestors."""
    return memo(snap, "interesting", _interesting)


def _interesting(snap: NodeSnapshot) -> set[int]:
    procs = snap.processes
    # Proc.is_gpu_holder, spelt out: this runs over every process of every poll
    keep = {p.pid for p in procs if p.gpu_memory_mib or p.device_files or p.state in ("Z", "D") or p.d_threads}
    if not keep:
        return keep
    by_pid = {p.pid: p for p in procs}
    for pid in list(keep):
        seen = 0
        parent = by_pid[pid].ppid if pid in by_pid else 0
        while parent > 1 and parent in by_pid and parent not in keep and seen < MAX_DEPTH:
            keep.add(parent)
            parent = by_pid[parent].ppid
            seen += 1
    return keep


def _matches(p: Proc, needle: str) -> bool:
    return (needle in p.name.lower() or needle in p.cmdline.lower() or needle == str(p.pid)
            or needle == (p.user or "").lower())


def hidden_holders(snap: NodeSnapshot, text_filter: str) -> int:
    """The GPU holders (memory or a device file) a process filter hides: the panel says so."""
    needle = text_filter.lower()
    if not needle:
        return 0
    return sum(1 for p in snap.processes if (p.gpu_memory_mib or p.device_files) and not _matches(p, needle))


@dataclass(frozen=True)
class _Tree:
    """The processes one view holds, as a forest: worked out once per snapshot and view."""
    procs: tuple[Proc, ...]
    roots: tuple[Proc, ...]                 # in display order
    children: dict[int, list[Proc]]         # unsorted: sorted when walked
    related: set[int]
    holding: set[int]                       # GPU holders and their ancestors
    show_all: bool

    def sibling_order(self, p: Proc) -> tuple[bool, bool, int]:
        """All processes: the subtrees with GPU holders, then those with zombies or threads in
        D, then the rest, each in PID order. GPU-related only: PID order (as ps shows them)."""
        if not self.show_all:
            return (False, False, p.pid)
        return (p.pid not in self.holding, p.pid not in self.related, p.pid)


def _tree(snap: NodeSnapshot, show_all: bool, needle: str) -> _Tree:
    related = interesting(snap)
    procs = list(snap.processes) if show_all else [p for p in snap.processes if p.pid in related]
    if needle:
        procs = [p for p in procs if _matches(p, needle)]
    unique: dict[int, Proc] = {}
    for p in procs:
        unique.setdefault(p.pid, p)          # a PID listed twice shows once
    children: dict[int, list[Proc]] = {}
    roots: list[Proc] = []
    for p in unique.values():
        if p.ppid in unique and p.ppid != p.pid:
            children.setdefault(p.ppid, []).append(p)
        else:
            roots.append(p)
    # GPU memory under each process, and which hold a GPU holder: each holder's memory added
    # up its chain of ancestors
    subtree: dict[int, int] = {}
    holding: set[int] = set()
    for p in unique.values():
        if not p.gpu_memory_mib and not p.device_files:
            continue
        mib = p.gpu_memory_total_mib
        node: Proc | None = p
        for _ in range(MAX_DEPTH):
            if node is None or (not mib and node.pid in holding):
                break
            holding.add(node.pid)
            if mib:
                subtree[node.pid] = subtree.get(node.pid, 0) + mib
            node = unique.get(node.ppid) if node.ppid != node.pid else None
    tree = _Tree(procs=tuple(unique.values()), roots=(), children=children, related=related,
                 holding=holding, show_all=show_all)
    # roots: the most GPU memory first (in whole GiB: eight workers holding 74.3 GiB each, a few
    # MiB apart, stay in PID order, TP0 to TP7), then the trees holding devices, then the rest
    roots.sort(key=lambda p: (-(subtree.get(p.pid, 0) // 1024), p.pid not in holding) + tree.sibling_order(p))
    return dataclasses.replace(tree, roots=tuple(roots))


class RowMemory:
    """The rows the last walk of each node's view made, by PID: the next walk reuses a row whose
    process is the same object at the same depth (most of a real-size node's, poll after poll).
    Kept by the view that draws the rows (the process panel, the follower's), one each."""

    def __init__(self) -> None:
        self.last: dict[tuple[str, bool], dict[int, ProcRow]] = {}


def _walk(tree: _Tree, name: str, limit: int | None, memory: RowMemory | None) -> list[ProcRow]:
    """The first ``limit`` rows (None: all), depth first; children are sorted as they are reached,
    so the cost follows the rows made, not the processes held."""
    rows: list[ProcRow] = []
    visited: set[int] = set()
    last = memory.last.get((name, tree.show_all), {}) if memory is not None else {}
    made: dict[int, ProcRow] = {}

    def row(p: Proc, depth: int) -> ProcRow:
        r = last.get(p.pid)
        if r is None or r.proc is not p or r.depth != depth:
            r = ProcRow(f"{name}:{p.pid}", name, p, depth)
        made[p.pid] = r
        return r
    cap = len(tree.procs) if limit is None else limit
    stack: list[tuple[Proc, int]] = [(r, 0) for r in reversed(tree.roots)]
    while stack and len(rows) < cap:
        p, depth = stack.pop()
        if p.pid in visited:
            continue
        visited.add(p.pid)
        rows.append(row(p, depth))
        kids = tree.children.get(p.pid)
        if kids:
            stack.extend((c, depth + 1) for c in sorted(kids, key=tree.sibling_order, reverse=True))
    if len(rows) < cap and len(visited) < len(tree.procs):
        for p in tree.procs:  # cycles (a corrupt table) still show, flat
            if len(rows) >= cap:
                break
            if p.pid not in visited:
                visited.add(p.pid)
                rows.append(row(p, 0))
    if memory is not None:
        memory.last[(name, tree.show_all)] = made
    return rows


def proc_view(snap: NodeSnapshot, *, show_all: bool = False, text_filter: str = "",
              limit: int | None = PROC_ROW_LIMIT, keep: int | None = None,
              memory: RowMemory | None = None) -> ProcView:
    """One node's processes as an indented tree, the subtrees holding the most GPU memory
    first, cut after ``limit`` rows (None: every row).

    GPU-related only (the default): holders, zombies, threads in D and their ancestors, siblings
    in PID order (as ps shows them). ``show_all``: every process, and at every level the
    GPU-related subtrees come before the rest (both in PID order), so the bound never hides a
    holder behind ordinary processes. ``text_filter`` (case-insensitive: name, command line,
    exact PID or user) searches everything the view holds, shown or not. ``keep``: a PID to
    show even past the bound (the selected process: the cursor stays on it), in the last row
    (depth 0: it stands outside its tree); the rows never exceed ``limit``.
    The tree is worked out once per snapshot and view (O(processes)); the rows cost what the
    bound allows."""
    needle = text_filter.lower()
    tree = memo(snap, f"proc-tree:{show_all}:{needle}", lambda s: _tree(s, show_all, needle))
    # once per snapshot and view: a redraw of the same reading (a tag, a resize) walks nothing
    rows = list(memo(snap, f"proc-rows:{show_all}:{needle}:{limit}", lambda s: tuple(_walk(tree, s.name, limit, memory))))
    if keep is not None and rows and len(rows) < len(tree.procs) and all(r.proc.pid != keep for r in rows):
        kept = next((p for p in tree.procs if p.pid == keep), None)
        if kept is not None:
            rows[-1] = ProcRow(key=f"{snap.name}:{kept.pid}", node=snap.name, proc=kept, depth=0)
    return ProcView(rows=tuple(rows), matched=len(tree.procs),
                    total=len(snap.processes) if snap.table_size is None else snap.table_size)


def _holders_by_gpu(snap: NodeSnapshot) -> dict[str, list[Proc]]:
    """{GPU index as a string: processes with memory on it or its device file open}, in /proc
    order, for every GPU at once (one pass over the processes)."""
    out: dict[str, list[Proc]] = {}
    for p in snap.processes:
        if not p.gpu_memory_mib and not p.device_files:
            continue                    # most processes: nothing to add (100,000 of them, each poll)
        keys = set(p.gpu_memory_mib)
        keys.update(str(i) for i in p.device_gpus)
        for key in keys:
            out.setdefault(key, []).append(p)
    return out


def gpu_holders(snap: NodeSnapshot, index: int) -> list[Proc]:
    """Processes with memory on GPU ``index`` or its device file (/dev/nvidiaN) open.
    Worked out once per snapshot for all its GPUs."""
    return list(memo(snap, "holders_by_gpu", _holders_by_gpu).get(str(index), ()))


#: the process panel's orders: the tree (GPU-related trees first), then flat by what matters
SORTS = ("tree", "memory", "pid", "user")


#: how each order reads (the panel's title, the order menu)
ORDER_WORDS = {"tree": "as a tree", "memory": "by GPU memory", "pid": "by PID", "user": "by user"}


def orders() -> tuple[str, ...]:
    """Every order the panel takes: SORTS, and each flat one reversed ("-memory")."""
    return tuple(o for base in SORTS for o in ((base,) if base == "tree" else (base, "-" + base)))


def order_words(order: str) -> str:
    """"by GPU memory", "by GPU memory, reversed", "as a tree"."""
    base = order.removeprefix("-")
    return ORDER_WORDS.get(base, base) + (", reversed" if order.startswith("-") else "")


def sorted_rows(rows: Sequence[ProcRow], order: str) -> tuple[ProcRow, ...]:
    """``rows`` (a proc_view's) in ``order``: "tree" as they are; otherwise flat (depth 0) by GPU
    memory (most first, device holders next), PID, or user then PID; "-memory" (a leading "-")
    the same order reversed."""
    base = order.removeprefix("-")
    if base == "tree" or base not in SORTS:
        return tuple(rows)
    keys = {
        "memory": lambda r: (-r.proc.gpu_memory_total_mib, not r.proc.holds_devices, r.proc.pid),
        "pid": lambda r: r.proc.pid,
        "user": lambda r: (r.proc.user or "~", r.proc.pid),
    }
    return tuple(r._replace(depth=0) for r in sorted(rows, key=keys[base], reverse=order.startswith("-")))
