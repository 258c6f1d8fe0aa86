"""The facts a reader of the postmortem needs before the story: each node (its GPUs, driver and
kernel), the workload that held the memory (owner, commands, the process that started them, the
Slurm job and the container where the cgroups name one) and how the incident was detected (the
gate, the watch, a person at the console).

The session writes the node's ``facts`` and ``workload`` into its first reading
(console/session/node_record.py); files written before say "not recorded". Detection is read
from the entries every version writes: the gate's note ("gate: …"), the watch's ("watch opened
this incident: …"), a console's start ("console started watching …"). Pure.
"""
from __future__ import annotations

from typing import Any, Mapping, Sequence

from console.incident.consoles import CONSOLE_STARTED
from console.model import TimelineEntry
from console.textsafe import markdown_text

#: the first entries the gate and the watch write (console/session/gate.py, watch.py)
GATE_NOTE = "gate: "
WATCH_NOTE = "watch opened this incident: "
#: a node the console simulates (TARGET ``demo``/``demo:NAME``)
DEMO_NAMES = ("demo",)


def first_facts(entries: Sequence[TimelineEntry]) -> dict[str | None, Mapping[str, Any]]:
    out: dict[str | None, Mapping[str, Any]] = {}
    for e in entries:
        if isinstance(e.facts, Mapping) and e.node not in out:
            out[e.node] = e.facts
    return out


def first_workload(entries: Sequence[TimelineEntry]) -> dict[str | None, Sequence[Mapping[str, Any]]]:
    out: dict[str | None, Sequence[Mapping[str, Any]]] = {}
    for e in entries:
        if e.workload is not None and e.node not in out:
            out[e.node] = [w for w in e.workload if isinstance(w, Mapping)]
    return out


def is_demo_node(node: str | None, facts: Mapping[str, Any] | None) -> bool:
    if isinstance(facts, Mapping) and facts.get("demo") is True:
        return True
    return node is not None and (node in DEMO_NAMES or node.startswith("demo:"))


def is_demo(entries: Sequence[TimelineEntry]) -> bool:
    """Every node the incident names is a simulated one (marked in its facts, or named ``demo``)."""
    facts = first_facts(entries)
    nodes = {e.node for e in entries if e.node}
    return bool(nodes) and all(is_demo_node(n, facts.get(n)) for n in nodes)


def node_text(node: str | None, facts: Mapping[str, Any] | None) -> str:
    """"gpu07: 8 × NVIDIA H100 80GB HBM3, driver 580.95.05, kernel 6.8.0-87-generic"."""
    name = node or "the node"
    if not isinstance(facts, Mapping):
        return f"{name}: not recorded (the timeline was written before the console recorded a node's facts)"
    models = [g for g in facts.get("gpus") or () if isinstance(g, Mapping)]
    gpus = ", ".join(f"{g.get('count', '?')} × {g.get('model', '?')}" for g in models) or "GPUs not read"
    parts = [gpus, f"driver {facts.get('driver') or 'not read'}", f"kernel {facts.get('kernel') or 'not read'}"]
    host = facts.get("hostname")
    if host and host != node:
        parts.append(f"host name {host}")
    demo = " (a simulated demo node)" if facts.get("demo") else ""
    return f"{name}: " + ", ".join(str(p) for p in parts) + demo


def workload_text(group: Mapping[str, Any]) -> str:
    """One group of holders: owner, how many, their commands, the process that started them, the
    Slurm job and the container."""
    commands = [str(c) for c in group.get("commands") or ()]
    n = group.get("pids") if isinstance(group.get("pids"), int) else len(commands)
    shown = ", ".join(f"`{_code(c)}`" for c in commands)
    more = " …" if isinstance(n, int) and n > len(commands) else ""
    out = f"{n} process{'es' if n != 1 else ''} of user {markdown_text(group.get('user') or '?')}: {shown}{more}"
    parent = group.get("parent")
    if isinstance(parent, Mapping):
        out += (f"; started by PID {markdown_text(parent.get('pid'))} ({markdown_text(parent.get('user') or '?')}) "
                f"`{_code(parent.get('command') or '')}`")
    job = group.get("job")
    out += (f"; Slurm job {markdown_text(job)} (user {markdown_text(group.get('job_user') or group.get('user') or '?')})"
            if job else "; no Slurm job (no holder's cgroup names one)")
    if group.get("container"):
        out += f"; container {markdown_text(group['container'])}"
    if group.get("pod"):
        out += f"; Kubernetes pod {markdown_text(group['pod'])}"
    return out


def _code(text: object) -> str:
    """Words inside a code span: one line, no backtick (it would end the span), bounded."""
    return " ".join(str(text).split()).replace("`", "'")[:160]


def detection(entries: Sequence[TimelineEntry]) -> str:
    """How the incident was detected, in words, from its first entries."""
    for e in entries[:12]:
        if e.kind == "note" and e.text.startswith(GATE_NOTE):
            return f"the gate (`gpu-incident gate`, a Prolog/Epilog check) found the node not clean: " \
                   f"{markdown_text(e.text[len(GATE_NOTE):], 240)}"
        if e.kind == "note" and e.text.startswith(WATCH_NOTE):
            return f"the watch (`gpu-incident watch`) opened it: {markdown_text(e.text[len(WATCH_NOTE):], 240)}"
        if e.kind == "note" and e.node is None and e.text.startswith(CONSOLE_STARTED):
            return f"a person: {markdown_text(e.by)} started the console on {markdown_text(e.text[len(CONSOLE_STARTED):])}"
    if entries:
        return f"a person: {markdown_text(entries[0].by)} (the incident's first entry, {markdown_text(entries[0].kind)})"
    return "not recorded"


def fact_lines(entries: Sequence[TimelineEntry]) -> list[str]:
    """The postmortem's "The node and the workload" section (heading included)."""
    nodes = list(dict.fromkeys(e.node for e in entries if e.node))
    if not nodes:
        return []
    facts, work = first_facts(entries), first_workload(entries)
    out = ["## The node and the workload", ""]
    for node in nodes:
        out.append(f"- **Node** {markdown_text(node_text(node, facts.get(node)))}")
        if node in work:
            groups = work[node]
            if not groups:
                out.append("  - workload: no process of a job held a GPU at the first reading "
                           "(only the node's own programs, or memory no process accounts for)")
            for g in groups:
                out.append(f"  - workload: {workload_text(g)}")
        else:
            out.append("  - workload: not recorded (no reading of the node that held memory carried it)")
    return out + [""]
