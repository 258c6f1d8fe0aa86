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


#: characters that make links, images, HTML, code and emphasis of plain text in Markdown
#: (CommonMark, GitHub's), backslash-escaped: a link or an image needs "[", HTML and autolinks "<";
#: the rest (] ( ) - # _ …) mean nothing mid-line without those (an intraword _ is no emphasis)
_MARKDOWN = set("`*[<|")
_PUNCTUATION = set("!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~")
#: what a line may not start with, or it becomes a heading, a list, a quote or a rule
_LINE_START = tuple("#-+=>") + tuple(f"{d}." for d in range(10))
#: what GitHub turns into a live link with no markup at all: broken by a word joiner (U+2060),
#: invisible where the text is read, so the words stay as they were and link nowhere
_AUTOLINKS = (("://", ":\u2060//"), ("www.", "www\u2060."))


def markdown_text(value: object, limit: int | None = None, *, line_start: bool = True) -> str:
    """One printable line (:func:`one_line`) that a Markdown viewer shows as the same words and
    no markup: what would make a link, an image, HTML, code or emphasis backslash-escaped (and a
    backslash that would escape the next character), with ``line_start`` a leading character that
    would make a heading or a list, and what GitHub would autolink (a URL, ``www.``) broken. For
    untrusted text in prose (``line_start=False`` in a table cell): process names, command lines,
    outputs outside fences."""
    text = one_line(value, limit)
    out = []
    for i, ch in enumerate(text):
        if ch in _MARKDOWN or (ch == "\\" and i + 1 < len(text) and text[i + 1] in _PUNCTUATION):
            out.append("\\")
        out.append(ch)
    text = "".join(out)
    if line_start and text.startswith(_LINE_START):
        text = "\\" + text
    for seq, broken in _AUTOLINKS:
        text = text.replace(seq, broken)
    return text
