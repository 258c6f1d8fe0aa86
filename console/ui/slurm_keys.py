"""Slurm in the console: the node's Slurm line (state, reason, the jobs that own its GPU
processes) and the two rungs, D (drain) and U (resume), through Confirm like every action.

Shown only where Slurm is present (console/sources/slurm.py: scontrol and squeue found where
Slurm commands run, and the node known to Slurm); elsewhere the line stays hidden and D/U say
why nothing can be done. The reading is refreshed every SLURM_POLL_S for the node in view,
off the UI thread, and at once after a drain or resume.
"""
from __future__ import annotations

from rich.text import Text

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


class SlurmKeys:
    """Mixed into IncidentApp (needs: slurm, sources, snapshots, current_node, timeline, policy,
    monitors, read_only, dry_run, notify, push_screen, run_worker, set_interval, query)."""

    slurm = None

    def start_slurm(self) -> None:
        self.slurm_readings: dict = {}
        self._slurm_drawn = None            # the Slurm line's text on screen
        if self.slurm is None:
            return
        self.set_interval(SLURM_POLL_S, self.refresh_slurm)
        self.refresh_slurm()

    def refresh_slurm(self) -> None:
        if self.slurm is not None:
            self.run_worker(self._read_slurm(self.current_node), group="slurm", exclusive=True)

    async def _read_slurm(self, name: str) -> None:
        snap = self.snapshots.get(name)
        reading = await self.engine.call(lambda: self.slurm.read(name, snap))   # its SSH client: the engine's
        self.slurm_readings[name] = reading
        if name == self.current_node:
            self.render_slurm()

    def slurm_reading(self):
        """The node in view's last Slurm reading when Slurm is present, else None."""
        reading = getattr(self, "slurm_readings", {}).get(self.current_node)
        return reading if reading is not None and reading.present else None

    def render_slurm(self) -> None:
        if not self.query("#slurm"):
            return
        widget = self.query_one("#slurm", LiteralStatic)
        reading = self.slurm_reading()
        if reading is None:
            if widget.display:
                widget.display = False
                self.call_after_refresh(self.fit_panels)
            return
        from console.actions.ladder import top_step
        from console.actions.slurm import drain_first
        snap = self.snapshots.get(self.current_node)
        top = top_step(snap.findings) if snap is not None else None
        text = slurm_text(reading, snap, drain_first(top.rung if top else None, reading.node))
        if text != self._slurm_drawn:       # an update re-lays the screen out: only on a change
            self._slurm_drawn = text
            widget.update(text)
        if not widget.display:
            widget.display = True
            self.call_after_refresh(self.fit_panels)

    def _slurm_target(self):
        """(reading, source, snap) for D/U, or None after saying why."""
        reading = self.slurm_reading()
        if self.slurm is None or reading is None:
            why = ("no Slurm here (scontrol/squeue not found where Slurm commands run)" if self.slurm is None
                   else "this node is not known to Slurm (or Slurm has not answered yet)")
            self.notify(f"D/U drain and resume in Slurm: {why}", severity="warning")
            return None
        source = next((s for s in self.sources if s.name == self.current_node), None)
        return reading, source, self.snapshots.get(self.current_node)

    def action_drain(self, finding=None) -> None:
        from console.actions.slurm import plan_drain, reason_finding
        target = self._slurm_target()
        if target is None:
            return
        reading, source, snap = target
        if finding is None and self.query("#findings") and self.focused is self.query_one("#findings"):
            finding = self.selected_finding
        plan = plan_drain(self.current_node, reading.slurm_name, self.incident_id or "",
                          reason_finding(snap, finding), where=self.slurm.where, state=reading.node, snap=snap)
        self._confirm_slurm(plan, reading.slurm_name)

    def action_resume(self) -> None:
        from console.actions.slurm import plan_resume
        target = self._slurm_target()
        if target is None:
            return
        reading, source, snap = target
        plan = plan_resume(self.current_node, reading.slurm_name, snap, where=self.slurm.where, state=reading.node,
                           incident_id=self.incident_id)
        self._confirm_slurm(plan, reading.slurm_name)

    def drain_before(self, finding) -> bool:
        """A finding's step is a reset/reboot and Slurm still schedules onto the node: the drain
        goes to Confirm first (x again afterwards for the step itself). True when it did."""
        from console.actions.slurm import drain_first
        reading = self.slurm_reading()
        if reading is None or not drain_first(finding.rung, reading.node):
            return False
        self.notify(f"{reading.slurm_name} still takes jobs in Slurm: drain it first, then x again for the "
                    f"{finding.rung}")
        self.action_drain(finding)
        return True

    def _confirm_slurm(self, plan, slurm_name: str) -> None:
        from console.actions.slurm import SlurmActionSource
        from console.ui.confirm import ConfirmScreen
        if not plan.commands:
            why = "; ".join(plan.refusals) or "nothing to do"
            self.notify(f"{plan.title}: nothing to run — {why}", severity="warning", timeout=8)
            return
        node = plan.node

        def answered(answer: str | None) -> None:
            if not answer:
                self.notify("cancelled: nothing ran")
                return
            source = SlurmActionSource(self.slurm, node, slurm_name)
            self.run_worker(self._execute_slurm(plan, source), group="actions", exclusive=False)
        self.push_screen(ConfirmScreen(plan, read_only=self.read_only, dry_run=self.dry_run), answered)

    async def _execute_slurm(self, plan, source) -> None:
        await self.engine.call(lambda: self.session.execute(plan, source=source, poll_s=0.5))   # events say how
        if plan.node == self.current_node:
            await self._read_slurm(plan.node)
