"""Rendering untrusted strings (process names, command lines) literally."""
from __future__ import annotations

from rich.text import Text


def printable(value: object, limit: int | None = None) -> str:
    """Control characters and escape sequences shown as \\xNN, never interpreted."""
    out = []
    for ch in str(value):
        if ch.isprintable():
            out.append(ch)
        elif ch == "\t":
            out.append(" ")
        else:
            code = ord(ch)
            out.append(f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}")
    text = "".join(out)
    if limit is not None and len(text) > limit:
        text = text[: max(0, limit - 1)] + "…"
    return text


def literal(value: object, style: str = "", limit: int | None = None) -> Text:
    """A rich Text that never parses markup ("[bold]" stays "[bold]")."""
    return Text(printable(value, limit), style=style, no_wrap=True)
