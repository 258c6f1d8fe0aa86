"""Rendering untrusted strings (process names, command lines) literally."""
from __future__ import annotations

from rich.text import Text

from console.textsafe import printable

__all__ = ["literal", "printable"]


def literal(value: object, style: str = "", limit: int | None = None) -> Text:
    """A rich Text that never parses markup ("[bold]" stays "[bold]")."""
    return Text(printable(value, limit), style=style, no_wrap=True)
