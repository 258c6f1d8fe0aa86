"""``nvidia-smi --query-gpu=pci.bus_id,fabric.state,fabric.status --format=csv,noheader`` -> each
GPU's NVLink fabric registration, {bus id as printed: (state, status)}.

Pure; never raises, whatever the text. The values real tools compare against
(NVIDIA/NVSentinel#1382, Azure/azhpc-images#506): state ``Completed`` (else ``Not Started``,
``In Progress``) and status ``Success`` (else e.g. ``Insufficient Resources``); ``N/A`` or
``[Not Supported]`` where a GPU has no fabric (read as None). An nvidia-smi too old for the
fields refuses the whole query ('Field "fabric.state" is not a valid field to query.'): no row,
nothing known. The remap section carries this after probe.FABRIC_MARK (``split_fabric``).
"""
from __future__ import annotations

import csv
import dataclasses
import io
from typing import Iterable

from console.model import Gpu, bus_key

#: the most rows read (a flood is cut, not parsed)
MAX_ROWS = 1024
_UNKNOWN = {"", "n/a", "[n/a]", "not supported", "[not supported]", "unknown", "[unknown error]"}


def _word(text: str) -> str | None:
    word = " ".join(text.split())[:40]
    return None if word.lower() in _UNKNOWN or not word.isprintable() else word


def split_fabric(text: object, mark: str) -> tuple[str, str]:
    """(what came before the mark line, what came after it); no mark: (text, "")."""
    if not isinstance(text, str):
        return "", ""
    line = f"{mark}\n"
    if text.startswith(line):
        return "", text[len(line):]
    head, sep, tail = text.partition(f"\n{line}")
    return (head, tail) if sep else (text, "")


def parse_fabric(text: object) -> dict[str, tuple[str | None, str | None]]:
    if not isinstance(text, str) or not text.strip():
        return {}
    out: dict[str, tuple[str | None, str | None]] = {}
    try:
        rows = list(csv.reader(io.StringIO(text[: MAX_ROWS * 200])))[:MAX_ROWS]
    except csv.Error:
        return {}
    for row in rows:
        if len(row) != 3 or bus_key(row[0].strip()) is None:
            continue                     # a refusal, an error line, anything else
        state, status = _word(row[1]), _word(row[2])
        if state is not None or status is not None:
            out[row[0].strip()] = (state, status)
    return out


def with_fabric(gpus: Iterable[Gpu], found: dict[str, tuple[str | None, str | None]]) -> tuple[Gpu, ...]:
    """The GPUs, each with its fabric state and status from ``found`` (matched by bus id)."""
    gpus = tuple(gpus)
    if not found:
        return gpus
    keyed = {k: v for b, v in found.items() if (k := bus_key(b)) is not None}
    out = []
    for g in gpus:
        got = keyed.get(bus_key(g.bus_id) or "")
        out.append(g if got is None or got == (g.fabric_state, g.fabric_status)
                   else dataclasses.replace(g, fabric_state=got[0], fabric_status=got[1]))
    return tuple(out)


def not_ready(g: Gpu) -> str | None:
    """Why this GPU's fabric is not ready ("state In Progress", "status Insufficient Resources"),
    or None (ready, or no fabric known)."""
    if g.fabric_state is not None and g.fabric_state != "Completed":
        return f"state {g.fabric_state}"
    if g.fabric_state == "Completed" and g.fabric_status not in (None, "Success"):
        return f"status {g.fabric_status}"
    return None
