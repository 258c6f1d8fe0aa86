"""The console's own diagnosis in the postmortem: its findings at their worst, with the evidence
each rested on, and how they changed over the incident.

The session writes the findings into the timeline (console/session/node_record.py): a node's
first reading carries them (``findings``), and so does each observation of a change ("findings
on gpu07: zombie (critical) new"). Files written before there was a ``findings`` field still
hold the findings the gate, the watch and the session noted ("finding critical xid: …"): those
are read instead. Pure: reads timeline entries only.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from console.incident.readings import when
from console.incident.summary import offset
from console.model import TimelineEntry, severity_rank
from console.textsafe import markdown_text

#: a note of a finding, as the gate, the watch and the session write one
_NOTED = re.compile(r"^finding (info|low|high|critical) (\S+): (.*?)(?: — next: .*)?$", re.S)
#: evidence keys a reader gains nothing from (repeated elsewhere, or epoch seconds)
_QUIET = ("pids", "gpus", "since", "processes", "threads")


@dataclass(frozen=True)
class Seen:
    """One finding as one entry recorded it."""
    node: str | None
    kind: str
    severity: str
    summary: str
    evidence: Mapping[str, Any]
    seq: int
    at: float | None


def _from_entry(e: TimelineEntry) -> list[Seen]:
    at = when(e)
    if e.findings is not None:
        out = []
        for f in e.findings:
            if not isinstance(f, Mapping):
                continue
            raw = f.get("evidence")
            evidence: Mapping[str, Any] = raw if isinstance(raw, Mapping) else {}
            out.append(Seen(e.node, str(f.get("kind") or "?"), str(f.get("severity") or "?"),
                            str(f.get("summary") or ""), evidence, e.seq, at))
        return out
    if e.kind == "note":
        m = _NOTED.match(e.text or "")
        if m:
            return [Seen(e.node, m.group(2), m.group(1), m.group(3), {}, e.seq, at)]
    return []


def seen(entries: Sequence[TimelineEntry]) -> list[Seen]:
    return [s for e in entries for s in _from_entry(e)]


def worst(entries: Sequence[TimelineEntry]) -> list[Seen]:
    """Per node and kind, the finding when it first reached its worst (the highest severity; a
    record with its evidence over a note of the same finding), the worst first."""
    best: dict[tuple[str | None, str], Seen] = {}
    for s in seen(entries):
        key = (s.node, s.kind)
        old = best.get(key)
        if old is None or severity_rank(s.severity) > severity_rank(old.severity) or (
                severity_rank(s.severity) == severity_rank(old.severity) and s.evidence and not old.evidence):
            best[key] = s
    return sorted(best.values(), key=lambda s: (-severity_rank(s.severity), s.node or "", s.seq))


def changes(entries: Sequence[TimelineEntry]) -> list[TimelineEntry]:
    """The entries that recorded the findings (the first reading, each change)."""
    return [e for e in entries if e.findings is not None]


def evidence_text(evidence: Mapping[str, Any]) -> str:
    """"wchan _nv043417rm, threads_in_d 8, parent 72169" (escaped: it may hold a process's words)."""
    parts = []
    for key, value in evidence.items():
        if key in _QUIET or value in (None, [], ""):
            continue
        shown = ", ".join(str(v) for v in value) if isinstance(value, list) else str(value)
        parts.append(f"{key} {shown}")
    return markdown_text("; ".join(parts))


def _pids(e: TimelineEntry, s: Seen) -> str:
    for f in e.findings or ():
        if isinstance(f, Mapping) and f.get("kind") == s.kind and isinstance(f.get("pids"), list):
            pids = [str(p) for p in f["pids"]]
            npids = f.get("npids")
            more = npids if isinstance(npids, int) else len(pids)
            return ", ".join(pids) + (f" and {more - len(pids)} more" if more > len(pids) else "")
    return ""


def finding_lines(entries: Sequence[TimelineEntry], start: float | None) -> list[str]:
    """The postmortem's "What the console found" section (heading included); [] when the
    timeline holds no finding at all."""
    found = worst(entries)
    if not found:
        return []
    by_seq = {e.seq: e for e in entries}

    def at(s_at: float | None, seq: int) -> str:
        return f"{offset(s_at - start)}, #{seq}" if s_at is not None and start is not None else f"#{seq}"
    out = ["## What the console found", "",
           "Its own diagnosis, each finding at its worst with the evidence it rested on:", ""]
    for s in found:
        node = f" on {markdown_text(s.node)}" if s.node else ""
        out.append(f"- **{markdown_text(s.severity)} {markdown_text(s.kind)}**{node} ({at(s.at, s.seq)}): "
                   f"{markdown_text(s.summary)}")
        pids = _pids(by_seq[s.seq], s) if s.seq in by_seq else ""
        if pids:
            out.append(f"  - PIDs: {pids}")
        said = evidence_text(s.evidence)
        if said:
            out.append(f"  - evidence: {said}")
    steps = changes(entries)
    if steps:
        out += ["", "How they changed:", ""]
        for e in steps:
            out.append(f"- **{at(when(e), e.seq)}** {markdown_text(_change_words(e))}")
    return out + [""]


def _change_words(e: TimelineEntry) -> str:
    if e.text.startswith("findings on "):
        return e.text
    kinds = [f"{f.get('kind')} ({f.get('severity')})" for f in e.findings or () if isinstance(f, Mapping)]
    node = f" of {e.node}" if e.node else ""
    return f"first reading{node}: " + (", ".join(kinds) if kinds else "no finding")
