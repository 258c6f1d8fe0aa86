"""How timeline entries look in the replay and follow views (rich Text; no App here).

Every entry field is untrusted and rendered literally; verdicts are shown as of a step. An
action's outcome (an `observation` with ``outcome: true``) is listed as "outcome" at the time
it was written and shown again in its action's detail once the replay has reached it.
"""
from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from typing import Sequence

from rich.text import Text

from console.incident.readings import memory_text as group_memory_text, readings, wait_table
from console.incident.summary import mib
from console.incident.timeline import hypothesis_label, hypothesis_numbers, outcomes
from console.model import VERDICTS, TimelineEntry
from console.textsafe import one_line
from console.ui.text import literal, printable

POLL_S = 0.5
KIND_SHORT = {"hypothesis": "hyp", "observation": "obs", "verdict": "verdict"}
KIND_STYLE = {"hypothesis": "bold cyan", "check": "", "action": "bold yellow", "observation": "dim",
              "verdict": "bold magenta", "note": "italic"}
VERDICT_STYLE = {"confirmed": "bold green", "refuted": "bold red", "inconclusive": "yellow",
                 "open": "bold cyan"}
# (label, key, width); the last column ("what") takes the rest of the line
COLUMNS = (("#", "seq", 4), ("time", "time", 8), ("kind", "kind", 7), ("node", "node", 9),
           ("by", "by", 9))


# ---------------------------------------------------------------- pure helpers (no widgets)
def parse_ts(ts: object) -> dt.datetime | None:
    if not isinstance(ts, str):
        return None
    try:
        when = dt.datetime.fromisoformat(ts.strip())
    except ValueError:
        return None
    return when if when.tzinfo else when.replace(tzinfo=dt.timezone.utc)


def clock_text(ts: object) -> str:
    when = parse_ts(ts)
    return when.strftime("%H:%M:%S") if when else printable(ts, 8)


def elapsed_seconds(entries: Sequence[TimelineEntry], index: int) -> float | None:
    """Seconds from the incident's first timestamp to entry ``index``'s (0-based)."""
    if not 0 <= index < len(entries):
        return None
    start = next((w for w in (parse_ts(e.ts) for e in entries) if w is not None), None)
    when = parse_ts(entries[index].ts)
    if start is None or when is None:
        return None
    return (when - start).total_seconds()


def elapsed_text(seconds: float | None) -> str:
    if seconds is None:
        return "T+?"
    sign = "-" if seconds < 0 else "+"
    whole = int(abs(seconds))
    days, rest = divmod(whole, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    return f"T{sign}" + (f"{days}d " if days else "") + f"{hours}:{minutes:02d}:{secs:02d}"


def _key(value: object) -> object | None:
    """A hashable reference (hypothesis / action seq) or None for garbage."""
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        return None
    return value


def verdicts_as_of(entries: Sequence[TimelineEntry], count: int) -> dict[object, tuple[str, object]]:
    """{hypothesis seq: (verdict, verdict entry's seq)} from the first ``count`` entries."""
    out: dict[object, tuple[str, object]] = {}
    for e in entries[:max(0, count)]:
        ref = _key(e.hypothesis)
        if e.kind == "verdict" and ref is not None and e.verdict in VERDICTS:
            out[ref] = (str(e.verdict), e.seq)
    return out


def hypothesis_state(entries: Sequence[TimelineEntry], count: int, seq: object) -> str:
    """"open" until a verdict entry among the first ``count`` entries closes it."""
    ref = _key(seq)
    found = verdicts_as_of(entries, count).get(ref) if ref is not None else None
    return found[0] if found else "open"


def _is_num(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _num(value: object, fmt: str = "") -> str:
    return format(value, fmt) if _is_num(value) else printable(value, 40)


def memory_text(memory: object) -> str:
    if not memory:
        return "-"
    if not isinstance(memory, Mapping):
        return printable(memory, 120)
    return ", ".join(f"GPU{printable(k, 8)} {_num(v) if v is not None else '?'} MiB"
                     for k, v in memory.items())


def freed_text(e: TimelineEntry) -> str:
    if e.freed_mib is None:
        return ""
    out = f"freed {mib(e.freed_mib)}"                 # one rounding rule (incident/summary.py, diagnosis/text.py)
    if e.seconds_to_free is not None:
        out += f" in {_num(e.seconds_to_free, '.1f')} s"
    return out


def is_outcome(e: TimelineEntry) -> bool:
    return e.kind == "observation" and e.outcome is True


def targets_text(targets: object) -> str:
    """`72169 (python3), 72230 (sglang::scheduler_TP0)` from an action's targets, literally."""
    if not isinstance(targets, (list, tuple)):
        return printable(targets, 200)
    parts = []
    for target in targets:
        if isinstance(target, Mapping):
            name = target.get("name")
            parts.append(printable(target.get("pid"), 12) + (f" ({printable(name, 40)})" if name else ""))
        else:
            parts.append(printable(target, 40))
    return ", ".join(parts)


def _hyp(numbers: Mapping[int, int] | None, seq: object) -> str:
    """A hypothesis as people number them ("H2"), or "#seq" without the incident's numbers."""
    return printable(hypothesis_label(dict(numbers or {}), seq), 12)


def summary(e: TimelineEntry, state: str | None = None, numbers: Mapping[int, int] | None = None) -> Text:
    """The list's last column: what the entry says, in one line, literally. ``numbers``: the
    incident's hypothesis numbers (console/incident/timeline.py hypothesis_numbers)."""
    out = Text(no_wrap=True, overflow="ellipsis")
    if e.kind == "hypothesis":
        out.append(f"[{state or 'open'}] ", style=VERDICT_STYLE.get(state or "open", ""))
        if numbers and _key(e.seq) in numbers:
            out.append(f"{_hyp(numbers, e.seq)} ", style="bold")
    elif e.kind == "verdict":
        verdict = printable(e.verdict, 14) if e.verdict is not None else "no verdict"
        out.append(verdict, style=VERDICT_STYLE.get(str(e.verdict), ""))
        if e.hypothesis is not None:
            out.append(f" on {_hyp(numbers, e.hypothesis)}")
        out.append(" ")
    elif e.hypothesis is not None:
        out.append(f"→{_hyp(numbers, e.hypothesis)} ", style="dim")
    if e.kind == "observation" and e.action is not None:
        out.append(f"of #{printable(e.action, 8)} ", style="dim")
        if is_outcome(e) and e.rc is not None and not e.command:
            out.append(f"(rc {_num(e.rc)}) ", style="green" if e.rc == 0 else "red")
    if e.text:
        out.append(one_line(e.text))
    if e.command:
        out.append(("  " if e.text else "") + "$ " + one_line(e.command), style="bold")
        if e.rc is not None:
            out.append(f" (rc {_num(e.rc)})", style="green" if e.rc == 0 else "red")
    if e.freed_mib is not None:
        out.append("  " + freed_text(e), style="green")
    return out


def row_cells(e: TimelineEntry, state: str | None, what_width: int,
              numbers: Mapping[int, int] | None = None) -> tuple[Text, ...]:
    what = summary(e, state, numbers)
    what.truncate(max(4, what_width), overflow="ellipsis")
    kind = "outcome" if is_outcome(e) else str(e.kind) if isinstance(e.kind, str) else printable(e.kind)
    return (literal(e.seq, limit=COLUMNS[0][2]), Text(clock_text(e.ts)),
            literal(KIND_SHORT.get(kind, kind), KIND_STYLE.get(kind, ""), limit=COLUMNS[2][2]),
            literal(e.node if e.node is not None else "-", limit=COLUMNS[3][2]),
            literal(_who(e.by), limit=COLUMNS[4][2]), what)


def _who(by: object) -> str:
    """`alice@bastion` -> `alice` when the whole does not fit the list's column (detail has it all)."""
    text = printable(by)
    return text.split("@", 1)[0] if len(text) > COLUMNS[4][2] and "@" in text[1:] else text


def _lines(out: Text, value: object, indent: str = "  ", limit: int = 400) -> None:
    text = value if isinstance(value, str) else printable(value)
    lines = text.splitlines() or [""]
    for ln in lines[:limit]:
        out.append(indent + printable(ln) + "\n")
    if len(lines) > limit:
        out.append(f"{indent}… {len(lines) - limit} more lines\n", style="dim")


def detail(entries: Sequence[TimelineEntry], index: int, as_of: int, when: str = "as of this step") -> Text:
    """Everything about entry ``index`` (0-based); verdicts are those of the first ``as_of`` entries."""
    out = Text()
    if not 0 <= index < len(entries):
        out.append("no entries", style="dim")
        return out
    e = entries[index]
    by_seq = {k: x for x in entries if (k := _key(x.seq)) is not None}
    numbers = hypothesis_numbers(entries)
    out.append(f"#{printable(e.seq, 12)} ", style="bold")
    out.append(printable(e.kind, 20), style=KIND_STYLE.get(str(e.kind), "") or "bold")
    if e.kind == "hypothesis" and _key(e.seq) in numbers:
        out.append(f" {_hyp(numbers, e.seq)}", style="bold")
    out.append(f"  {printable(e.ts, 40)}  {elapsed_text(elapsed_seconds(entries, index))}\n", style="dim")
    out.append(f"node {printable(e.node if e.node is not None else '-', 60)}   by {printable(e.by, 60)}\n")
    if e.kind == "hypothesis":
        state = hypothesis_state(entries, as_of, e.seq)
        out.append(f"verdict {when}: ")
        out.append(state, style=VERDICT_STYLE.get(state, ""))
        closing = verdicts_as_of(entries, as_of).get(_key(e.seq))
        if closing:
            out.append(f" (#{printable(closing[1], 12)})")
        out.append("\n")
    if e.verdict is not None or e.kind == "verdict":
        out.append("verdict: ")
        out.append(printable(e.verdict, 20), style=VERDICT_STYLE.get(str(e.verdict), ""))
        out.append("\n")
    if e.hypothesis is not None:
        ref = by_seq.get(_key(e.hypothesis))
        out.append(f"hypothesis {_hyp(numbers, e.hypothesis)}")
        if ref is not None:
            out.append(": " + one_line(ref.text)[:200])
        out.append("\n")
    if e.action is not None:
        ref = by_seq.get(_key(e.action))
        out.append(f"{'outcome of' if is_outcome(e) else 'about'} action #{printable(e.action, 12)}")
        if ref is not None:
            out.append(": " + one_line(ref.command or ref.text)[:200])
        out.append("\n")
    if e.text:
        _lines(out, e.text, indent="")
    if isinstance(e.digest, (list, tuple)):
        for line in e.digest[:40]:               # a check's summary, before its output
            out.append("  • " + one_line(line) + "\n")
    if e.command:
        for i, line in enumerate(str(e.command).splitlines() or [""]):    # a multi-line command as lines
            out.append(("$ " if i == 0 else "  ") + printable(line), style="bold")
            if i == 0 and e.rc is not None:
                out.append(f"   rc {_num(e.rc)}", style="green" if e.rc == 0 else "bold red")
            out.append("\n")
    if e.output:      # a wait's reads one line each, as the postmortem has them (no ::t= framing)
        table = wait_table(e)
        _lines(out, "\n".join(table) if table else e.output)
    if e.targets:
        out.append(f"targets: {targets_text(e.targets)}\n")
    if e.gpu_memory_before or e.gpu_memory_after:
        out.append(f"memory before: {memory_text(e.gpu_memory_before)}\n")
        out.append(f"memory after:  {memory_text(e.gpu_memory_after)}\n")
    if e.freed_mib is not None:
        out.append(freed_text(e) + "\n", style="bold green")
    if e.kind == "action":
        _outcome_part(out, entries[:max(0, as_of)], e)
    _gpu_state(out, entries[:max(0, as_of)], when)
    return out


def _gpu_state(out: Text, seen: Sequence[TimelineEntry], when: str) -> None:
    """Each node's GPU memory as the entries seen so far last read it: replay shows the GPUs at
    every step (the incident's readings: console/incident/readings.py)."""
    latest: dict[object, object] = {}
    for r in readings(seen):                  # oldest first: the last one per node stays
        latest[r.node] = r
    if not latest:
        return
    out.append(f"\nGPU memory {when}\n", style="bold")
    for node, r in latest.items():
        out.append(f"  {printable(node if node is not None else '-', 40)}: "
                   f"{printable(group_memory_text(r.memory), 300)} (#{printable(r.seq, 12)})\n")


def _outcome_part(out: Text, seen: Sequence[TimelineEntry], action: TimelineEntry) -> None:
    """The action's outcome, when the entries seen so far hold it."""
    ref = _key(action.seq)
    result = outcomes(seen).get(ref) if isinstance(ref, int) else None   # type: ignore[arg-type]
    if result is None:
        if action.rc is None and action.command and not str(action.text).startswith(("[dry-run]", "[read-only]")):
            out.append("outcome: not recorded yet\n", style="dim")
        return
    out.append(f"\noutcome #{printable(result.seq, 12)}  {printable(result.ts, 40)}", style="bold")
    if result.rc is not None:
        out.append(f"   rc {_num(result.rc)}", style="green" if result.rc == 0 else "bold red")
    out.append("\n")
    if result.text:
        _lines(out, result.text, indent="")
    if result.output:
        _lines(out, result.output)
    if result.gpu_memory_after:
        out.append(f"memory after:  {memory_text(result.gpu_memory_after)}\n")
    if result.freed_mib is not None:
        out.append(freed_text(result) + "\n", style="bold green")


def hypotheses_line(entries: Sequence[TimelineEntry], count: int) -> Text:
    """"hypotheses: H1 refuted  H2 open" as of the first ``count`` entries."""
    out = Text(no_wrap=True, overflow="ellipsis")
    hyps = [e for e in entries[:max(0, count)] if e.kind == "hypothesis"]
    if not hyps:
        return out
    numbers = hypothesis_numbers(entries)
    out.append("hypotheses:", style="dim")
    for h in hyps:
        state = hypothesis_state(entries, count, h.seq)
        out.append(f" {_hyp(numbers, h.seq)} ")
        out.append(state, style=VERDICT_STYLE.get(state, ""))
    return out


def short_path(path: str, limit: int = 40) -> str:
    text = printable(path)
    return text if len(text) <= limit else "…" + text[-(limit - 1):]




# ---------------------------------------------------------------- shared widget plumbing
