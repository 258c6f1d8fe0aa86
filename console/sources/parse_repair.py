"""``nvidia-smi -q -d ROW_REMAPPER,PAGE_RETIREMENT`` -> each GPU's memory repair (model.MemoryRepair).

Pure; never raises, whatever the text. What real nvidia-smi prints (tests/fixtures/real/remap-*,
retired-pages-*), one block per GPU after its header line::

    GPU 00000000:10:1C.0
        Retired Pages
            Single Bit ECC                    : N/A
            Double Bit ECC                    : N/A
            Pending Page Blacklist            : N/A        (older drivers: "Pending")
        Remapped Rows
            Correctable Error                 : 1
            Uncorrectable Error               : 0
            Pending                           : Yes
            Remapping Failure Occurred        : No
            Bank Remap Availability Histogram
                Max                           : 639 bank(s)

A GPU without row remapping (before Ampere) prints ``Remapped Rows : N/A`` on one line, one
without page retirement (Ampere and later) ``N/A`` under Retired Pages. ``Pending`` is read by
the block it is in. Values other than Yes/No and a number (``N/A``, ``[N/A]``, ``Not
supported``) are None. A block with no GPU line above it (a pasted excerpt) is keyed None.
"""
from __future__ import annotations

import dataclasses
import re
from typing import Iterable

from console.model import Gpu, MemoryRepair, bus_key

_GPU_LINE = re.compile(r"GPU ((?:[0-9A-Fa-f]{4,8}:)?[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9A-Fa-f])")
_RETIRED, _REMAPPED = "retired pages", "remapped rows"
#: (block, key) -> MemoryRepair field
_FIELDS = {
    (_RETIRED, "pending page blacklist"): "pages_pending",
    (_RETIRED, "pending"): "pages_pending",
    (_REMAPPED, "pending"): "remap_pending",
    (_REMAPPED, "remapping failure occurred"): "remap_failure",
    (_REMAPPED, "uncorrectable error"): "rows_uncorrectable",
    (_REMAPPED, "correctable error"): "rows_correctable",
}
#: the most read (8 GPUs print ~150 lines, ~7 KB; a flood is cut, not parsed)
MAX_CHARS = 1 << 20
MAX_LINES = 20_000


def _value(field: str, text: str) -> bool | int | None:
    word = text.strip()
    if field.startswith("rows_"):
        return int(word) if word.isascii() and word.isdecimal() and len(word) < 10 else None
    return {"yes": True, "no": False}.get(word.lower())


def parse_memory_repair(text: object) -> dict[str | None, MemoryRepair]:
    """{bus id as printed (None: a block before any GPU line): MemoryRepair}; GPUs whose blocks
    say nothing known (all N/A, or no block) are left out."""
    if not isinstance(text, str):
        return {}
    found: dict[str | None, dict[str, bool | int | None]] = {}
    bus: str | None = None
    block: str | None = None
    depth = 0
    for raw in text[:MAX_CHARS].splitlines()[:MAX_LINES]:
        line = raw.expandtabs(8)
        stripped = line.strip()
        if not stripped:
            continue
        indent = len(line) - len(line.lstrip())
        m = _GPU_LINE.fullmatch(stripped)
        if m is not None:
            bus, block = m.group(1), None
            continue
        key, sep, value = stripped.partition(":")
        key = " ".join(key.split()).lower()
        if key in (_RETIRED, _REMAPPED):
            block, depth = key, indent
            continue
        if block is not None and indent <= depth:
            block = None                 # the next block of the same level: Temperature, [...]
        field = _FIELDS.get((block, key)) if block is not None and sep else None
        if field is not None:
            found.setdefault(bus, {})[field] = _value(field, value)
    out: dict[str | None, MemoryRepair] = {}
    for where, fields in found.items():
        if any(v is not None for v in fields.values()):
            out[where] = MemoryRepair(**fields)
    return out


def with_repair(gpus: Iterable[Gpu], found: dict[str | None, MemoryRepair]) -> tuple[Gpu, ...]:
    """The GPUs, each with its memory repair from ``found`` (matched by bus id, however the two
    spell it; a block keyed None goes to a node's only GPU), the others as they were."""
    gpus = tuple(gpus)
    if not found:
        return gpus
    keyed = {k: r for b, r in found.items() if b is not None and (k := bus_key(b)) is not None}
    lone = found.get(None) if len(gpus) == 1 else None
    out = []
    for g in gpus:
        key = bus_key(g.bus_id)
        repair = keyed.get(key) if key is not None else None
        if repair is None:
            repair = lone
        out.append(g if repair is None or repair == g.memory_repair
                   else dataclasses.replace(g, memory_repair=repair))
    return tuple(out)
