"""The NVLink fabric (causes from the field, 10): on an NVSwitch system a GPU the fabric manager
has not set up (state not Completed, or a status other than Success) is named, with the fabric
manager as the next step; the probe asks for it only where the NVSwitch control file is."""
from __future__ import annotations

import dataclasses

from hypothesis import given
from hypothesis import strategies as st

from console import probe
from console.clock import FakeClock
from console.monitor import diagnosed
from console.sources.parse_fabric import parse_fabric, split_fabric
from console.sources.sim import SimSource

# the values real tools check for (NVIDIA/NVSentinel#1382, Azure/azhpc-images#506)
CSV = ("00000000:18:00.0, Completed, Success\n"
       "00000000:2A:00.0, In Progress, N/A\n"
       "00000000:3A:00.0, Completed, Insufficient Resources\n"
       "00000000:5D:00.0, [N/A], [N/A]\n")


def test_the_fabric_rows_are_read_and_what_is_not_known_is_none():
    got = parse_fabric(CSV)
    assert got["00000000:18:00.0"] == ("Completed", "Success")
    assert got["00000000:2A:00.0"] == ("In Progress", None)
    assert got["00000000:3A:00.0"] == ("Completed", "Insufficient Resources")
    assert "00000000:5D:00.0" not in got
    assert parse_fabric('Field "fabric.state" is not a valid field to query.\n\n') == {}


def test_the_section_splits_at_its_mark():
    head, tail = split_fabric(f"GPU 00000000:18:00.0\n    Remapped Rows : N/A\n{probe.FABRIC_MARK}\n{CSV}",
                              probe.FABRIC_MARK)
    assert head.endswith("Remapped Rows : N/A") and tail == CSV
    assert split_fabric("no mark here", probe.FABRIC_MARK) == ("no mark here", "")


@given(st.text(max_size=400))
def test_the_parser_never_raises(text):
    parse_fabric(text)
    split_fabric(text, probe.FABRIC_MARK)


def test_the_probe_asks_for_the_fabric_only_on_an_nvswitch_system():
    assert f"if [ -e {probe.NVSWITCH_CTL} ]; then echo '{probe.FABRIC_MARK}'" in probe.remap_call()


async def test_an_nvswitch_node_whose_fabric_is_still_registering_is_named_with_the_fabric_manager_next():
    clock = FakeClock()
    src = SimSource(name="hgx", scenario="graceful", clock=clock)
    node = src.node
    node.nvswitches = 4
    for g in node.gpus[:4]:
        g.fabric_state, g.fabric_status = "In Progress", "N/A"
    snap = diagnosed(await src.poll())
    assert [g.fabric_state for g in snap.gpus][:5] == ["In Progress"] * 4 + ["Completed"]
    f, = [f for f in snap.findings if f.kind == "fabric-not-ready"]
    assert f.gpus == (0, 1, 2, 3) and f.severity == "high" and f.rung is None
    assert f.summary.startswith("GPUs 0-3: the NVLink fabric is not ready (state In Progress)")
    assert "nvidia-fabricmanager is not running here: start it" in f.next_step
    ready = dataclasses.replace(snap, gpus=tuple(dataclasses.replace(g, fabric_state="Completed",
                                                                     fabric_status="Success") for g in snap.gpus))
    assert "fabric-not-ready" not in [x.kind for x in diagnosed(dataclasses.replace(ready, findings=())).findings]


async def test_a_node_without_nvswitches_has_no_fabric_and_no_finding():
    src = SimSource(name="plain", scenario="graceful", clock=FakeClock())
    for g in src.node.gpus:
        g.fabric_state = "In Progress"            # were it asked, it would say so: it is not asked
    snap = diagnosed(await src.poll())
    assert all(g.fabric_state is None for g in snap.gpus)
    assert "fabric-not-ready" not in [f.kind for f in snap.findings]
