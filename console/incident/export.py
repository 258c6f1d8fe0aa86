"""Timeline exports: Markdown postmortem and a plain-text listing."""
from __future__ import annotations

from typing import Sequence

import re

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


def as_text(entries: Sequence[TimelineEntry]) -> str:
    lines = []
    for e in entries:
        head = f"#{e.seq:<4} {_one_line(e.ts)}  {_one_line(e.kind):<11} {_one_line(e.node) or '-':<12} {_one_line(e.by)}"
        lines.append(head)
        if e.text:
            lines.append(f"      {_one_line(e.text)}")
        if e.command:
            lines.append(f"      $ {_one_line(e.command)}" + (f"   (rc {e.rc})" if e.rc is not None else ""))
        if e.freed_mib is not None:
            lines.append(f"      freed {e.freed_mib} MiB" +
                         (f" in {e.seconds_to_free:.1f} s" if e.seconds_to_free is not None else ""))
        if e.verdict:
            lines.append(f"      verdict: {e.verdict}")
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
    for e in entries:
        out.append(f"### #{e.seq} {_one_line(e.kind)} — {_one_line(e.ts)} — {_one_line(e.node)} "
                   f"({_one_line(e.by)})".replace(" —  (", " — ("))
        if e.text:
            out += ["", _one_line(e.text)]
        if e.command:
            block = [f"$ {_clean(e.command)}", *_clean(e.output).splitlines()[:40]]
            fence = _fence("\n".join(block))
            out += ["", fence, *block, fence]
            if e.rc is not None:
                out.append(f"exit status {e.rc}")
        if e.gpu_memory_before or e.gpu_memory_after:
            out += ["", f"- before: {_memory(e.gpu_memory_before)}", f"- after: {_memory(e.gpu_memory_after)}"]
        if e.freed_mib is not None:
            out.append(f"- freed: {e.freed_mib} MiB" +
                       (f" in {e.seconds_to_free:.1f} s" if e.seconds_to_free is not None else ""))
        if e.verdict:
            out.append(f"- verdict: {e.verdict}" + (f" on #{e.hypothesis}" if e.hypothesis else ""))
        out.append("")
    return "\n".join(out)
