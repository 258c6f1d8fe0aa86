"""What `watch` says of the causes it opens an incident for: one line, a cause that several GPUs
share said once ("idle-memory: GPUs 0-7 hold 74.3 GiB each at 0 % utilisation …"), and the
severity the notification carries."""
from __future__ import annotations

import re
from typing import Protocol, Sequence

from console.diagnosis.text import mib, ranges
from console.model import NodeSnapshot, severity_rank

#: a watch cause is what a person is woken for: at least this severe when no finding says more
CAUSE_SEVERITY = "high"

_PER_GPU = re.compile(r"GPU (\d+) holds (\S+ [GM]iB) (.*)")


class _Cause(Protocol):
    kind: str
    summary: str


def idle_summary(gpu: int, used_mib: int, idle_after: float) -> str:
    return f"GPU {gpu} holds {mib(used_mib)} at 0 % utilisation for more than {idle_after:g} s"


def causes_text(causes: Sequence[_Cause]) -> str:
    """``kind: summary; …``, the per-GPU summaries that say the same of several GPUs merged."""
    groups: dict[tuple[str, str, str], list[int]] = {}
    parts: list[str | tuple[str, str, str]] = []
    for c in causes:
        m = _PER_GPU.fullmatch(c.summary)
        if m is None:
            parts.append(f"{c.kind}: {c.summary}")
            continue
        key = (c.kind, m.group(2), m.group(3))
        if key not in groups:
            groups[key] = []
            parts.append(key)
        groups[key].append(int(m.group(1)))
    out: list[str] = []
    for part in parts:
        if isinstance(part, str):
            out.append(part)
            continue
        kind, amount, rest = part
        gpus = groups[part]
        if len(gpus) == 1:
            out.append(f"{kind}: GPU {gpus[0]} holds {amount} {rest}")
        else:
            out.append(f"{kind}: GPUs {ranges(gpus)} hold {amount} each {rest}")
    return "; ".join(out)


def worst_severity(snap: NodeSnapshot, causes: Sequence[_Cause]) -> str:
    """The most severe of the findings behind these causes, and never below CAUSE_SEVERITY."""
    kinds = {c.kind for c in causes}
    found = [f.severity for f in snap.findings if f.kind in kinds]
    return max(found + [CAUSE_SEVERITY], key=severity_rank)
