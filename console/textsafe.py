"""Untrusted text (process names, command lines, command output) made safe to show.

Control characters and escape sequences come out as ``\\xNN`` (``\\uNNNN`` above 0xff),
never interpreted by a terminal, a Markdown viewer or a widget. Textual-free: the UI
(console/ui/text.py), the exports and the parsers all use these.
"""
from __future__ import annotations


def printable(value: object, limit: int | None = None, *, keep: str = "") -> str:
    """``value`` as text with every non-printable character escaped (a tab becomes a space),
    at most ``limit`` characters (the last one then "…"). Characters in ``keep`` (for
    example "\\t\\n" for a multi-line block) pass through unchanged."""
    out = []
    for ch in str(value):
        if ch.isprintable() or ch in keep:
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


def one_line(value: object, limit: int | None = None) -> str:
    """One printable line: runs of whitespace (newlines included) become one space, then
    :func:`printable`."""
    return printable(" ".join(str(value).split()), limit)
