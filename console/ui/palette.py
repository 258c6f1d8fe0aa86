"""The command palette (ctrl+p): every action and check, driver reload and reboot included.
Titles and keys come from console/ui/keys.py, so a remapped key shows here too."""
from __future__ import annotations

from functools import partial
from typing import Callable

from textual.command import DiscoveryHit, Hit, Hits, Provider

from console.ui import keys
from console.ui.text import literal_content


def _callback(app, action: str) -> Callable[[], object]:
    """A keys.py action string as a call: "act('sigterm')" or "wait_recheck"."""
    name, _, arg = action.partition("(")
    method = getattr(app, f"action_{name}")
    return partial(method, arg.rstrip(")").strip("'\"")) if arg else method


def _commands(app) -> list[tuple[str, Callable[[], object], str]]:
    from console.rungs import CUSTOM
    from console.actions.plan import CUSTOM_DESCRIPTION
    from console.checks.registry import CHECKS
    keymap = getattr(app, "keymap", {})
    out: list[tuple[str, Callable[[], object], str]] = []
    fleet = getattr(app, "fleet_mode", False)

    def off(action: str) -> bool:
        """A key that is off where the operator is (the fleet table: no node panels to act on)."""
        return app.check_action(action.partition("(")[0], ()) is False
    for k in keys.KEYS:
        if k.palette is not None and (fleet or not k.fleet_only) and not off(k.action) \
                and not (app.read_only and keys.off_read_only(k)):
            out.append((k.palette, _callback(app, k.action), f"{keys.key_of(k.id, keymap)} — {k.help}"))
    if off("act") or off("check"):
        return out
    if not app.read_only:                   # driver reload and reboot change the node
        for title, rung, hint in keys.PALETTE_ONLY:
            out.append((title, partial(app.action_act, rung), hint))
    for check in CHECKS.values():
        out.append((f"Check: {check.name}", partial(app.checks.ask_params, check.name), check.description))
    # a command of one's own is an action (Confirm, --read-only, --dry-run), as from the picker
    out.append((f"Check: {CUSTOM.id}", app.action_custom_command, CUSTOM_DESCRIPTION))
    return out


class IncidentCommands(Provider):
    async def discover(self) -> Hits:
        for name, callback, help_text in _commands(self.app):
            # help: literally (it names keys remapped in a config file; Textual parses a str)
            yield DiscoveryHit(name, callback, help=literal_content(help_text))  # type: ignore[arg-type]

    async def search(self, query: str) -> Hits:
        matcher = self.matcher(query)
        for name, callback, help_text in _commands(self.app):
            score = matcher.match(name)
            if score > 0:
                yield Hit(score, matcher.highlight(name), callback, help=literal_content(help_text))  # type: ignore[arg-type]
