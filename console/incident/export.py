"""Timeline exports: Markdown postmortem and a plain-text listing.

The postmortem, in the order a team reads it:

- two or three sentences first (console/incident/brief.py: what was stuck and why, what freed
  it, what to change);
- the headline (console/incident/summary.py: nodes, whether it is a demo, how it was detected
  (console/incident/facts.py), what was stuck, when it was first seen held, the root-cause
  verdict, the resolution, the time to free from that first held reading and from the action
  (console/incident/freeing.py), who acted) and, when the console wrote one, the memory chart
  (an SVG beside the Markdown, linked);
- The node and the workload (console/incident/facts.py): GPUs, driver, kernel; owner, commands,
  launcher, Slurm job, container;
- What the console found (console/incident/diagnosis_story.py): its findings at their worst
  with their evidence, and how they changed;
- Impact (console/incident/impact.py): per GPU the memory held and for how long, GPU-hours,
  the total;
- Timeline (console/incident/narrative.py): hypotheses, checks and actions one line each at
  their time since the start, in the order they happened, each action with what it rested on
  (console/incident/grounds.py) and its outcome; Verdicts, each with its reasons
  (console/incident/verdicts.py);
- Action items (console/incident/lessons.py);
- Record, folded whole into one ``<details>`` at the end: every entry whole. Summaries come first: a check shows its digest (holders per
  process, threads in D, memory per read) before its output; a wait's ``::t=S::`` frames are a
  table of one line per read (console/incident/readings.py); outputs longer than a screenful
  are folded (``<details>``) and cut; a command already shown, or echoed by its own output, is
  not repeated; memory readings are written once, GPUs that read the same grouped.

An action and its outcome (the `observation` with ``outcome: true`` naming it) are shown as
one block at the action's place — when it was sent — with the outcome's rc, output, memory
before and after, and time; actions sent on the same node before that outcome was seen are
named in the block, so a later SIGKILL's effect is never read as the SIGTERM's.
"""
from __future__ import annotations

import dataclasses
import re
from typing import Sequence

from console.checks.registry import digest
from console.incident.brief import brief
from console.incident.consoles import attached_elsewhere
from console.incident.diagnosis_story import finding_lines
from console.incident.facts import detection, fact_lines, is_demo
from console.incident.freeing import first_held_text, freeing, time_to_free_text
from console.incident.impact import impact_lines
from console.incident.lessons import action_item_lines
from console.incident.narrative import timeline_lines, verdict_lines
from console.incident.readings import is_wait, memory_text, wait_table, when
from console.incident.summary import Summary, gpu_list, mib, summarize
from console.incident.timeline import hypothesis_label, hypothesis_numbers, outcomes
from console.model import TimelineEntry
from console.textsafe import markdown_text, one_line, printable

FOLD_LINES = 12            # outputs longer than this are folded into <details>
KEEP_LINES = 120           # and cut to this many lines there (the JSON export keeps them whole)
ESCAPED = ("Detected", "Demo")
LONG_COMMAND = 100         # a command longer than this (or of several lines) is shown once, then named


def _clean(text: str | None) -> str:
    """Untrusted text (process names, command output) with control characters and escape
    sequences shown as \\xNN, never sent raw to a terminal or a Markdown viewer; lines kept."""
    return printable(text or "", keep="\t\n")


def _one_line(text: str | None) -> str:
    return one_line(text or "")


def _md(text: str | None) -> str:
    """Untrusted words in Markdown prose (a process name may be a link): escaped, one line."""
    return markdown_text(text or "")


def _cell(text: str | None) -> str:
    """One line for a Markdown table cell (a `|` would end the cell: escaped with the rest)."""
    return markdown_text(text or "", line_start=False)


def _fence(body: str) -> str:
    """A code fence longer than any run of backticks inside the block."""
    longest = max((len(m) for m in re.findall(r"`+", body)), default=0)
    return "`" * max(3, longest + 1)


def _freed(e: TimelineEntry) -> str:
    return (f"freed {mib(e.freed_mib)}" + (f" in {e.seconds_to_free:.1f} s" if e.seconds_to_free is not None else "")
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


def _check_name(e: TimelineEntry) -> str:
    return e.text.split(":", 1)[0] if e.kind == "check" and ":" in e.text else ""


def as_text(entries: Sequence[TimelineEntry]) -> str:
    lines = []
    merged, inside = _merged(entries)
    numbers = hypothesis_numbers(entries)
    for e in entries:
        if id(e) in inside:
            continue
        head = f"#{e.seq:<4} {_one_line(e.ts)}  {_one_line(e.kind):<11} {_one_line(e.node) or '-':<12} {_one_line(e.by)}"
        lines.append(head)
        if e.kind == "hypothesis":
            lines.append(f"      {hypothesis_label(numbers, e.seq)}: {_one_line(e.text)}")
        elif e.text:
            lines.append(f"      {_one_line(e.text)}")
        if e.hypothesis is not None and e.kind != "hypothesis":
            lines.append(f"      {'on' if e.kind == 'verdict' else 'for'} {hypothesis_label(numbers, e.hypothesis)}")
        if e.command:
            first, *rest = _clean(e.command).splitlines() or [""]
            lines.append(f"      $ {first}" + (f"   (rc {e.rc})" if e.rc is not None else ""))
            lines += [f"        {line}" for line in rest]
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


# ---------------------------------------------------------------- Markdown

def headline(s: Summary, entries: Sequence[TimelineEntry] = ()) -> list[str]:
    """The postmortem's opening block: one table a reader takes in at a glance."""
    if not s.entries:
        return ["_No entries._", ""]
    stuck = "; ".join(x.text() for x in s.stuck) or "no memory reading recorded"
    found = freeing(entries)
    start = when(entries[0]) if entries else None
    rows = [("Nodes", ", ".join(s.nodes) or "-"),
            ("State", s.state + (" (a console is still attached)" if s.console_running else "")),
            *([("Demo", "yes: every node is simulated (a `demo` target); kept apart from real incidents")]
              if entries and is_demo(entries) else []),
            ("Detected", detection(entries)),
            *([("What was wrong", "no GPU held memory; " + "; ".join(
                f"{', '.join(f.kinds)} on {f.node}" for f in s.faults))] if s.faults and not s.stuck else
              [("What was stuck", stuck), ("First seen held", first_held_text(found, start))]),
            *([("Still held", "; ".join(x.text() for x in s.still_held))] if s.still_held else []),
            *([("Left off", "what B stopped, not restored on " + ", ".join(s.left_off))] if s.left_off else []),
            ("Root cause", s.root_cause),
            ("Resolution", s.resolution),
            *([] if s.faults and not s.stuck else [("Time to free", time_to_free_text(found, s, start))]),
            ("Who acted", "; ".join(s.acted_by) or "nobody sent an action"),
            ("Hypotheses", f"{s.hypotheses} ({s.open_hypotheses} open)"),
            ("Started / last entry", f"{s.started} / {s.last}")]
    out = ["| | |", "|---|---|"]
    # rows written escaped already ("Detected" quotes the gate's and the watch's words)
    out += [f"| **{label}** | {value.replace('|', chr(92) + '|') if label in ESCAPED else _cell(value)} |"
            for label, value in rows]
    return out + [""]


def _fold(lines: list[str], label: str) -> list[str]:
    """A fenced block; folded into <details> when long, and cut to KEEP_LINES there."""
    shown = lines[:KEEP_LINES]
    if len(lines) > KEEP_LINES:
        shown.append(f"[… {len(lines) - KEEP_LINES} more lines: `gpu-incident timeline export ID --format json` "
                     "has them all]")
    fence = _fence("\n".join(shown))
    block = [fence, *shown, fence]
    if len(lines) <= FOLD_LINES:
        return ["", *block]
    return ["", f"<details><summary>{label} ({len(lines)} lines)</summary>", "", *block, "", "</details>"]


def as_markdown(entries: Sequence[TimelineEntry], *, incident_id: str = "", chart: str | None = None) -> str:
    """The postmortem. ``chart``: the file name of the memory chart written beside it (linked)."""
    out = [f"# Incident {incident_id}".rstrip(), ""]
    said = brief(entries, incident_id) if entries else ""
    if said:
        out += [said, ""]
    summary = summarize(entries, incident_id)
    if summary.console_running and not attached_elsewhere(entries):   # gone, or the one exporting
        summary = dataclasses.replace(summary, console_running=False)
    out += headline(summary, entries)
    if chart:
        out += [f"![GPU memory over the incident, actions marked]({chart})", ""]
    if not entries:
        return "\n".join(out)
    start = when(entries[0])
    out += fact_lines(entries)
    out += finding_lines(entries, start)
    out += impact_lines(entries, start)
    out += timeline_lines(entries, start)
    out += verdict_lines(entries)
    out += action_item_lines(entries)
    kept = sum(1 for e in entries if e.kind != "observation" or not e.outcome)
    out += ["## Record", "", f"<details><summary>Every entry as it was written ({kept} entries; long outputs "
            "folded again inside)</summary>", "",
            "`gpu-incident timeline export ID --format json` has every field of every entry.", ""]
    return "\n".join(out + _record(entries) + ["</details>", ""])


def _record(entries: Sequence[TimelineEntry]) -> list[str]:
    out: list[str] = []
    numbers = hypothesis_numbers(entries)
    merged, inside = _merged(entries)
    commands: dict[str, int] = {}         # a long command already shown -> the entry that showed it
    for e in entries:
        if id(e) in inside:
            continue
        result = merged.get(e.seq) if e.kind == "action" else None
        label = f" {hypothesis_label(numbers, e.seq)}" if e.kind == "hypothesis" else ""
        out.append(f"### #{e.seq} {_md(e.kind)}{label} — {_md(e.ts)} — {_md(e.node)} "
                   f"({_md(e.by)})".replace(" —  (", " — ("))
        if e.text:
            out += ["", _md(e.text)]
        if e.hypothesis is not None and e.kind not in ("hypothesis", "verdict"):
            out += ["", f"- for {hypothesis_label(numbers, e.hypothesis)}"]
        if e.targets:
            names = [_target(t) for t in e.targets]
            more = f" and {len(names) - 12} more" if len(names) > 12 else ""
            out += ["", "- targets: " + ", ".join(names[:12]) + more]
        summary_lines = list(e.digest or ()) or (digest(_check_name(e), e.output or "") if e.kind == "check" else [])
        if summary_lines:
            out += [""] + [f"- {_md(line)}" for line in summary_lines]
        shown = result or e           # the outcome carries rc, output, memory after and freed
        output = wait_table(e) or _clean(shown.output).splitlines()
        block: list[str] = []
        if e.command and not _echoed(e.command, output):
            command = _clean(e.command)
            long = len(command) > LONG_COMMAND or "\n" in command
            if long and command in commands:
                out += ["", f"`$` the same command as #{commands[command]}"]
            else:
                if long:
                    commands[command] = e.seq
                block = [f"$ {command}"]
        if len(output) <= FOLD_LINES:               # a short session: the command and what it said
            block += output
            output = []
        if block:
            fence = _fence("\n".join(block))
            out += ["", fence, *block, fence]
        if output:
            out += _fold(output, "reads" if is_wait(e) else "output")
        if e.command and shown.rc is not None:
            out += ["", f"exit status {shown.rc}"]
        if result is not None:
            out += ["", f"Outcome (#{result.seq}, {_md(result.ts)}): {_md(result.text)}"]
            for m in _meanwhile(entries, e, result):
                out.append(f"- sent meanwhile: #{m.seq} {_md(m.text)} ({_md(m.ts)})")
        tail = _memory_lines(e, shown, merged)
        if shown.freed_mib is not None and e.kind in ("action", "check"):
            tail.append(f"- {_freed(shown).replace('freed ', 'freed: ', 1)}")
        if e.verdict:
            tail.append(f"- verdict: {e.verdict}" + (f" on {hypothesis_label(numbers, e.hypothesis)}"
                                                     if e.hypothesis is not None else ""))
        out += ([""] + tail if tail else []) + [""]          # a list after a blank line
    return out


def _echoed(command: str, output: list[str]) -> bool:
    """The output already shows each line of the command as ``$ line`` (B's and the restore's do)."""
    lines = [ln.strip() for ln in _clean(command).splitlines() if ln.strip()]
    said = {ln.strip() for ln in output}
    return bool(lines) and all(f"$ {ln}" in said for ln in lines)


def _memory_lines(e: TimelineEntry, shown: TimelineEntry, merged: dict[int, TimelineEntry]) -> list[str]:
    """The memory an entry read, once: an action's before and after (its outcome's); an
    observation of an action only when it read something its outcome did not; a wait's reads
    are in its table; anything else as it read it."""
    if e.kind == "action":
        before, after = e.gpu_memory_before or shown.gpu_memory_before, shown.gpu_memory_after
        if not before and not after:
            return []
        return [f"- before: {memory_text(before) or 'not read'}", f"- after: {memory_text(after) or 'not read yet'}"]
    if e.kind == "observation" and isinstance(e.action, int) and e.action in merged:
        after = e.gpu_memory_after
        return [f"- after: {memory_text(after)}"] if after and after != merged[e.action].gpu_memory_after else []
    if is_wait(e) and wait_table(e):
        return []
    sides = [(label, m) for label, m in (("before", e.gpu_memory_before), ("after", e.gpu_memory_after)) if m]
    if len(sides) == 1 and e.kind == "observation":
        return [f"- reading: {memory_text(sides[0][1])}"]
    return [f"- {label}: {memory_text(m)}" for label, m in sides]


def _target(t) -> str:
    pid = t.get("pid") if isinstance(t, dict) else None
    name = t.get("name") if isinstance(t, dict) else None
    return f"{_md(str(pid))}" + (f" ({_md(str(name))})" if name else "")


__all__ = ["as_markdown", "as_text", "headline", "gpu_list", "mib"]
