"""Row remapping and page retirement (issue 22 item 7): the probe's sticky remap section, its pure
parser, NVML's reading, the findings (a pending remap is a reset due even with no process; a
failed remap is a drain), and the simulator's remap-pending scenario. The real pastes themselves
are read in tests/test_real_outputs.py."""
from __future__ import annotations

import dataclasses
import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from console import probe
from console.clock import FakeClock
from console.diagnosis import diagnose
from console.model import ActionRecord, DriverProc, MemoryRepair, NodeSnapshot
from console.sources.local.nvml import read_nvml
from console.sources.parse_repair import parse_memory_repair, with_repair
from console.sources.sim import SimSource
from tests.fake_pynvml import FakeNvml, eight_gpus
from tests.fuzzing import examples
from tests.test_ssh import node_a, options  # noqa: F401 (fixture)
from test_diagnose_builders import T0, freed, worker

PENDING = MemoryRepair(remap_pending=True, remap_failure=False, rows_uncorrectable=4, rows_correctable=0)
FAILED = MemoryRepair(remap_pending=True, remap_failure=True, rows_uncorrectable=9, rows_correctable=0)


def _kv(indent: int, key: str, value: str) -> str:
    return f"{' ' * indent}{key:<{42 - indent}}: {value}\n"


def report(*gpus: tuple[str, str, str, str]) -> str:
    """-q -d ROW_REMAPPER,PAGE_RETIREMENT as nvidia-smi prints it: (bus, uncorrectable rows,
    pending, failure) per GPU; "N/A" rows print the one-line block of a GPU without remapping."""
    out = "\n==============NVSMI LOG==============\n\n" + _kv(0, "Driver Version", "580.95.05") + "\n"
    for bus, rows, pending, failure in gpus:
        out += f"GPU {bus}\n    Retired Pages\n" + _kv(8, "Single Bit ECC", "N/A") + _kv(8, "Double Bit ECC", "N/A")
        out += _kv(8, "Pending Page Blacklist", "N/A")
        if rows == "N/A":
            out += _kv(4, "Remapped Rows", "N/A") + "\n"
            continue
        out += ("    Remapped Rows\n" + _kv(8, "Correctable Error", "0") + _kv(8, "Uncorrectable Error", rows)
                + _kv(8, "Pending", pending) + _kv(8, "Remapping Failure Occurred", failure)
                + "        Bank Remap Availability Histogram\n" + _kv(12, "None", "0 bank(s)") + "\n")
    return out


def with_state(s: NodeSnapshot, **by_gpu: MemoryRepair) -> NodeSnapshot:
    gpus = tuple(dataclasses.replace(g, memory_repair=by_gpu.get(f"g{g.index}")) for g in s.gpus)
    return dataclasses.replace(s, gpus=gpus)


def only(findings, kind):
    hits = [f for f in findings if f.kind == kind]
    assert len(hits) == 1, [(f.kind, f.summary) for f in findings]
    return hits[0]


# ---------------------------------------------------------------- the parser

def test_each_gpu_block_is_read_by_its_bus_and_pending_by_the_block_it_is_in():
    text = report(("00000000:18:00.0", "0", "No", "No"), ("00000000:2A:00.0", "4", "Yes", "No"),
                  ("00000000:3B:00.0", "N/A", "", ""))
    # a full -q has other "Pending" keys (ECC Mode, MIG Mode): they are not the remap's
    text = text.replace("GPU 00000000:18:00.0\n", "GPU 00000000:18:00.0\n    ECC Mode\n"
                        + _kv(8, "Current", "Enabled") + _kv(8, "Pending", "Enabled"))
    got = parse_memory_repair(text)
    assert set(got) == {"00000000:18:00.0", "00000000:2A:00.0"}        # the third says nothing known
    assert got["00000000:18:00.0"] == MemoryRepair(False, False, 0, 0, None)
    assert got["00000000:2A:00.0"] == MemoryRepair(True, False, 4, 0, None)


@pytest.mark.parametrize("value", ["N/A", "[N/A]", "Not Supported", "[Not Supported]", "[Insufficient Permissions]",
                                   "", "yes please", "-1", "٣", "9" * 40])
def test_a_value_that_is_not_yes_no_or_a_number_is_none_never_a_crash(value):
    got = parse_memory_repair(f"GPU 0000:18:00.0\n    Remapped Rows\n{_kv(8, 'Uncorrectable Error', value)}"
                              f"{_kv(8, 'Pending', value)}{_kv(8, 'Remapping Failure Occurred', 'No')}")
    assert got == {"0000:18:00.0": MemoryRepair(None, False, None, None, None)}


def test_older_spellings_tabs_and_a_block_without_a_gpu_line():
    old = "GPU 0000:05:00.0\n\tRetired pages\n\t\tSingle Bit ECC              : 2\n\t\tPending                     : Yes\n"
    assert parse_memory_repair(old) == {"0000:05:00.0": MemoryRepair(pages_pending=True)}
    lone = "    Remapped Rows\n" + _kv(8, "Pending", "Yes")
    assert parse_memory_repair(lone) == {None: MemoryRepair(remap_pending=True)}


def test_the_state_goes_to_the_gpu_of_the_same_bus_however_spelt_and_a_lone_block_to_a_lone_gpu():
    gpus = freed().gpus                                      # buses 00000000:18:00.0, :28:00.0, ...
    got = with_repair(gpus, {"0000:28:00.0": PENDING, "00000000:99:00.0": FAILED})
    assert [g.memory_repair for g in got] == [None, PENDING] + [None] * 6
    assert got[0] is gpus[0], "a GPU with nothing new is the same object"
    assert [g.memory_repair for g in with_repair(gpus, {None: PENDING})] == [None] * 8
    assert with_repair(gpus[:1], {None: PENDING})[0].memory_repair == PENDING


@examples(200)
@given(st.lists(st.one_of(st.sampled_from(report(("00000000:18:00.0", "4", "Yes", "No")).splitlines(True)
                                          + ["GPU ", "\t", ":", "Pending", " : ", "Yes", "N/A", "[N/A]", "\x00",
                                             "    Remapped Rows", "    Retired Pages", "\u0663", "\r"]),
                          st.text(max_size=12)), max_size=40).map("".join))
def test_the_parser_never_raises_and_names_only_buses_it_saw(text):
    got = parse_memory_repair(text)
    for bus, r in got.items():
        assert bus is None or bus in text
        assert isinstance(r, MemoryRepair) and r != MemoryRepair()
        assert all(v is None or isinstance(v, (bool, int)) for v in dataclasses.astuple(r))
    with_repair(freed().gpus, got)


def test_a_follower_gets_the_state_back_from_the_snapshot_data_and_junk_there_is_unknown():
    from console.incident.mirror import snapshot_from_data, snapshot_to_data
    s = with_state(freed(), g2=PENDING, g5=FAILED)
    assert snapshot_from_data(json.loads(json.dumps(snapshot_to_data(s)))).gpus == s.gpus
    data = snapshot_to_data(s)
    data["gpus"][2]["memory_repair"] = {"remap_pending": "yes", "rows_uncorrectable": True, "rows_correctable": 2}
    data["gpus"][5]["memory_repair"] = ["not", "a", "mapping"]
    back = snapshot_from_data(data)
    assert back.gpus[2].memory_repair == MemoryRepair(rows_correctable=2) and back.gpus[5].memory_repair is None
    diagnose(back)


def test_anything_but_text_is_nothing():
    assert parse_memory_repair(None) == {} and parse_memory_repair(b"GPU 0000:18:00.0") == {}


# ---------------------------------------------------------------- the findings

def test_a_pending_remap_with_nothing_on_the_gpu_is_a_reset_now():
    s = with_state(freed(), g2=PENDING)
    f = only(diagnose(s), "row-remap-pending")
    assert f.severity == "high" and f.gpus == (2,) and f.rung == "reset"
    assert f.summary == ("GPU 2: a row remap is pending (4 rows remapped after uncorrectable errors); "
                         "no process uses it: it can be reset now")
    assert f.next_step.startswith("Reset GPU 2: the row remap pending on GPU 2 takes effect only when the GPU is reset")
    assert f.evidence["rows_uncorrectable"] == 4 and f.evidence["holders"] == []
    # persistence mode on: the reset step the ladder uses clears the blockers first
    blocked = with_state(dataclasses.replace(freed(), gpus=tuple(dataclasses.replace(g, persistence_mode=True)
                                                                 for g in freed().gpus)), g2=PENDING)
    f = only(diagnose(blocked), "row-remap-pending")
    assert f.rung == "clear-blockers" and "persistence mode off on GPU 2" in f.next_step
    assert only(diagnose(blocked), "reset-blocker").severity == "high"


def test_a_pending_remap_under_a_running_job_waits_for_the_job():
    job = worker(2, mib=60000)
    s = with_state(dataclasses.replace(freed(), processes=freed().processes + (job,),
                                       driver_processes=(DriverProc(job.pid, 2, freed().gpus[2].uuid, 60000,
                                                                    "sglang::scheduler_TP2"),)), g2=PENDING)
    f = only(diagnose(s), "row-remap-pending")
    assert f.severity == "low" and f.rung is None
    assert "reset after the job ends" in f.summary and "sglang::scheduler_TP2" in f.summary
    assert f.next_step.startswith("Nothing to do while the job runs: reset GPU 2")
    assert f.evidence["holders"] == [job.pid]
    # a container's job: the driver lists a host PID this namespace does not have
    foreign = with_state(dataclasses.replace(freed(), driver_processes=(
        DriverProc(2841917, 2, freed().gpus[2].uuid, 60000, "python3"),)), g2=PENDING)
    f = only(diagnose(foreign), "row-remap-pending")
    assert f.severity == "low" and "PID 2841917" in f.summary


def test_a_remap_still_pending_after_a_reset_wants_a_reboot():
    s = with_state(freed(T0 + 60), g2=PENDING)
    reset = ActionRecord(rung="reset", ts=T0, node="demo", gpus=(2,))
    f = only(diagnose(s, actions=[reset]), "row-remap-pending")
    assert f.rung == "reboot" and "still pending after the reset 60 s ago" in f.next_step
    assert only(diagnose(s, actions=[reset], now=T0 + 1), "row-remap-pending").rung == "wait"


def test_a_failed_remap_is_critical_and_a_drain_not_a_reset():
    fs = diagnose(with_state(freed(), g5=FAILED))
    f = only(fs, "row-remap-failure")
    assert f.severity == "critical" and f.rung is None and f.gpus == (5,) and fs[0] is f
    assert "a row remap failed (9 rows remapped after uncorrectable errors)" in f.summary
    assert f.next_step.startswith("Drain the node and have GPU 5 inspected or replaced")
    assert "a reset does not fix it" in f.next_step
    assert "row-remap-pending" not in [x.kind for x in fs], "the failure says it all"


def test_pages_pending_retirement_are_a_reset_due_like_a_pending_remap():
    f = only(diagnose(with_state(freed(), g0=MemoryRepair(pages_pending=True))), "retired-pages-pending")
    assert f.severity == "high" and f.rung == "reset" and "pages are pending retirement" in f.summary


def test_nothing_pending_nothing_known_nothing_said_and_xid_63_speaks_only_when_the_state_is_unknown():
    xid63 = ("[ 9.1] NVRM: Xid (PCI:0000:38:00): 63, pid=1896, Row Remapper: New row marked for remapping, "
             "reset gpu to activate.")
    clean = with_state(dataclasses.replace(freed(), kernel_log=(xid63,)), g2=MemoryRepair(False, False, 2, 0))
    assert not [f for f in diagnose(clean) if f.kind.startswith(("row-remap", "retired")) or f.kind == "xid"]
    unknown = dataclasses.replace(clean, gpus=freed().gpus)
    assert [f.evidence["xid"] for f in diagnose(unknown) if f.kind == "xid"] == [63]
    pages_only = with_state(unknown, g2=MemoryRepair(pages_pending=False))     # before Ampere: no remap state
    assert [f.evidence["xid"] for f in diagnose(pages_only) if f.kind == "xid"] == [63]


# ---------------------------------------------------------------- NVML

def test_nvml_reads_remapped_rows_and_pending_pages_and_not_supported_is_unknown():
    gpus = eight_gpus(4)
    gpus[2].remapped = (1, 4, 1, 0)
    gpus[3].remapped = (0, 9, 1, 1)
    gpus[4].pages_pending = 1
    gpus[5].errors["nvmlDeviceGetRemappedRows"] = 13          # a driver without the function
    nv = FakeNvml(gpus)
    nv.nvmlInit()
    reading = read_nvml(nv)
    assert reading.warnings == () and len(reading.gpus) == 8
    assert [g.memory_repair for g in reading.gpus[:6]] == [
        None, None, MemoryRepair(True, False, 4, 1, None), MemoryRepair(True, True, 9, 0, None),
        MemoryRepair(pages_pending=True), None]
    snap = NodeSnapshot(name="local", taken_at=T0, gpus=reading.gpus)
    assert {f.kind for f in diagnose(snap)} >= {"row-remap-pending", "row-remap-failure", "retired-pages-pending"}


# ---------------------------------------------------------------- the probe's cadence

async def test_the_remap_section_is_asked_at_the_first_probe_then_once_a_minute_and_after_a_command():
    clock = FakeClock()
    src = SimSource(scenario="remap-pending", clock=clock)
    asked = []
    for _ in range(probe.REMAP_EVERY + 2):
        snap = await src.poll()
        assert snap.error is None and snap.gpu(2).memory_repair.remap_pending
        asked.append("remap" not in src._skip)
        clock.advance(1.0)
    assert asked.count(True) == 2 and asked[0] and asked[probe.REMAP_EVERY], asked
    calls = [line for _, line in src.node.history if "ROW_REMAPPER" in line]
    assert len(calls) == 2, "one nvidia-smi -q a minute, not one a poll"
    await src.run("true")                     # a command (a reset, say) may have applied the remap
    await src.poll()
    assert "remap" not in src._skip


async def test_an_nvidia_smi_older_than_row_remapping_is_asked_for_the_pages_alone():
    src = SimSource(scenario="graceful", clock=FakeClock())
    src.node.driver_version = "418.67"
    src.node.gpus[1].pages_pending = True
    snap = await src.poll()
    assert snap.error is None and not snap.warnings
    assert snap.gpu(1).memory_repair == MemoryRepair(pages_pending=True)
    assert snap.gpu(0).memory_repair == MemoryRepair(pages_pending=None) or snap.gpu(0).memory_repair is None
    assert only(diagnose(snap), "retired-pages-pending").gpus == (1,)


async def test_a_driver_that_fails_is_not_asked_for_its_rows():
    src = SimSource(scenario="graceful", clock=FakeClock())
    src.node.driver_state = "not-loaded"
    snap = await src.poll()
    assert snap.error and "driver" in snap.error
    out = (await src.node.exec(probe.build_script("::gi-t::"), 10.0)).stdout
    assert f"::gi-t:: begin remap\n{probe.REMAP_SKIPPED}\n::gi-t:: end remap 9" in out


# ---------------------------------------------------------------- the demo scenario

def test_the_remap_pending_scenario_through_snapshot_json(capsys):
    from console import cli
    assert cli.main(["snapshot", "--json", "demo:remap-pending"]) == 0
    node, = json.loads(capsys.readouterr().out)["nodes"]
    assert node["error"] is None and max(g["memory_used_mib"] for g in node["gpus"]) < 1024
    f, = [f for f in node["findings"] if f["kind"] == "row-remap-pending"]
    assert f["gpus"] == [2] and f["severity"] == "high" and f["rung"] == "clear-blockers"
    # its blockers come first (the summary says so, as the step does: they no longer disagree)
    assert "it can be reset once its reset blockers are cleared" in f["summary"] and "4 rows" in f["summary"]
    assert f["evidence"]["remap_pending"] is True and f["evidence"]["rows_uncorrectable"] == 4
    assert not [x for x in node["findings"] if x["kind"] == "xid"], "Xid 63 is the pending remap's, said once"
    assert not [x for x in node["findings"] if 5 in x["gpus"] and x["kind"].startswith("row-remap")]
    by_index = {g["index"]: g["memory_repair"] for g in node["gpus"]}
    assert by_index[2]["remap_pending"] is True and by_index[2]["rows_uncorrectable"] == 4
    assert by_index[5]["remap_pending"] is False and by_index[5]["rows_uncorrectable"] == 2


async def test_following_the_advice_applies_the_remap_within_the_shortest_path_plus_one():
    from console.actions.ladder import top_step
    from console.monitor import NodeMonitor
    from tests.sim_fixtures import take_step
    clock = FakeClock()
    src = SimSource(name="demo", scenario="remap-pending", clock=clock)
    monitor = NodeMonitor(src, interval=3600)
    taken = []
    while True:
        snap = await monitor.poll_once()
        if not [f for f in snap.findings if f.kind == "row-remap-pending"]:
            break
        assert len(taken) <= len(src.node.ground_truth.shortest_path), taken
        top = top_step(snap.findings)
        done = await take_step(src, snap, top, monitor)
        assert done.status in ("settled", "unsettled") and not done.plan.refusals, done.text
        taken.append(top.rung)
    assert taken == list(src.node.ground_truth.shortest_path) == ["clear-blockers", "reset"]
    assert not src.node.gpus[2].remap_pending and src.node.gpus[2].rows_uncorrectable == 4


# ---------------------------------------------------------------- over a real sshd

async def test_over_ssh_a_pending_remap_is_read_from_the_node_once(sshd, node_a, tmp_path, ssh_home):  # noqa: F811
    from console.sources.ssh.source import SshSource
    node_a.smi.set(used=(4, 4), remap=(0, 4))
    node_a.smi.clear_calls()
    src = SshSource(node_a.target, options(sshd, tmp_path))
    src.smi_loop = False
    try:
        for _ in range(3):
            snap = await src.poll()
        assert snap.error is None and not snap.warnings, (snap.error, snap.warnings)
        assert [g.memory_repair for g in snap.gpus] == [MemoryRepair(False, False, 0, 0, None),
                                                       MemoryRepair(True, False, 4, 0, None)]
        f = only(diagnose(snap), "row-remap-pending")
        assert f.gpus == (1,) and f.severity == "high" and f.rung == "clear-blockers"   # persistence mode on
        assert [c for c in node_a.smi.calls() if c.startswith("-q")] == ["-q -d ROW_REMAPPER,PAGE_RETIREMENT"]
    finally:
        await src.close()


async def test_the_gpu_details_say_what_memory_repair_waits_for():
    from console.monitor import diagnosed
    from console.ui.details import gpu_detail
    src = SimSource(name="demo", scenario="remap-pending", clock=FakeClock())
    snap = diagnosed(await src.poll())
    pending = gpu_detail(snap.gpu(2), snap).plain
    assert "memory repair" in pending and "row remap pending (4 rows after uncorrectable errors): a reset applies it" in pending
    done = gpu_detail(snap.gpu(5), snap).plain
    assert "nothing pending (2 rows after uncorrectable errors)" in done
    unread = gpu_detail(dataclasses.replace(snap.gpu(5), memory_repair=None), snap).plain
    assert "not read yet" in unread


def test_the_gpu_query_reads_health_beside_memory_and_the_old_layouts_still_parse():
    """probe.HEALTH_FIELDS come last: 15 columns (16 with the recovery action) carry them; rows of
    9 or 10 (a stand-in, an older capture) parse as before, health unknown."""
    from console.sources.parse import parse_gpu_query
    base = "0, GPU-a, NVIDIA H100 80GB HBM3, 00000000:18:00.0, 4, 81559, 0, Enabled, Disabled"
    full = parse_gpu_query(base + ", None, 54, 71.23, 1980, 5, 16, 0\n").gpus[0]
    assert (full.recovery_action, full.temperature_c, full.power_w, full.clock_sm_mhz, full.pcie_gen,
            full.pcie_width, full.ecc_uncorrected) == ("none", 54, 71.23, 1980, 5, 16, 0)
    without = parse_gpu_query(base + ", 54, [N/A], 1980, 4, 8, [N/A]\n").gpus[0]
    assert (without.recovery_action, without.temperature_c, without.power_w, without.pcie_width,
            without.ecc_uncorrected) == (None, 54, None, 8, None)
    old = parse_gpu_query(base + ", Reset\n").gpus[0]
    assert old.recovery_action == "gpu_reset" and old.temperature_c is None and old.memory_total_mib == 81559


async def test_the_gpu_details_and_json_carry_the_health():
    from console.monitor import diagnosed
    from console.output.json import gpu_json
    from console.ui.details import gpu_detail
    src = SimSource(name="demo", scenario="seed", clock=FakeClock())
    snap = diagnosed(await src.poll())
    g = snap.gpu(0)
    assert g.pcie_gen == 5 and g.pcie_width == 16 and g.ecc_uncorrected == 0 and g.temperature_c is not None
    shown = gpu_detail(g, snap).plain
    assert "PCIe gen 5 x16 · 0 uncorrected ECC errors" in shown and "°C" in shown
    doc = gpu_json(g)
    assert doc["pcie_gen"] == 5 and doc["temperature_c"] == g.temperature_c and doc["power_w"] == g.power_w
