"""The "Confirm" modal: node, exact command lines and every target, before anything runs.

The prompt (`y: run it`, or the node's name to type) is pinned to the modal's bottom and the
command lines to its top; the targets between them scroll (↑ ↓ pgup pgdn home end), so at
80x24 nine targets never push the prompt below the fold."""
from __future__ import annotations

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.containers import Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Input

from console.actions.plan import ActionPlan
from console.ui import pair_driver, pinned
from console.ui.text import LiteralInput, LiteralStatic, printable
from console.ui import keys


def head_text(plan: ActionPlan) -> Text:
    """Pinned at the top: what runs, where, exactly."""
    out = Text()
    out.append("Confirm", style="bold reverse")
    out.append(f"  {printable(plan.title)} on ", style="bold")
    out.append(printable(plan.node) + "\n\n", style="bold yellow")
    out.append("Will run, exactly:\n", style="bold")
    for command in plan.commands:
        out.append("  $ " + printable(command) + "\n", style="bold")
    out.rstrip()
    return out


def body_text(plan: ActionPlan) -> Text:
    """Scrolls: every target (PID, user, state, GPU memory, name, command line), notes, refusals."""
    out = Text()
    if plan.targets:
        out.append(f"{len(plan.targets)} target{'s' if len(plan.targets) != 1 else ''}:\n", style="bold")
        out.append(f"{'PID':>8} {'USER':<10} S {'GPU MiB':>8}  NAME / COMMAND LINE\n", style="bold")
        for t in plan.targets:
            d = f"  {t.threads_in_d} thread(s) in D" if t.threads_in_d else ""
            out.append(f"{t.pid:>8} {printable(t.user or '?', 10):<10} {printable(t.state, 1)} {t.gpu_total_mib or '':>8}  ")
            out.append(printable(t.name) + d + "\n", style="bold")
            out.append("          " + printable(t.cmdline or f"[{t.name}]") + "\n", style="dim")
            if t.why:       # why it is a target at all (F: what it holds of the GPU)
                out.append("          ↳ " + printable(t.why) + "\n", style="italic")
            if t.usage or t.busy:   # what it is doing now: a busy target is a running job
                out.append("          " + ("⚡ BUSY, computing: " if t.busy else "↳ ") + printable(t.usage) + "\n",
                           style="bold yellow" if t.busy else "dim")
    for note in plan.notes:
        out.append("\n⚠ " + printable(note), style="yellow")
    for refusal in plan.refusals:
        out.append("\n✖ left out: " + printable(refusal), style="dim")
    out.rstrip()
    return out


def prompt_text(plan: ActionPlan, *, read_only: bool, dry_run: bool, scrolls: bool = False,
                problem: str = "") -> Text:
    """Pinned at the bottom: the answer the modal waits for."""
    out = Text()
    if read_only:
        out.append("READ-ONLY: refused, nothing runs from this console.\n", style="bold yellow")
    elif dry_run:
        out.append("DRY-RUN: the commands are recorded, not run.\n", style="bold yellow")
    if problem:
        out.append(printable(problem) + "\n", style="bold red")
    if plan.typed_confirmation:
        out.append(f"Type the node's name ({printable(plan.typed_confirmation)}) and press enter; "
                   "escape cancels.", style="bold")
    elif read_only:      # never "run it" where nothing can run
        out.append("y: record the refusal    n / escape: cancel", style="bold")
    else:
        out.append("y: run it    n / escape: cancel", style="bold")
    if scrolls:
        out.append("    ↓ pgdn end: more", style="dim")
    return out


def plan_text(plan: ActionPlan, *, read_only: bool, dry_run: bool) -> Text:
    """The whole Confirm as one text (head, targets, prompt): for tests and exports."""
    out = Text()
    for part in (head_text(plan), body_text(plan), prompt_text(plan, read_only=read_only, dry_run=dry_run)):
        out.append_text(part)
        out.append("\n")
    return out


class ConfirmScreen(ModalScreen[str | None]):
    """Dismisses with "y" (or the typed name) to run, None to cancel."""
    BINDINGS = keys.bindings("confirm")

    def __init__(self, plan: ActionPlan, *, read_only: bool = False, dry_run: bool = False) -> None:
        super().__init__()
        self.plan = plan
        self.read_only, self.dry_run = read_only, dry_run
        self._head = head_text(plan)
        self._body = body_text(plan)
        self._scrolls = False           # the targets are taller than the room: the prompt says ↑ ↓
        self._ran = False               # answered to run (the follower is told how it ended)

    @property
    def text(self) -> str:
        """Everything the modal shows, as plain text (head, targets, prompt)."""
        return pinned.text_of(self)

    def compose(self) -> ComposeResult:
        with Vertical(id="confirm"):
            yield LiteralStatic(self._head, id="confirm-head")
            with VerticalScroll(id="confirm-body"):
                yield LiteralStatic(self._body, id="confirm-targets")
            yield LiteralStatic(self._prompt(), id="confirm-prompt")
            if self.plan.typed_confirmation:
                yield LiteralInput(placeholder=printable(self.plan.typed_confirmation), id="typed")

    def _prompt(self, problem: str = "") -> Text:
        return prompt_text(self.plan, read_only=self.read_only, dry_run=self.dry_run, scrolls=self._scrolls,
                           problem=problem)

    def on_mount(self) -> None:
        pair_driver.confirm_opened(self.app, self.plan)      # a follower sees what is about to run
        if not self._body.plain:
            self.query_one("#confirm-body").display = False
        if self.plan.typed_confirmation:
            self.query_one("#typed", Input).focus()
        else:
            self.query_one("#confirm-body").focus()
        self.call_after_refresh(self._fit)

    def on_resize(self) -> None:
        self.call_after_refresh(self._fit)

    def _fit(self) -> None:
        """The targets get what the head, the prompt and the borders leave."""
        scrolls = pinned.fit_middle(self, self.query_one("#confirm"), self.query_one("#confirm-body"), 0.94)
        if scrolls != self._scrolls:
            self._scrolls = scrolls
            self.query_one("#confirm-prompt", LiteralStatic).update(self._prompt())

    def action_scroll(self, how: str) -> None:
        getattr(self.query_one("#confirm-body", VerticalScroll), f"scroll_{how}")()

    def on_unmount(self) -> None:
        pair_driver.confirm_answered(self.app, self._ran)

    def action_confirm(self) -> None:
        if not self.plan.typed_confirmation:
            self._ran = True
            self.dismiss("y")

    def action_cancel(self) -> None:
        self.dismiss(None)

    @on(Input.Submitted, "#typed")
    def _typed(self, event: Input.Submitted) -> None:
        if event.value == self.plan.typed_confirmation:
            self._ran = True
            self.dismiss(event.value)
        else:
            self.query_one("#confirm-prompt", LiteralStatic).update(
                self._prompt("the name does not match: nothing runs"))


def many_head_text(plans: list[ActionPlan]) -> Text:
    """One step on several nodes: each node's exact commands, node by node."""
    out = Text()
    out.append("Confirm", style="bold reverse")
    out.append(f"  the same step on {len(plans)} nodes\n\n", style="bold")
    out.append("Will run, exactly:\n", style="bold")
    for plan in plans:
        out.append("  on ", style="bold")
        out.append(printable(plan.node), style="bold yellow")
        out.append(f" — {printable(plan.title)}:\n", style="bold")
        for command in plan.commands:
            out.append("    $ " + printable(command) + "\n", style="bold")
    out.rstrip()
    return out


def many_body_text(plans: list[ActionPlan], skipped: list[str]) -> Text:
    """Scrolls: each node's targets (PIDs and names), notes, refusals; the nodes left out and why."""
    out = Text()
    for plan in plans:
        out.append(printable(plan.node) + ": ", style="bold yellow")
        if plan.targets:
            shown = ", ".join(f"{t.pid} {printable(t.name, 24)}" + (" ⚡BUSY" if t.busy else "")
                              for t in plan.targets[:6])
            more = f" and {len(plan.targets) - 6} more" if len(plan.targets) > 6 else ""
            out.append(f"{len(plan.targets)} target{'s' if len(plan.targets) != 1 else ''}: {shown}{more}\n")
        else:
            out.append("GPUs " + ", ".join(str(g) for g in plan.gpus) + "\n")
        for note in plan.notes:
            out.append("  ⚠ " + printable(note) + "\n", style="yellow")
        for refusal in plan.refusals:
            out.append("  ✖ left out: " + printable(refusal) + "\n", style="dim")
    for why in skipped:
        out.append("not in this step: " + printable(why) + "\n", style="dim")
    out.rstrip()
    return out


class ManyConfirmScreen(ConfirmScreen):
    """Confirm of one step on several nodes (X): every node's exact commands in one modal; `y`
    runs each node's plan through the same guarded execute, recorded and verified per node."""

    def __init__(self, plans: list[ActionPlan], skipped: list[str], *, read_only: bool = False,
                 dry_run: bool = False) -> None:
        summary = ActionPlan(node=", ".join(p.node for p in plans), rung=plans[0].rung,
                             title=f"{plans[0].title.split(' ')[0]} on {len(plans)} nodes",
                             commands=tuple(f"{p.node}: {c}" for p in plans for c in p.commands))
        super().__init__(summary, read_only=read_only, dry_run=dry_run)   # what a follower is shown
        self.plans = plans
        self._head = many_head_text(plans)
        self._body = many_body_text(plans, skipped)

    def _prompt(self, problem: str = "") -> Text:
        out = prompt_text(self.plan, read_only=self.read_only, dry_run=self.dry_run, scrolls=self._scrolls,
                          problem=problem)
        if not self.read_only and not self.plan.typed_confirmation:
            out = Text(out.plain.replace("y: run it", f"y: run it on the {len(self.plans)} nodes"), style="bold")
        return out
