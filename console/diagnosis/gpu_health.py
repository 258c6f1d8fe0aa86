"""A GPU's own health where it needs no process to explain it: hot while it idles (cooling), a
PCIe link trained narrower than its slot (seating, riser, lanes). Neither holds memory and the
console runs nothing for them: they are said (low), with what a person does about them, so the
marks the GPU panel shows (console/output/health.py) are findings too — in `snapshot --json`,
the watch and the postmortem.

The thresholds live here, their one home; the GPU panel's marks use them."""
from __future__ import annotations

from console.diagnosis import text as t
from console.diagnosis.advice import Advice, finding
from console.diagnosis.context import Situation
from console.model import Finding, Gpu

#: within this many degrees of the GPU's slowdown temperature (NVML's threshold) the temperature
#: is marked: the clocks are about to drop
HOT_MARGIN_C = 5
#: where the slowdown temperature is not known (over SSH: nvidia-smi's query has no field for it
#: that older drivers know), a temperature from here on is marked (data-centre GPUs slow down at
#: 87–95 °C)
HOT_FALLBACK_C = 85
#: at or below this utilisation a GPU idles: being hot then is the cooling's doing, not work's
IDLE_UTIL_PCT = 5


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


def gpu_health(sit: Situation) -> list[Finding]:
    out = []
    for g in sit.snap.gpus:
        said = []
        if hot(g) and g.utilization_pct is not None and g.utilization_pct <= IDLE_UTIL_PCT:
            limit = f" (it slows down at {g.temperature_slowdown_c} °C)" if g.temperature_slowdown_c else ""
            power = f", drawing {g.power_w:.0f} W" if g.power_w is not None else ""
            said.append(f"{g.temperature_c} °C while idle ({g.utilization_pct} %{power}){limit}")
        if link_degraded(g):
            said.append(f"its PCIe link trained at x{g.pcie_width} of x{g.pcie_width_max}")
        if not said:
            continue
        summary = f"GPU {g.index}: " + "; ".join(said)
        todo = (["check its cooling (fans, airflow, a blocked intake)"] if hot(g) else []) + (
            ["reseat it or its riser at the next maintenance"] if link_degraded(g) else [])
        step = Advice(None, "Nothing for the console to run: the GPU's hardware, not a process — "
                            f"{' and '.join(todo)}; if it recurs, drain the node first (D under Slurm). "
                            f"{t.gpus([g.index])} keeps working meanwhile.", (), (g.index,))
        out.append(finding("gpu-health", "low", summary, step, (), (g.index,),
                           {"temperature_c": g.temperature_c, "slowdown_c": g.temperature_slowdown_c,
                            "utilization_pct": g.utilization_pct, "power_w": g.power_w,
                            "pcie_width": g.pcie_width, "pcie_width_max": g.pcie_width_max}))
    return out
