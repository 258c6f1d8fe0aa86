"""A GPU's health beside its memory, as few cells as the GPU panel has: ``61°C 350W`` when the
width allows, and short marks for what is wrong (``ECC 3``, ``remap!``, ``PCIe x8``, a hot
temperature) that stay at any width. The details screen (enter on the GPU panel) has the full
values. Pure: numbers in, words out (nothing from the node is printed here but numbers).
"""
from __future__ import annotations

from dataclasses import dataclass

from console.model import Gpu

#: within this many degrees of the GPU's slowdown temperature (NVML's threshold) the temperature
#: is marked: the clocks are about to drop
HOT_MARGIN_C = 5
#: where the slowdown temperature is not known (over SSH: nvidia-smi's query has no field for it
#: that older drivers know), a temperature from here on is marked (data-centre GPUs slow down at
#: 87–95 °C)
HOT_FALLBACK_C = 85

#: what the GPU panel's health cell shows, widest first: it takes the first that fits
TIERS = ("full", "temp", "marks")


@dataclass(frozen=True)
class Mark:
    text: str
    severity: str       # "critical", "high" or "low" (console.model severities)


def hot(g: Gpu) -> bool:
    """The temperature is at or near where the GPU slows down."""
    if g.temperature_c is None:
        return False
    limit = (g.temperature_slowdown_c - HOT_MARGIN_C) if g.temperature_slowdown_c else HOT_FALLBACK_C
    return g.temperature_c >= limit


def link_degraded(g: Gpu) -> bool:
    """The PCIe link trained narrower than the GPU and its slot allow (x8 in an x16 slot: a
    seating, riser or lane fault). The generation is not judged: it drops by itself while the
    GPU idles, to save power."""
    return (g.pcie_width is not None and g.pcie_width_max is not None
            and 0 < g.pcie_width < g.pcie_width_max)


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
