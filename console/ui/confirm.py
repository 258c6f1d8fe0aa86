"""The "Confirm" modal: node, exact command lines and every target, before anything runs."""
from __future__ import annotations

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Input

from console.actions.plan import ActionPlan
from console.ui.text import LiteralInput, LiteralStatic, printable


def plan_text(plan: ActionPlan, *, read_only: bool, dry_run: bool) -> Text:
    out = Text()
    out.append("Confirm\n", style="bold reverse")
    out.append(f"\n{printable(plan.title)} on ", style="bold")
    out.append(printable(plan.node) + "\n\n", style="bold yellow")
    out.append("Will run, exactly:\n", style="bold")
    for command in plan.commands:
        out.append("  $ " + printable(command) + "\n", style="bold")
    if plan.targets:
        out.append(f"\n{'PID':>8} {'USER':<10} S {'GPU MiB':>8}  NAME / COMMAND LINE\n", style="bold")
        for t in plan.targets:
            d = f"  {t.threads_in_d} thread(s) in D" if t.threads_in_d else ""
            out.append(f"{t.pid:>8} {printable(t.user or '?', 10):<10} {printable(t.state, 1)} {t.gpu_total_mib or '':>8}  ")
            out.append(printable(t.name) + d + "\n", style="bold")
            out.append("          " + printable(t.cmdline or f"[{t.name}]") + "\n", style="dim")
            if t.why:       # why it is a target at all (F: what it holds of the GPU)
                out.append("          ↳ " + printable(t.why) + "\n", style="italic")
    for note in plan.notes:
        out.append("\n⚠ " + printable(note), style="yellow")
    for refusal in plan.refusals:
        out.append("\n✖ left out: " + printable(refusal), style="dim")
    out.append("\n\n")
    if read_only:
        out.append("READ-ONLY: this will be refused and recorded, nothing runs.\n", style="bold yellow")
    elif dry_run:
        out.append("DRY-RUN: the commands are recorded, not run.\n", style="bold yellow")
    if plan.typed_confirmation:
        out.append(f"Type the node's name ({printable(plan.typed_confirmation)}) and press enter; "
                   "escape cancels.", style="bold")
    else:
        out.append("y: run it    n / escape: cancel", style="bold")
    return out


class ConfirmScreen(ModalScreen[str | None]):
    """Dismisses with "y" (or the typed name) to run, None to cancel."""
    BINDINGS = [Binding("escape", "cancel", "Cancel"), Binding("n", "cancel", "No", show=False),
                Binding("y", "confirm", "Yes", show=False)]

    def __init__(self, plan: ActionPlan, *, read_only: bool = False, dry_run: bool = False) -> None:
        super().__init__()
        self.plan = plan
        self._body = plan_text(plan, read_only=read_only, dry_run=dry_run)

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="confirm"):
            yield LiteralStatic(self._body)
            if self.plan.typed_confirmation:
                yield LiteralInput(placeholder=printable(self.plan.typed_confirmation), id="typed")

    def on_mount(self) -> None:
        if self.plan.typed_confirmation:
            self.query_one("#typed", Input).focus()

    def action_confirm(self) -> None:
        if not self.plan.typed_confirmation:
            self.dismiss("y")

    def action_cancel(self) -> None:
        self.dismiss(None)

    @on(Input.Submitted, "#typed")
    def _typed(self, event: Input.Submitted) -> None:
        if event.value == self.plan.typed_confirmation:
            self.dismiss(event.value)
        else:
            self.notify("the name does not match: nothing runs", severity="warning")
