"""A GPU's health beside its memory (issue 20): temperature and power in the GPU panel where the
width allows, a short mark for what is wrong at any width (console/output/health.py), the full
values in the GPU's details; read over SSH (the GPU query's HEALTH_FIELDS) and by NVML."""
from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, strategies as st

from console.model import Gpu, MemoryRepair
from console.output import health
from console.output.json import gpu_json
from console.sources.parse import parse_gpu_query
from tests.fuzzing import examples

BASE = "0, GPU-a, NVIDIA H100 80GB HBM3, 00000000:18:00.0, 4, 81559, 0, Enabled, Disabled"


def gpu(**kw) -> Gpu:
    fields = dict(index=0, uuid="GPU-a", name="NVIDIA H100 80GB HBM3", bus_id="00000000:18:00.0",
                  memory_used_mib=4, memory_total_mib=81559, temperature_c=61, power_w=349.6,
                  pcie_gen=5, pcie_width=16, pcie_gen_max=5, pcie_width_max=16, ecc_uncorrected=0)
    fields.update(kw)
    return Gpu(**fields)


def words(g: Gpu, room: int | None = None) -> str:
    return health.cell_text(g, room)


# ---------------------------------------------------------------- what is wrong, in a few cells

def test_a_healthy_gpu_shows_its_temperature_and_power_and_no_mark():
    assert words(gpu()) == "61°C 350W" and health.marks(gpu()) == []


def test_each_fault_has_its_short_mark_most_severe_first():
    g = gpu(ecc_uncorrected=3, pcie_width=8, memory_repair=MemoryRepair(remap_pending=True))
    assert [m.text for m in health.marks(g)] == ["remap!", "ECC 3", "PCIe x8"]
    assert [m.severity for m in health.marks(g)] == ["high", "high", "low"]
    assert health.marks(gpu(memory_repair=MemoryRepair(remap_failure=True, remap_pending=True)))[0] == \
        health.Mark("remap✖", "critical")
    assert [m.text for m in health.marks(gpu(memory_repair=MemoryRepair(pages_pending=True)))] == ["retire!"]


def test_an_idle_link_at_a_lower_generation_is_no_fault_a_narrower_one_is():
    assert health.marks(gpu(pcie_gen=1)) == []
    assert not health.link_degraded(gpu(pcie_width=8, pcie_width_max=None))      # an older capture: unknown
    assert health.link_degraded(gpu(pcie_width=8))


def test_hot_is_near_the_slowdown_temperature_or_85_where_it_is_not_known():
    assert health.hot(gpu(temperature_c=83, temperature_slowdown_c=87))
    assert not health.hot(gpu(temperature_c=81, temperature_slowdown_c=87))
    assert health.hot(gpu(temperature_c=85)) and not health.hot(gpu(temperature_c=84))
    assert not health.hot(gpu(temperature_c=None))


def test_narrower_the_power_goes_then_the_temperature_but_a_mark_or_a_hot_one_stays():
    g = gpu(ecc_uncorrected=3)
    assert words(g, 40) == "61°C 350W ECC 3"
    assert words(g, 12) == "61°C ECC 3"
    assert words(g, 6) == "ECC 3"
    assert words(gpu(), 3) == ""
    assert words(gpu(temperature_c=90), 6) == "90°C"
    assert health.fit(gpu(temperature_c=90), 6) == [("90°C", "high")]


def test_marks_that_do_not_fit_are_counted_never_cut():
    g = gpu(ecc_uncorrected=3, pcie_width=8, memory_repair=MemoryRepair(remap_pending=True))
    assert words(g, 15) == "remap! ECC 3 +1" and words(g, 14) == "remap! +2"
    assert words(g, 9) == "remap! +2"
    assert words(g, 3) == "remap!"          # the first mark shows, whatever the room


@given(st.integers(min_value=0, max_value=60), st.lists(st.booleans(), min_size=5, max_size=5),
       st.one_of(st.none(), st.integers(-5, 200)))
@examples(30)
def test_fit_keeps_to_its_room_once_the_first_mark_is_there(room, flags, temp):
    ecc, remap, fail, pages, narrow = flags
    g = gpu(temperature_c=temp, ecc_uncorrected=7 if ecc else 0, pcie_width=4 if narrow else 16,
            memory_repair=MemoryRepair(remap_pending=remap, remap_failure=fail, pages_pending=pages))
    parts = health.fit(g, room)
    first = health.cell_parts(g, "marks")[:1]
    assert health.width_of(parts) <= room or parts == first
    if first:
        assert parts[0] == first[0] or parts[0][1] == ""      # a mark never drops out of sight


# ---------------------------------------------------------------- read over SSH and by NVML

def test_the_gpu_query_reads_the_links_maximum_after_the_health():
    """probe.HEALTH_FIELDS end with the link's maximum generation and width: 17 columns (18 with
    the recovery action); 15 or 16 (the six fields before them) still parse, the maximum unknown."""
    full = parse_gpu_query(BASE + ", None, 54, 71.23, 1980, 4, 8, 2, 5, 16\n").gpus[0]
    assert (full.recovery_action, full.pcie_gen, full.pcie_width, full.ecc_uncorrected, full.pcie_gen_max,
            full.pcie_width_max) == ("none", 4, 8, 2, 5, 16)
    assert [m.text for m in health.marks(full)] == ["ECC 2", "PCIe x8"]
    without = parse_gpu_query(BASE + ", 54, 71.23, 1980, 4, 8, 2, [N/A], [N/A]\n").gpus[0]
    assert without.recovery_action is None and without.pcie_width == 8 and without.pcie_width_max is None
    before = parse_gpu_query(BASE + ", None, 54, 71.23, 1980, 4, 8, 2\n").gpus[0]
    assert (before.recovery_action, before.pcie_width, before.ecc_uncorrected, before.pcie_width_max) == \
        ("none", 8, 2, None)


async def test_nvml_reads_the_links_maximum_and_the_slowdown_temperature():
    import pynvml
    from fake_pynvml import FakeNvml, eight_gpus
    from console.sources.local.source import LocalSource
    gpus = eight_gpus()[:2]
    gpus[0].health = {"nvmlDeviceGetTemperature": 84, "nvmlDeviceGetTemperatureThreshold": 87,
                      "nvmlDeviceGetPowerUsage": 612345, "nvmlDeviceGetCurrPcieLinkWidth": 8,
                      "nvmlDeviceGetMaxPcieLinkWidth": 16, "nvmlDeviceGetCurrPcieLinkGeneration": 5,
                      "nvmlDeviceGetMaxPcieLinkGeneration": 5}
    src = LocalSource("local", nvml_module=FakeNvml(gpus), dmesg_command=("true",))
    snap = await src.poll()
    g, other = snap.gpu(0), snap.gpu(1)
    assert (g.temperature_c, g.temperature_slowdown_c, g.power_w, g.pcie_width, g.pcie_width_max) == \
        (84, 87, 612.35, 8, 16)
    assert health.hot(g) and [m.text for m in health.marks(g)] == ["PCIe x8"]
    assert other.temperature_slowdown_c is None and other.pcie_width_max is None     # NotSupported
    assert not any("temperature" in w or "PCIe" in w for w in snap.warnings)
    doc = gpu_json(g)
    assert (doc["pcie_width_max"], doc["pcie_gen_max"], doc["temperature_slowdown_c"]) == (16, 5, 87)
    assert pynvml.NVML_TEMPERATURE_THRESHOLD_SLOWDOWN == 1


def test_the_details_say_what_the_marks_stand_for():
    pytest.importorskip("textual")
    from console.ui.details import health_words
    said = health_words(gpu(temperature_c=84, temperature_slowdown_c=87, pcie_width=8, pcie_gen=4))
    assert "84 °C (hot, slows down at 87 °C)" in said and "PCIe gen 4 x8 (degraded: x16 possible)" in said
    assert "(gen 5 possible: an idle link runs slower)" in health_words(gpu(pcie_gen=1))
    assert "PCIe gen 5 x16 ·" in health_words(gpu())


# ---------------------------------------------------------------- the GPU panel, as the operator sees it

async def _first_screen(scenario: str, size: tuple[int, int], shown=lambda text: True) -> tuple[str, object]:
    """The screen once the first poll is drawn and ``shown(text)`` holds (the panels are fitted
    after a layout pass or two: under load that takes a while)."""
    from console.clock import FakeClock
    from console.sources.sim import SimSource
    from console.ui.app import IncidentApp
    from conftest import wait_for
    from test_ui_room import lines
    app = IncidentApp([SimSource(name="demo", scenario=scenario, clock=FakeClock())], autostart=False)
    async with app.run_test(size=size) as pilot:
        await app.monitors[0].poll_once()
        await wait_for(pilot, lambda: "demo" in app.snapshots and app.query_one("#gpus").row_count == 8)
        try:
            await wait_for(pilot, lambda: shown("\n".join(lines(app))))
        except AssertionError:
            pass                        # the test's own asserts say what is missing
        await pilot.pause()
        return "\n".join(lines(app)), app.snapshots["demo"]


@pytest.mark.parametrize("size", [(80, 24), (100, 16)], ids=lambda s: f"{s[0]}x{s[1]}")
async def test_the_gpu_panel_shows_health_beside_memory_and_keeps_the_holders_and_first_finding(size):
    pytest.importorskip("textual")
    shown, snap = await _first_screen("seed", size, lambda text: "W " in text and (
        size[0] == 80 or "NVIDIA RTX PRO…" in text) and "INFO     PID 72169" in text)
    gpu_lines = [ln for ln in shown.splitlines() if ln.startswith(" 0 ") or ln.startswith(" 1 ")]
    assert gpu_lines and all("°C" in ln and "W " in ln for ln in gpu_lines), shown
    assert " Health " in shown and "sglang::scheduler_TP0" in shown and "INFO     PID 72169" in shown, shown
    if size[0] == 80:
        assert " Name" not in shown and "NVIDIA" not in shown.split("processes:")[0], shown   # gone, not cut
    else:
        assert "NVIDIA RTX PRO…" in shown, shown


@pytest.mark.parametrize("size", [(80, 24), (100, 16), (64, 24)], ids=lambda s: f"{s[0]}x{s[1]}")
async def test_a_pending_remap_and_its_ecc_error_show_in_the_gpu_panel_at_any_width(size):
    pytest.importorskip("textual")
    shown, _snap = await _first_screen("remap-pending", size, lambda text: "remap!" in text and (
        size[0] < 80 or "remap! ECC 1" in text))
    row = next(ln for ln in shown.splitlines() if ln.startswith(" 2 "))
    assert "remap!" in row, shown
    if size[0] >= 80:
        assert "remap! ECC 1" in row, shown


@pytest.mark.parametrize("size", [(80, 24), (120, 36)], ids=lambda s: f"{s[0]}x{s[1]}")
async def test_the_remap_demo_shows_a_degraded_link_and_a_hot_gpu_in_the_gpu_panel(size):
    """demo:remap-pending's node has two more faults the panel alone shows: GPU 6's link trained
    at x8 in its x16 slot, GPU 7 at 88 °C (marked hot: the temperature stays at any width)."""
    pytest.importorskip("textual")
    shown, snap = await _first_screen("remap-pending", size, lambda text: "PCIe x8" in text and "88°C" in text)
    rows = {ln[:3]: ln for ln in shown.splitlines() if ln[:3] in (" 5 ", " 6 ", " 7 ")}
    assert "PCIe x8" in rows[" 6 "] and "PCIe" not in rows[" 5 "] + rows[" 7 "], shown
    assert "88°C" in rows[" 7 "], shown
    assert not any(f.kind.startswith(("pcie", "hot")) for f in snap.findings), "the panel's marks, no finding"


def test_a_gpu_hot_while_idle_and_a_narrow_link_are_findings_with_what_a_person_does():
    """33, item 9: marked in the GPU panel, they are findings too (low: the console runs nothing)."""
    import dataclasses
    from console.diagnosis import diagnose
    from console.model import Gpu, NodeSnapshot
    base = Gpu(0, "GPU-0", "H100", "00000000:18:00.0", 4, 81559)
    hot_idle = dataclasses.replace(base, index=1, uuid="GPU-1", temperature_c=88, utilization_pct=0, power_w=412.0)
    hot_busy = dataclasses.replace(base, index=2, uuid="GPU-2", temperature_c=88, utilization_pct=97, power_w=650.0)
    narrow = dataclasses.replace(base, index=3, uuid="GPU-3", pcie_width=8, pcie_width_max=16)
    snap = NodeSnapshot(name="n", taken_at=1.0, gpus=(base, hot_idle, hot_busy, narrow))
    found = {f.gpus: f for f in diagnose(snap) if f.kind == "gpu-health"}
    assert set(found) == {(1,), (3,)}, "a hot GPU that works is not a finding; a healthy one neither"
    assert found[(1,)].summary == "GPU 1: 88 °C while idle (0 %, drawing 412 W)"
    assert "cooling" in found[(1,)].next_step and found[(1,)].rung is None and found[(1,)].severity == "low"
    assert found[(3,)].summary == "GPU 3: its PCIe link trained at x8 of x16" and "reseat" in found[(3,)].next_step
