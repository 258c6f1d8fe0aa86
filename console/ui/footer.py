"""The footer, fitted to the terminal's width: the keys of the panel in focus and the console's
own, dropping the least important (console/ui/keys.py ``rank``) until the rest fit, so `? Help`
and `q Quit` are there at 80 columns. Every key stays in Help and the command palette."""
from __future__ import annotations

from textual.app import ComposeResult
from textual.widgets import Footer

from console.ui import keys

#: a key's cells in the footer besides its key and label: padding around the key, after the label
_KEY_EXTRA = 3
#: the command palette's key, docked right ("▏^p palette")
_PALETTE_CELLS = 14


def fitted(items: list[tuple[int, int]], width: int) -> set[int]:
    """Indexes of the items (rank, cells) to keep within ``width``: the lowest ranks first,
    ties in order; rank 0 always."""
    keep = {i for i, (rank, _) in enumerate(items) if rank == 0}
    used = sum(items[i][1] for i in keep)
    for i in sorted(range(len(items)), key=lambda i: (items[i][0], i)):
        if i in keep:
            continue
        if used + items[i][1] > width:
            break
        keep.add(i)
        used += items[i][1]
    return keep


class QuietFooter(Footer):
    """A footer composed again only when what it shows would change: Textual recomposes a
    footer whenever its screen's bindings are announced again (a window opened over the screen
    or closed, a focus move), and a recompose mounts every key anew and lays the whole screen
    out again (~10 ms at 80x24, twice for every window opened and closed)."""

    _shown: tuple = ()

    def _showing(self) -> tuple:
        """What compose would show now: the screen's shown keys, their state, and the width."""
        bindings = tuple((binding.key, binding.action, binding.description, enabled, tooltip)
                         for (_, binding, enabled, tooltip) in self.screen.active_bindings.values()
                         if binding.show)
        return bindings, self.size.width or self.app.size.width

    def bindings_changed(self, screen) -> None:  # noqa: ANN001 - Textual's signal hands the Screen
        if self._bindings_ready and self.is_attached and screen is self.screen and self._showing() == self._shown:
            return
        super().bindings_changed(screen)

    def compose(self) -> ComposeResult:
        if self._bindings_ready:
            self._shown = self._showing()
        yield from super().compose()


class FittedFooter(QuietFooter):
    def compose(self) -> ComposeResult:
        widgets = list(super().compose())
        # a key is what has an action (Textual's FooterKey, not exported: no private import)
        bound = [w for w in widgets if isinstance(getattr(w, "action", None), str)
                 and not w.has_class("-command-palette")]
        others = [w for w in widgets if w not in bound]
        width = (self.size.width or self.app.size.width) - (_PALETTE_CELLS if others else 0)
        items = [(keys.rank_of_action(w.action), len(w.key_display) + len(w.description) + _KEY_EXTRA)
                 for w in bound]
        keep = fitted(items, width)
        yield from (w for i, w in enumerate(bound) if i in keep)
        yield from others

    def on_resize(self) -> None:
        self.call_after_refresh(self.recompose)
