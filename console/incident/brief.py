"""The postmortem's first words: two or three sentences a person reads before the table — what
was stuck and why, what freed it, what to change — written from the timeline alone.

- what and why: the memory the first held reading showed, the workload that held it
  (console/incident/facts.py), and the worst of the console's findings
  (console/incident/diagnosis_story.py) or, when none was recorded, the confirmed hypothesis;
- what freed it: the action (its title, who sent it, how long after it the memory was back) and
  the actions before it that freed nothing — or that nothing has yet;
- what to change: the first action item (console/incident/lessons.py).

Pure; every untrusted word escaped (console/textsafe.py ``markdown_text``).
"""
from __future__ import annotations

import re
from typing import Sequence

from console import rungs
from console.incident import diagnosis_story, facts
from console.incident.freeing import freeing
from console.incident.lessons import action_items
from console.incident.summary import duration, mib, summarize
from console.incident.timeline import outcomes
from console.incident.verdicts import action_rung
from console.model import TimelineEntry
from console.textsafe import markdown_text

#: findings severe enough to be the "why" (else the worst that says what holds the memory)
WHY_SEVERITIES = ("critical", "high")
#: findings about what a reset needs, never what held the memory
NOT_A_CAUSE = ("reset-blocker", "blockers-off")


def _why(entries: Sequence[TimelineEntry]) -> str:
    causes = [s for s in diagnosis_story.worst(entries) if s.kind not in NOT_A_CAUSE]
    found = [s for s in causes if s.severity in WHY_SEVERITIES] or causes
    if found:
        return f"the console found {found[0].summary}"
    s = summarize(entries)
    if s.root_cause.startswith("H") and " confirmed: " in s.root_cause:
        return "the cause confirmed: " + s.root_cause.split(" confirmed: ", 1)[1]
    return ""


def _holder(entries: Sequence[TimelineEntry]) -> str:
    for node, groups in facts.first_workload(entries).items():
        for g in groups:
            parent = g.get("parent")
            command = (parent.get("command") if isinstance(parent, dict) else None) or next(
                iter(g.get("commands") or ()), "")
            words = " ".join(str(command).split()[:4])
            words = words.split(" --", 1)[0].split(" -- ", 1)[0]
            return f"{g.get('user') or '?'}'s {words}" + (f" (Slurm job {g['job']})" if g.get("job") else "")
    return ""


def _to_change(item: str) -> str:
    """An action item's first two sentences (what happened, what to do)."""
    return " ".join(re.split(r"(?<=\.)\s+(?=[A-Z])", item)[:2])


def brief(entries: Sequence[TimelineEntry], incident_id: str = "") -> str:
    """The summary paragraph ("" when the timeline shows no memory held)."""
    s = summarize(entries, incident_id)
    if not s.stuck:
        return ""
    stuck = "; ".join(x.text() for x in s.stuck)
    holder = _holder(entries)
    why = _why(entries)
    first = f"{stuck} stayed held" + (f" by {holder}" if holder else "") + (f": {why}" if why else "") + "."
    f = freeing(entries)
    said = re.search(r"#(\d+) ", s.resolution)
    best = next((e for e in entries if e.kind == "action" and said is not None and str(e.seq) == said.group(1)),
                None)
    if best is not None and f.seconds is not None:
        done = outcomes(entries)
        before = [a for a in entries if a.kind == "action" and a.seq < best.seq and a.seq in done
                  and not rungs.of(action_rung(a)).unblocks and not a.text.startswith(("[read-only]", "[dry-run]"))
                  and (done[a.seq].freed_mib or 0) < 256]
        after = ("" if s.after_action_s is None else " at once" if s.after_action_s < 1
                 else f" {duration(s.after_action_s)} after it was sent")
        tried = f", after {', '.join(a.text for a in before)} had freed nothing" if before else ""
        second = f"{best.text} (#{best.seq}, by {best.by}) freed it{after}{tried}."
    elif f.seconds is not None:
        second = f"It came back without an action ({s.resolution.removeprefix('no action: ')})."
    elif best is not None and s.still_held:
        freed = max((e.freed_mib for e in entries if e.kind == "observation" and e.action == best.seq
                     and isinstance(e.freed_mib, int)), default=0)
        second = (f"{best.text} (#{best.seq}, by {best.by}) freed {mib(freed) if freed >= 256 else 'nothing'}; "
                  f"{'; '.join(x.text() for x in s.still_held)} is still held.")
    elif best is not None and s.state == "resolved":      # freed in part; the rest is running work
        freed = max((e.freed_mib for e in entries if e.kind == "observation" and e.action == best.seq
                     and isinstance(e.freed_mib, int)), default=0)
        second = (f"{best.text} (#{best.seq}, by {best.by}) freed {mib(freed)}; what is still in use is running "
                  "work (the console found nothing stuck when it stopped).")
    else:
        second = "Nothing has freed it yet."
    items = action_items(entries)
    third = f"To change: {_to_change(items[0])}" if items else ""
    return " ".join(markdown_text(x) for x in (first, second, third) if x)
