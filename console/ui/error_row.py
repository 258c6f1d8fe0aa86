"""A failing node's error as the findings panel and its details show it: the remedy first and
whole (wrapped, never cut at 80 columns), then the error (console/output/remedy.py)."""
from __future__ import annotations

import textwrap

from rich.text import Text

from console.output.remedy import remedy_of
from console.textsafe import printable

#: the cells before the text (as a finding's "CRITICAL " column)
INDENT = 9


def _wrap(text: str, width: int) -> list[str]:
    return textwrap.wrap(printable(text), max(10, width), break_long_words=True, break_on_hyphens=False) or [""]


def error_lines(error: str, width: int) -> list[tuple[str, str]]:
    """(line, style) each, the remedy's lines first ("→ …"), then the error's, at ``width``."""
    room = width - INDENT
    remedy = remedy_of(error)
    out: list[tuple[str, str]] = []
    if remedy:
        out += [(("→ " if i == 0 else "  ") + line, "bold") for i, line in enumerate(_wrap(remedy, room - 2))]
    out += [(line, "red") for line in _wrap(error, room)]
    return out


def error_cell(error: str, width: int) -> Text:
    """The findings panel's ERROR row; enter on it shows error_detail."""
    cell = Text("ERROR    ", style="bold red")
    for i, (line, style) in enumerate(error_lines(error, width)):
        if i:
            cell.append("\n" + " " * INDENT)
        cell.append(line, style=style)
    return cell


def error_detail(node: str, error: str) -> Text:
    """Enter on the ERROR row: what to do, whole, then the error and where it came from."""
    out = Text()
    out.append(f"{printable(node)} cannot be read\n\n", style="bold")
    remedy = remedy_of(error)
    if remedy:
        out.append("What to do\n", style="bold underline")
        out.append(printable(remedy) + "\n\n", style="bold")
    out.append("The error\n", style="bold underline")
    out.append(printable(error) + "\n\n", style="red")
    out.append("The console keeps trying; the node's panels fill once it answers. m lists every node's "
               "error with its remedy.", style="dim")
    return out
