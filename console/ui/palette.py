"""The command palette (ctrl+p): every action and check, driver reload and reboot included."""
from __future__ import annotations

from functools import partial
from typing import Callable

from textual.command import DiscoveryHit, Hit, Hits, Provider


def _commands(app) -> list[tuple[str, Callable[[], object], str]]:
    from console.checks.registry import CHECKS
    out: list[tuple[str, Callable[[], object], str]] = [
        ("SIGTERM the selected/tagged processes", partial(app.action_act, "sigterm"), "t — Confirm first"),
        ("SIGKILL the selected/tagged processes", partial(app.action_act, "sigkill"), "k — Confirm first"),
        ("Kill every holder of the selected GPU's device files", partial(app.action_act, "kill-holders"),
         "F — each holder listed by PID; never fuser -k"),
        ("Clear reset blockers of the selected GPU", partial(app.action_act, "clear-blockers"),
         "B — persistence mode, nvidia-persistenced, MPS, DCGM"),
        ("Reset the selected GPU (nvidia-smi -r)", partial(app.action_act, "reset"), "R"),
        ("Reload the NVIDIA driver on this node", partial(app.action_act, "reload-driver"),
         "palette only: type the node's name to confirm"),
        ("Reboot this node", partial(app.action_act, "reboot"), "palette only: type the node's name to confirm"),
        ("Wait and recheck GPU memory", app.action_wait_recheck, "w"),
        ("State a hypothesis", app.action_hypothesis, "h"),
        ("Verdict on the open hypothesis", app.action_verdict, "v"),
        ("Note", app.action_note, "n"),
        ("Export the timeline as Markdown", app.action_export, "e"),
        ("Filter processes", app.action_filter, "/"),
        ("Show all processes / GPU-related only", app.action_toggle_all, "a"),
        ("Help: every key", app.action_help, "?"),
    ]
    for check in CHECKS.values():
        out.append((f"Check: {check.name}", partial(app._ask_params, check.name), check.description))
    return out


class IncidentCommands(Provider):
    async def discover(self) -> Hits:
        for name, callback, help_text in _commands(self.app):
            yield DiscoveryHit(name, callback, help=help_text)

    async def search(self, query: str) -> Hits:
        matcher = self.matcher(query)
        for name, callback, help_text in _commands(self.app):
            score = matcher.match(name)
            if score > 0:
                yield Hit(score, matcher.highlight(name), callback, help=help_text)
