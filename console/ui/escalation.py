"""Keys of the escalation ladder: t, k, F9 (a signal of one's choice), F, R, B, x's rungs, a
command of the operator's own (the check picker's last entry), and reload/reboot from the
palette.

Every destructive action goes plan -> Confirm (exact commands, every target) -> guarded
execute -> verified timeline entry; --read-only and --dry-run are enforced by the action layer,
planning and executing are the session's (console/session/core.py).

``Escalation`` belongs to the App (``app.escalation``) and uses its public view: the node in
view (``current()``), the selection (``selected_pids()``, ``selected_gpu``, ``tagged``), the
Slurm line (drain before a reset), the check runs (a step that begins with a check), ``say``/
``notify``, ``present`` and the session on its engine.
"""
from __future__ import annotations

from typing import Any

from console import rungs
from console.session.core import custom_output
from console.sources.base import Source
from console.ui.check_runs import WAIT_S
from console.ui.text import printable


class Escalation:
    def __init__(self, app: Any) -> None:
        self.app = app

    def apply_finding(self, finding) -> None:
        """A finding's next step (console/actions/step.py), planned by the session on the engine
        like every other key's (a whole read first where the rung needs one; the loop stops
        in Confirm): waiting is the wait-and-reread check, a rung goes to Confirm."""
        source, snap = self.app.current()
        if source is None or snap is None:
            self.app.notify("no reading of this node yet", severity="warning")
            return
        if rungs.of(finding.rung).check is None and self.app.slurm_line.drain_before(finding):
            return                      # Slurm: drain first (ui/slurm_line.py)
        if rungs.of(finding.rung).whole_first and not source.whole_is_fresh():
            self.app.notify(f"{source.name}: reading every process first…", timeout=3)
        self.app.run_worker(self._apply(finding, source), group="escalation")

    async def _apply(self, finding, source: Source) -> None:
        try:
            step = await self.app.facade.step(source.name, finding, wait_default=WAIT_S)
        except ValueError as exc:
            self.app.notify(str(exc), severity="error")
            return
        if step is None or self.app.current()[0] is not source:
            return                   # nothing to do, or the operator moved to another node meanwhile
        if step.plan is not None and self.app.read_only:
            self.refused_read_only(step.plan)
            return
        if step.check is not None:
            then = self.plan_after(step, source) if step.then else None
            self.app.checks.run(step.check[0], dict(step.check[1]), then=then)
        else:
            self.confirm(step.plan, source)

    def apply_everywhere(self, finding) -> None:
        """X: this finding's step on every node whose next step is the same (its kind and rung),
        planned by the session on each node, in one Confirm; each node's plan then runs through
        the same guarded execute as x's, recorded and verified on its own. A wait, a check, a
        step Slurm wants drained first or a typed confirmation is taken node by node (x)."""
        from console.actions.ladder import top_step
        app = self.app
        same = []
        for source in app.sources:
            snap = app.snapshots.get(source.name)
            top = top_step(snap.findings) if snap is not None and snap.error is None else None
            if top is not None and top.kind == finding.kind and top.rung == finding.rung:
                same.append((source, top))
        r = rungs.of(finding.rung)
        if r.check is not None:
            app.say(f"X: {finding.rung} is a read-only step: take it node by node (x)", "warning")
            return
        if r.drain_first and app.slurm_line.reading() is not None:
            app.say(f"X: Slurm drains each node first before {r.id}: take it node by node (D, then x)", "warning")
            return
        if len(same) < 2:
            app.say(f"X: no other node's next step is {finding.kind} → {finding.rung}; x takes this one")
            return
        app.notify(f"X: planning {finding.rung} on {len(same)} nodes…", timeout=3)
        app.run_worker(self._plan_everywhere(same), group="escalation")

    async def _plan_everywhere(self, same) -> None:
        app = self.app
        plans, skipped, sources = [], [], {}
        for source, finding in same:
            try:
                step = await app.facade.step(source.name, finding, wait_default=WAIT_S)
            except ValueError as exc:
                skipped.append(f"{source.name}: {exc}")
                continue
            plan = step.plan if step is not None else None
            if plan is None or not plan.commands:
                skipped.append(f"{source.name}: " + ("; ".join(plan.refusals) if plan else "no step now"))
            elif plan.typed_confirmation:
                skipped.append(f"{source.name}: {plan.title} asks for the node's name: take it there (x)")
            else:
                plans.append(plan)
                sources[plan.node] = source
        if not plans:
            app.say("X: nothing to run on any node — " + "; ".join(skipped), "warning")
            return
        if app.read_only:
            for plan in plans:
                self.refused_read_only(plan)
            return
        from console.ui.confirm import ManyConfirmScreen

        def answered(answer: str | None) -> None:
            if not answer:
                app.notify("cancelled: nothing ran on any node")
                return
            for plan in plans:
                self.execute(plan, sources[plan.node])
        app.push_screen(ManyConfirmScreen(plans, skipped, read_only=app.read_only, dry_run=app.dry_run), answered)

    def plan_after(self, step, source: Source):
        """What follows a step's check (the MPS clients' list): the plan its answer makes, in
        Confirm — only the tagged processes count as chosen (the cursor always sits on one)."""
        node = source.name

        async def then(result, seq) -> None:
            chosen = [int(k.rsplit(":", 1)[1]) for k in self.app.tagged if k.rsplit(":", 1)[0] == node]
            try:
                plan, why = await self.app.facade.after_check(node, step, result, chosen=chosen)
            except ValueError as exc:
                self.app.notify(str(exc), severity="error")
                return
            if plan is None:             # no daemon answered, the server is gone: what it said, whole
                self.app.say(f"{node}: {result.name}: {why}", "warning")
                self.app.present(f"{result.name} on {node}: {result.summary}", lambda: self.app.checks.show(result, seq))
                return
            if self.app.read_only:
                self.refused_read_only(plan)
                return
            self.app.present(f"{plan.title} on {node}", lambda: self.confirm(plan, source))
        return then

    def refused_read_only(self, plan) -> None:
        """x under --read-only: its step would be refused, said with its exact commands, instead
        of a Confirm that offers to run it."""
        commands = "; ".join(plan.commands) or "nothing to run"
        self.app.say(f"READ-ONLY: the next step would be refused: {plan.title} on {plan.node} "
                     f"($ {printable(commands, 160)}) — nothing runs from this console", "warning")

    async def act(self, rung: str) -> None:
        source, snap = self.app.current()
        if source is None or snap is None:
            self.app.notify("no reading of this node yet", severity="warning")
            return
        pids = gpus = None
        r = rungs.of(rung)
        if r.on_processes and not r.whole_first:
            pids = self.app.selected_pids()
            if not pids:
                self.app.notify("select or tag processes first (space tags)", severity="warning")
                return
        elif r.whole_first:
            gpu = self.app.selected_gpu
            if gpu is None:
                self.app.notify("select a GPU first (tab to the GPU table)", severity="warning")
                return
            gpus = [gpu]
        if r.whole_first and not source.whole_is_fresh():
            # every holder, not only those the probe watches (a hidden one may have come since
            # the last whole read): the node reads all its processes first
            self.app.notify(f"{source.name}: reading every process first…", timeout=3)
        await self._confirm_planned(source, lambda: self.app.facade.plan(source.name, rung, pids=pids or (),
                                                                         gpus=gpus or (), seen=snap))

    def signal_menu(self) -> None:
        """F9: choose a signal (SIGTERM first) for the selected/tagged processes -> Confirm."""
        from console.ui.signal_menu import SignalMenu
        source, snap = self.app.current()
        if source is None or snap is None:
            self.app.notify("no reading of this node yet", severity="warning")
            return
        pids = self.app.selected_pids()
        if not pids:
            self.app.notify("select or tag processes first (space tags)", severity="warning")
            return
        node = source.name

        def chosen(sig: str | None) -> None:
            if sig is None:
                return
            source, snap = self._still_in_view(node, need_reading=True)
            if source is None or snap is None:
                return
            self._plan_then_confirm(source, lambda: self.app.facade.plan(node, "signal", pids=pids, signal=sig,
                                                                          seen=snap))
        self.app.push_screen(SignalMenu(pids, node), chosen)

    def _plan_then_confirm(self, source: Source, make) -> None:
        """Plan on the engine (the session's door), then Confirm on this screen (a worker)."""
        self.app.run_worker(self._confirm_planned(source, make), group="escalation")

    async def _confirm_planned(self, source: Source, make) -> None:
        """``await make()`` (a plan, through the facade), then Confirm it — unless it cannot be
        planned (said) or the operator moved to another node meanwhile (nothing to confirm)."""
        try:
            plan = await make()
        except ValueError as exc:
            self.app.notify(str(exc), severity="error")
            return
        if self.app.current()[0] is source:
            self.confirm(plan, source)

    def custom_command(self) -> None:
        """A command line of the operator's own: typed, then planned as an action -> Confirm."""
        from console.ui.prompts import TextPrompt
        app = self.app
        source, _ = app.current()
        if source is None:
            return
        node = source.name

        def got(line: str | None) -> None:
            if line is None:
                return
            source, snap = self._still_in_view(node)
            if source is None:
                return
            self._plan_then_confirm(source, lambda: app.facade.plan_custom(node, line, seen=snap))
        app.push_screen(TextPrompt(f"Your own command on {printable(node, 40)}",
                                   placeholder="e.g. nvidia-smi -q -d PIDS",
                                   hint="an action: Confirm shows it first; refused under --read-only, "
                                        "recorded only under --dry-run"), got)

    def _still_in_view(self, node: str, need_reading: bool = False):
        """(source, snapshot) of the node in view when it is still ``node`` (a prompt was open
        meanwhile) and, with ``need_reading``, has a reading; else (None, None), said."""
        source, snap = self.app.current()
        if source is None or source.name != node or (need_reading and snap is None):
            self.app.notify(f"{node} is no longer the node in view: nothing runs", severity="warning")
            return None, None
        return source, snap

    def confirm(self, plan, source: Source) -> None:
        """Confirm (exact commands, every target), then the guarded execute; nothing runs unanswered."""
        if not plan.commands:
            why = "; ".join(plan.refusals) or "nothing to do"
            self.app.notify(f"{plan.title}: nothing to run — {why}", severity="warning", timeout=8)
            return
        from console.ui.confirm import ConfirmScreen
        self.app.read_whole_table(source)       # every process fresh while the operator reads Confirm

        def answered(answer: str | None) -> None:
            if answer:
                self.execute(plan, source, typed=answer if plan.typed_confirmation else None)
            else:
                self.app.notify("cancelled: nothing ran")
        self.app.push_screen(ConfirmScreen(plan, read_only=self.app.read_only, dry_run=self.app.dry_run), answered)

    def execute(self, plan, source: Source, *, typed: str | None = None) -> None:
        """The session's executor (console/session/core.py); its events say what happened."""
        async def work() -> None:
            outcome = await self.app.facade.execute(plan, typed=typed)
            if custom_output(outcome):          # never over an open prompt
                self.app.present(f"{plan.title} on {plan.node}: output", lambda: self.show_output(outcome))
        self.app.run_worker(work(), group="actions", exclusive=False)

    def show_output(self, outcome) -> None:
        """What a command of the operator's own printed (as a check's result is shown)."""
        from rich.text import Text

        from console.ui.details import DetailScreen
        plan, entry = outcome.plan, outcome.entry
        body = Text()
        body.append(f"{printable(plan.title)} on {printable(plan.node)}", style="bold")
        body.append(f"   (timeline #{entry.seq}, an action)\n\n" if entry is not None else "\n\n", style="dim")
        body.append(printable(outcome.text) + "\n\n")
        body.append("$ " + printable(plan.commands[0]) + "\n", style="italic")
        body.append(f"exit status {outcome.rc}\n\n" if outcome.rc is not None else "did not finish\n\n",
                    style="dim")
        for line in outcome.output.splitlines()[:200]:
            body.append(printable(line) + "\n")
        self.app.push_screen(DetailScreen(body))
