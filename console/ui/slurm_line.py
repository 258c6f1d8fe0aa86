"""Slurm in the console: the node's Slurm line (state, reason, the jobs that own its GPU
processes) and the two rungs, D (drain) and U (resume), through Confirm like every action.

``SlurmLine`` is a widget of its own (it was a mixin of the App's): it keeps the readings and
its timer, draws itself, and says when it shows or hides (``SlurmLine.Shown``: the App shares
the rows again); the App's D and U, and x before a reset or reboot, ask it.

Shown only where Slurm is present (console/sources/slurm.py: scontrol and squeue found where
Slurm commands run, and the node known to Slurm); elsewhere the line stays hidden and D/U say
why nothing can be done. The reading is refreshed every SLURM_POLL_S for the node in view,
off the UI thread, and at once after a drain or resume.
"""
from __future__ import annotations

from rich.text import Text
from textual.message import Message

from console.ui.text import LiteralStatic, printable

#: how often the node in view's Slurm state and jobs are read
SLURM_POLL_S = 5.0
#: jobs shown in the line (the rest counted)
JOBS_SHOWN = 3


def slurm_text(reading, snap=None, drain_advised: bool = False) -> Text:
    """The Slurm line: ``Slurm demo: IDLE+DRAIN (gpu-incident …: xid) · job 12 alice "train"
    RUNNING 1:02:03 (GPU PIDs 4242)``; every value from Slurm or the node printed literally."""
    out = Text()
    out.append("Slurm ", style="bold")
    out.append(printable(reading.slurm_name or "?", 40), style="bold")
    if reading.node is None:
        out.append(": " + printable(reading.error or "not read", 100), style="bold red")
        return out
    node = reading.node
    out.append(": ")
    out.append(printable(node.state, 30), style="bold yellow" if node.drained else "bold")
    if node.reason and node.drained:
        out.append(f" ({printable(node.reason, 80)})", style="dim")
    if drain_advised:
        out.append("  not drained: D before the reset/reboot", style="bold yellow")
    owned = reading.gpu_jobs
    jobs = sorted(reading.jobs, key=lambda j: j.job_id not in owned)   # the GPU holders' jobs first
    for job in jobs[:JOBS_SHOWN]:
        out.append(" · job ")
        out.append(printable(job.job_id, 12), style="bold")
        if job.ambiguous:
            out.append(" (scontrol's record repeats a field: not read)", style="red")
        else:
            if job.user:
                out.append(" " + printable(job.user, 16))
            if job.name is not None:
                out.append(" " + printable(repr(job.name) if "\n" in job.name else f'"{job.name}"', 40))
            if job.state:
                out.append(" " + printable(job.state, 40))
            if job.elapsed:
                out.append(" " + printable(job.elapsed, 14))
        pids = owned.get(job.job_id)
        if pids:
            more = f" +{len(pids) - 3}" if len(pids) > 3 else ""
            out.append(f" (GPU PIDs {', '.join(map(str, pids[:3]))}{more})", style="cyan")
    if len(jobs) > JOBS_SHOWN:
        out.append(f" · {len(jobs) - JOBS_SHOWN} more jobs", style="dim")
    if not jobs:
        out.append(" · no job", style="dim")
    if reading.error:
        out.append("  ⚠ " + printable(reading.error, 60), style="yellow")
    if reading.note:
        out.append("  ⚠ " + printable(reading.note, 100), style="yellow")
    return out


class SlurmLine(LiteralStatic):
    """The node in view's Slurm line; hidden where Slurm is absent or does not know the node.
    Reads the App's (its parent's) view: ``current_node``, ``snapshots``, ``sources``, the
    engine and the session, the incident's ID and the policy flags."""

    class Shown(Message):
        """The line came or went: the panels below it share the rows again."""

        def __init__(self, shown: bool) -> None:
            super().__init__()
            self.shown = shown

    def __init__(self, slurm=None, **kwargs) -> None:
        super().__init__(**kwargs)
        self.slurm = slurm                  # console/sources/slurm.py SlurmClient, or None
        self.readings: dict = {}
        self._drawn: Text | None = None     # the text on screen
        self.display = False

    def on_mount(self) -> None:
        if self.slurm is not None:
            self.set_interval(SLURM_POLL_S, self.refresh_reading)
            self.refresh_reading()

    def refresh_reading(self) -> None:
        if self.slurm is not None:
            self.run_worker(self._read(self.app.current_node), group="slurm", exclusive=True)

    async def _read(self, name: str) -> None:
        app = self.app
        snap = app.snapshots.get(name)
        reading = await app.facade.connection_call(lambda: self.slurm.read(name, snap))   # its SSH client: the engine's
        self.readings[name] = reading
        if name == app.current_node:
            self.redraw()

    def reading(self):
        """The node in view's last Slurm reading when Slurm is present, else None."""
        reading = self.readings.get(self.app.current_node)
        return reading if reading is not None and reading.present else None

    def _show(self, shown: bool) -> None:
        if self.display != shown:
            self.display = shown
            self.post_message(self.Shown(shown))

    def redraw(self) -> None:
        reading = self.reading()
        if reading is None:
            self._show(False)
            return
        from console.actions.ladder import top_step
        from console.actions.slurm import drain_first
        snap = self.app.snapshots.get(self.app.current_node)
        top = top_step(snap.findings) if snap is not None else None
        text = slurm_text(reading, snap, drain_first(top.rung if top else None, reading.node))
        if text != self._drawn:             # an update re-lays the screen out: only on a change
            self._drawn = text
            self.update(text)
        self._show(True)

    def _target(self):
        """(reading, snap) for D/U, or None after saying why."""
        reading = self.reading()
        if self.slurm is None or reading is None:
            why = ("no Slurm here (scontrol/squeue not found where Slurm commands run)" if self.slurm is None
                   else "this node is not known to Slurm (or Slurm has not answered yet)")
            self.app.notify(f"D/U drain and resume in Slurm: {why}", severity="warning")
            return None
        return reading, self.app.snapshots.get(self.app.current_node)

    def drain(self, finding=None) -> None:
        """D: drain the node in view (the reason names the incident and ``finding``)."""
        from console.actions.slurm import plan_drain, reason_finding
        target = self._target()
        if target is None:
            return
        reading, snap = target
        app = self.app
        plan = plan_drain(app.current_node, reading.slurm_name, app.incident_id or "",
                          reason_finding(snap, finding), where=self.slurm.where, state=reading.node, snap=snap)
        self._confirm(plan, reading.slurm_name)

    def resume(self) -> None:
        """U: resume the node in view."""
        from console.actions.slurm import plan_resume
        target = self._target()
        if target is None:
            return
        reading, snap = target
        app = self.app
        plan = plan_resume(app.current_node, reading.slurm_name, snap, where=self.slurm.where, state=reading.node,
                           incident_id=app.incident_id)
        self._confirm(plan, reading.slurm_name)

    def drain_before(self, finding) -> bool:
        """A finding's step is a reset/reboot and Slurm still schedules onto the node: the drain
        goes to Confirm first (x again afterwards for the step itself). True when it did."""
        from console.actions.slurm import drain_first
        reading = self.reading()
        if reading is None or not drain_first(finding.rung, reading.node):
            return False
        self.app.notify(f"{reading.slurm_name} still takes jobs in Slurm: drain it first, then x again for the "
                        f"{finding.rung}")
        self.drain(finding)
        return True

    def _confirm(self, plan, slurm_name: str) -> None:
        from console.actions.slurm import SlurmActionSource
        from console.ui.confirm import ConfirmScreen
        app = self.app
        if not plan.commands:
            why = "; ".join(plan.refusals) or "nothing to do"
            app.notify(f"{plan.title}: nothing to run — {why}", severity="warning", timeout=8)
            return
        node = plan.node

        def answered(answer: str | None) -> None:
            if not answer:
                app.notify("cancelled: nothing ran")
                return
            source = SlurmActionSource(self.slurm, node, slurm_name)
            self.run_worker(self._execute(plan, source), group="actions", exclusive=False)
        app.push_screen(ConfirmScreen(plan, read_only=app.read_only, dry_run=app.dry_run), answered)

    async def _execute(self, plan, source) -> None:
        app = self.app
        await app.facade.execute(plan, source=source, poll_s=0.5)   # events say how
        if plan.node == app.current_node:
            await self._read(plan.node)
