"""What the tables show, computed from snapshots. Pure: no Textual here, so it is unit-testable."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from console.diagnosis.history import memo
from console.model import NodeSnapshot, Proc


def fmt_mib(value: int | None) -> str:
    return "N/A" if value is None else f"{value}MiB"


@dataclass(frozen=True)
class ProcRow:
    key: str            # "node:pid"
    node: str
    proc: Proc
    depth: int


def interesting(snap: NodeSnapshot) -> set[int]:
    """PIDs worth showing by default: GPU holders, zombies, threads in D, and their ancestors."""
    by_pid = {p.pid: p for p in snap.processes}
    keep = {p.pid for p in snap.processes
            if p.is_gpu_holder or p.state in ("Z", "D") or p.d_threads}
    for pid in list(keep):
        seen = 0
        parent = by_pid[pid].ppid if pid in by_pid else 0
        while parent > 1 and parent in by_pid and parent not in keep and seen < 64:
            keep.add(parent)
            parent = by_pid[parent].ppid
            seen += 1
    return keep


def proc_rows(snaps: Sequence[NodeSnapshot], *, show_all: bool = False,
              text_filter: str = "") -> list[ProcRow]:
    """Processes as an indented tree, biggest GPU holders first within each level."""
    rows: list[ProcRow] = []
    needle = text_filter.lower()
    for snap in snaps:
        shown = {p.pid for p in snap.processes} if show_all else interesting(snap)
        if needle:
            shown = {p.pid for p in snap.processes if p.pid in shown and
                     (needle in p.name.lower() or needle in p.cmdline.lower() or needle == str(p.pid)
                      or needle == (p.user or "").lower())}
        procs = [p for p in snap.processes if p.pid in shown]
        children: dict[int, list[Proc]] = {}
        for p in procs:
            children.setdefault(p.ppid if p.ppid in shown else -1, []).append(p)

        def weight(p: Proc) -> tuple[int, int]:
            return (-subtree_mib(p), p.pid)

        def subtree_mib(p: Proc, _depth: int = 0) -> int:
            if _depth > 64:
                return 0
            return p.gpu_memory_total_mib + sum(subtree_mib(c, _depth + 1) for c in children.get(p.pid, ()))

        visited: set[int] = set()

        def walk(p: Proc, depth: int) -> None:
            if p.pid in visited:
                return
            visited.add(p.pid)
            rows.append(ProcRow(key=f"{snap.name}:{p.pid}", node=snap.name, proc=p, depth=depth))
            for c in sorted(children.get(p.pid, ()), key=lambda c: c.pid):  # siblings as ps shows them
                walk(c, depth + 1)

        for root in sorted(children.get(-1, ()), key=weight):
            walk(root, 0)
        for p in procs:  # cycles (a corrupt table) still show, flat
            if p.pid not in visited:
                walk(p, 0)
    return rows


def _holders_by_gpu(snap: NodeSnapshot) -> dict[str, list[Proc]]:
    """{GPU index as a string: processes with memory on it or its device file open}, in /proc
    order, for every GPU at once (one pass over the processes)."""
    out: dict[str, list[Proc]] = {}
    for p in snap.processes:
        keys = set(p.gpu_memory_mib)
        keys.update(str(i) for i in p.device_gpus)
        for key in keys:
            out.setdefault(key, []).append(p)
    return out


def gpu_holders(snap: NodeSnapshot, index: int) -> list[Proc]:
    """Processes with memory on GPU ``index`` or its device file (/dev/nvidiaN) open.
    Worked out once per snapshot for all its GPUs."""
    return list(memo(snap, "holders_by_gpu", _holders_by_gpu).get(str(index), ()))
