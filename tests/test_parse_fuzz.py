"""Hypothesis fuzz of the probe parsers: any text gives values or warnings, never an exception.

``parse_probe`` catches everything and turns it into an error line, which would hide a
parser bug; so these tests call the parts and ``_parse_probe`` (no safety net) directly.
"""
from __future__ import annotations

from hypothesis import HealthCheck, given
from hypothesis import strategies as st

from tests.fuzzing import examples
from console.model import NodeSnapshot
from console.sources import parse
from console.sources.parse_proc import parse_exe, parse_pending
from console import probe

MARK = "::gi-fuzz::"
NA = ["[N/A]", "[Not Supported]", "[Insufficient Permissions]", "[Unknown Error]", "N/A", ""]
FAILURES = [
    "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure that "
    "the latest NVIDIA driver is installed and running.",
    "No devices were found",
    "Unable to determine the device handle for GPU 0000:02:00.0: GPU is lost.  Reboot the system to "
    "recover this GPU",
    "Failed to initialize NVML: Driver/library version mismatch",
    "NVML library version: 580.95",
    "timeout: failed to run command 'nvidia-smi': No such file or directory",
    "sh: 1: nvidia-smi: not found",
    "Failed to initialize NVML: Unknown Error",
    "dmesg: read kernel buffer failed: Operation not permitted",
]
fuzz = examples(250, suppress_health_check=[HealthCheck.too_slow])

# text that looks like what nodes print, mutated: fragments of real lines, separators, junk
fragment = st.one_of(
    st.sampled_from(FAILURES + NA + [",", ", ", "\n", " ", "(", ")", ") ", " (", "0", "-1", "76109",
                                     "GPU-5a1c", "MIG-1", "MiB", "%", "\x00", "\ufffd", "é", "\"",
                                     "/proc/1/fd", "/proc/12/task/13", "/dev/nvidia0", "pid:[4026531836]",
                                     "btime 1795953977", "NVRM: Xid (PCI:0000:18:00): 79, GPU has fallen off",
                                     "Kernel Module  580.95.05", "  MIG 1g.12gb     Device  0: (UUID: MIG-a)",
                                     "GPU 0: NVIDIA H200 (UUID: GPU-1)", MARK, "begin", "end",
                                     "\u00b2", "\u0663", "9" * 40]),
    st.text(max_size=12),
)
node_text = st.lists(fragment, max_size=40).map("".join)


def sections_text(bodies: dict[str, str], rcs: dict[str, object]) -> str:
    out = []
    for name, _ in probe.sections():
        if name not in bodies:
            continue
        out.append(f"{MARK} begin {name}\n{bodies[name]}\n")
        rc = rcs.get(name, 0)
        if rc != "cut":
            out.append(f"{MARK} end {name} {rc}\n")
    return "".join(out)


probe_output = st.builds(
    sections_text,
    st.dictionaries(st.sampled_from([n for n, _ in probe.sections()]), node_text, max_size=11),
    st.dictionaries(st.sampled_from([n for n, _ in probe.sections()]),
                    st.sampled_from([0, 1, 9, 124, 127, 255, "x", "", "cut"]), max_size=11),
)


@fuzz
@given(node_text, st.one_of(st.none(), st.integers(-1, 256)))
def test_nvidia_smi_parsers_never_raise(text, rc):
    gp = parse.parse_gpu_query(text, rc)
    assert all(isinstance(g.index, int) for g in gp.gpus)
    assert gp.error is None or (gp.error and "\n" not in gp.error)
    procs, warnings = parse.parse_compute_apps(text, {g.uuid: g.index for g in gp.gpus})
    assert all(isinstance(p.pid, int) for p in procs) and all("\n" not in w for w in warnings)
    parse.parse_gpu_list(text)
    parse.nvsmi_failure(text, rc)
    parse.lost_gpu_bus_ids(text)
    parse.csv_rows(text)
    parse.parse_driver_version(text)


@fuzz
@given(node_text)
def test_proc_parsers_never_raise(text):
    for pid, st_line in parse.parse_stat(text).items():
        assert pid == st_line.pid and isinstance(st_line.ppid, int)
    parse.parse_ps(text)
    parse.parse_dstate(text)
    parse.parse_fds(text)
    parse.parse_pidns(text)
    parse.parse_meta(text)
    assert all(isinstance(exe, str) and exe for exe in parse_exe(text).values())
    assert all(isinstance(v, bool) for v in parse_pending(text).values())
    pci = parse.parse_pci(text)
    assert pci is None or all(isinstance(g.bus_id, str) and g.present in (True, False, None) for g in pci)
    lines, warnings = parse.parse_xid(text)
    assert all("\n" not in w for w in warnings)


@fuzz
@given(probe_output)
def test_whole_probe_gives_a_snapshot(text):
    snap = parse._parse_probe("n1", text, MARK, 1.0, 2.0)
    assert isinstance(snap, NodeSnapshot) and snap.name == "n1"
    assert snap.error is None or "\n" not in snap.error
    assert all("\n" not in w for w in snap.warnings)
    # the safety net is never what answers
    assert not (parse.parse_probe("n1", text, MARK, taken_at=1.0).error or "").startswith("could not parse")


@fuzz
@given(st.binary(max_size=400).map(lambda b: b.decode("utf-8", "replace")))
def test_raw_bytes_as_probe_output(text):
    parse._parse_probe("n1", text, MARK, 1.0, None)
    parse._parse_probe("n1", f"{MARK} begin gpu\n{text}\n{MARK} end gpu 0\n", MARK, 1.0, None)


value = st.one_of(st.integers(0, 200_000).map(str), st.sampled_from(NA))


@fuzz
@given(st.lists(st.tuples(value, value, value, st.sampled_from(["Enabled", "Disabled"] + NA),
                          st.sampled_from(["Enabled", "Disabled"] + NA)), min_size=1, max_size=8))
def test_gpu_values_are_ints_or_none_never_zero_for_na(rows):
    text = "".join(f"{i}, GPU-{i:04d}, NVIDIA H200, 00000000:{i:02X}:00.0, {used}, {total}, {util}, {pm}, {mig}\n"
                   for i, (used, total, util, pm, mig) in enumerate(rows))
    gp = parse.parse_gpu_query(text, 0)
    assert gp.error is None and len(gp.gpus) == len(rows)
    for g, (used, total, util, pm, mig) in zip(gp.gpus, rows):
        assert g.memory_used_mib == (int(used) if used.isdigit() else None)
        assert g.memory_total_mib == (int(total) if total.isdigit() else None)
        assert g.utilization_pct == (int(util) if util.isdigit() else None)
        assert g.persistence_mode == {"Enabled": True, "Disabled": False}.get(pm)
        assert g.mig_mode == {"Enabled": True, "Disabled": False}.get(mig)


@fuzz
@given(st.text(alphabet=st.characters(blacklist_categories=("Cs", "Cc")), min_size=1, max_size=40)
       .filter(lambda s: s.strip() == s and s))
def test_process_names_with_commas_and_spaces_survive(name):
    procs, warnings = parse.parse_compute_apps(f"4242, GPU-1, 100, {name}\n", {"GPU-1": 0})
    assert [(p.pid, p.gpu_index, p.used_memory_mib, p.name) for p in procs] == [(4242, 0, 100, name)]


@fuzz
@given(st.text(alphabet=st.characters(blacklist_categories=("Cs", "Cc")), max_size=16).filter(
    lambda s: "\n" not in s), st.sampled_from("RSDZTIX"), st.integers(0, 4_000_000), st.integers(0, 10**12))
def test_stat_line_comm_may_hold_anything(comm, state, ppid, ticks):
    rest = " ".join(["1"] * 16)
    line = f"77 ({comm}) {state} {ppid} 77 77 0 -1 4194560 0 0 0 0 0 0 0 0 20 0 3 0 {ticks} {rest}"
    st_line = parse.parse_stat_line(line)
    assert (st_line.pid, st_line.comm, st_line.state, st_line.ppid, st_line.num_threads,
            st_line.start_ticks) == (77, comm, state, ppid, 3, ticks)


def test_regression_unicode_digit_after_a_newline_in_comm():
    """A process may put a newline in its name (prctl), and what follows may start with '²' --
    isdigit() but not int(). It used to take the whole node down; now the record is read whole."""
    stat = "77 (evil\n\u00b2 (x) S 1 77 77 0 -1 4194560 0 0 0 0 0 0 0 0 20 0 3 0 500 1 1\n"
    text = f"{MARK} begin stat\n{stat}{MARK} end stat 0\n{MARK} begin args\n/proc/\u00b2/cmdline:x\0{MARK} end args 0\n"
    snap = parse._parse_probe("n1", text, MARK, 1.0, None)
    assert [(p.pid, p.name, p.start_ticks) for p in snap.processes] == [(77, "evil\n\u00b2 (x", 500)]


def test_regression_absurd_start_time_keeps_the_process():
    big = "9" * 400
    meta = f"1.0\n100\nbtime {big}\nnode\n0\npid:[1]\n5"
    stat = f"77 (x) S 1 77 77 0 -1 4194560 0 0 0 0 0 0 0 0 20 0 3 0 {big} 1 1"
    text = f"{MARK} begin meta\n{meta}\n{MARK} end meta 0\n{MARK} begin stat\n{stat}\n{MARK} end stat 0\n"
    snap = parse._parse_probe("n1", text, MARK, 1.0, None)
    assert [(p.pid, p.create_time) for p in snap.processes] == [(77, None)]
