"""A GPU's health beside its memory, as few cells as the GPU panel has: ``61°C 350W`` when the
width allows, and short marks for what is wrong (``ECC 3``, ``remap!``, ``PCIe x8``, a hot
temperature) that stay at any width. The details screen (enter on the GPU panel) has the full
values. Pure: numbers in, words out (nothing from the node is printed here but numbers).
"""
from __future__ import annotations

from dataclasses import dataclass

# the thresholds live with the finding they make (console/diagnosis/gpu_health.py); the panel's
# marks, the details screen and the tests read them through here
from console.diagnosis.gpu_health import hot, link_degraded
from console.model import Gpu

#: what the GPU panel's health cell shows, widest first: it takes the first that fits
TIERS = ("full", "temp", "marks")


@dataclass(frozen=True)
class Mark:
    text: str
    severity: str       # "critical", "high" or "low" (console.model severities)


def marks(g: Gpu) -> list[Mark]:
    """What is wrong, most severe first; empty for a healthy GPU (or one whose driver says nothing)."""
    out: list[Mark] = []
    r = g.memory_repair
    if r is not None and r.remap_failure:
        out.append(Mark("remap✖", "critical"))
    elif r is not None and r.remap_pending:
        out.append(Mark("remap!", "high"))
    if r is not None and r.pages_pending:
        out.append(Mark("retire!", "high"))
    if g.ecc_uncorrected:
        out.append(Mark(f"ECC {g.ecc_uncorrected}", "high"))
    if link_degraded(g):
        out.append(Mark(f"PCIe x{g.pcie_width}", "low"))
    return out


def temperature_text(g: Gpu) -> str:
    return "" if g.temperature_c is None else f"{g.temperature_c}°C"


def power_text(g: Gpu) -> str:
    return "" if g.power_w is None else f"{round(g.power_w)}W"


def cell_parts(g: Gpu, tier: str) -> list[tuple[str, str]]:
    """The health cell's words and their severity ("" for plain): ``tier`` "full" shows the
    temperature and the power, "temp" the temperature, "marks" only what is wrong — a hot
    temperature is one of those, so it shows at any width."""
    parts: list[tuple[str, str]] = []
    heat = "high" if hot(g) else ""
    if tier in ("full", "temp") or heat:
        if temperature_text(g):
            parts.append((temperature_text(g), heat))
    if tier == "full" and power_text(g):
        parts.append((power_text(g), ""))
    parts += [(m.text, m.severity) for m in marks(g)]
    return parts


def width_of(parts: list[tuple[str, str]]) -> int:
    return sum(len(text) for text, _ in parts) + max(0, len(parts) - 1)


def fit(g: Gpu, room: int | None) -> list[tuple[str, str]]:
    """The widest of the TIERS that fits in ``room`` cells (None: the widest); where even the
    marks do not, the most severe first and "+N" for those left out — never a mark cut
    mid-word. The first mark always shows, whatever the room."""
    for tier in TIERS:
        parts = cell_parts(g, tier)
        if room is None or width_of(parts) <= room:
            return parts
    for n in range(len(parts) - 1, 0, -1):
        cut = parts[:n] + [(f"+{len(parts) - n}", "")]
        if width_of(cut) <= room:
            return cut
    return parts[:1]


def cell_text(g: Gpu, room: int | None = None) -> str:
    return " ".join(text for text, _ in fit(g, room))
