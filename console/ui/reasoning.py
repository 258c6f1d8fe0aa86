"""Keys of the reasoning half: checks (w, c), hypotheses (h), verdicts (v), notes (n), export (e),
filter (/) and tagging (space). Nothing here changes a node; everything lands in the timeline.

The one entry of the check picker that could change a node — a command of the operator's own,
always the picker's last entry — is not a check: it is planned as an action
(console/actions/plan.py plan_custom) and goes through Confirm and the action layer
(console/ui/escalation.py), like every rung."""
from __future__ import annotations

from rich.text import Text
from textual.widgets import DataTable

from console.model import NodeSnapshot
from console.sources.base import Source
from console.ui.text import printable


class ReasoningKeys:
    """Mixed into IncidentApp (needs: sources, current_node, snapshots, incident, timeline,
    tagged, proc_filter, selected_process_key, notify, push_screen, run_worker)."""

    WAIT_S = 5

    # ---- reasoning: hypotheses, checks, verdicts, notes (non-destructive)
    def _current(self) -> tuple[Source | None, NodeSnapshot | None]:
        src = next((s for s in self.sources if s.name == self.current_node), None)
        return src, self.snapshots.get(self.current_node)

    def selected_pids(self) -> list[int]:
        """Tagged processes of the current node, else the one under the cursor."""
        keys = [k for k in self.tagged if k.rsplit(":", 1)[0] == self.current_node]
        if not keys and self.selected_process_key:
            keys = [self.selected_process_key]
        return sorted(int(k.rsplit(":", 1)[1]) for k in keys)

    def action_wait_recheck(self) -> None:
        """w: wait and re-read; as long as memory usually takes to come back here after what was
        last done to this node (console/incident/freetimes.py), at least WAIT_S, at most 300 s."""
        import math

        from console.incident import freetimes
        seconds = self.WAIT_S
        if self.timeline is not None:
            monitor = self.session.monitor(self.current_node)
            done = [a.rung for a in (monitor.actions if monitor else ()) if a.node in (None, self.current_node)]
            after = done[-1] if done else "job"
            kept = freetimes.load(self.timeline.path.parent)
            hit = freetimes.usually(kept, after, self.current_node)
            if hit is not None:
                seconds = max(self.WAIT_S, min(300, math.ceil(hit[0])))
                self.say(f"{self.current_node}: {freetimes.said(kept, after, self.current_node)}: waiting {seconds} s")
        self._run_check("wait-and-reread", {"seconds": seconds})

    def action_check(self) -> None:
        from console.actions.plan import CUSTOM_DESCRIPTION
        from console.actions.ladder import CUSTOM_RUNG
        from console.checks.registry import CHECKS
        from console.ui.prompts import CheckPicker

        def chosen(name: str | None) -> None:
            if name:
                self._ask_params(name)
        entries = [(c.name, c.description) for c in CHECKS.values()] + [(CUSTOM_RUNG, CUSTOM_DESCRIPTION)]
        self.push_screen(CheckPicker(entries), chosen)

    def action_custom_command(self) -> None:
        """A command line of the operator's own: typed, then planned as an action -> Confirm."""
        from console.actions.plan import plan_custom
        from console.ui.prompts import TextPrompt
        source, _ = self._current()
        if source is None:
            return
        node = source.name

        def got(line: str | None) -> None:
            if line is None:
                return
            source, snap = self._current()
            if source is None or source.name != node:
                self.notify(f"{node} is no longer the node in view: nothing runs", severity="warning")
                return
            try:
                plan = plan_custom(node, line, snap)
            except ValueError as exc:
                self.notify(str(exc), severity="error")
                return
            self._confirm(plan, source)
        self.push_screen(TextPrompt(f"Your own command on {printable(node, 40)}",
                                    placeholder="e.g. nvidia-smi -q -d PIDS",
                                    hint="an action: Confirm shows it first; refused under --read-only, "
                                         "recorded only under --dry-run"), got)

    def _ask_params(self, name: str) -> None:
        """Fill a check's parameters: PIDs from the selection, the rest asked for. The custom
        entry is not a check: it goes to action_custom_command (an action)."""
        from console.actions.ladder import CUSTOM_RUNG
        from console.checks.registry import CHECKS
        from console.ui.prompts import TextPrompt
        if name == CUSTOM_RUNG:
            self.action_custom_command()
            return
        check = CHECKS[name]
        params: dict[str, object] = {}
        pending = []
        pids = self.selected_pids()
        for p in check.params:
            if p.kind == "pids" and pids:
                params[p.name] = tuple(pids)
            elif p.name == "pid" and pids:
                params[p.name] = pids[0]
            elif p.required or p.name in ("port", "seconds"):
                pending.append(p)

        def ask(index: int) -> None:
            if index == len(pending):
                self._run_check(name, params)
                return
            p = pending[index]

            def got(value: str | None) -> None:
                if value is None:
                    return
                params[p.name] = value if value.strip() or p.default is None else p.default
                ask(index + 1)
            default = "" if p.default in (None, ()) else str(p.default)
            self.push_screen(TextPrompt(f"{name}: {p.help or p.name}", value=default,
                                        hint="enter runs the check, escape cancels"), got)
        ask(0)

    def _run_check(self, name: str, params: dict, then=None) -> None:
        """Run a check off the keys: its progress in the status line while it runs (a wait says
        how far it is and what came back at every read), its result shown when it ends — or,
        when a prompt or another window is open, kept until that closes (never over what the
        operator is typing). ``then(result, seq)``: what follows instead of the result window (a
        step whose check makes its plan: Confirm)."""
        from console.checks.registry import render
        source, snap = self._current()
        if source is None:
            return
        try:
            render(name, **params)          # bad parameters: one line now, before anything runs
        except ValueError as exc:
            self.notify(str(exc), severity="error")
            return
        self._check_runs = getattr(self, "_check_runs", 0) + 1
        key = f"check-{self._check_runs}"
        self.set_activity(key, f"{source.name}: {name} running…", f"{_short_name(name)}…")
        # in words: the command (probe framing and all) is in the result's window and the timeline
        self.notify(f"{source.name}: {name} running (a read-only check)…", timeout=4)

        def progress(p) -> None:
            self.set_activity(key, f"{p.node}: {p.text}", f"{_short_name(p.name)} {p.elapsed_s:.0f}/{p.total_s:.0f} s")
        hopped = self.engine.hop(progress)           # told on the engine's loop, drawn on this one

        async def work() -> None:
            try:
                result = await self.engine.call(lambda: self.session.run_check(
                    source, name, snap, progress=hopped, **params))
            except ValueError as exc:
                self.notify(str(exc), severity="error")
                return
            finally:
                self.set_activity(key, None)
            entry = self.incident.record_check(result)
            seq = entry.seq if entry else None
            # the status line says it ended, with what it found (not "running …" any more)
            self.say(f"{result.node}: {result.name}: {result.summary}")
            if then is not None and result.rc is not None:
                then(result, seq)
                return
            self.present(f"{result.name} on {result.node}: {result.summary}",
                         lambda: self._show_check(result, seq))
        self.run_worker(work(), group="checks", exclusive=False)

    # ---- what long work says while it runs, and results that wait for an open prompt
    def set_activity(self, key: str, text: str | None, short: str | None = None) -> None:
        """Work in progress (None: done): whole in the line above the footer, ``short`` (what
        and how far, never cut mid-number) in the status line at the top; ``running_work()`` has
        it as data (the live state hands it to a follower too)."""
        work = vars(self).setdefault("_running_work", {})
        if text is None:
            work.pop(key, None)
        else:
            work[key] = (text, short or text)
        if self.is_running and self.screen_stack and self.query("#status"):   # not while the app winds down
            self._render_status()
            self._render_activity()

    def running_work(self) -> list[str]:
        """What is running now, one line each ("demo: wait-and-reread: 15 of 86 s, …")."""
        try:           # also read from the engine's thread (the follower's state)
            return [text for text, _short in list(vars(self).get("_running_work", {}).values())]
        except RuntimeError:      # changed while read: the next write has it
            return []

    def status_activity(self, line: Text) -> None:
        """Appended to the status line by the app: work in progress (short), results kept for later."""
        for _text, short in list(vars(self).get("_running_work", {}).values()):
            line.append("  ⏳ " + printable(short, 40), style="bold cyan")
        waiting = self.__dict__.get("pending_results", [])
        if waiting:
            line.append(f"  ✔ {printable(waiting[0][0], 70)} — shown when this window closes"
                        + (f" (+{len(waiting) - 1})" if len(waiting) > 1 else ""), style="bold green")

    def present(self, headline: str, show) -> None:
        """Show a result window now — unless a prompt (or any other window) is open: then it waits
        in the status line and opens when the operator is back on the main screen."""
        pending = self.__dict__.setdefault("pending_results", [])
        if len(self.screen_stack) <= 1 and not pending:
            show()
            return
        pending.append((headline, show))
        # the status line at the top may be cut at 80 columns: the activity line says it whole
        self.notify(f"✔ {headline} — shown when this window closes")
        if not self.__dict__.get("_watching_screens"):
            self._watching_screens = True
            self.screen_change_signal.subscribe(self, self._screen_changed)
        self._render_status()

    def _screen_changed(self, screen) -> None:
        pending = self.__dict__.get("pending_results", [])
        if pending and len(self.screen_stack) <= 1:
            _, show = pending.pop(0)
            self._render_status()
            self.call_later(show)

    def _show_check(self, result, seq: int | None) -> None:
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
        self.push_screen(DetailScreen(body))

    def action_hypothesis(self) -> None:
        from console.ui.prompts import TextPrompt

        def got(text: str | None) -> None:
            if text and text.strip():
                entry = self.incident.hypothesis(self.current_node, text)
                label = self.incident.number(entry.seq) if entry else "?"
                self.notify(f"hypothesis {label} open: test it with w or c, then v")
        self.push_screen(TextPrompt("State a hypothesis", placeholder="e.g. the memory needs more time to come back",
                                    hint="it stays open until you give a verdict (v)"), got)

    def action_verdict(self) -> None:
        from console.ui.prompts import VerdictScreen
        hyp = self.incident.open_hypothesis()
        if hyp is None:
            self.notify("no open hypothesis: state one first (h)", severity="warning")
            return
        suggested, why = self.incident.suggest_verdict()

        def got(verdict: str | None) -> None:
            if verdict:
                self.incident.verdict(self.current_node, verdict)
                self.notify(f"hypothesis {label}: {verdict}")
        label = self.incident.number(hyp.seq)
        self.push_screen(VerdictScreen(f"{label}: {hyp.text}", suggested, why), got)

    def action_note(self) -> None:
        from console.ui.prompts import TextPrompt

        def got(text: str | None) -> None:
            if text and text.strip():
                self.incident.note(self.current_node, text)
        self.push_screen(TextPrompt("Note", placeholder="what you see, what you decided"), got)

    def action_export(self) -> None:
        from console.ui.postmortem import write_postmortem
        if self.timeline is None:
            self.notify("no timeline to export", severity="warning")
            return
        path = self.timeline.path.with_suffix(".md")
        try:   # 0600, a temp file renamed over it: a symlink planted at <id>.md is never followed
            _, chart = write_postmortem(self.timeline.refresh(), self.timeline.path, path,
                                        self.timeline.incident_id, self.memory_data())
        except OSError as exc:
            self.notify(f"export failed: {exc}", severity="error")
            return
        self.notify(f"postmortem written: {path}" + (f" (chart: {chart})" if chart else ""), timeout=8)

    def action_filter(self) -> None:
        from console.ui.prompts import TextPrompt

        def got(text: str | None) -> None:
            if text is not None:
                self.proc_filter = text.strip()
                self._render_status()
                self.refresh_procs()
        self.push_screen(TextPrompt("Filter processes (name, command line, PID or user; empty clears)",
                                    value=self.proc_filter), got)

    def action_clear_filter(self) -> None:
        """Escape on the process panel: the filter goes (with none, in fleet mode: the fleet)."""
        if self.proc_filter:
            self.proc_filter = ""
            self.say("process filter cleared")
            self._render_status()
            self.refresh_procs()
        elif getattr(self, "fleet_mode", False):
            self.action_fleet()

    def action_tag(self) -> None:
        key = self.selected_process_key
        if key is None:
            return
        self.tagged.symmetric_difference_update({key})
        self.refresh_procs()
        self.query_one("#procs").action_cursor_down()
        pid = key.rsplit(":", 1)[1]
        mine = sum(1 for k in self.tagged if k.rsplit(":", 1)[0] == self.current_node)
        now = self.selected_process_key
        moved = f"; the cursor moved down to PID {now.rsplit(':', 1)[1]}" if now and now != key else ""
        self.say(f"{'tagged' if key in self.tagged else 'untagged'} PID {pid} ({mine} tagged: t, k and "
                 f"F9 act on them){moved}")


def _short_name(check: str) -> str:
    """A running check as the status line at the top names it (few words: it shares the line)."""
    return "wait" if check == "wait-and-reread" else check
