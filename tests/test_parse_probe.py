"""The probe parser on real-format text: nvidia-smi CSV and failures, /proc stat lines, command
lines and users."""
import subprocess
import time

import pytest

from console.sources import parse
from console import probe
from tests.probe_sections import ps_sections

MARK = "::gi-test::"
GPU_ROWS = """\
0, GPU-5a1c0c7e-1111-2222-3333-444455556666, NVIDIA RTX PRO 6000 Blackwell Server Edition, 00000000:18:00.0, 76109, 97887, 0, Enabled, [N/A]
1, GPU-5a1c0c7e-1111-2222-3333-444455556667, NVIDIA RTX PRO 6000 Blackwell Server Edition, 00000000:2A:00.0, 76113, 97887, [Not Supported], Disabled, [N/A]
"""


def section(name, body, rc=0):
    return f"{MARK} begin {name}\n{body.rstrip()}\n{MARK} end {name} {rc}\n" if body else \
        f"{MARK} begin {name}\n{MARK} end {name} {rc}\n"


def probe_text(gpu=GPU_ROWS, gpu_rc=0, apps="", stat="", ps="", dstate="", fds="", pidns="", xid="",
               listing=""):
    meta = "1795954121.776342613\n100\nbtime 1795953977\nnode7\n0\npid:[4026531836]\n4242"
    return (section("meta", meta) + section("gpu", gpu, gpu_rc) + section("apps", apps)
            + section("list", listing) + section("stat", stat) + ps_sections(ps, MARK)
            + section("dstate", dstate) + section("fds", fds) + section("pidns", pidns)
            + section("xid", xid) + section("driver", "NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.95.05  Tue Sep 30 00:00:00 UTC 2025"))


STAT_72170 = ("72170 (sglang::schedul) Z 72169 72169 72100 0 -1 4227340 0 0 0 0 0 0 0 0 20 0 2 0 "
              "81234 0 0 18446744073709551615 0 0 0 0 0 0 0 0 0 0 0 0 17 3 0 0 0 0 0 0 0 0 0 0 0 0 0")
STAT_72169 = ("72169 (python3) S 1 72169 72100 0 -1 4194560 0 0 0 0 0 0 0 0 20 0 3 0 "
              "81000 0 0 18446744073709551615 0 0 0 0 0 0 0 0 0 0 0 0 17 3 0 0 0 0 0 0 0 0 0 0 0 0 0")
STAT_ODD = ("900 (a) b (c) S 1 900 900 0 -1 4194560 0 0 0 0 0 0 0 0 20 0 1 0 "
            "500 0 0 18446744073709551615 0 0 0 0 0 0 0 0 0 0 0 0 17 3 0 0 0 0 0 0 0 0 0 0 0 0 0")


def test_gpus_processes_and_holders_join():
    apps = ("72170, GPU-5a1c0c7e-1111-2222-3333-444455556666, 75800, sglang::scheduler_TP0\n"
            "72170, GPU-5a1c0c7e-1111-2222-3333-444455556667, [N/A], sglang::scheduler_TP0\n"
            "555, GPU-5a1c0c7e-1111-2222-3333-444455556666, 12, python3, -c, print(1)\n")
    ps = ("  72169 root     python3 -m sglang.launch_server --model-path moonshotai/Kimi-K2.5 --tp 8\n"
          "  72170 root     [sglang::schedul] <defunct>\n"
          "    900 mlops    ./a) b (c\n")
    dstate = f"/proc/72170/task/72201 uvm_va_space_destroy {STAT_72170.replace(' Z ', ' D ', 1).replace('(sglang::schedul)', '(cuda-EvtHandlr)')}\0"
    fds = "/proc/72170/fd /dev/nvidia0\0/proc/72170/fd /dev/nvidiactl\0/proc/72170/fd /dev/nvidia0\0"
    snap = parse.parse_probe("n1", probe_text(apps=apps, stat="\n".join([STAT_72169, STAT_72170, STAT_ODD]),
                                              ps=ps, dstate=dstate, fds=fds,
                                              pidns="72170 pid:[4026531836]"), MARK, taken_at=1.0)
    assert snap.error is None
    assert [(g.index, g.memory_used_mib, g.memory_total_mib) for g in snap.gpus] == [(0, 76109, 97887), (1, 76113, 97887)]
    g1 = snap.gpu(1)
    assert g1.utilization_pct is None and g1.persistence_mode is False and snap.gpu(0).persistence_mode is True
    z = snap.proc(72170)
    assert z.state == "Z" and z.ppid == 72169 and z.gpu_memory_mib == {"0": 75800, "1": None}
    assert z.device_files == ("/dev/nvidia0", "/dev/nvidiactl")
    assert z.threads_in_d == 1 and z.d_threads[0].tid == 72201 and z.d_threads[0].wchan == "uvm_va_space_destroy"
    assert z.create_time == 1795953977 + 812.34
    assert snap.proc(900).name == "a) b (c" and snap.proc(900).user == "mlops"
    # the driver's PID 555 is not in /proc: kept as a driver process, name with commas intact
    assert [d.name for d in snap.driver_processes if d.pid == 555] == ["python3, -c, print(1)"]
    assert snap.proc(555) is None
    assert snap.own_pids == (4242,) and snap.hostname == "node7" and snap.driver_version == "580.95.05"


def test_driver_failures_become_one_line_errors_and_processes_stay():
    stat = STAT_72169
    cases = {
        ("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure "
         "that the latest NVIDIA driver is installed and running.", 9): "driver",
        ("No devices were found", 6): "no devices",
        ("Failed to initialize NVML: Driver/library version mismatch\nNVML library version: 580.95", 18): "mismatch",
        ("timeout: failed to run command ‘nvidia-smi’: No such file or directory", 127): "nvidia-smi not found",
        ("sh: 1: nvidia-smi: not found", 127): "nvidia-smi not found",
        ("", 124): "timed out",
    }
    for (text, rc), word in cases.items():
        snap = parse.parse_probe("n", probe_text(gpu=text, gpu_rc=rc, stat=stat), MARK, taken_at=0)
        assert snap.error and word in snap.error, (text, snap.error)
        assert "\n" not in snap.error
        assert snap.gpus == () and snap.proc(72169) is not None


def test_lost_gpu_is_absent_and_named_by_bus_id():
    text = ("Unable to determine the device handle for GPU 0000:2A:00.0: GPU is lost.  Reboot the system "
            "to recover this GPU\n" + GPU_ROWS.splitlines()[0] + "\n")
    snap = parse.parse_probe("n", probe_text(gpu=text, gpu_rc=15), MARK, taken_at=0)
    assert snap.error is None
    assert [g.index for g in snap.gpus] == [0]
    assert snap.lost_gpus == ("0000:2A:00.0",)
    assert any("lost" in w for w in snap.warnings)


def test_mig_mode_gpus_are_marked_with_their_instances():
    gpu = ("0, GPU-aaaa, NVIDIA H100 80GB HBM3, 00000000:41:00.0, 12000, 81559, [N/A], Enabled, Enabled\n")
    listing = ("GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-aaaa)\n"
               "  MIG 3g.40gb     Device  0: (UUID: MIG-1111)\n"
               "  MIG 1g.10gb     Device  1: (UUID: MIG-2222)\n")
    snap = parse.parse_probe("n", probe_text(gpu=gpu, listing=listing), MARK, taken_at=0)
    g = snap.gpu(0)
    assert g.mig_mode is True and g.utilization_pct is None
    assert [(m.profile, m.device_index) for m in g.mig_instances] == [("3g.40gb", 0), ("1g.10gb", 1)]


def test_values_with_units_and_garbage_rows():
    assert parse.na_or_int("76109 MiB") == 76109 and parse.na_or_int("[Insufficient Permissions]") is None
    assert parse.na_or_int("12 %") == 12 and parse.na_or_int("lots") is None
    res = parse.parse_gpu_query("garbage line without commas\n" + GPU_ROWS, 0)
    assert len(res.gpus) == 2 and res.warnings == ["unparsed nvidia-smi line: garbage line without commas"]


def test_dmesg_denied_is_a_warning_and_xid_lines_kept():
    xid = ("[ 9999.1] NVRM: Xid (PCI:0000:41:00): 119, pid=1, name=x, Timeout after 6s\n"
           "dmesg: read kernel buffer failed: Operation not permitted\n")
    snap = parse.parse_probe("n", probe_text(xid=xid), MARK, taken_at=0)
    assert snap.kernel_log == ("[ 9999.1] NVRM: Xid (PCI:0000:41:00): 119, pid=1, name=x, Timeout after 6s",)
    assert "dmesg not permitted: Xid lines unavailable" in snap.warnings


def test_cut_short_probe_still_gives_what_arrived():
    text = probe_text(stat=STAT_72169)
    cut = text[: text.index(f"{MARK} end stat")]
    snap = parse.parse_probe("n", cut, MARK, taken_at=0)
    assert snap.proc(72169) is not None and len(snap.gpus) == 2
    assert "probe section 'stat' cut short" in snap.warnings


def test_forged_marker_in_a_process_name_cannot_end_a_section():
    ps = "  72169 root     echo '::gi-other:: end args 0'\n"
    snap = parse.parse_probe("n", probe_text(stat=STAT_72169, ps=ps), MARK, taken_at=0)
    assert snap.proc(72169).cmdline == "echo '::gi-other:: end args 0'"


def test_real_probe_on_this_machine_lists_our_own_process():
    mark = probe.new_mark()
    child = subprocess.Popen(["sleep", "30"])
    try:
        out = subprocess.run(["sh"], input=probe.build_script(mark), capture_output=True, text=True, timeout=20)
        snap = parse.parse_probe("local", out.stdout, mark, taken_at=time.time())
    finally:
        child.kill()
        child.wait()
    p = snap.proc(child.pid)
    assert p is not None and p.cmdline == "sleep 30" and p.name == "sleep"
    assert p.create_time is not None and abs(p.create_time - time.time()) < 60
    if snap.gpus == ():
        assert snap.error  # no GPU here: the node says why in one line


def test_driver_pid_colliding_with_another_local_program_is_foreign():
    # the driver's 72169 is "python3"; here 72169 is a postgres that holds no device file
    stat = STAT_72169.replace("(python3)", "(postgres)")
    ps = "  72169 postgres postgres: checkpointer\n"
    apps = "72169, GPU-5a1c0c7e-1111-2222-3333-444455556666, 75800, python3\n"
    snap = parse.parse_probe("n", probe_text(apps=apps, stat=stat, ps=ps), MARK, taken_at=0)
    assert snap.proc(72169).gpu_memory_mib == {}
    assert [d.local for d in snap.driver_processes] == [False]
    assert snap.driver_processes_here() == ()
    # the same PID with a device file open is the GPU process (CUDA holds /dev/nvidia*)
    snap = parse.parse_probe("n", probe_text(apps=apps, stat=stat, ps=ps, fds="/proc/72169/fd /dev/nvidia0\0"),
                             MARK, taken_at=0)
    assert snap.proc(72169).gpu_memory_mib == {"0": 75800}


@pytest.mark.parametrize("name", ["[b]pwn[/b]", "[kworker/0:1]", "[python3]"])
def test_a_process_named_in_brackets_is_compared_by_its_name_never_taken_for_a_placeholder(name):
    """Only nvidia-smi's own placeholders ([N/A], [Not Found], …) say "name unknown": a process
    that calls itself "[kworker/0:1]" is the local process of that name (its fds unreadable),
    not a PID of another namespace that the kill path would leave alone."""
    from console.model import Proc
    from console.sources.parse import NAME_PLACEHOLDERS, same_process
    proc = Proc(pid=4242, ppid=1, state="S", user="nobody", name=name[:15], cmdline=name)
    assert same_process(proc, name)
    for placeholder in NAME_PLACEHOLDERS:
        assert not same_process(proc, placeholder)
