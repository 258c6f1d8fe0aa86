"""Table-driven option scanning for the simulated tools (nvidia-smi, pgrep, pkill)."""
from __future__ import annotations

from typing import Iterator


def scan_options(args: list[str], flags: dict[str, str], valued: dict[str, str], *,
                 long_equals: bool = False) -> Iterator[tuple[str | None, str | bool | None]]:
    """One (name, value) per option or operand, in order.

    An argument in ``flags`` gives ``(flags[arg], True)``; one in ``valued`` takes the next
    argument as its value (None when there is none): ``(valued[arg], value)``; with
    ``long_equals`` a ``--option=value`` in ``valued`` also counts. Anything else gives
    ``(None, arg)`` for the caller to judge (an operand, a bundle, a bad option)."""
    it = iter(args)
    for a in it:
        key, eq, value = a.partition("=") if long_equals and a.startswith("--") else (a, "", "")
        if a in flags:
            yield flags[a], True
        elif key in valued:
            yield valued[key], (value if eq else next(it, None))
        else:
            yield None, a
