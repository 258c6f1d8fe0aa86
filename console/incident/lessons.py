"""The postmortem's action items: what to change so it does not happen again, worked out from what
the timeline shows happened (each item names the entries it rests on). Pure.

- SIGTERM freed nothing and its targets kept running: the workers ignore SIGTERM;
- memory came back long after the action that freed it (more than the verification window):
  the drain or epilog window must be at least that long (with the D-state threads a states
  check saw, when one did);
- a reset (driver reload, reboot) freed the memory: the Xids that called for it are the ones to
  watch for;
- B stopped what keeps a reset from running: whether the restore ran, was declined, or not;
- memory still held, hypotheses without a verdict: what is still to do.
"""
from __future__ import annotations

import math
import re
from typing import Mapping, Sequence

from console import rungs
from console.diagnosis import text as t
from console.incident.grounds import xid_grounds
from console.incident.impact import held
from console.incident.narrative import without_title
from console.incident.readings import when
from console.incident.summary import DECLINED_RESTORE, duration, restores_blockers, running_work, stops_blockers
from console.incident.timeline import hypothesis_label, hypothesis_numbers, outcomes
from console.incident.verdicts import FREED_NOTICE_MIB, action_rung
from console.model import TimelineEntry

#: the console's first verification window: memory back within it is not slow
VERIFY_S = 10.0


def _freed(outcome: TimelineEntry | None) -> int:
    return outcome.freed_mib if outcome is not None and isinstance(outcome.freed_mib, int) else 0


def _ignored_term(entries: Sequence[TimelineEntry], done: Mapping[int, TimelineEntry]) -> list[str]:
    out = []
    for a in entries:
        outcome = done.get(a.seq)
        if a.kind != "action" or rungs.of(action_rung(a)) is not rungs.sending("TERM") or outcome is None or _freed(outcome) >= FREED_NOTICE_MIB:
            continue
        running = re.search(r"(\d+) still running", outcome.text)
        if running:
            window = re.search(r"after (\d+) s", outcome.text)
            out.append(f"The workers ignored SIGTERM: {running.group(1)} still running "
                       f"{window.group(1) + ' s ' if window else ''}after it (#{a.seq}). Give them a SIGTERM "
                       "handler that releases the GPU (end the process group, free the CUDA context), or a "
                       "teardown timeout after which they exit on their own.")
    return out


def _slow(entries: Sequence[TimelineEntry]) -> list[str]:
    """Per node: memory back more than VERIFY_S after the last action sent before it came back."""
    out = []
    spans = [h for h in held(entries) if h.freed]
    for node in dict.fromkeys(h.node for h in spans):
        back = max(h.until for h in spans if h.node == node)
        sent = [a for a in entries if a.kind == "action" and a.node == node and not rungs.of(action_rung(a)).unblocks
                and not a.text.startswith(("[read-only]", "[dry-run]")) and (when(a) or math.inf) <= back]
        if not sent:
            continue
        action = sent[-1]
        late = back - (when(action) or back)
        if late <= VERIFY_S:
            continue
        stuck = [e for e in entries if e.kind == "check" and e.node == node and e.seq > action.seq
                 and e.text.startswith("states:") and " in D at " in e.text]
        wchans = ", ".join(dict.fromkeys(re.findall(r" in D at ([^);,]+)", stuck[0].text))) if stuck else ""
        why = f"; threads were in D inside the driver meanwhile (at {wchans}, check #{stuck[0].seq})" if stuck else ""
        window = int(math.ceil(late / 30.0) * 30)
        out.append(f"Memory came back only {duration(late)} after {action.text} (#{action.seq}) on "
                   f"{node or 'the node'}{why}. The drain or epilog window must be at least that: wait "
                   f"{window} s (`gpu-incident gate --wait {window}`) before the node takes a job, and do "
                   "not escalate inside it.")
    return out


def _reset_needed(entries: Sequence[TimelineEntry], done: Mapping[int, TimelineEntry]) -> list[str]:
    out = []
    for a in entries:
        if a.kind != "action" or not rungs.of(action_rung(a)).rests_on_faults:
            continue
        if _freed(done.get(a.seq)) < FREED_NOTICE_MIB:
            continue
        codes = sorted({int(c) for line in xid_grounds(entries, a) for c in re.findall(r"Xid (\d+)", line)})
        watch = (f"Xid {', '.join(map(str, codes))}" if codes else "the Xid that called for it (none was recorded: "
                 "run the kernel-log check before a reset)")
        out.append(f"{a.text} was needed to free the memory (#{a.seq}): watch for {watch} in the kernel log "
                   "(or DCGM's XID errors) and drain the node when one appears; a reset is not guaranteed, "
                   "so check the GPU's health after it.")
    return out


def _blockers(entries: Sequence[TimelineEntry]) -> list[str]:
    out = []
    for b in [e for e in entries if e.kind == "action" and stops_blockers(e)]:
        what = b.text.split(":", 1)[1].strip() if ":" in b.text else "the reset blockers"
        after = [e for e in entries if e.seq > b.seq and e.node == b.node]
        restore = next((e for e in after if e.kind == "action" and restores_blockers(e)), None)
        declined = next((e for e in after if e.kind == "note" and e.text.lower().startswith(DECLINED_RESTORE)), None)
        outcome = outcomes(entries).get(restore.seq) if restore is not None else None
        if restore is not None:
            state = f"the restore ran (#{restore.seq}" + (f": {without_title(outcome, restore)})" if outcome else ")")
        elif declined is not None:
            state = f"the restore was declined (#{declined.seq}: {declined.text})"
        else:
            state = "nothing restored it: restore it (x) or say why not in a note \"declined restore: …\""
        out.append(f"B stopped {what} on {b.node or 'the node'} for the reset (#{b.seq}): {state}.")
    return out


def action_items(entries: Sequence[TimelineEntry]) -> list[str]:
    """The action items, one paragraph each (see the module)."""
    done = outcomes(entries)
    items = _ignored_term(entries, done) + _slow(entries) + _reset_needed(entries, done) + _blockers(entries)
    still = [h for h in held(entries) if not h.freed and not running_work(entries, h.node)]
    if still:
        items.append("Memory is still held: " + "; ".join(
            f"{t.gpus([h.gpu for h in still if h.node == n])} on {n or 'the node'}"
            for n in dict.fromkeys(h.node for h in still)) + ". The incident is open until it is back.")
    judged = {e.hypothesis for e in entries if e.kind == "verdict"}
    numbers = hypothesis_numbers(entries)
    open_ = [e for e in entries if e.kind == "hypothesis" and e.seq not in judged]
    if open_:
        items.append("Give a verdict (v) to " + ", ".join(hypothesis_label(numbers, h.seq) for h in open_)
                     + ": a hypothesis left open says nothing to the next person.")
    return items


def action_item_lines(entries: Sequence[TimelineEntry]) -> list[str]:
    items = action_items(entries)
    return ["## Action items", ""] + ([f"{i}. {item}" for i, item in enumerate(items, 1)]
                                      or ["None found in the timeline."]) + [""]
