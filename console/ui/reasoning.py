"""Keys of the incident's reasoning: hypotheses (h), verdicts (v), notes (n) and the postmortem
(e). Nothing here changes a node; everything lands in the timeline.

``Reasoning`` belongs to the App (``app.reasoning``): it reads the incident and the node in view
and opens the prompts."""
from __future__ import annotations

from typing import Any


class Reasoning:
    def __init__(self, app: Any) -> None:
        self.app = app

    def hypothesis(self) -> None:
        from console.ui.prompts import TextPrompt
        app = self.app

        def got(text: str | None) -> None:
            if text and text.strip():
                entry = app.incident.hypothesis(app.current_node, text)
                label = app.incident.number(entry.seq) if entry else "?"
                app.notify(f"hypothesis {label} open: test it with w or c, then v")
        app.push_screen(TextPrompt("State a hypothesis", placeholder="e.g. the memory needs more time to come back",
                                   hint="it stays open until you give a verdict (v)"), got)

    def verdict(self) -> None:
        from console.ui.prompts import VerdictScreen
        app = self.app
        hyp = app.incident.open_hypothesis()
        if hyp is None:
            app.notify("no open hypothesis: state one first (h)", severity="warning")
            return
        suggested, why = app.incident.suggest_verdict()

        def got(verdict: str | None) -> None:
            if verdict:
                app.incident.verdict(app.current_node, verdict)
                app.notify(f"hypothesis {label}: {verdict}")
        label = app.incident.number(hyp.seq)
        app.push_screen(VerdictScreen(f"{label}: {hyp.text}", suggested, why), got)

    def note(self) -> None:
        from console.ui.prompts import TextPrompt
        app = self.app

        def got(text: str | None) -> None:
            if text and text.strip():
                app.incident.note(app.current_node, text)
        app.push_screen(TextPrompt("Note", placeholder="what you see, what you decided"), got)

    def export(self) -> None:
        from console.ui.postmortem import write_postmortem
        app = self.app
        if app.timeline is None:
            app.notify("no timeline to export", severity="warning")
            return
        path = app.timeline.path.with_suffix(".md")
        try:   # 0600, a temp file renamed over it: a symlink planted at <id>.md is never followed
            _, chart = write_postmortem(app.timeline.refresh(), app.timeline.path, path,
                                        app.timeline.incident_id, app.memory_data())
        except OSError as exc:
            app.notify(f"export failed: {exc}", severity="error")
            return
        app.notify(f"postmortem written: {path}" + (f" (chart: {chart})" if chart else ""), timeout=8)
