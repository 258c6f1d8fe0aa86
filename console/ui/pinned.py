"""Modals whose head and foot stay in view while their middle scrolls (Confirm, details):
at 80x24 the prompt of a Confirm with nine targets, or a finding's `x`, is never below the fold."""
from __future__ import annotations

from textual.screen import Screen
from textual.widget import Widget

from console.ui.text import LiteralStatic


def fit_middle(screen: Screen, box: Widget, middle: Widget, share: float) -> bool:
    """The middle of ``box`` (at most ``share`` of the screen high, with a border) gets what
    the pinned parts leave. True when what it holds is taller: it scrolls."""
    pinned = sum(w.outer_size.height for w in box.children if w is not middle and w.display)
    room = max(3, int(screen.size.height * share) - box.styles.gutter.height - pinned)
    middle.styles.max_height = room
    held = sum(w.outer_size.height for w in middle.children) + middle.styles.gutter.height
    return held > room


def text_of(screen: Screen) -> str:
    """Everything a modal shows, as plain text, top to bottom."""
    return "\n".join(str(w.render()) for w in screen.query(LiteralStatic))
