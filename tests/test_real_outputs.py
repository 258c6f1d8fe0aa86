"""Every real output in tests/fixtures/real/ parsed with the console's own parsers, asserting what
a person reads in it: GPU counts, memory, bus ids, PIDs and their MiB, MIG instances, the node's
error words, each Xid's number/bus/pid/name and what the console advises, a reset's outcome.

The default nvidia-smi table has no parser in the console (the probe reads --query-gpu and
--query-compute-apps, the local source reads NVML); for the table excerpts the tests read the
facts a person reads with two small regular expressions (memory cells, process rows).
"""
from __future__ import annotations

import dataclasses
import re

import pytest

from pathlib import Path

from tests.real_fixtures import DIR, SEPARATOR, load, names
from console import probe
from console.actions.reset_output import parse_reset_output, reset_outcome_line
from console.checks.parse import parse_kernel_log
from console.diagnosis import diagnose
from console.diagnosis.xid import fallen_off_bus, parse_xid_line
from console.model import Gpu, NodeSnapshot
from console.sources import parse

README = (DIR / "README").read_text(encoding="utf-8")


# ---------------------------------------------------------------- the corpus itself

def test_the_corpus_has_at_least_30_real_outputs_each_with_its_source_and_driver():
    all_ = names()
    assert len(all_) >= 51
    for name in all_:
        r = load(name)
        assert r.source.startswith("https://"), name
        assert r.driver, name
        assert r.body.strip(), name
        assert SEPARATOR not in r.body and not r.body.startswith("# source:"), name


def test_the_readme_lists_every_fixture_with_its_source_and_a_not_found_list():
    for name in names():
        row = next((ln for ln in README.splitlines() if ln.startswith(f"| `{name}` |")), None)
        assert row is not None, f"{name} is not in tests/fixtures/real/README"
        assert load(name).source.split()[0] in row
    listed = set(re.findall(r"^\| `([^`]+)` \|", README, re.M))
    assert listed == set(names())
    assert "\nNot found\n" in README


# ---------------------------------------------------------------- kernel log: Xid lines

def xids(name: str):
    return [ev for ev in map(parse_xid_line, load(name).body.splitlines()) if ev is not None]


@pytest.mark.parametrize("name, seen", [
    ("xid-43-31-94-akash-244.log", [
        (43, "0000:00:05", 1045242, "pt_main_thread", "none"),
        (43, "0000:00:05", 1084984, "pt_main_thread", "none"),
        (31, "0000:00:07", 2512125, "python3.10", "app"),
        (94, "0000:00:08", None, None, "app")]),
    ("xid-62-154-109-ogkm-1031.log", [
        (62, "0000:2d:00", None, None, "reset"),
        (154, "0000:2d:00", None, None, "reset"),
        (109, "0000:2d:00", 619, "(udev-worker)", "reset")]),
    ("xid-120-154-nvforum-364958.log", [
        (120, "0000:01:00", None, None, "reset"),
        (154, "0000:01:00", None, None, "reset")]),
    ("xid-62-154-45-nvforum-364958.log", [
        (62, "0000:01:00", None, None, "reset"),
        (154, "0000:01:00", None, None, "reset"),
        (45, "0000:01:00", 12542, "VLLM::Worker", "none")]),
    ("xid-13-vllm-5901.log", [(13, "0000:43:00", None, None, "app")] * 5),
    ("xid-13-109-gpud-46.log", [(13, "0000:cb:00", None, None, "app")] * 3 + [
        (109, "0000:cb:00", 1797828, "pt_main_thread", "reset")]),
    ("xid-45-after-145-149-ogkm-1150.log", [
        (45, "0000:dc:00", 1818990, "python3", "none"),
        (45, "0000:ed:00", 1818992, "python3", "none"),
        (45, "0000:ba:00", 1818989, "python3", "none"),
        (45, "0000:97:00", 1818987, "python3", "none")]),
    ("xid-79-ogkm-1151.log", [(79, "0000:06:00", None, None, "reboot")]),
])
def test_xid_lines_give_number_bus_pid_name_and_the_catalogue_action(name, seen):
    evs = xids(name)
    assert [(e.code, e.bus, e.pid, e.process, e.action) for e in evs] == seen
    body = load(name).body
    probe_lines, warnings = parse.parse_xid(body)             # the probe's dmesg section
    # every Xid line, and beside them only the other lines the probe keeps (a GPU fallen off the
    # bus, a lost one: probe.KERNEL_MARKS)
    assert len([line for line in probe_lines if "NVRM: Xid" in line]) == len(seen) and warnings == []
    assert all(probe.kernel_line(line) for line in probe_lines)
    check = parse_kernel_log(body)                            # the kernel-log check
    assert [x["xid"] for x in check["xids"]] == [s[0] for s in seen] and check["error"] is None


@pytest.mark.parametrize("name", ["xid-62-154-109-ogkm-1031.log", "xid-120-154-nvforum-364958.log",
                                    "xid-62-154-45-nvforum-364958.log"])
def test_xid_154_names_its_recovery_action_gpu_reset_required(name):
    (ev,) = [e for e in xids(name) if e.code == 154]
    assert ev.recovery == "GPU Reset Required"
    assert (ev.action, ev.severity) == ("reset", "critical")
    assert ev.describe == "Xid 154 (recovery action: GPU Reset Required)"


def test_xid_31_keeps_its_mmu_fault_text_and_94_its_containment():
    x31, x94 = [e for e in xids("xid-43-31-94-akash-244.log") if e.code in (31, 94)]
    assert "MMU Fault: ENGINE GRAPHICS GPCCLIENT_T1_8" in x31.text
    assert x94.text.startswith("pid='<unknown>', name=<unknown>, Contained: SM (0x1). RST: No, D-RST: No")


def test_xid_45_says_which_xid_caused_it():
    assert all(e.text.endswith(("caused by previous Xid 149", "caused by previous Xid 145"))
               for e in xids("xid-45-after-145-149-ogkm-1150.log"))


def node_for(name: str, buses: dict[str, int]) -> NodeSnapshot:
    """A node whose GPUs sit on the buses the fixture names, with its kernel log."""
    gpus = tuple(Gpu(index=i, uuid=f"GPU-{i}", name="NVIDIA H100 80GB HBM3", bus_id=b, memory_used_mib=4,
                     memory_total_mib=81559, utilization_pct=0, persistence_mode=False)
                 for b, i in buses.items())
    lines = tuple(ln for ln in load(name).body.splitlines() if "NVRM: Xid" in ln)
    return NodeSnapshot(name="real", taken_at=1.0, gpus=gpus, kernel_log=lines)


def xid_findings(snap: NodeSnapshot) -> dict[int, object]:
    return {f.evidence["xid"]: f for f in diagnose(snap) if f.kind == "xid"}


def test_diagnosis_of_the_akash_node_follows_the_catalogue_buckets():
    snap = node_for("xid-43-31-94-akash-244.log", {"00000000:00:05.0": 0, "00000000:00:07.0": 1,
                                                   "00000000:00:08.0": 2})
    f = xid_findings(snap)
    assert f[43].rung is None and f[43].next_step.startswith("Nothing to do") and "×2" in f[43].summary
    assert f[31].rung is None and f[31].next_step.startswith("Restart the application (PID 2512125)")
    assert f[94].rung is None and f[94].next_step.startswith("Restart the application")
    assert f[94].gpus == (2,) and "GPU 2 (0000:00:08)" in f[94].summary


def test_diagnosis_of_xid_62_and_154_wants_a_reset_and_79_a_reboot():
    f = xid_findings(node_for("xid-62-154-109-ogkm-1031.log", {"00000000:2D:00.0": 0}))
    assert f[154].severity == "critical" and f[154].rung == "reset"
    assert "the driver says GPU Reset Required" in f[154].summary
    assert f[62].rung == "reset" and f[109].rung == "reset"
    f = xid_findings(node_for("xid-79-ogkm-1151.log", {"00000000:06:00.0": 0}))
    assert f[79].severity == "critical" and f[79].rung == "reboot"
    assert f[79].next_step.startswith("Reboot the node")


def test_a_gpu_that_fell_off_the_bus_without_an_xid_is_still_named():
    body = load("fallen-off-bus-no-xid-nvsentinel-155.log").body
    # no "NVRM: Xid" line at all: the probe keeps the three lines of the probe-time form, so the
    # bus named in the first reaches diagnosis from a node's dmesg too
    kept, warnings = parse.parse_xid(body)
    assert [line.split("NVRM: ", 1)[1] for line in kept] == [
        "The NVIDIA GPU 0000:b3:00.0", "(PCI ID: 10de:26b5) installed in this system has",
        "fallen off the bus and is not responding to commands."] and warnings == []
    assert fallen_off_bus("\n".join(kept)) == ["0000:b3:00.0"]
    assert fallen_off_bus(body) == ["0000:b3:00.0"]
    assert parse_kernel_log(body)["fallen_off_bus"] == ["0000:b3:00.0"]


def test_the_xid_79_paste_also_names_the_bus_in_its_fallen_off_line():
    assert fallen_off_bus(load("xid-79-ogkm-1151.log").body) == ["0000:06:00.0"]


async def test_kernel_log_check_on_real_lines_names_the_gpu_and_what_the_driver_says():
    from console.checks.registry import run_check
    from test_checks import Canned
    r = await run_check(Canned(load("xid-62-154-109-ogkm-1031.log").body), "kernel-log")
    assert r.summary == "Xid 62, 154, 109; latest: Xid 109 on 0000:2d:00 (context switch timeout)"
    r = await run_check(Canned(load("fallen-off-bus-no-xid-nvsentinel-155.log").body), "kernel-log")
    assert r.summary == "GPU 0000:b3:00.0 fell off the bus (no Xid line)"
    r = await run_check(Canned(load("xid-79-ogkm-1151.log").body), "kernel-log")
    assert r.summary == ("Xid 79; latest: Xid 79 on 0000:06:00 (GPU has fallen off the bus); "
                         "GPU 0000:06:00.0 fell off the bus")


# ---------------------------------------------------------------- nvidia-smi failures: the node's error

@pytest.mark.parametrize("name, words", [
    ("no-driver-gcp-compute-gpu-installation-33.txt", ("driver", "couldn't communicate")),
    ("no-driver-shine-cluster-50.txt", ("driver", "couldn't communicate")),
    ("no-devices-580-ogkm-935.txt", ("no devices",)),
    ("no-devices-syslog-ogkm-862.txt", ("no devices",)),
    ("mismatch-550-intel-llvm-17614.txt", ("mismatch", "NVML library 550.144")),
    ("mismatch-570-tinygrad-ogkm-47.txt", ("mismatch", "NVML library 570.124")),
    ("smi-not-found-chroot-k8s-test-infra-759.txt", ("nvidia-smi not found",)),
])
def test_nvidia_smi_failures_give_the_node_error_in_the_contract_words(name, words):
    gp = parse.parse_gpu_query(load(name).body, None)
    assert gp.gpus == [] and gp.error is not None
    for w in words:
        assert w in gp.error, (w, gp.error)
    assert not any("NVML library version" in w for w in gp.warnings)


def test_a_lost_gpu_is_named_lost_with_its_bus_id():
    gp = parse.parse_gpu_query(load("gpu-lost-k8s-device-plugin-231.txt").body, None)
    assert gp.lost == ["0000:C1:00.0"] and gp.gpus == []
    assert gp.error.startswith("GPU 0000:C1:00.0 is lost") and "reboot" in gp.error
    assert gp.warnings == ["GPU 0000:C1:00.0 is lost (nvidia-smi cannot reach it)"]


@pytest.mark.parametrize("name, bus, reason", [
    ("handle-unknown-error-ogkm-387.txt", "0000:0B:00.0", "Unknown Error"),
    ("handle-not-found-ogkm-259.txt", "0000:D8:00.0", "Not Found"),
])
def test_a_gpu_nvidia_smi_cannot_get_a_handle_for_is_named_with_the_reason(name, bus, reason):
    text = load(name).body
    assert parse.unreachable_gpus(text) == [(bus, reason)]
    gp = parse.parse_gpu_query(text, None)
    assert gp.lost == []                                     # not "GPU is lost": the driver did not say so
    assert gp.error == f"driver error: nvidia-smi cannot reach GPU {bus} ({reason})"
    assert gp.warnings == [f"GPU {bus} cannot be reached: {reason}"]


# ---------------------------------------------------------------- --query-gpu values

@pytest.mark.parametrize("name, values", [
    ("query-gpu-na-i3pystatus-776.csv", [2004, 2004, 0, 44, None, 0, 0]),
    ("query-gpu-not-supported-i3pystatus-776.csv", [2004, 2004, 0, 44, None, 0, 0]),
    ("query-gpu-memory-na-gb10-llama-swap-782.csv", [None, None, 0]),
])
def test_query_gpu_values_na_and_not_supported_become_none(name, values):
    (row,) = parse.csv_rows(load(name).body)
    assert [parse.na_or_int(v) for v in row] == values


def test_query_gpu_with_its_header_line_reads_not_supported_as_none():
    header, value = parse.csv_rows(load("query-gpu-not-supported-header-tuxclocker-15.csv").body)
    assert header == ["utilization.gpu [%]"] and value == ["[Not Supported]"]
    assert parse.na_or_int(value[0]) is None and parse.na_or_text(value[0]) is None


# ---------------------------------------------------------------- nvidia-smi -L with MIG

def test_list_of_one_gpu_split_into_seven_mig_devices():
    mig = parse.parse_gpu_list(load("list-mig-7x1g-datadog-33120.txt").body)
    assert list(mig) == [0] and len(mig[0]) == 7
    assert {m.profile for m in mig[0]} == {"1g.10gb"} and [m.device_index for m in mig[0]] == list(range(7))
    assert mig[0][0].uuid == "MIG-feb88891-0321-5fef-9c87-d4af3b54259e" and mig[0][0].gpu_index == 0


def test_list_of_four_gpus_with_mig_on_the_first_only():
    mig = parse.parse_gpu_list(load("list-mig-mixed-telegraf-5812.txt").body)
    assert {k: len(v) for k, v in mig.items()} == {0: 4, 1: 0, 2: 0, 3: 0}
    assert {m.profile for m in mig[0]} == {"1g.20gb"}
    assert mig[0][3].uuid == "MIG-930574a9-d43a-5d2b-95da-3e68384c8d6b"


# ---------------------------------------------------------------- the default table (read in tests)

MEM_CELL = re.compile(r"\|\s+(?:(\d+)MiB /\s*(\d+)MiB|N/A)\s+\|")
PROC_ROW = re.compile(r"^\|\s+(\d+)\s+(?:(N/A|\d+)\s+(N/A|\d+)\s+)?(\d+)\s+(C|G|C\+G|M|M\+C)\s+(.+?)\s+(\d+)MiB \|$")


def table_memory(text: str) -> list[tuple[int, int] | None]:
    """Memory-Usage cells of the GPU rows, in order (None where the table prints N/A)."""
    out = []
    for line in text.splitlines():
        if "%" in line or "W /" in line or re.search(r"\d+C\s", line):
            m = MEM_CELL.search(line)
            if m:
                out.append((int(m.group(1)), int(m.group(2))) if m.group(1) else None)
    return out


def table_processes(text: str) -> list[tuple]:
    rows = []
    for line in text.splitlines():
        m = PROC_ROW.match(line)
        if m:
            gi, ci = m.group(2), m.group(3)
            rows.append((int(m.group(1)), gi, ci, int(m.group(4)), m.group(5), m.group(6), int(m.group(7))))
    return rows


@pytest.mark.parametrize("name, memory", [
    ("table-mig-gpus-nvitop-pr8.txt", [(23100, 81920), (24205, 81920)]),
    ("table-mig-enabled-545-mig-parted-31.txt", [(87, 81920)]),
    ("table-mig-memory-na-535-dcgm-exporter-544.txt", [None]),
    ("table-memory-kept-after-ctrl-c-pytorch-4031.txt", [(7829, 12189)]),
    ("table-zombie-not-listed-nvtop-70.txt", [(644, 24265)]),
    ("table-container-no-process-rows-pai-2001.txt", [(11637, 12207)]),
])
def test_table_memory_cells(name, memory):
    body = load(name).body
    assert table_memory(body) == memory
    assert table_processes(body) == []
    for line in body.splitlines():                      # the values the probe's CSV would carry
        if "MiB /" in line:
            used = line.split("|")[2].split("/")[0]
            assert parse.na_or_int(used) == int(used.strip().removesuffix("MiB"))


def test_mig_enabled_table_shows_utilisation_and_whole_gpu_memory_as_na():
    for name in ("table-mig-gpus-nvitop-pr8.txt", "table-mig-enabled-545-mig-parted-31.txt",
                 "table-mig-memory-na-535-dcgm-exporter-544.txt"):
        rows = [ln for ln in load(name).body.splitlines() if "Enabled" in ln or "   On |" in ln]
        assert rows, name
        util = [ln.split("|")[3].split()[0] for ln in load(name).body.splitlines() if "W /" in ln]
        assert util[-1] == "N/A" and parse.na_or_int(util[-1]) is None


def test_mig_devices_table_gives_gi_ci_and_per_instance_memory():
    body = load("table-mig-devices-nvitop-pr8.txt").body
    rows = re.findall(r"^\|\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)\s+\|\s+(\d+)MiB /\s*(\d+)MiB \|", body, re.M)
    assert [tuple(map(int, r)) for r in rows] == [(1, 3, 0, 0, 14366, 19968), (1, 5, 0, 1, 9826, 19968),
                                                 (1, 6, 0, 2, 13, 19968)]


def test_mig_process_table_gives_gi_ci_pid_and_mib_per_instance():
    rows = table_processes(load("table-mig-processes-nvitop-pr8.txt").body)
    assert len(rows) == 10
    assert rows[0] == (0, "N/A", "N/A", 55111, "C", "tritonserver", 20481)
    assert rows[1] == (1, "3", "0", 34965, "C", "python", 14195)
    per_gi = {}
    for gpu, gi, ci, pid, _, _, mib in rows:
        per_gi[(gpu, gi)] = per_gi.get((gpu, gi), 0) + mib
    assert per_gi[(1, "3")] == 14195 + 149                    # two processes in one GPU instance
    assert sum(mib for gpu, *_, mib in rows if gpu == 3) == 13313 + 9833 + 10321


def test_process_table_without_mig_lists_one_pid_on_two_gpus():
    rows = table_processes(load("processes-gi-ci-na-nvitop-152.txt").body)
    assert [(r[0], r[3], r[6]) for r in rows] == [(0, 10734, 160), (0, 58661, 3), (1, 10734, 160),
                                                 (2, 18243, 64), (2, 22720, 34)]
    assert {r[1] for r in rows} == {"N/A"} and [r[4] for r in rows] == ["C", "G", "C", "G", "G"]


def test_container_sees_an_empty_process_table_the_host_sees_the_pid():
    assert table_processes(load("processes-empty-in-container-nvidia-docker-179.txt").body) == []
    host = load("processes-host-view-nvidia-docker-179.txt").body
    assert table_processes(host) == [(0, None, None, 28290, "C", "python", 1012)]


def test_no_running_processes_found_is_an_empty_driver_list():
    body = load("processes-no-running-found-nvidia-docker-1460.txt").body
    assert "No running processes found" in body and table_processes(body) == []
    # the probe's --query-compute-apps sees the same words as no process, not as a parse error
    assert parse.parse_compute_apps("No running processes found\n", {}) == ([], [])


# ---------------------------------------------------------------- nvidia-smi -r outcomes

@pytest.mark.parametrize("name, rc, outcomes", [
    ("reset-in-use-nvsentinel-1690.txt", 255,
     [("00000000:1A:00.0", False, "In use by another client")]),
    ("reset-in-use-4gpus-mig-parted-181.txt", 255,
     [(bus, False, "In use by another client")
      for bus in ("00000000:01:00.0", "00000000:47:00.0", "00000000:81:00.0", "00000000:C2:00.0")]),
    ("reset-success-after-pm0-nvsentinel-1690.txt", 0, [("00000000:1A:00.0", True, "")]),
    ("reset-success-8gpus-k8s-test-infra-759.txt", 0,
     [(f"00000000:0{i}:00.0", True, "") for i in range(1, 9)]),
    ("reset-older-wording-gpu-operator-118.txt", None,
     [("00000000:C1:00.0", False, "in use by another process"), ("00000000:C1:00.0", True, "")]),
    ("mig-pending-in-use-gpu-operator-118.txt", None, []),     # a MIG mode change, no reset
])
def test_reset_output_gives_each_gpu_and_its_outcome(name, rc, outcomes):
    got = parse_reset_output(load(name).body, rc)
    assert [(o.bus_id, o.reset, o.reason) for o in got] == outcomes


def test_reset_refusal_line_names_the_gpu_and_the_reason():
    got = parse_reset_output(load("reset-in-use-nvsentinel-1690.txt").body, 255)
    assert reset_outcome_line(got, 255) == "GPU 00000000:1A:00.0 not reset: In use by another client"
    got = parse_reset_output(load("reset-success-8gpus-k8s-test-infra-759.txt").body, 0)
    assert reset_outcome_line(got, 0) == "8 GPUs reset (00000000:01:00.0 … 00000000:08:00.0)"


def test_real_gpu_recovery_action_output_dcgm_263():
    """The one real paste of the query field: "None" and "Reset" (the probe asks for it, probe.gpu_call)."""
    from console.model import recovery_token
    rows = [r for r in parse.csv_rows(load("query-gpu-recovery-action-dcgm-263.csv").body) if r[0].isdecimal()]
    # the reporter's annotation after "Reset" ("<= GPU is unusable, reset required") is not nvidia-smi's
    assert [recovery_token(r[1].split("<=")[0]) for r in rows] == ["none", "gpu_reset"] + ["none"] * 6


# ---------------------------------------------------------------- every fixture has a test

def test_every_fixture_is_parsed_by_some_test():
    """Each fixture is named in this file or replayed as a case (tests/test_real_cases.py)."""
    here = "".join((Path(__file__).parent / f).read_text(encoding="utf-8")
                   for f in ("test_real_outputs.py", "test_real_cases.py"))
    assert [n for n in names() if f'"{n}"' not in here] == []


def test_a_gpu_whose_firmware_cannot_boot_wants_a_drain_and_a_reboot_not_a_reset():
    """open-gpu-kernel-modules #1230: no Xid, only the driver's own lines — WPR2 already up, then
    RmInitAdapter failed for the GPU's bus, retried. The probe's kernel-log section (the real
    grep -E of the probe, on the pasted lines) keeps them; the finding names the bus nvidia-smi
    no longer lists, and its next step drains and reboots (a reset cannot reach the GPU)."""
    import shutil
    import subprocess
    from console import probe
    body = load("gsp-wpr2-rminit-failed-ogkm-1230.log").body
    lines, warnings = parse.parse_xid(body)
    assert [("WPR2" in ln, "RmInitAdapter failed!" in ln) for ln in lines] == [(True, False), (False, True)]
    assert warnings == []
    if shutil.which("grep"):
        kept = subprocess.run(["grep", "-E", f"{probe.KERNEL_LINES_ERE}|dmesg:"], input=body, text=True,
                              capture_output=True, check=True).stdout
        assert parse.parse_xid(kept)[0] == lines
    gpus = tuple(Gpu(index=i, uuid=f"GPU-{i}", name="NVIDIA H100 80GB HBM3", bus_id=f"00000000:{b}:00.0",
                     memory_used_mib=4, memory_total_mib=81559, utilization_pct=0, persistence_mode=True)
                 for i, b in enumerate(("18", "2a")))          # 0000:a1:00.0 is not among them
    snap = NodeSnapshot(name="real", taken_at=1.0, gpus=gpus, kernel_log=tuple(lines))
    found = [f for f in diagnose(snap) if f.kind == "firmware-boot"]
    assert len(found) == 1
    f = found[0]
    assert f.severity == "critical" and f.rung == "reboot" and f.gpus == ()
    assert "0000:a1:00.0" in f.summary and "WPR2 already up" in f.summary and "nvidia-smi no longer lists" in f.summary
    assert f.next_step.startswith("Drain the node first") and "reset does not clear" in f.next_step
    assert diagnose(snap)[0] is f or diagnose(snap)[0].severity == "critical"
    # after a reboot the kernel log starts anew: nothing left to say
    assert not [f for f in diagnose(dataclasses.replace(snap, kernel_log=())) if f.kind == "firmware-boot"]


@pytest.mark.parametrize("lines", [
    ["NVRM: GPU 0000:zz:00.0: RmInitAdapter failed! (0x62"],            # cut short, bad bus
    ["[  1.0] NVRM: GPU3 _kgspBootGspRm: unexpected WPR2 already up"],   # no adapter line: no bus
    ["RmInitAdapter failed!" * 50, "", "\x1b[31mNVRM: GPU 0000:01:00.0: RmInitAdapter failed! (0x1)"],
])
def test_firmware_lines_cut_short_or_garbled_never_crash_and_name_only_what_they_say(lines):
    from console.diagnosis.xid import firmware_failures
    out = firmware_failures(lines)
    for fail in out:
        assert fail.bus is None or re.fullmatch(r"[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9A-Fa-f]", fail.bus)
    snap = NodeSnapshot(name="n", taken_at=1.0, kernel_log=tuple(lines))
    kinds = [f.kind for f in diagnose(snap)]
    assert kinds.count("firmware-boot") == len(out)


# ---------------------------------------------------------------- row remapping / page retirement

@pytest.mark.parametrize("name, found, kind", [
    ("remap-pending-uncorrectable-gpud-80.txt", {None: (True, None, 4, 0, None)}, "row-remap-pending"),
    ("remap-pending-a100-510-ml-engineering.txt", {"00000000:10:1C.0": (True, False, 0, 1, None)}, "row-remap-pending"),
    ("retired-pages-pending-ml-engineering.txt", {None: (None, None, None, None, True)}, "retired-pages-pending"),
    ("remap-clean-ampere-551-exllamav3-112.txt", {None: (False, False, 0, 0, None)}, None),
    ("retired-pages-no-remap-p100-460-dcgm-exporter-16.txt", {None: (None, None, None, None, False)}, None),
])
def test_real_remapped_rows_and_retired_pages(name, found, kind):
    """nvidia-smi -q's Remapped Rows and Retired Pages blocks as people pasted them: "Pending" read
    by its block, N/A as unknown, the one-line "Remapped Rows : N/A" of a GPU before Ampere; a
    pending remap or retirement on a GPU nothing holds is a reset due (a remap's rows counted)."""
    from console.model import MemoryRepair
    from console.sources.parse_repair import parse_memory_repair
    body = load(name).body
    got = parse_memory_repair(body)
    assert got == {bus: MemoryRepair(*values) for bus, values in found.items()}
    bus = next(iter(found)) or "00000000:3B:00.0"
    gpu = Gpu(index=0, uuid="GPU-0", name="NVIDIA A100-SXM4-80GB", bus_id=bus, memory_used_mib=4,
              memory_total_mib=81920, utilization_pct=0, persistence_mode=False, mig_mode=False)
    mark = "::gi-real::"
    text = (f"{mark} begin gpu\n0, GPU-0, NVIDIA A100-SXM4-80GB, {bus}, 4, 81920, 0, Disabled, Disabled\n"
            f"{mark} end gpu 0\n{mark} begin apps\n{mark} end apps 0\n{mark} begin remap\n{body}{mark} end remap 0\n")
    snap = parse.parse_probe("real", text, mark, taken_at=1.0)
    assert snap.gpus[0].memory_repair == got[next(iter(found))]
    assert snap.gpus[0] == dataclasses.replace(gpu, memory_repair=snap.gpus[0].memory_repair)
    found_kinds = [f for f in diagnose(snap) if f.kind in ("row-remap-pending", "retired-pages-pending",
                                                            "row-remap-failure")]
    assert [f.kind for f in found_kinds] == ([kind] if kind else [])
    if kind == "row-remap-pending":
        f = found_kinds[0]
        assert f.severity == "high" and f.rung == "reset" and "no process uses it: it can be reset now" in f.summary
        rows = found[next(iter(found))][2]
        assert f"{rows} rows remapped after uncorrectable errors" in f.summary


# ---------------------------------------------------------------- per-process utilisation (pmon)

def test_real_pmon_not_supported_gives_no_figure_and_no_warning():
    """keylase/nvidia-patch #89 (415.27, a GeForce GT 640): pmon refused. No process gets a
    figure, nothing is warned, and the source hears that pmon is not supported (it then asks
    every probe.PMON_UNSUPPORTED_EVERY polls, not every probe.PMON_EVERY)."""
    from console.sources.parse_pmon import parse_pmon
    body = load("pmon-not-supported-nvidia-patch-89.txt").body
    got = parse_pmon(body)
    assert got.unsupported and got.sm == {}
    mark = "::gi-real::"
    text = (f"{mark} begin gpu\n0, GPU-0, GeForce GT 640, 00000000:01:00.0, 0, 1999, [N/A], Disabled, [N/A]\n"
            f"{mark} end gpu 0\n{mark} begin apps\n{mark} end apps 0\n{mark} begin pmon\n{body}{mark} end pmon 255\n")
    cache: dict = {}
    snap = parse.parse_probe("real", text, mark, taken_at=1.0, cache=cache)
    assert snap.error is None and not any("pmon" in w for w in snap.warnings)
    assert cache["pmon_unsupported"] is True
