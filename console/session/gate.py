"""`gpu-incident gate`: are these nodes' GPUs clean, for the next job? Fail closed.

A node is clean when every health signal of console/diagnosis/fitness.py reads ok or n/a (it
answered, every GPU is there and on the bus, no recovery action, no fresh Xid, no repair due, the
fabric up, nothing stuck, no workload holding a GPU — the node's own programs allowed); a signal
that cannot be read is not clean. The gate polls every node as the console does until each is clean or ``--wait`` passes, and
measures each one's time-to-free. A node still held, or one that could not be read, fails: the
gate then opens an incident with what it saw (the snapshot's findings, and the read-only checks
that name the holders, their thread states and wchan, and the kernel log) before anything is
killed, and with ``--drain`` drains the node in Slurm through the console's own drain action.
"""
from __future__ import annotations

import asyncio
import os
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from console.actions.slurm import SlurmActionSource, plan_drain, reason_finding
from console.clock import REAL_CLOCK, Clock
from console.diagnosis import fitness
from console.model import Finding, NodeSnapshot
from console.incident import freetimes, gatemarks
from console.incident.timeline import Timeline
from console.session import evidence, node_record
from console.session.core import Session
from console.sources.base import Source
from console.sources.slurm import SlurmClient
from console.textsafe import one_line

#: how often the gate reads each node while it waits
GATE_INTERVAL_S = 1.0
#: node errors that waiting does not mend (no driver, the wrong library, no GPU, no nvidia-smi):
#: the gate says so at once instead of waiting out --wait; a node unreachable or timing out is
#: read again until the wait is over
PERMANENT_ERRORS = ("driver not loaded", "no nvidia driver", "shared library not found", "version mismatch",
                    "no devices", "nvidia-smi not found")
PASSING_ERRORS = ("timed out", "unreachable", "refused")


def permanent(error: str | None) -> bool:
    """A node error no wait mends (see PERMANENT_ERRORS)."""
    low = (error or "").lower()
    return bool(low) and not any(w in low for w in PASSING_ERRORS) and any(w in low for w in PERMANENT_ERRORS)


@dataclass
class GateNode:
    name: str
    clean: bool = False
    seconds_to_free: float | None = None      # from the gate's start to its first clean reading
    held: str | None = "not read yet"         # why it is not clean (one line)
    snapshot: NodeSnapshot | None = None
    evidence: list[str] = field(default_factory=list)   # the timeline entries that hold it
    drained: str | None = None                # the drain's outcome line, with --drain
    usually: str = ""                         # "memory usually comes back within N s here (…)"
    signals: list[fitness.Signal] = field(default_factory=list)   # every health signal, at the last reading
    permanent: bool = False                   # an error no wait mends: said at once, not waited out


async def wait_clean(session: Session, wait_s: float, *, interval: float = GATE_INTERVAL_S,
                     clock: Clock = REAL_CLOCK, marks: dict[str, Any] | None = None,
                     window_s: float = fitness.KERNEL_WINDOW_S) -> list[GateNode]:
    """Read every node until each is clean or ``wait_s`` passes (at least one reading each).
    ``marks``: the last clean verdicts on record (console/incident/gatemarks.py)."""
    nodes = {name: GateNode(name) for name in session.names()}
    started = clock.now()
    first = True
    while True:
        pending = [m for m in session.monitors if not nodes[m.name].clean and not nodes[m.name].permanent]
        snaps = await asyncio.gather(*(m.poll_once() for m in pending))
        elapsed = clock.now() - started
        for snap in snaps:
            node = nodes[snap.name]
            node.snapshot = snap
            node.signals = fitness.signals(snap, clean_uptime_s=gatemarks.clean_uptime(marks or {}, snap),
                                           window_s=window_s)
            node.held = fitness.why_not(node.signals)
            if node.held is None:       # clean at the first reading: nothing had to come back
                node.clean, node.seconds_to_free = True, 0.0 if first else round(elapsed, 1)
            elif permanent(snap.error):
                node.permanent = True
        first = False
        left = wait_s - (clock.now() - started)
        if all(n.clean or n.permanent for n in nodes.values()) or left <= 0:
            return list(nodes.values())
        await clock.sleep(min(interval, left))


async def record_evidence(session: Session, node: GateNode, wait_s: float) -> None:
    """What the gate saw on a node that failed, into the incident, before anyone acts."""
    node.evidence += await evidence.record(
        session.incident, session.source(node.name), node.name, node.snapshot,
        hypothesis=f"the GPUs of {node.name} are not clean after the job: {node.held}",
        seen=f"gate: {node.name} after {wait_s:g} s: {node.held}")


async def drain(session: Session, node: GateNode, slurm: SlurmClient | None) -> None:
    """``--drain``: the console's own drain action (recorded before it is sent, verified)."""
    if slurm is None:
        node.drained = "not drained: no Slurm here (scontrol/squeue not found where Slurm commands run)"
        return
    reading = await slurm.read(node.name, node.snapshot)
    if reading is None or not reading.present or reading.slurm_name is None:
        node.drained = f"not drained: {node.name} is not known to Slurm"
        return
    finding = reason_finding(node.snapshot) if node.snapshot is not None and node.snapshot.findings else None
    if finding is None:        # a node that could not be read still has a cause to name
        kind = "probe-hung" if node.snapshot is not None and node.snapshot.error else "ghost-memory"
        finding = Finding(kind=kind, severity="high", summary=node.held or "", next_step="")
    timeline = session.timeline
    plan = plan_drain(node.name, reading.slurm_name, timeline.incident_id if timeline else "", finding,
                      where=slurm.where, state=reading.node, snap=node.snapshot)
    if not plan.commands:
        node.drained = "not drained: " + "; ".join(plan.refusals)
        return
    outcome = await session.execute(plan, source=SlurmActionSource(slurm, node.name, reading.slurm_name),
                                    poll_s=0.5)
    node.drained = outcome.text


def line(node: GateNode, wait_s: float, incident: str | None) -> str:
    """One log line per node (fits a Slurm log line: no newline, bounded)."""
    name = one_line(node.name, 80)
    usually = f"; {node.usually}" if node.usually else ""
    if node.clean:
        return f"gpu-incident gate: {name}: clean (GPUs back to idle in {node.seconds_to_free:g} s{usually})"
    when = "at once (waiting would not mend it)" if node.permanent else f"after {wait_s:g} s"
    out = f"gpu-incident gate: {name}: NOT CLEAN {when}: {one_line(node.held or '', 300)}{usually}"
    if incident:
        out += f"; incident {incident}"
    if node.drained:
        out += f"; {one_line(node.drained, 200)}"
    return out


def document(nodes: Sequence[GateNode], wait_s: float, incident: str | None) -> dict[str, Any]:
    """``--json``: the verdict, each node's time-to-free, the incident and the findings."""
    def findings(snap: NodeSnapshot | None) -> list[dict[str, Any]]:
        if snap is None:
            return []
        return [{"kind": f.kind, "severity": f.severity, "pids": list(f.pids), "gpus": list(f.gpus),
                 "summary": f.summary, "next_step": f.next_step} for f in snap.findings]
    return {"clean": all(n.clean for n in nodes), "wait_s": wait_s, "incident": incident,
            "nodes": [{"name": n.name, "clean": n.clean, "seconds_to_free": n.seconds_to_free,
                       "held": None if n.clean else n.held, "permanent": n.permanent,
                       "signals": {sg.name: sg.to_json() for sg in n.signals}, "evidence": n.evidence, "drained": n.drained,
                       "usually": n.usually or None,
                       "findings": [] if n.clean else findings(n.snapshot)} for n in nodes]}


async def run(sources: Sequence[Source], *, wait_s: float, open_incident: Callable[[], Timeline],
              slurm: SlurmClient | None = None, drain_nodes: bool = False, interval: float = GATE_INTERVAL_S,
              directory: str | os.PathLike[str] | None = None,
              kernel_window_s: float = fitness.KERNEL_WINDOW_S) -> tuple[list[GateNode], str | None]:
    """The whole gate: wait for clean; on failure open the incident (``open_incident()`` -> a
    Timeline), record the evidence, drain with ``drain_nodes``. (nodes, incident ID or None).
    ``directory``: the incident directory, where every time-to-free measured is kept and read
    back (console/incident/freetimes.py), and each node's last clean verdict (gatemarks.py:
    kernel lines after it are fresh; without one, those of the last ``kernel_window_s``)."""
    session = Session(sources)
    try:
        nodes = await wait_clean(session, wait_s, interval=interval, marks=gatemarks.load(directory),
                                 window_s=kernel_window_s)
        kept = freetimes.load(directory)
        for node in nodes:
            node.usually = freetimes.said(kept, "job", node.name)
            if node.clean and node.seconds_to_free:       # 0: nothing had to come back
                freetimes.record(directory, node.name, "job", node.seconds_to_free,
                                 demo=node_record.demo_source(session.source(node.name)))
            if node.clean and node.snapshot is not None:
                gatemarks.record(directory, node.snapshot)
        failed = [n for n in nodes if not n.clean]
        if not failed:
            return nodes, None
        timeline = open_incident()
        session.attach(timeline)
        session.incident.note(None, "gate: " + "; ".join(f"{n.name}: {n.held}" for n in failed))
        for node in failed:
            await record_evidence(session, node, wait_s)
        if drain_nodes:
            for node in failed:
                await drain(session, node, slurm)
        return nodes, timeline.incident_id
    finally:
        await session.stop()
