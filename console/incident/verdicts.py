"""The verdict the evidence suggests for a hypothesis: the checks and the actions linked to it.

Pure: reads timeline entries only. An action with its outcome (memory before and after) is
evidence like a check: a hypothesis that names what was done ("SIGTERM to torchrun frees GPUs
0-3") is matched to the actions taken while it was open — by the rung its words name (SIGTERM,
SIGKILL, holders, blockers, reset, reload, reboot), by a target's name or PID — and judged on the
GPUs it names (all the action's GPUs when it names none):

- memory freed there (by the outcome or a later observation of the action) -> confirmed;
- nothing freed there once the verification window has passed (the outcome is written) -> refuted;
- otherwise inconclusive, saying why (no outcome yet, the action touched none of its GPUs, ...).

A hypothesis of patience ("the memory needs more time") is judged by the wait-and-reread check:
memory came back while waiting -> confirmed, nothing came back -> refuted.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Mapping, Sequence

from console.diagnosis import text as t
from console.incident.timeline import outcomes
from console import rungs
from console.model import TimelineEntry

FREED_NOTICE_MIB = 256      # less than this between before and after is noise, not memory coming back
_PATIENCE = re.compile(r"\b(time|wait|slow|later|teardown|releas|pinned|clean ?up|settl)", re.IGNORECASE)
_GPUS = re.compile(r"\bGPUs?\s*((?:\d+(?:\s*[-–]\s*\d+)?)(?:\s*(?:,|and|&|\+)\s*\d+(?:\s*[-–]\s*\d+)?)*)", re.I)
_ALL_GPUS = re.compile(r"\b(all|every|the) GPUs\b", re.I)


@dataclass(frozen=True)
class Suggestion:
    verdict: str        # confirmed | refuted | inconclusive
    why: str


def gpus_named(text: str) -> set[int]:
    """GPU indices a sentence names: "GPUs 0-3", "GPU 3", "GPUs 0, 1 and 5"."""
    found: set[int] = set()
    for m in _GPUS.finditer(text):
        for part in re.split(r"\s*(?:,|and|&|\+)\s*", m.group(1)):
            bounds = [int(x) for x in re.split(r"\s*[-–]\s*", part.strip()) if x.isdecimal()]
            if len(bounds) == 2 and 0 <= bounds[1] - bounds[0] < 1024:
                found.update(range(bounds[0], bounds[1] + 1))
            elif len(bounds) == 1:
                found.add(bounds[0])
    return found


def rungs_named(text: str) -> set[str]:
    return rungs.named_in(text)


def action_rung(action: TimelineEntry) -> str:
    """The rung an action entry was: its ``rung`` field; in files written before there was one,
    worked out from its title and command (rungs.from_title)."""
    return action.rung or rungs.from_title(action.text or "", action.command or "")


def _names_target(text: str, action: TimelineEntry) -> bool:
    low = text.lower()
    for target in action.targets or ():
        if not isinstance(target, Mapping):
            continue
        name = str(target.get("name") or "")
        pid = target.get("pid")
        if len(name) >= 4 and name.lower() in low:
            return True
        if isinstance(pid, int) and re.search(rf"\b{pid}\b", text):
            return True
    return False


def _freed_on(before: Mapping[str, int | None] | None, after: Mapping[str, int | None] | None,
              gpus: set[int]) -> tuple[int, set[int]] | None:
    """(MiB freed on ``gpus`` (all when empty), the GPUs it was freed on); None without readings."""
    if not before or not after:
        return None
    if gpus and not any(str(g) in before for g in gpus):
        return None                 # the action read none of the GPUs the hypothesis names
    total, where = 0, set()
    for key, was in before.items():
        if not str(key).isdecimal() or (gpus and int(key) not in gpus):
            continue
        now = after.get(key)
        if was is None or now is None:
            continue
        if was - now >= FREED_NOTICE_MIB:
            where.add(int(key))
        total += max(0, was - now)
    return total, where


def _mib(value: int) -> str:
    return t.mib(value)          # one rounding rule (console/diagnosis/text.py)


def _gpus(gpus: set[int]) -> str:
    if not gpus:
        return "its GPUs"
    items = sorted(gpus)
    if len(items) > 1 and items == list(range(items[0], items[-1] + 1)):
        return f"GPUs {items[0]}-{items[-1]}"
    return ("GPU " if len(items) == 1 else "GPUs ") + ", ".join(map(str, items))


def _judge_actions(hyp: TimelineEntry, actions: list[TimelineEntry], entries: Sequence[TimelineEntry]) -> Suggestion:
    named = gpus_named(hyp.text)
    done = outcomes(entries)
    later: dict[int, list[TimelineEntry]] = {}
    for e in entries:
        if e.kind == "observation" and not e.outcome and isinstance(e.action, int):
            later.setdefault(e.action, []).append(e)
    waiting: list[TimelineEntry] = []
    refuting: list[tuple[TimelineEntry, int]] = []
    for action in reversed(actions):            # the newest evidence first
        result = done.get(action.seq)
        if action.rc is None and result is None and (action.text or "").startswith(("[dry-run]", "[read-only]")):
            continue                              # recorded, never sent: no evidence
        if result is None:
            waiting.append(action)
            continue
        before = action.gpu_memory_before or result.gpu_memory_before
        readings = [result] + later.get(action.seq, [])
        best: tuple[int, set[int], TimelineEntry] | None = None
        for reading in readings:
            freed = _freed_on(before, reading.gpu_memory_after, named)
            if freed is not None and (best is None or freed[0] > best[0]):
                best = (freed[0], freed[1], reading)
        if best is None:
            continue
        freed_mib, where, reading = best
        if freed_mib >= FREED_NOTICE_MIB:
            when = f" in {reading.seconds_to_free:.0f} s" if isinstance(reading.seconds_to_free, (int, float)) else ""
            return Suggestion("confirmed", f"action #{action.seq} ({action.text}) freed {_mib(freed_mib)} on "
                                           f"{_gpus(where or named)}{when}")
        refuting.append((action, freed_mib))
    if refuting:
        action, freed_mib = refuting[0]
        return Suggestion("refuted", f"action #{action.seq} ({action.text}) freed {_mib(freed_mib)} on "
                                     f"{_gpus(named)} after its verification window")
    if waiting:
        return Suggestion("inconclusive", f"action #{waiting[0].seq} ({waiting[0].text}) has no outcome yet: "
                                          "its verification window is still running")
    return Suggestion("inconclusive", f"the actions taken for it read no memory before and after on {_gpus(named)}")


def suggest(entries: Sequence[TimelineEntry], hyp: TimelineEntry | None) -> Suggestion:
    """The verdict the timeline's evidence suggests for the hypothesis ``hyp`` (see the module)."""
    if hyp is None:
        return Suggestion("inconclusive", "no open hypothesis")
    after = [e for e in entries if e.seq > hyp.seq]
    closed = next((e for e in after if e.kind == "verdict" and e.hypothesis == hyp.seq), None)
    if closed is not None:
        after = [e for e in after if e.seq < closed.seq]
    checks = [e for e in after if e.kind == "check" and e.hypothesis == hyp.seq]
    while_open = [e for e in after if e.kind == "action" and (e.hypothesis in (hyp.seq, None))]
    rungs = rungs_named(hyp.text)
    matched = [a for a in while_open if action_rung(a) in rungs or _names_target(hyp.text, a)]
    if not rungs and not matched:
        matched = [a for a in while_open if a.hypothesis == hyp.seq]    # linked by being open
    last_check = checks[-1] if checks else None
    last_action = matched[-1] if matched else None
    patient = _PATIENCE.search(hyp.text) is not None
    if last_check is not None and patient and last_check.text.startswith("wait-and-reread") and (
            last_action is None or last_check.seq > last_action.seq):
        if last_check.freed_mib and last_check.freed_mib >= FREED_NOTICE_MIB:
            return Suggestion("confirmed", f"check #{last_check.seq} (the wait): {_said(last_check)}")
        if last_check.gpu_memory_after:
            return Suggestion("refuted", f"check #{last_check.seq} (the wait): {_said(last_check)}")
    if matched:
        return _judge_actions(hyp, matched, entries)
    if rungs and while_open:
        names = ", ".join(sorted(rungs))
        return Suggestion("inconclusive", f"it names {names}, and no such action was taken while it was open")
    if last_check is not None:
        return Suggestion("inconclusive", f"check #{last_check.seq} does not decide it on its own")
    if rungs:
        return Suggestion("inconclusive", "no action it names was taken yet, and no check was run for it")
    return Suggestion("inconclusive", "no check was run and no action taken for it yet")


def _said(check: TimelineEntry) -> str:
    """A wait's summary without its name: "memory came back ~76 s in: …" / "no memory came back …"."""
    return check.text.split(":", 1)[-1].strip()


def _default_text(verdict: str, hyp: TimelineEntry) -> str:
    """What a verdict says when the operator wrote nothing (console/incident/log.py)."""
    return f"{verdict}: {hyp.text}"


def reasons(entries: Sequence[TimelineEntry], verdict: TimelineEntry) -> list[str]:
    """Why ``verdict`` was given, in lines: the operator's own words (when more than the default),
    what the evidence in the timeline at that moment says (``suggest``), and the checks run for
    the hypothesis. When the operator chose otherwise than the evidence suggests, both are said."""
    hyp = next((e for e in entries if e.kind == "hypothesis" and e.seq == verdict.hypothesis), None)
    if hyp is None:
        return []
    before = [e for e in entries if e.seq < verdict.seq]
    out = []
    if verdict.text and verdict.text != _default_text(verdict.verdict or "", hyp):
        out.append(f"{verdict.by}: {verdict.text}")
    found = suggest(before, hyp)
    if found.verdict == verdict.verdict:
        out.append(f"the evidence: {found.why}")
    else:
        out.append(f"the evidence suggested {found.verdict}: {found.why}; {verdict.by} chose {verdict.verdict}")
    cited = set(re.findall(r"#(\d+)", found.why))
    out += [f"check #{e.seq} {e.text}" for e in before
            if e.kind == "check" and e.hypothesis == hyp.seq and str(e.seq) not in cited]
    return out
