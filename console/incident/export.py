"""Timeline exports: Markdown postmortem and a plain-text listing.

An action and its outcome (the `observation` with ``outcome: true`` naming it) are shown as
one block at the action's place — when it was sent — with the outcome's rc, output, memory
and time; actions sent on the same node before that outcome was seen are named in the block,
so a later SIGKILL's effect is never read as the SIGTERM's.
"""
from __future__ import annotations

from typing import Sequence

import re

from console.incident.timeline import outcomes
from console.model import TimelineEntry
from console.textsafe import one_line, printable


def _clean(text: str | None) -> str:
    """Untrusted text (process names, command output) with control characters and escape
    sequences shown as \\xNN, never sent raw to a terminal or a Markdown viewer; lines kept."""
    return printable(text or "", keep="\t\n")


def _one_line(text: str | None) -> str:
    return one_line(text or "")


def _fence(body: str) -> str:
    """A code fence longer than any run of backticks inside the block."""
    longest = max((len(m) for m in re.findall(r"`+", body)), default=0)
    return "`" * max(3, longest + 1)


def _memory(m) -> str:
    if not m:
        return ""
    return ", ".join(f"GPU{k} {v if v is not None else '?'} MiB" for k, v in m.items())


def _freed(e: TimelineEntry) -> str:
    return (f"freed {e.freed_mib} MiB" + (f" in {e.seconds_to_free:.1f} s" if e.seconds_to_free is not None else "")
            if e.freed_mib is not None else "")


def _meanwhile(entries: Sequence[TimelineEntry], action: TimelineEntry, outcome: TimelineEntry) -> list[TimelineEntry]:
    """Other actions on the action's node sent after it and before its outcome was written."""
    try:
        start, end = entries.index(action), entries.index(outcome)
    except ValueError:
        return []
    return [e for e in entries[start + 1:end] if e.kind == "action" and e.node == action.node]


def _merged(entries: Sequence[TimelineEntry]) -> tuple[dict[int, TimelineEntry], set[int]]:
    """({action seq: outcome}, ids of the outcome entries shown inside their action's block)."""
    found = outcomes(entries)
    actions = {e.seq for e in entries if e.kind == "action"}
    shown = {a: o for a, o in found.items() if a in actions}
    return shown, {id(o) for o in shown.values()}


def as_text(entries: Sequence[TimelineEntry]) -> str:
    lines = []
    merged, inside = _merged(entries)
    for e in entries:
        if id(e) in inside:
            continue
        head = f"#{e.seq:<4} {_one_line(e.ts)}  {_one_line(e.kind):<11} {_one_line(e.node) or '-':<12} {_one_line(e.by)}"
        lines.append(head)
        if e.text:
            lines.append(f"      {_one_line(e.text)}")
        if e.command:
            lines.append(f"      $ {_one_line(e.command)}" + (f"   (rc {e.rc})" if e.rc is not None else ""))
        if e.freed_mib is not None:
            lines.append(f"      {_freed(e)}")
        if e.verdict:
            lines.append(f"      verdict: {e.verdict}")
        out = merged.get(e.seq) if e.kind == "action" else None
        if out is not None:
            lines.append(f"      outcome #{out.seq} {_one_line(out.ts)}"
                         + (f" (rc {out.rc})" if out.rc is not None else "") + f": {_one_line(out.text)}")
            if out.freed_mib is not None:
                lines.append(f"      {_freed(out)}")
            for m in _meanwhile(entries, e, out):
                lines.append(f"      sent meanwhile: #{m.seq} {_one_line(m.text)}")
    return "\n".join(lines) + ("\n" if lines else "")


def as_markdown(entries: Sequence[TimelineEntry], *, incident_id: str = "") -> str:
    out = [f"# Incident {incident_id}".rstrip(), ""]
    if entries:
        people = sorted({e.by for e in entries})
        nodes = sorted({e.node for e in entries if e.node})
        out += [f"- Started: {_one_line(entries[0].ts)}", f"- Last entry: {_one_line(entries[-1].ts)}",
                f"- Nodes: {', '.join(map(_one_line, nodes)) or '-'}",
                f"- By: {', '.join(map(_one_line, people))}", ""]
    hyps = [e for e in entries if e.kind == "hypothesis"]
    if hyps:
        out += ["## Hypotheses", ""]
        for h in hyps:
            verdicts = [e for e in entries if e.kind == "verdict" and e.hypothesis == h.seq]
            v = verdicts[-1].verdict if verdicts else "open"
            out.append(f"- #{h.seq} {_one_line(h.text)} — **{v}**")
        out.append("")
    out += ["## Timeline", ""]
    merged, inside = _merged(entries)
    for e in entries:
        if id(e) in inside:
            continue
        result = merged.get(e.seq) if e.kind == "action" else None
        out.append(f"### #{e.seq} {_one_line(e.kind)} — {_one_line(e.ts)} — {_one_line(e.node)} "
                   f"({_one_line(e.by)})".replace(" —  (", " — ("))
        if e.text:
            out += ["", _one_line(e.text)]
        if e.targets:
            out += ["", "- targets: " + ", ".join(_target(t) for t in e.targets)]
        shown = result or e           # the outcome carries rc, output, memory after and freed
        if e.command:
            block = [f"$ {_clean(e.command)}", *_clean(shown.output).splitlines()[:40]]
            fence = _fence("\n".join(block))
            out += ["", fence, *block, fence]
            if shown.rc is not None:
                out.append(f"exit status {shown.rc}")
        if result is not None:
            out += ["", f"Outcome (#{result.seq}, {_one_line(result.ts)}): {_one_line(result.text)}"]
            for m in _meanwhile(entries, e, result):
                out.append(f"- sent meanwhile: #{m.seq} {_one_line(m.text)} ({_one_line(m.ts)})")
        before = e.gpu_memory_before or shown.gpu_memory_before
        if before or shown.gpu_memory_after:
            out += ["", f"- before: {_memory(before)}", f"- after: {_memory(shown.gpu_memory_after)}"]
        if shown.freed_mib is not None:
            out.append(f"- {_freed(shown).replace('freed ', 'freed: ', 1)}")
        if e.verdict:
            out.append(f"- verdict: {e.verdict}" + (f" on #{e.hypothesis}" if e.hypothesis else ""))
        out.append("")
    return "\n".join(out)


def _target(t) -> str:
    pid = t.get("pid") if isinstance(t, dict) else None
    name = t.get("name") if isinstance(t, dict) else None
    return f"{_one_line(str(pid))}" + (f" ({_one_line(str(name))})" if name else "")
