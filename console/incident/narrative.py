"""The postmortem's story: the timeline of hypotheses, checks and actions as a reader takes it in
(one line each, at its time since the incident began, an action with what it rested on and what
came of it), and the verdicts with their reasons. The record below it in the postmortem
(console/incident/export.py) has every entry whole; each line here names its entry (#N).

Pure: reads timeline entries only.
"""
from __future__ import annotations

import re
from typing import Sequence

from console.incident.consoles import is_start
from console.incident.grounds import grounds
from console.incident.readings import is_wait, wait_span, when
from console.incident.summary import offset
from console.incident.timeline import hypothesis_label, hypothesis_numbers, outcomes
from console.incident.verdicts import reasons
from console.model import TimelineEntry
from console.textsafe import markdown_text, one_line

INLINE_COMMAND = 160       # commands longer than this are left to the record


def _line(text: object) -> str:
    """An entry's words in Markdown prose: untrusted (a process name may be a link), so escaped."""
    return markdown_text(text or "")


def without_title(outcome: TimelineEntry, action: TimelineEntry) -> str:
    """An outcome's words without its action's title in front ("sent to 5 of 5; …")."""
    text, title = one_line(outcome.text or ""), one_line(action.text or "")
    return _line(text[len(title) + 2:] if title and text.startswith(title + ": ") else text)


def _command(e: TimelineEntry) -> str:
    lines = [ln.strip() for ln in (e.command or "").splitlines() if ln.strip()]
    if not lines or any("`" in ln for ln in lines) or sum(len(ln) for ln in lines) > INLINE_COMMAND:
        return ""
    return ": " + ", ".join(f"`{one_line(ln)}`" for ln in lines)     # a code span: no markup inside


def _at(e: TimelineEntry, start: float | None) -> str:
    at = when(e)
    span = wait_span(e)
    if at is None or start is None:
        return f"**{_line(e.ts)}**"
    if span is not None and span[1] - span[0] >= 1:
        return f"**{offset(span[0] - start)}–{offset(span[1] - start)}**"
    return f"**{offset(at - start)}**"


def timeline_lines(entries: Sequence[TimelineEntry], start: float | None) -> list[str]:
    """The Timeline section (heading included)."""
    out = ["## Timeline", ""]
    if start is not None:
        out += [f"T+ is the time since the first entry ({_line(entries[0].ts)}); #N names the entry in the "
                "Record below, where every output is kept.", ""]
    numbers = hypothesis_numbers(entries)
    done = outcomes(entries)
    actions = {e.seq: e for e in entries if e.kind == "action"}
    shown = {id(o) for a, o in done.items() if a in actions}     # said under their action
    for e in in_shown_order(entries):
        if id(e) in shown or is_start(e):      # a console starting is no event of the incident
            continue
        node = f" on {_line(e.node)}" if e.node else ""
        at = _at(e, start)
        if e.kind == "hypothesis":
            out.append(f"- {at} hypothesis **{hypothesis_label(numbers, e.seq)}**{node}: {_line(e.text)} (#{e.seq})")
        elif e.kind == "check":
            name, _, said = _line(e.text).partition(": ")
            what = "**wait**" if is_wait(e) else f"check **{name}**"
            out.append(f"- {at} {what}{node}: {said or _line(e.text)} (#{e.seq})")
        elif e.kind == "verdict":
            on, why = ((f"{hypothesis_label(numbers, e.hypothesis)} ", "; its reasons under Verdicts")
                       if e.hypothesis is not None else ("", f": {_line(e.text)}" if e.text else ""))
            out.append(f"- {at} verdict: {on}**{_line(e.verdict)}** (#{e.seq}{why})")
        elif e.kind == "action":
            out += _action(entries, e, done.get(e.seq), start, numbers)
        elif e.kind == "observation" and isinstance(e.action, int) and e.action in actions:
            out.append(f"- {at} after #{e.action} ({_line(actions[e.action].text)}): {_line(reworded(e.text))} "
                       f"(#{e.seq})")
        elif e.kind == "observation":
            out.append(f"- {at} {_line(e.text)} (#{e.seq})")
        else:
            out.append(f"- {at} {_line(e.kind)}{node}: {_line(e.text)} (#{e.seq})")
    return out + [""]


def in_shown_order(entries: Sequence[TimelineEntry]) -> list[TimelineEntry]:
    """The entries by the moment the Timeline shows for each — a wait at its start, not at its
    end when it was written — so that what happened during a wait is listed after it began;
    the file's order where the moments are equal or unknown."""
    def moment(pair: tuple[int, TimelineEntry]) -> tuple[float, int]:
        i, e = pair
        span = wait_span(e)
        at = span[0] if span is not None else when(e)
        return (at if at is not None else float("-inf"), i)
    if any(when(e) is None for e in entries):
        return list(entries)          # a hand-edited file: its own order
    return [e for _, e in sorted(enumerate(entries), key=moment)]


def reworded(text: str) -> str:
    """The action layer's "targets 9 still running" as a reader says it: "9 targets still running"."""
    text = re.sub(r"\btargets (\d+) ", r"\1 targets ", text)
    return re.sub(r"\btargets all ", "all targets ", text)


def _action(entries: Sequence[TimelineEntry], e: TimelineEntry, outcome: TimelineEntry | None,
            start: float | None, numbers: dict[int, int]) -> list[str]:
    node = f" on {_line(e.node)}" if e.node else ""
    why = f", for {hypothesis_label(numbers, e.hypothesis)}" if e.hypothesis is not None else ""
    out = [f"- {_at(e, start)} **action: {_line(e.text)}**{node}{why} (#{e.seq}, by {_line(e.by)}){_command(e)}"]
    out += [f"  - rested on: {_line(g)}" for g in grounds(entries, e)]
    if outcome is not None:
        out.append(f"  - outcome ({_at(outcome, start).strip('*')}, #{outcome.seq}): "
                   f"{reworded(without_title(outcome, e))}")
    return out


def verdict_lines(entries: Sequence[TimelineEntry]) -> list[str]:
    """The Verdicts section: every hypothesis, its verdict and the reasons for it."""
    hyps = [e for e in entries if e.kind == "hypothesis"]
    if not hyps:
        return []
    numbers = hypothesis_numbers(entries)
    out = ["## Verdicts", ""]
    for h in hyps:
        verdicts = [e for e in entries if e.kind == "verdict" and e.hypothesis == h.seq]
        last = verdicts[-1] if verdicts else None
        out.append(f"- {hypothesis_label(numbers, h.seq)} {_line(h.text)} — **{last.verdict if last else 'open'}**"
                   + (f" (#{last.seq}, {_line(last.by)})" if last else ""))
        out += [f"  - {_line(r)}" for r in (reasons(entries, last) if last else [])]
    return out + [""]
