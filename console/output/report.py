"""`gpu-incident snapshot` without --json: a plain-text report for a terminal or a ticket."""
from __future__ import annotations

from typing import Sequence

from console.model import NodeSnapshot, severity_rank
from console.textsafe import printable
from console.output.rows import gpu_holders   # pure (no Textual): the console's own definition of a holder


def snapshot_report(snaps: Sequence[NodeSnapshot], width: int = 100) -> str:
    lines: list[str] = []
    for snap in snaps:
        head = printable(snap.name)
        if snap.error:
            lines.append(f"{head}: ✖ {printable(snap.error)}")
        else:
            used = sum(g.memory_used_mib or 0 for g in snap.gpus)
            total = sum(g.memory_total_mib or 0 for g in snap.gpus)
            probe = f", probe {snap.probe_ms:.0f} ms" if snap.probe_ms is not None else ""
            lines.append(f"{head}: {len(snap.gpus)} GPUs, {used} / {total} MiB used{probe}")
        for w in snap.warnings:
            lines.append(f"  ⚠ {printable(w, width)}")
        for g in snap.gpus:
            holders = gpu_holders(snap, g.index)
            used = "N/A" if g.memory_used_mib is None else f"{g.memory_used_mib}MiB"
            total = "N/A" if g.memory_total_mib is None else f"{g.memory_total_mib}MiB"
            lines.append(f"  GPU {g.index}  {used:>9} / {total:<9} {len(holders):>3} holders  "
                         f"{printable(g.name, 48)}")
        for f in sorted(snap.findings, key=lambda f: -severity_rank(f.severity)):
            lines.append(f"  {f.severity.upper():<8} {f.kind}: {printable(f.summary)}")
            if f.next_step:
                lines.append(f"           → {printable(f.next_step)}")
        lines.append("")
    return "\n".join(lines)
