"""Per-process GPU utilisation (issue 20): what the driver says each process does with the SMs.

Over SSH the probe asks ``nvidia-smi pmon -c 1 -s u`` every probe.PMON_EVERY polls while the
driver lists a process (console/sources/parse_pmon.py reads it by its header's names); locally
NVML's nvmlDeviceGetProcessUtilization; the simulator answers pmon in its documented layout.
What a user sees: a busy worker's SM% beside the stuck 0% holders, an empty cell where the
driver says nothing, the figure in ``snapshot --json`` and in a process's details, and the
column where the width leaves the names their room."""
from __future__ import annotations

import asyncio
import dataclasses
import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from console import probe
from console.clock import FakeClock
from console.model import DriverProc, Proc
from console.sim import nvsmi
from console.sources import parse
from console.sources.parse_pmon import PmonParse, busiest, credit_sm, parse_pmon
from console.sources.sim import SimSource
from tests.fuzzing import examples

DOCUMENTED = """\
# gpu        pid  type    sm   mem   enc   dec   command
# Idx          #   C/G     %     %     %     %   name
    0      22010     C    98    56     -     -   python3
    1      22010     C    41    12     -     -   python3
    2      22011     C     -     -     -     -   python3
    3          -     -     -     -     -     -   -
"""
#: newer drivers: jpg and ofa after dec; with -s um an fb column before the command
WIDE = """\
# gpu         pid   type     sm    mem    enc    dec    jpg    ofa     fb    command
# Idx           #    C/G      %      %      %      %      %      %     MB    name
    0       4188     C      7      1      -      -      -      -  59120    nvidia-cuda-mps-server
    0       9001     C     88     30      0      0      0      0    512    VLLM::EngineCore worker
"""


# ---------------------------------------------------------------- the parser

def test_the_documented_layout_gives_each_process_its_sm_per_gpu_and_dash_is_unknown():
    got = parse_pmon(DOCUMENTED)
    assert got == PmonParse(sm={22010: {0: 98, 1: 41}, 22011: {2: None}})
    assert busiest(got.sm[22010]) == 98 and busiest(got.sm[22011]) is None and busiest(None) is None


def test_the_sm_column_is_found_by_its_header_name_not_by_its_position():
    assert parse_pmon(WIDE).sm == {4188: {0: 7}, 9001: {0: 88}}
    # the same rows with the columns in another order (a driver that moves them)
    moved = ("# pid gpu command_x sm\n# # Idx name %\n 77 1 - 12\n")
    assert parse_pmon(moved).sm == {77: {1: 12}}
    # no header: nothing is guessed from positions
    assert parse_pmon("    0      22010     C    98    56     -     -   python3\n") == PmonParse()


@pytest.mark.parametrize("text", [
    "", "\n\n", "# gpu pid type sm\n", "# gpu pid sm\n 0 -1 50\n 0 0 50\n x 5 50\n 0 5 ٣\n 0 5 101\n",
    "# gpu pid type sm mem enc dec command\n    0  123\n", "\x00\ufffd# gpu pid sm\n\x00 0 9 9\n",
    "Failed to initialize NVML: Driver/library version mismatch\nNVML library version: 580.95\n",
    probe.SKIPPED, probe.REMAP_SKIPPED, "9" * 400,
])
def test_garbage_cut_short_or_odd_values_give_nothing_or_none_never_a_crash(text):
    got = parse_pmon(text)
    assert all(v is None or 0 <= v <= 100 for per in got.sm.values() for v in per.values())
    assert all(pid > 0 for pid in got.sm)


def test_the_not_supported_text_says_so_and_gives_no_figure():
    got = parse_pmon("Not supported on the device(s)\nFailed to process command line\n")
    assert got.unsupported and got.sm == {}


pmon_fragment = st.one_of(
    st.sampled_from(["# gpu", " pid", " type", " sm", " mem", " enc", " dec", " jpg", " ofa", " fb",
                     " command", "# Idx", " #", " C/G", " %", " name", "\n", " ", "  ", "-", " - ", "0", "7",
                     "22010", "100", "101", "-1", " C ", " G ", "python3", "Not supported on the device(s)",
                     "Failed to process command line", "\x00", "\ufffd", "\u0663", "\u00b2", "9" * 30, "#"]),
    st.text(max_size=8))


@examples(300)
@given(st.lists(pmon_fragment, max_size=60).map("".join))
def test_fuzzed_pmon_text_never_raises_and_gives_only_percentages(text):
    got = parse_pmon(text)
    for pid, per in got.sm.items():
        assert isinstance(pid, int) and pid > 0
        for gpu, value in per.items():
            assert isinstance(gpu, int) and gpu >= 0
            assert value is None or (isinstance(value, int) and 0 <= value <= 100)
    assert not (got.unsupported and got.sm)


# ---------------------------------------------------------------- crediting the processes

def _proc(pid: int) -> Proc:
    return Proc(pid=pid, ppid=1, state="S", user="root", name="python3", cmdline="python3 w.py")


def test_only_processes_the_driver_lists_here_get_a_figure_the_busiest_of_their_gpus():
    procs = (_proc(10), _proc(11), _proc(12), _proc(13))
    driver = (DriverProc(10, 0, "GPU-0", 100, "python3", local=True),
              DriverProc(10, 1, "GPU-1", 100, "python3", local=True),
              DriverProc(11, 0, "GPU-0", 100, "python3", local=False),     # another namespace's PID
              DriverProc(13, 2, "GPU-2", 100, "python3", local=True))
    sm = {10: {0: 3, 1: 97}, 11: {0: 50}, 12: {0: 60}, 13: {2: None}}
    cache: dict = {}
    out = credit_sm(procs, driver, sm, cache)
    assert [p.gpu_sm_pct for p in out] == [97, None, None, None]
    # the same inputs: the very same tuple; a changed figure: a new object for that process only
    assert credit_sm(procs, driver, sm, cache) is out
    again = credit_sm(procs, driver, {10: {0: 3, 1: 97}, 13: {2: 40}}, cache)
    assert again[0] is out[0] and again[3].gpu_sm_pct == 40 and again[1] is procs[1]


def test_the_parsers_fresh_list_is_credited_as_a_walk_of_every_process_would():
    # fresh (the parser's list: PID order, one a PID, no figure yet): only the listed PIDs are
    # looked up, by bisection; the answer and the objects kept are the full walk's
    procs = tuple(_proc(pid) for pid in range(10, 40, 3))
    driver = (DriverProc(10, 0, "GPU-0", 100, "python3", local=True),
              DriverProc(22, 1, "GPU-1", 100, "python3", local=True),
              DriverProc(25, 0, "GPU-0", 100, "python3", local=False),
              DriverProc(26, 2, "GPU-2", 100, "python3", local=True),       # not in /proc
              DriverProc(37, 2, "GPU-2", 100, "python3", local=True))
    sm = {10: {0: 3, 1: 97}, 22: {1: None}, 25: {0: 50}, 26: {2: 9}, 37: {2: 0}}
    walked, quick = {}, {}
    out = credit_sm(procs, driver, sm, walked)
    fast = credit_sm(procs, driver, sm, quick, fresh=True)
    assert fast == out and [p.gpu_sm_pct for p in fast] == [97] + [None] * 8 + [0]
    assert [a is b for a, b in zip(fast, procs)] == [a is b for a, b in zip(out, procs)]
    again = credit_sm(procs, driver, {**sm, 37: {2: 5}}, quick, fresh=True)
    assert again[0] is fast[0] and again[9].gpu_sm_pct == 5


# ---------------------------------------------------------------- the probe section

MARK = "::gi-sm::"


def _probe(pmon: str | None, apps: str = "22010, GPU-0, 76105, python3\n") -> str:
    gpu = "0, GPU-0, NVIDIA H100, 00000000:18:00.0, 76109, 81559, 0, Enabled, Disabled\n"
    text = (f"{MARK} begin meta\n1.0\n100\nbtime 1000\nnode\n0\npid:[1]\n1\n{MARK} end meta 0\n"
            f"{MARK} begin pids\n{MARK} end pids 0\n"
            f"{MARK} begin stat\n22010 (python3) S 1 22010 22010 0 -1 0 0 0 0 0 0 0 0 0 20 0 4 0 500 0 0\n"
            f"{MARK} end stat 0\n{MARK} begin gpu\n{gpu}{MARK} end gpu 0\n{MARK} begin apps\n{apps}{MARK} end apps 0\n")
    if pmon is not None:
        text += f"{MARK} begin pmon\n{pmon}{MARK} end pmon 0\n"
    return text


def test_the_probe_credits_the_pmon_figure_and_keeps_it_on_the_polls_that_leave_pmon_out():
    cache: dict = {}
    first = parse._parse_probe("n", _probe(DOCUMENTED), MARK, 1.0, None, cache)
    assert first.proc(22010).gpu_sm_pct == 98
    assert json.loads(json.dumps(first.proc(22010).gpu_sm_pct)) == 98
    later = parse._parse_probe("n", _probe(None), MARK, 2.0, None, cache)       # pmon left out (STICKY)
    assert later.proc(22010).gpu_sm_pct == 98
    # the driver no longer lists it: the kept figure is not put on it
    gone = parse._parse_probe("n", _probe(None, apps=""), MARK, 3.0, None, cache)
    assert gone.proc(22010).gpu_sm_pct is None
    # pmon refused: unknown, no warning, and the source hears it is not supported
    refused = parse._parse_probe("n", _probe("Not supported on the device(s)\nFailed to process command line\n"),
                                 MARK, 4.0, None, cache)
    assert refused.proc(22010).gpu_sm_pct is None and refused.warnings == () and cache["pmon_unsupported"]


def test_a_timed_out_pmon_says_so_in_a_warning():
    text = _probe(None) + f"{MARK} begin pmon\n{MARK} end pmon 124\n"
    snap = parse._parse_probe("n", text, MARK, 1.0, None, {})
    assert snap.proc(22010).gpu_sm_pct is None
    assert any("pmon timed out" in w for w in snap.warnings)


def test_the_pmon_section_runs_only_after_the_driver_answered_and_is_sticky():
    line = probe.section_line(MARK, "pmon", probe.driver_call("pmon"))
    assert f"{probe.timed(probe.QUERY_PMON)} 2>&1" in line and f'"${probe.NV_RC}" = 0' in line
    assert "pmon" in probe.STICKY and probe.PMON_EVERY == 30
    assert f"{MARK} begin pmon" not in probe.build_script(MARK, skip=frozenset({"pmon"}))


def _pmon_asked(src: SimSource, polls: int) -> list[bool]:
    asked = []
    for _ in range(polls):
        snap = asyncio.run(src.poll())
        assert snap.error is None, snap.error
        asked.append("pmon" not in src._skip)
    return asked


def test_pmon_is_asked_every_pmon_every_polls_while_the_driver_lists_a_process():
    src = SimSource(name="demo", scenario="slow-teardown", clock=FakeClock())
    asked = _pmon_asked(src, 2 * probe.PMON_EVERY + 1)
    assert [i for i, a in enumerate(asked) if a] == [0, probe.PMON_EVERY, 2 * probe.PMON_EVERY], asked
    pmon_runs = [c for _t, c in src.node.history if "pmon" in c]
    assert len(pmon_runs) == 3


def test_no_process_no_pmon_after_the_first_probe():
    src = SimSource(name="demo", scenario="reset-required", clock=FakeClock())   # no process on any GPU
    asked = _pmon_asked(src, 2 * probe.PMON_EVERY + 1)
    assert asked.count(True) == 1 and asked[0]
    assert not asyncio.run(src.poll()).driver_processes


def test_where_pmon_is_not_supported_it_is_asked_far_less_often_and_nothing_is_warned():
    src = SimSource(name="demo", scenario="slow-teardown", clock=FakeClock())
    src.node.pmon_supported = False
    asked = _pmon_asked(src, 2 * probe.PMON_EVERY + 1)
    assert asked.count(True) == 1
    snap = asyncio.run(src.poll())
    assert all(p.gpu_sm_pct is None for p in snap.processes) and snap.warnings == ()
    assert src._every("pmon") == probe.PMON_UNSUPPORTED_EVERY


# ---------------------------------------------------------------- the simulator

def _pmon_text(scenario: str, **host) -> tuple[str, int]:
    src = SimSource(name="demo", scenario=scenario, clock=FakeClock())
    for k, v in host.items():
        setattr(src.node, k, v)
    out, _err, rc = nvsmi.run(src.node, ["pmon", "-c", "1", "-s", "u"])
    return out, rc


def test_the_simulator_answers_pmon_in_the_documented_layout_busy_workers_and_stuck_holders():
    seed, rc = _pmon_text("seed")
    assert rc == 0
    lines = seed.splitlines()
    assert lines[0].split() == ["#", "gpu", "pid", "type", "sm", "mem", "enc", "dec", "jpg", "ofa", "command"]
    assert lines[1].split()[:4] == ["#", "Idx", "#", "C/G"]
    assert {pid: busiest(per) for pid, per in parse_pmon(seed).sm.items()} == {
        72230 + 64 * i: 0 for i in range(8)}                      # the hung schedulers: 0 %
    busy = parse_pmon(_pmon_text("slow-teardown")[0]).sm
    assert sorted(busy) == [51842, 51914, 51986, 52058]
    assert all(85 <= busiest(per) < 100 for per in busy.values())      # training workers, busy
    older, _ = _pmon_text("seed", driver_version="470.82.01")
    assert "jpg" not in older.splitlines()[0] and parse_pmon(older).sm[72230] == {0: 0}


def test_the_simulator_can_refuse_pmon_as_a_real_driver_did():
    from tests.real_fixtures import load
    out, rc = _pmon_text("seed", pmon_supported=False)
    real = load("pmon-not-supported-nvidia-patch-89.txt").body
    assert out == real.split("\n", 1)[1] and rc != 0      # the paste less its shell prompt line


def test_snapshot_json_carries_each_process_sm_share(tmp_path):
    from console.output.json import snapshot_document
    from console.monitor import diagnosed
    src = SimSource(name="demo", scenario="slow-teardown", clock=FakeClock())
    snap = diagnosed(asyncio.run(src.poll()))
    doc = json.loads(json.dumps(snapshot_document([snap], snap.taken_at)))
    procs = {p["pid"]: p for p in doc["nodes"][0]["processes"]}
    assert {pid: procs[pid]["gpu_sm_pct"] for pid in (51842, 51914, 51986, 52058)} == {
        51842: 95, 51914: 93, 51986: 96, 52058: 94}
    assert procs[51830]["gpu_sm_pct"] is None                 # torchrun: the driver does not list it
    assert all("gpu_sm_pct" in p for p in procs.values())


# ---------------------------------------------------------------- NVML (the local source)

def _local(gpus, **kw):
    from console.sources.local.source import LocalSource
    from tests.fake_pynvml import FakeNvml
    nv = FakeNvml(gpus, **kw)
    return nv, LocalSource(nvml_module=nv)


async def test_nvml_process_samples_give_the_newest_sm_and_ask_only_for_newer_ones(gpu_worker_pid):
    from tests.fake_pynvml import FakeGpu
    pid = gpu_worker_pid
    g0 = FakeGpu(0, "00000000:18:00.0", used_mib=500, compute=[(pid, 500 << 20)])
    g1 = FakeGpu(1, "00000000:19:00.0", used_mib=500, compute=[(pid, 500 << 20)])
    now_us = 10 ** 16                             # samples far in the future: newer than any first window
    g0.samples = [(pid, now_us, 12), (pid, now_us + 5, 30)]
    g1.samples = [(pid, now_us + 1, 71)]
    nv, src = _local([g0, g1])
    try:
        snap = await src.poll()
        assert snap.proc(pid).gpu_sm_pct == 71 and snap.warnings == ()
        g1.samples = []                           # nothing new on GPU 1, a new sample on GPU 0
        g0.samples.append((pid, now_us + 9, 44))
        snap = await src.poll()
        assert snap.proc(pid).gpu_sm_pct == 44
        assert nv.since[-2:] == [(0, now_us + 5), (1, now_us + 1)]     # lastSeenTimeStamp moved on
    finally:
        await src.close()


async def test_nvml_without_process_samples_gives_none_no_warning_and_is_not_asked_again(gpu_worker_pid):
    from tests.fake_pynvml import FakeGpu
    pid = gpu_worker_pid
    g0 = FakeGpu(0, "00000000:18:00.0", used_mib=500, compute=[(pid, 500 << 20)], samples=None)   # NotSupported
    g1 = FakeGpu(1, "00000000:19:00.0", used_mib=500, compute=[(pid, 500 << 20)])                # NOT_FOUND
    g2 = FakeGpu(2, "00000000:1A:00.0")                                                           # no process
    nv, src = _local([g0, g1, g2])
    try:
        for _ in range(3):
            snap = await src.poll()
            assert snap.proc(pid).gpu_sm_pct is None and snap.proc(pid).gpu_memory_mib
            assert not [w for w in snap.warnings if "utili" in w.lower()], snap.warnings
        asked = [i for i, _ in nv.since]
        assert asked.count(0) == 1 and asked.count(1) == 3 and 2 not in asked
    finally:
        await src.close()


@pytest.fixture
def gpu_worker_pid():
    import subprocess
    p = subprocess.Popen(["sleep", "300"])
    yield p.pid
    p.kill()
    p.wait()


# ---------------------------------------------------------------- the screen

def _screen(app) -> str:
    return "\n".join("".join(seg.text for seg in strip) for strip in app.screen._compositor.render_strips())


async def _shown(size: tuple[int, int], scenario: str = "slow-teardown") -> str:
    from console.ui.app import IncidentApp
    app = IncidentApp([SimSource(name="demo", scenario=scenario, clock=FakeClock())])
    async with app.run_test(size=size) as pilot:
        for _ in range(500):
            snap = app.snapshots.get("demo")
            if snap is not None and any(p.gpu_sm_pct is not None for p in snap.processes) \
                    and app.query_one("#procs").row_count:
                break
            await pilot.pause(0.02)
        await pilot.pause(0.1)
        return _screen(app)


async def test_at_100_columns_the_process_panel_shows_sm_beside_the_memory_and_empty_where_unknown():
    text = await _shown((100, 16))
    header = next(line for line in text.split("\n") if "GPU MiB" in line)
    assert "SM%" in header and header.index("SM%") < header.index("User") < header.index("Process")
    rows = {line.split()[0]: line for line in text.split("\n") if line.strip()[:5].isdecimal()}
    col = header.index("SM%")
    workers = [rows[pid] for pid in ("51842", "51914", "51986", "52058") if pid in rows]
    assert workers and all(line[col:col + 3].strip().isdecimal() for line in workers), workers
    assert rows["51830"][col:col + 3].strip() == ""            # torchrun: not listed by the driver: empty


async def test_at_80_columns_sm_gives_way_and_the_names_keep_their_room():
    text = await _shown((80, 24))
    header = next(line for line in text.split("\n") if "GPU MiB" in line)
    assert "SM%" not in header and "Process" in header
    assert len(header) - header.index("Process") >= 40


async def test_the_details_of_a_listed_process_say_its_sm_share():
    from console.ui.app import IncidentApp
    from console.ui.details import proc_detail
    src = SimSource(name="demo", scenario="slow-teardown", clock=FakeClock())
    snap = await src.poll()
    busy = proc_detail(snap.proc(51842), snap).plain
    assert "GPU SM busy    95% (the busiest of its GPUs)" in busy
    stuck = SimSource(name="demo", scenario="seed", clock=FakeClock())
    s = await stuck.poll()
    assert "GPU SM busy    0%" in proc_detail(s.proc(72230), s).plain
    none = dataclasses.replace(s.proc(72230), gpu_sm_pct=None)
    assert "GPU SM busy    not reported" in proc_detail(none, s).plain
    assert IncidentApp                                           # (the screen that shows it: enter)


def test_proc_with_is_dataclasses_replace_without_the_memos():
    import dataclasses
    from console.model import proc_with
    p = Proc(pid=5, ppid=1, state="S", user="root", name="python3", cmdline="python3 w.py",
             device_files=("/dev/nvidia0",), gpu_memory_mib={"0": 10})
    assert p.device_gpus == (0,)                       # a memo slot set on p
    q = proc_with(p, gpu_sm_pct=7, cpu_ticks=3)
    assert q == dataclasses.replace(p, gpu_sm_pct=7, cpu_ticks=3) and q is not p
    assert getattr(q, "_device_gpus", None) is None    # unset, as replace leaves it
    with pytest.raises(TypeError):
        proc_with(p, no_such_field=1)
