"""An incident in a few lines: what was stuck, what freed it, how long it took, who acted.

``summarize`` is pure: it reads timeline entries only. The postmortem opens with it
(console/incident/export.py) and `gpu-incident timeline list` shows one row of it per incident
(``incident_rows``, which also asks whether each console still attached is alive:
console/incident/consoles.py — "console gone since HH:MM" for one that died without a word).

- stuck: per node, the first memory reading (an action's or a check's "before") — the GPUs
  above 1 GiB and what they held;
- resolution: the reading that freed the most (an action's outcome or a later observation of
  it, else a check that saw memory come back), with the action it belongs to;
- state: "resolved" once every GPU that was stuck, on every node, has a later reading at or
  below 1 GiB, else "open" — and ``still_held`` says what is still held, where (a node the
  console only watched counts: the session records each node's first reading that holds memory
  and its last one when the console stops, console/session/core.py);
- time to free: from the incident's first entry to that reading (and from its action); the
  postmortem says it from the first reading that showed the memory held instead
  (console/incident/freeing.py).
"""
from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Mapping, Sequence

from console import rungs
from console.diagnosis import text as t
from console.incident.consoles import attached, gone_since, unmatched
from console.incident.timeline import hypothesis_label, hypothesis_numbers, outcomes
from console.model import TimelineEntry, severity_rank

BUSY_MIB = 1024            # a GPU above this holds memory; at or below it, it is back
#: a note that declines the restore (the operator keeps B's blockers off on purpose)
DECLINED_RESTORE = "declined restore"


def parse_ts(ts: object) -> dt.datetime | None:
    if not isinstance(ts, str):
        return None
    try:
        when = dt.datetime.fromisoformat(ts.strip().replace("Z", "+00:00"))
    except ValueError:
        return None
    return when if when.tzinfo else when.replace(tzinfo=dt.timezone.utc)


def seconds_between(a: object, b: object) -> float | None:
    start, end = parse_ts(a), parse_ts(b)
    return None if start is None or end is None else (end - start).total_seconds()


def duration(seconds: float | None) -> str:
    """"1 min 44 s", "2 h 03 min", "52 s"."""
    if seconds is None:
        return "?"
    whole = int(round(abs(seconds)))
    h, rest = divmod(whole, 3600)
    m, s = divmod(rest, 60)
    if h:
        return f"{h} h {m:02d} min"
    if m:
        return f"{m} min {s} s" if s else f"{m} min"
    return f"{s} s"


def offset(seconds: float) -> str:
    """"T+1:46", "T+1:02:03": a moment as the time since the incident's first entry."""
    whole = int(round(max(0.0, seconds)))
    h, m, s = whole // 3600, whole // 60 % 60, whole % 60
    return f"T+{h}:{m:02d}:{s:02d}" if h else f"T+{m}:{s:02d}"


def mib(value: int | float) -> str:
    """GPU memory as the console says it everywhere (console/diagnosis/text.py: one rule); a value
    that is not a number (a hand-edited file) as it is."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value:
        return f"{value} MiB"
    return t.mib(round(value))


def gpu_list(gpus: Sequence[int]) -> str:
    items = sorted(set(gpus))
    if not items:
        return "no GPU"
    if len(items) > 1 and items == list(range(items[0], items[-1] + 1)):
        return f"GPUs {items[0]}-{items[-1]}"
    return ("GPU " if len(items) == 1 else "GPUs ") + ", ".join(map(str, items))


@dataclass(frozen=True)
class Stuck:
    node: str | None
    gpus: tuple[int, ...]
    mib: int
    seq: int                 # the entry whose "before" it is

    def text(self) -> str:
        where = f" on {self.node}" if self.node else ""
        return f"{mib(self.mib)} on {gpu_list(self.gpus)}{where}"


@dataclass(frozen=True)
class Summary:
    incident_id: str
    nodes: tuple[str, ...] = ()
    started: str | None = None
    last: str | None = None
    entries: int = 0
    hypotheses: int = 0
    open_hypotheses: int = 0
    actions: int = 0
    state: str = "open"                       # open | resolved
    console_running: bool = False             # a console started and did not say it stopped
    stuck: tuple[Stuck, ...] = ()
    root_cause: str = "no hypothesis stated"
    resolution: str = "nothing freed the memory yet"
    freed_at: str | None = None               # the ts of the reading that freed the most
    time_to_free_s: float | None = None       # from the first entry to that reading
    after_action_s: float | None = None       # from its action to that reading
    acted_by: tuple[str, ...] = ()            # "root@vm: 2 actions"
    people: tuple[str, ...] = field(default_factory=tuple)
    still_held: tuple[Stuck, ...] = ()        # per node: what its latest reading still holds
    left_off: tuple[str, ...] = ()            # nodes where what B stopped was neither restored nor declined
    faults: tuple["Fault", ...] = ()          # no memory held: the severe findings the incident is about


def _freed(before: Mapping[str, int | None] | None, after: Mapping[str, int | None] | None) -> int:
    if not before or not after:
        return 0
    return sum(max(0, (v or 0) - (after.get(k) or 0)) for k, v in before.items()
               if v is not None and after.get(k) is not None)


def _freed_gpus(before: Mapping[str, int | None] | None, after: Mapping[str, int | None] | None) -> list[int]:
    now = after or {}
    return [int(k) for k, v in (before or {}).items()
            if str(k).isdecimal() and v is not None and (back := now.get(k)) is not None and v - back >= 256]


def _stuck(entries: Sequence[TimelineEntry]) -> list[Stuck]:
    seen: dict[str | None, Stuck] = {}
    for e in entries:
        before = e.gpu_memory_before
        if e.node in seen or not before or e.kind not in ("action", "check", "observation"):
            continue
        busy = {int(k): v for k, v in before.items() if str(k).isdecimal() and v is not None and v > BUSY_MIB}
        if busy:
            seen[e.node] = Stuck(e.node, tuple(sorted(busy)), sum(busy.values()), e.seq)
    return list(seen.values())


def running_work(entries: Sequence[TimelineEntry], node: str | None) -> bool:
    """The node's last reading (when the console stopped) says what it still holds is running
    work: none of the findings it carries has a step (files written before it carried them: no)."""
    last = next((e for e in reversed(entries) if e.node == node and e.kind == "observation"
                 and e.gpu_memory_after and isinstance(e.findings, (list, tuple))), None)
    return last is not None and all(isinstance(f, Mapping) and "rung" in f and not f["rung"] for f in last.findings)


def _still_held(entries: Sequence[TimelineEntry], stuck: list[Stuck]) -> list[Stuck]:
    """Per stuck node, the GPUs whose latest reading since is still above 1 GiB (or none came),
    unless the console's last reading of it found nothing stuck there (running work holds it)."""
    out = []
    for s in stuck:
        if running_work(entries, s.node):
            continue
        latest: dict[int, int] = {}
        for e in entries:
            if e.node != s.node or e.seq < s.seq or not e.gpu_memory_after:
                continue
            for k, v in e.gpu_memory_after.items():
                if str(k).isdecimal() and v is not None:
                    latest[int(k)] = v
        held = [g for g in s.gpus if g not in latest or latest[g] > BUSY_MIB]
        if held:
            last_seq = max((e.seq for e in entries if e.node == s.node), default=s.seq)
            out.append(Stuck(s.node, tuple(held), sum(latest.get(g, 0) for g in held), last_seq))
    return out


def _left_off(entries: Sequence[TimelineEntry]) -> list[str]:
    """Nodes whose last B (clear-blockers, sent) has no restore after it, and no note that
    declines it ("declined restore: …")."""
    open_b: dict[str, int] = {}
    for e in entries:
        node = e.node or ""
        if e.kind == "action" and stops_blockers(e):
            open_b[node] = e.seq
        elif e.kind == "action" and restores_blockers(e):
            open_b.pop(node, None)
        elif e.kind == "note" and e.text.lower().startswith(DECLINED_RESTORE):
            open_b.pop(node, None)
    return sorted(open_b)


#: findings this severe in a node's first reading make it a fault the incident is about (a pending
#: row remap, an Xid that wants a reset), whether or not a GPU held memory
FAULT_SEVERITY = "high"
#: findings about what a remedy needs first, never the fault itself
NOT_FAULTS = ("reset-blocker", "blockers-off")


@dataclass(frozen=True)
class Fault:
    node: str
    kinds: tuple[str, ...]          # the severe findings of the node's first reading
    cleared_at: int | None          # the seq of the first findings' entry without any of them


def _faults(entries: Sequence[TimelineEntry]) -> list[Fault]:
    """Per node whose first reading carries severe findings: which, and whether a later entry
    of its findings shows them gone."""
    first: dict[str, tuple[str, ...]] = {}
    cleared: dict[str, int | None] = {}
    for e in entries:
        if e.kind != "observation" or not e.node or not isinstance(e.findings, (list, tuple)):
            continue
        kinds = tuple(dict.fromkeys(str(f.get("kind")) for f in e.findings if isinstance(f, Mapping)
                                    and severity_rank(str(f.get("severity"))) >= severity_rank(FAULT_SEVERITY)
                                    and f.get("kind") not in NOT_FAULTS))
        if e.node not in first:
            if kinds:
                first[e.node], cleared[e.node] = kinds, None
            continue
        if set(first[e.node]) & set(kinds):
            cleared[e.node] = None              # (back) again
        elif cleared[e.node] is None:
            cleared[e.node] = e.seq             # the first entry without them
    return [Fault(n, k, cleared[n]) for n, k in first.items()]


def _rung(e: TimelineEntry) -> rungs.Rung:
    return rungs.of(e.rung or rungs.from_title(e.text or "", e.command or ""))


def stops_blockers(action: TimelineEntry) -> bool:
    """B: the action stopped the reset blockers (by its rung, never its title)."""
    return _rung(action).stops_blockers


def restores_blockers(action: TimelineEntry) -> bool:
    """The restore that undoes B."""
    return _rung(action).settles_on == "blockers-back"


def summarize(entries: Sequence[TimelineEntry], incident_id: str = "") -> Summary:
    if not entries:
        return Summary(incident_id)
    numbers = hypothesis_numbers(entries)
    hyps = [e for e in entries if e.kind == "hypothesis"]
    verdict_of: dict[int, TimelineEntry] = {}
    for e in entries:
        if e.kind == "verdict" and isinstance(e.hypothesis, int):
            verdict_of[e.hypothesis] = e
    opened = [h for h in hyps if h.seq not in verdict_of]
    confirmed = [h for h in hyps if h.seq in verdict_of and verdict_of[h.seq].verdict == "confirmed"]
    if confirmed:
        root = "; ".join(f"{hypothesis_label(numbers, h.seq)} confirmed: {h.text}" for h in confirmed)
    elif hyps:
        states = ", ".join(f"{hypothesis_label(numbers, h.seq)} "
                           f"{verdict_of[h.seq].verdict if h.seq in verdict_of else 'open'}" for h in hyps)
        root = f"not established ({states})"
    else:
        root = "no hypothesis stated"

    actions = [e for e in entries if e.kind == "action"]
    by_seq = {e.seq: e for e in actions}
    done = outcomes(entries)
    best: tuple[int, TimelineEntry, TimelineEntry | None] | None = None
    for e in entries:
        action = None
        if e.kind == "observation" and isinstance(e.action, int) and e.action in by_seq:
            action = by_seq[e.action]
            freed = _freed(action.gpu_memory_before or e.gpu_memory_before, e.gpu_memory_after)
        elif e.kind == "check":
            freed = e.freed_mib or _freed(e.gpu_memory_before, e.gpu_memory_after)
        else:
            continue
        if freed >= 256 and (best is None or freed > best[0] or (freed == best[0] and best[2] is None
                                                                  and action is not None)):
            best = (freed, e, action)      # on a tie the action that freed it wins over a check that saw it
    if best is not None:
        freed, reading, action = best
        after_action = (reading.seconds_to_free if isinstance(reading.seconds_to_free, (int, float))
                        else seconds_between(action.ts, reading.ts) if action is not None else None)
        if action is not None:
            where = _freed_gpus(action.gpu_memory_before or reading.gpu_memory_before, reading.gpu_memory_after)
            resolution = (f"#{action.seq} {action.text}" + (f" on {action.node}" if action.node else "")
                          + f": {mib(freed)} freed on {gpu_list(where)}"
                          + (f", {duration(after_action)} after it was sent" if after_action is not None else ""))
            since_action = seconds_between(entries[0].ts, action.ts)
            to_free = (since_action + after_action if since_action is not None and after_action is not None
                       else seconds_between(entries[0].ts, reading.ts))
        else:
            resolution = f"no action: {reading.text}"
            to_free = seconds_between(entries[0].ts, reading.ts)
        freed_at = reading.ts
    else:
        resolution, to_free, after_action, freed_at = "nothing freed the memory yet", None, None, None
        sent = [a for a in actions if a.seq in done]
        if sent:
            resolution = f"not resolved: {len(sent)} action(s) freed nothing (last: #{sent[-1].seq} {sent[-1].text})"

    acted: dict[str, int] = {}
    for a in actions:
        if not a.text.startswith(("[read-only]", "[dry-run]")):     # sent, not refused or only recorded
            acted[a.by] = acted.get(a.by, 0) + 1
    stuck = _stuck(entries)
    held = _still_held(entries, stuck)
    if held and best is not None:
        resolution = "not resolved: still held: " + "; ".join(h.text() for h in held) + f" (freed so far: {resolution})"
    left_off = _left_off(entries)
    faults = [] if stuck else _faults(entries)
    if faults and best is None:        # no memory held: the incident is its severe findings
        open_ = [f for f in faults if f.cleared_at is None]
        if open_:
            resolution = "not resolved: " + "; ".join(f"{', '.join(f.kinds)} on {f.node} still there" for f in open_)
        else:
            resolution = "; ".join(_cleared_text(entries, f) for f in faults)
    if left_off and not held and (stuck or faults):
        resolution = (f"not resolved: what B stopped is still off on {', '.join(left_off)} (x restores it, or a "
                      f"note \"{DECLINED_RESTORE}: why\"; freed: {resolution})")
    return Summary(
        incident_id=incident_id,
        nodes=tuple(sorted({e.node for e in entries if e.node})),
        started=entries[0].ts, last=entries[-1].ts, entries=len(entries),
        hypotheses=len(hyps), open_hypotheses=len(opened), actions=len(actions),
        state="resolved" if ((stuck and not held) or (faults and all(f.cleared_at for f in faults))) and not left_off
        else "open", still_held=tuple(held),
        left_off=tuple(left_off), faults=tuple(faults),
        console_running=bool(unmatched(entries)),
        stuck=tuple(stuck), root_cause=root, resolution=resolution, freed_at=freed_at,
        time_to_free_s=to_free, after_action_s=after_action,
        acted_by=tuple(f"{who}: {n} action{'s' if n != 1 else ''}" for who, n in acted.items()),
        people=tuple(sorted({e.by for e in entries})))


def _cleared_text(entries: Sequence[TimelineEntry], f: Fault) -> str:
    """"row-remap-pending on gpu07 cleared after #5 Reset GPU 2"."""
    last = next((e for e in reversed(entries) if e.kind == "action" and e.node == f.node
                 and f.cleared_at is not None and e.seq < f.cleared_at), None)
    after = f" after #{last.seq} {last.text}" if last is not None else ""
    return f"{', '.join(f.kinds)} on {f.node} cleared{after}"


def _short_ts(ts: str | None, day: bool = True) -> str:
    when = parse_ts(ts)
    if when is None:
        return "?"
    return when.strftime("%Y-%m-%d %H:%M:%S" if day else "%H:%M:%S")


def console_state(entries: Sequence[TimelineEntry], *, host: str | None = None, alive=None) -> str:
    """"console attached" while a console that started on the incident has not said it stopped
    and may be alive; "console gone since HH:MM" (UTC, the last entry it wrote) when every such
    console's process on this host is gone; "" when none is attached."""
    consoles = attached(entries, host=host, **({"alive": alive} if alive is not None else {}))
    if not consoles:
        return ""
    since = gone_since(consoles)
    if since is None:
        return "console attached"
    when = parse_ts(since)
    return f"console gone since {when.strftime('%H:%M') if when is not None else '?'}"


def incident_rows(incidents: Sequence[tuple[str, Sequence[TimelineEntry]]], *, host: str | None = None,
                  alive=None, marks=None) -> str:
    """`gpu-incident timeline list`: one line per incident (ID, nodes, start, hypotheses, actions,
    state, last entry), newest first as given, under a header. ``host``, ``alive``: where this
    runs and how a console's process is checked (console/incident/consoles.py; tests).
    ``marks(entries)``: words added to the state ("demo, untouched": console/incident/hygiene.py)."""
    from console.textsafe import one_line
    rows = [("ID", "NODES", "STARTED (UTC)", "HYPOTHESES", "ACTIONS", "STATE", "LAST ENTRY")]
    for ident, entries in incidents:
        s = summarize(entries, ident)
        nodes = ", ".join(s.nodes[:2]) + (f" +{len(s.nodes) - 2}" if len(s.nodes) > 2 else "") or "-"
        same_day = s.started is not None and s.last is not None and (s.started or "")[:10] == (s.last or "")[:10]
        console = console_state(entries, host=host, alive=alive) if s.console_running else ""
        extra = marks(entries) if marks is not None else ""
        state = s.state + (f", {console}" if console else "") + (f", {extra}" if extra else "")
        rows.append((one_line(ident, 40), one_line(nodes, 30), _short_ts(s.started),
                     f"{s.hypotheses} ({s.open_hypotheses} open)", str(s.actions), state,
                     _short_ts(s.last, day=not same_day)))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "".join("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() + "\n" for r in rows)
