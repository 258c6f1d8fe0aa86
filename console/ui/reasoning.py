"""Keys of the incident's reasoning: hypotheses (h), verdicts (v), notes (n) and the postmortem
(e). Nothing here changes a node; everything lands in the timeline.

``Reasoning`` belongs to the App (``app.reasoning``): it opens the prompts; what is written, and
what the open hypothesis is, goes through the engine's door (console/session/facade.py)."""
from __future__ import annotations

from typing import Any


class Reasoning:
    def __init__(self, app: Any) -> None:
        self.app = app

    def hypothesis(self) -> None:
        from console.ui.prompts import TextPrompt
        app = self.app

        node = app.current_node

        async def write(text: str) -> None:
            _, label = await app.facade.hypothesis(node, text)
            app.notify(f"hypothesis {label} open: test it with w or c, then v")

        def got(text: str | None) -> None:
            if text and text.strip():
                app.run_worker(write(text), group="record")
        app.push_screen(TextPrompt("State a hypothesis", placeholder="e.g. the memory needs more time to come back",
                                   hint="it stays open until you give a verdict (v)"), got)

    def verdict(self) -> None:
        self.app.run_worker(self._verdict(), group="record")

    async def _verdict(self) -> None:
        from console.ui.prompts import VerdictScreen
        app = self.app
        node = app.current_node
        hyp, label, suggested, why = await app.facade.verdict_wanted()
        if hyp is None:
            app.notify("no open hypothesis: state one first (h)", severity="warning")
            return

        async def write(verdict: str) -> None:
            await app.facade.verdict(node, verdict)
            app.notify(f"hypothesis {label}: {verdict}")

        def got(verdict: str | None) -> None:
            if verdict:
                app.run_worker(write(verdict), group="record")
        app.push_screen(VerdictScreen(f"{label}: {hyp.text}", suggested, why), got)

    def note(self) -> None:
        from console.ui.prompts import TextPrompt
        app = self.app

        node = app.current_node

        def got(text: str | None) -> None:
            if text and text.strip():
                app.run_worker(app.facade.note(node, text), group="record")
        app.push_screen(TextPrompt("Note", placeholder="what you see, what you decided"), got)

    def export(self) -> None:
        self.app.run_worker(self._export(), group="record")

    async def _export(self) -> None:
        from console.ui.postmortem import write_postmortem
        app = self.app
        if app.timeline is None:
            app.notify("no timeline to export", severity="warning")
            return
        path = app.timeline.path.with_suffix(".md")
        try:   # 0600, a temp file renamed over it: a symlink planted at <id>.md is never followed
            _, chart = write_postmortem(app.timeline.refresh(), app.timeline.path, path,
                                        app.timeline.incident_id, await app.facade.memory_data())
        except OSError as exc:
            app.notify(f"export failed: {exc}", severity="error")
            return
        app.notify(f"postmortem written: {path}" + (f" (chart: {chart})" if chart else ""), timeout=8)
