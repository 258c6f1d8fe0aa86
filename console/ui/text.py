"""The one way text reaches the screen: literally, never as markup.

Every string the console shows may have come from a node (process names, command lines,
GPU names and UUIDs, command output), a file (a nodes file, a timeline, a config) or a
person (a hypothesis, a note, a custom command line). Textual parses a plain ``str`` as
markup in a DataTable cell, a Static, a notification, an OptionList prompt and a border
title: ``[/bogus]`` there raises MarkupError and takes the console down, ``[b]x[/b]`` is
rendered bold, ``[@click=app.quit]`` becomes a live action. So the UI never hands Textual a
plain ``str`` that it would parse:

- ``literal(value)`` / ``block(value)``: a rich ``Text`` built from :func:`printable` (escape
  codes shown as ``\\x1b``, brackets as brackets); build every ``Text`` from these or from
  ``Text.append`` of ``printable`` pieces (``Text`` never parses markup).
- ``LiteralTable``: a DataTable whose cells and column labels pass through ``cell``.
- ``LiteralStatic`` / ``LiteralOptionList``: markup off; a ``str`` becomes ``block(str)``.
- ``LiteralInput``: what a person types or pastes is kept printable (an escape code pasted
  into a prompt is shown, and recorded, as ``\\x1b``: Textual would send it raw).
- ``LiteralNotify``: mixed into every App here, so ``notify`` (the app's and every
  screen's, which delegates to it) shows its message and title literally.
- ``set_title(widget, value)``, ``set_subtitle``: border titles and subtitles as Text.
- ``literal_content(value)``: for a Textual API that takes only markup (the command palette's
  help line, where a key remapped in a config file shows): a ``Content``, which it keeps as is.

tests/test_ui_literal.py feeds markup and escape codes through every surface, and checks
that no module under console/ui/ builds those widgets or parses markup any other way.
"""
from __future__ import annotations

from typing import Any, Iterable

from rich.text import Text
from textual.content import Content
from textual.widgets import Input, OptionList, Static

from console.textsafe import printable
from console.ui.widening_table import WideningTable

__all__ = ["literal", "block", "cell", "cells", "printable", "set_title", "set_subtitle", "literal_content",
           "LiteralTable", "LiteralStatic", "LiteralOptionList", "LiteralInput", "LiteralNotify"]


def literal(value: object, style: str = "", limit: int | None = None) -> Text:
    """One line as a rich Text that never parses markup ("[bold]" stays "[bold]")."""
    return Text(printable(value, limit), style=style, no_wrap=True)


def block(value: object, style: str = "") -> Text:
    """Several lines (newlines kept, every other control character escaped) as a Text."""
    return Text(printable(value, keep="\n"), style=style)


def cell(value: Any) -> Any:
    """A DataTable cell or label as Textual will not parse it: a ``Text`` is kept as it is
    (the same object: tables.sync_table sorts rows by it), anything else becomes
    ``literal(value)``."""
    if isinstance(value, Text):
        return value
    return literal("" if value is None else value)


def cells(values: Iterable[Any]) -> tuple:
    return tuple(cell(v) for v in values)


def literal_content(value: object) -> Content:
    """Plain Content: Textual's ``Content.from_markup`` returns a Content unparsed."""
    return Content(printable(value))


def set_title(widget: Any, value: object, style: str = "") -> None:
    """A border title, literally (Textual parses a ``str`` border title as markup)."""
    widget.border_title = value if isinstance(value, Text) else literal(value, style)


def set_subtitle(widget: Any, value: object, style: str = "") -> None:
    """A border subtitle (the bottom border's), literally; None or "" takes it away."""
    setattr(widget, "border_subtitle", literal(value, style) if value else None)


class LiteralTable(WideningTable):
    """A DataTable that shows every cell and column label literally (``cell``), drawn again
    when a column widens (console/ui/widening_table.py)."""

    def add_column(self, label: Any, *, width: int | None = None, key: str | None = None,
                   default: Any = None) -> Any:
        return super().add_column(cell(label), width=width, key=key,
                                  default=None if default is None else cell(default))

    def add_row(self, *values: Any, height: int | None = 1, key: str | None = None,
                label: Any = None) -> Any:
        return super().add_row(*cells(values), height=height, key=key,
                               label=None if label is None else cell(label))

    def update_cell(self, row_key: Any, column_key: Any, value: Any, *, update_width: bool = False) -> None:
        super().update_cell(row_key, column_key, cell(value), update_width=update_width)


class LiteralStatic(Static):
    """A Static with markup off; a ``str`` is shown as ``block(str)``."""

    def __init__(self, content: Any = "", **kwargs: Any) -> None:
        kwargs["markup"] = False
        super().__init__(self._safe(content), **kwargs)

    @staticmethod
    def _safe(content: Any) -> Any:
        return block(content) if isinstance(content, str) else content

    def update(self, content: Any = "", *, layout: bool = True) -> None:
        super().update(self._safe(content), layout=layout)


class LiteralOptionList(OptionList):
    """An OptionList with markup off (prompts are shown as given)."""

    def __init__(self, *content: Any, **kwargs: Any) -> None:
        kwargs["markup"] = False
        super().__init__(*content, **kwargs)


class LiteralInput(Input):
    """An Input whose value stays printable (Textual's reactive validator hook)."""

    def validate_value(self, value: str) -> str:
        return printable(value)


class LiteralNotify:
    """Mixed into an App (before App): every notification is plain text, escape codes shown.
    Screens' and widgets' ``notify`` delegate to the app's, so this covers them too."""

    def notify(self, message: Any, *, title: Any = "", severity: Any = "information",
               timeout: float | None = None, markup: bool = False) -> None:
        super().notify(printable(message, keep="\n"), title=printable(title), severity=severity,  # type: ignore[misc]
                       timeout=timeout, markup=False)
