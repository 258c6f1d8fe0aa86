"""A parent that starts again what was killed: torchrun's elastic agent, Ray's raylet, a
supervisor, ``while true; do python train.py; done``. SIGKILL to the worker frees nothing for
long — a new worker takes the memory back within seconds — so the next step moves to the parent
(signalled before its new children, which are in the plan too).

The evidence: an action reached process P (PID, parent R, name N as planned: ActionRecord.family);
P is gone; R is still alive; and R now has a child named N that started after the action and
holds GPU memory or device files. One ``respawn`` finding per such parent.
"""
from __future__ import annotations

from console import rungs
from console.diagnosis import text as t
from console.diagnosis.advice import finding, signal_step
from console.diagnosis.context import Situation
from console.diagnosis.who import label
from console.model import Finding, Proc

#: how long after an action a new child is still its respawn
RESPAWN_WINDOW_S = 900.0
#: the console's and the node's clocks may disagree this much (start times are the node's)
CLOCK_SLACK_S = 2.0


def respawns(sit: Situation) -> list[Finding]:
    snap = sit.snap
    by_pid = {p.pid: p for p in snap.processes}
    found: dict[int, tuple[Proc, list[Proc], str, float]] = {}
    for action in sit.actions:
        if action.rung not in rungs.ENDING or not action.family or sit.age(action.ts) > RESPAWN_WINDOW_S:
            continue
        signalled = set(action.pids)
        for pid, ppid, name in action.family:
            parent = by_pid.get(ppid) if ppid not in (None, 0, 1) else None
            if parent is None or parent.pid in signalled or parent.state in ("Z", "X"):
                continue                      # no parent left to start it again (or it was signalled too)
            old = by_pid.get(pid)
            if old is not None and old.ppid == ppid and label(old) == name:
                continue                      # the target itself is still there: not a respawn
            new = [p for p in snap.processes
                   if p.ppid == ppid and p.pid != pid and label(p) == name and p.state not in ("Z", "X")
                   and p.create_time is not None and p.create_time >= action.ts - CLOCK_SLACK_S
                   and (p.gpu_memory_total_mib > 0 or p.holds_devices)]
            if new:
                known = found.get(parent.pid)
                merged = {p.pid: p for p in [*(known[1] if known else []), *new]}
                kids = [merged[k] for k in sorted(merged)]
                found[parent.pid] = (parent, kids, action.rung, action.ts)
    out = []
    for parent, kids, rung, ts in found.values():
        gpus = sorted({g for p in kids for g in sit.gpus_of(p)})
        held = sum(p.gpu_memory_total_mib for p in kids)
        names = sit.names(kids)
        summary = (f"PID {parent.pid} ({label(parent)}) started {names} again after the {rung.upper()} "
                   f"{t.ago(sit.age(ts))}: {t.plural(len(kids), 'new process', 'new processes')} "
                   f"{t.pid_list([p.pid for p in kids])}" + (f" holding {t.mib(held)} on {t.gpus(gpus)}" if held else ""))
        why = (" — it restarts what is killed (a supervisor, an elastic agent, a retry loop); the parent goes "
               "first, then its new children")
        step = signal_step(sit, [parent, *kids], gpus, f"PID {parent.pid} ({label(parent)}) and its new "
                           f"{t.plural(len(kids), 'child', 'children')}", purpose=why)
        out.append(finding("respawn", "high", summary, step, [parent.pid, *[p.pid for p in kids]], gpus,
                           {"parent": parent.pid, "respawned": [p.pid for p in kids], "after": rung,
                            "targets": [parent.pid, *[p.pid for p in kids]]}))
    return out

