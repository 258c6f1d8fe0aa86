"""What an action rested on: the evidence the timeline held, on its node, when it was sent.

- the checks run there since the node's previous action (each by its summary), the findings
  noted there ("finding critical xid: …", as the gate and the watch write them) and the verdicts
  given meanwhile (SIGKILL after "H1 refuted": SIGTERM freed nothing);
- for a reset, a driver reload or a reboot, the Xids that call for one: from the last kernel-log
  check on the node before it (each Xid with what it means), else from the findings noted there.

Pure: reads timeline entries only. What the timeline does not hold it cannot show: an action
sent from a finding's next step records its plan, not the finding (the gate and the watch note
their findings; a kernel-log check records the Xid lines).
"""
from __future__ import annotations

from typing import Sequence

from console import rungs
from console.checks import parse as check_parse
from console.incident.timeline import hypothesis_label, hypothesis_numbers
from console.incident.verdicts import action_rung
from console.model import TimelineEntry

XID_KINDS = ("xid", "recovery-action")
FINDING_NOTE = "finding "


def xids_of_check(check: TimelineEntry) -> list[str]:
    """A kernel-log check's Xids, one line per code and bus: "Xid 119 (GSP RPC timeout) ×2 on
    PCI 0000:41:00: what it means"."""
    if check.kind != "check" or not check.text.startswith("kernel-log:"):
        return []
    seen: dict[tuple[int, str], list[dict]] = {}
    for x in check_parse.parse_kernel_log(check.output or "")["xids"]:
        seen.setdefault((x["xid"], x["bus"]), []).append(x)
    out = []
    for (code, bus), found in seen.items():
        last = found[-1]
        title = f"recovery action: {last['recovery']}" if code == 154 and last["recovery"] else last["title"]
        times = f" ×{len(found)}" if len(found) > 1 else ""
        out.append(f"Xid {code} ({title}){times} on PCI {bus}: {last['meaning']}")
    return out


def _noted(e: TimelineEntry, kinds: Sequence[str] = ()) -> bool:
    if e.kind != "note" or not e.text.startswith(FINDING_NOTE):
        return False
    words = e.text[len(FINDING_NOTE):].split(" ", 2)
    return not kinds or (len(words) > 1 and words[1].rstrip(":") in kinds)


def xid_grounds(entries: Sequence[TimelineEntry], action: TimelineEntry) -> list[str]:
    """The Xids that called for ``action`` (see the module); [] for a rung no Xid calls for."""
    if not rungs.of(action_rung(action)).rests_on_faults:
        return []
    before = [e for e in entries if e.seq < action.seq and e.node == action.node]
    checks = [e for e in before if xids_of_check(e)]
    if checks:
        return [f"{line} (kernel log, check #{checks[-1].seq})" for line in xids_of_check(checks[-1])]
    return [f"#{e.seq} {e.text}" for e in before if _noted(e, XID_KINDS)]


def grounds(entries: Sequence[TimelineEntry], action: TimelineEntry) -> list[str]:
    """What ``action`` rested on, in lines (see the module)."""
    previous = max((e.seq for e in entries if e.kind == "action" and e.node == action.node
                    and e.seq < action.seq), default=0)
    since = [e for e in entries if previous < e.seq < action.seq and e.node in (action.node, None)]
    xids = xid_grounds(entries, action)         # said in full, in place of their check or note
    out = [f"check #{e.seq} {e.text}" for e in since if e.kind == "check" and not (xids and xids_of_check(e))]
    out += [f"#{e.seq} {e.text}" for e in since if _noted(e) and not (xids and _noted(e, XID_KINDS))]
    numbers = hypothesis_numbers(entries)
    out += [f"verdict #{e.seq}: {hypothesis_label(numbers, e.hypothesis)} {e.verdict}" for e in since
            if e.kind == "verdict" and e.verdict]
    if not xids and rungs.of(action_rung(action)).rests_on_faults:
        out.append("no Xid recorded before it: the timeline holds no kernel-log check or finding for this node "
                   "(run the kernel-log check, c, before a reset: it records the Xids that call for one)")
    return out + xids
