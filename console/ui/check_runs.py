"""Checks from the keys: ``w`` (wait and re-read), ``c`` (the picker, then the parameters the
selection does not give), their progress while they run and their result window. A check is
read-only and lands in the timeline; the picker's last entry, a command of the operator's own,
is not a check: it is planned as an action (console/ui/escalation.py, Confirm first).

``CheckRuns`` belongs to the App (``app.checks``) and uses its public view: the node in view
(``current()``), the selection (``selected_pids()``), ``say``/``notify``, ``present`` (a result
waits while a prompt is open), ``set_activity`` and the session on its engine."""
from __future__ import annotations

import math
from typing import Any, Callable

from rich.text import Text

from console.ui.text import printable

#: the shortest wait of ``w`` (longer where freeing memory usually took longer here)
WAIT_S = 5


class CheckRuns:
    def __init__(self, app: Any) -> None:
        self.app = app
        self._runs = 0          # checks started: each its own line of work in progress

    def wait_recheck(self) -> None:
        """w: wait and re-read; as long as memory usually takes to come back here after what was
        last done to this node (console/incident/freetimes.py), at least WAIT_S, at most 300 s."""
        from console.incident import freetimes
        app = self.app
        node = app.current_node
        seconds = WAIT_S
        if app.timeline is not None:
            done = app.done_rungs(node)
            after = done[-1] if done else "job"
            kept = freetimes.load(app.timeline.path.parent)
            hit = freetimes.usually(kept, after, node)
            if hit is not None:
                seconds = max(WAIT_S, min(300, math.ceil(hit[0])))
                app.say(f"{node}: {freetimes.said(kept, after, node)}: waiting {seconds} s")
        self.run("wait-and-reread", {"seconds": seconds})

    def pick(self) -> None:
        """c: the check picker (every check, then a command of one's own)."""
        from console.rungs import CUSTOM
        from console.actions.plan import CUSTOM_DESCRIPTION
        from console.checks.registry import CHECKS
        from console.ui.prompts import CheckPicker

        def chosen(name: str | None) -> None:
            if name:
                self.ask_params(name)
        entries = [(c.name, c.description) for c in CHECKS.values()] + [(CUSTOM.id, CUSTOM_DESCRIPTION)]
        self.app.push_screen(CheckPicker(entries), chosen)

    def ask_params(self, name: str) -> None:
        """Fill a check's parameters: PIDs from the selection, the rest asked for. The custom
        entry is not a check: it goes to the escalation's own command (an action)."""
        from console.rungs import CUSTOM
        from console.checks.registry import CHECKS
        from console.ui.prompts import TextPrompt
        app = self.app
        if name == CUSTOM.id:
            app.escalation.custom_command()
            return
        check = CHECKS[name]
        params: dict[str, object] = {}
        pending = []
        pids = app.selected_pids()
        for p in check.params:
            if p.kind == "pids" and pids:
                params[p.name] = tuple(pids)
            elif p.name == "pid" and pids:
                params[p.name] = pids[0]
            elif p.required or p.name in ("port", "seconds"):
                pending.append(p)

        def ask(index: int) -> None:
            if index == len(pending):
                self.run(name, params)
                return
            p = pending[index]

            def got(value: str | None) -> None:
                if value is None:
                    return
                params[p.name] = value if value.strip() or p.default is None else p.default
                ask(index + 1)
            default = "" if p.default in (None, ()) else str(p.default)
            app.push_screen(TextPrompt(f"{name}: {p.help or p.name}", value=default,
                                       hint="enter runs the check, escape cancels"), got)
        ask(0)

    def run(self, name: str, params: dict, then: Callable[[Any, int | None], None] | None = None) -> None:
        """Run a check off the keys: its progress in the status line while it runs (a wait says
        how far it is and what came back at every read), its result shown when it ends — or,
        when a prompt or another window is open, kept until that closes (never over what the
        operator is typing). ``then(result, seq)``: what follows instead of the result window (a
        step whose check makes its plan: Confirm)."""
        from console.checks.registry import render
        app = self.app
        source, snap = app.current()
        if source is None:
            return
        try:
            render(name, **params)          # bad parameters: one line now, before anything runs
        except ValueError as exc:
            app.notify(str(exc), severity="error")
            return
        self._runs += 1
        key = f"check-{self._runs}"
        app.set_activity(key, f"{source.name}: {name} running…", f"{_short_name(name)}…")
        # in words: the command (probe framing and all) is in the result's window and the timeline
        app.notify(f"{source.name}: {name} running (a read-only check)…", timeout=4)

        def progress(p) -> None:
            app.set_activity(key, f"{p.node}: {p.text}", f"{_short_name(p.name)} {p.elapsed_s:.0f}/{p.total_s:.0f} s")

        async def work() -> None:
            try:           # progress is told on the engine's loop, drawn on this one
                result = await app.facade.run_check(source, name, snap, progress=progress, **params)
            except ValueError as exc:
                app.notify(str(exc), severity="error")
                return
            finally:
                app.set_activity(key, None)
            entry = await app.facade.record_check(result)
            seq = entry.seq if entry else None
            # the status line says it ended, with what it found (not "running …" any more)
            app.say(f"{result.node}: {result.name}: {result.summary}")
            if then is not None and result.rc is not None:
                await then(result, seq)
                return
            app.present(f"{result.name} on {result.node}: {result.summary}", lambda: self.show(result, seq))
        app.run_worker(work(), group="checks", exclusive=False)

    def show(self, result, seq: int | None) -> None:
        """A check's result window: its digest, the exact command, its exit status, its output."""
        from console.checks.registry import digest
        from console.incident.readings import reads_table
        from console.ui.details import DetailScreen
        body = Text()
        body.append(f"{result.name} on {printable(result.node)}", style="bold")
        body.append(f"   (timeline #{seq})\n\n" if seq else "\n\n", style="dim")
        body.append(printable(result.summary) + "\n", style="bold")
        for line in digest(result.name, result.raw):
            body.append("  " + printable(line) + "\n")
        body.append("\n")
        for i, line in enumerate(result.command.splitlines() or [""]):   # a multi-line command, as lines
            body.append(("$ " if i == 0 else "  ") + printable(line) + "\n", style="italic")
        body.append(f"exit status {result.rc}\n\n" if result.rc is not None else "did not finish\n\n",
                    style="dim")
        # a wait's reads one line each, as the timeline and the postmortem show them (no ::t= framing)
        lines = (reads_table(result.raw) if result.name == "wait-and-reread" else []) or result.raw.splitlines()
        for line in lines[:200]:
            body.append(printable(line) + "\n")
        if len(lines) > 200:
            body.append(f"… {len(lines) - 200} more lines (the timeline keeps the output)\n", style="dim")
        self.app.push_screen(DetailScreen(body))


def _short_name(check: str) -> str:
    """A running check as the status line at the top names it (few words: it shares the line)."""
    return "wait" if check == "wait-and-reread" else check
