"""diagnose(): every finding kind, fed snapshots with the seed incident's real numbers."""
from __future__ import annotations

from dataclasses import replace

import pytest

from tests.fuzzing import examples
from console.diagnosis.history import History
from console.diagnosis import diagnose, fails, worst_severity
from console.actions.ladder import commands_for, step_args
from console.model import ActionRecord, DriverProc, Finding, Proc, ThreadInfo
from test_diagnose_builders import (CONSOLE_SHELL, LAUNCHER, SEED_USED, T0, WORKERS, at, freed, launcher,
                                    seed_orphans, seed_running, seed_stuck, snap, uuid, worker)


def kinds(findings) -> list[str]:
    return [f.kind for f in findings]


def only(findings, kind) -> Finding:
    hits = [f for f in findings if f.kind == kind]
    assert len(hits) == 1, (kind, kinds(findings))
    return hits[0]


def act(rung, ts, pids=(), gpus=()):
    return ActionRecord(rung=rung, ts=ts, node="demo", pids=tuple(pids), gpus=tuple(gpus))


# ---------------------------------------------------------------- zombie / d-state

def test_seed_defunct_workers_in_the_driver_say_wait_not_sigkill():
    fs = diagnose(seed_stuck())
    top = fs[0]
    assert top.kind == "zombie" and top.severity == "critical"
    assert top.rung == "wait"
    assert top.pids == WORKERS and top.gpus == tuple(range(8))
    assert "<defunct>" in top.summary and "uvm_va_space_destroy" in top.summary
    assert "parent PID 1 (systemd)" in top.summary
    assert "sglang::scheduler_TP0" in top.summary          # the driver's name, not comm's 15 chars
    assert top.next_step.startswith("Wait: 8 workers are <defunct> with threads in D state")
    assert "SIGKILL again cannot help" in top.next_step
    assert top.evidence["mib"] == sum(SEED_USED) - 8 * 4
    assert top.evidence["threads_in_d"] == 8


def test_dstate_groups_threads_by_wchan_with_each_thread_in_evidence():
    f = only(diagnose(seed_stuck()), "d-state")
    assert f.severity == "high"
    assert f.evidence["wchan"] == "uvm_va_space_destroy"
    assert [th["tid"] for th in f.evidence["threads"]] == [p + 40 for p in WORKERS]
    assert "8 threads of 8 processes" in f.summary and "uvm_va_space_destroy" in f.summary


def test_stuck_past_the_teardown_window_without_progress_says_reboot():
    old = seed_stuck(T0)
    now = seed_stuck(T0 + 130)
    top = diagnose(now, [old, seed_stuck(T0 + 65)])[0]
    assert top.kind == "zombie" and top.rung == "reboot"
    assert top.since == T0
    assert top.next_step.startswith("Reboot the node") and "for 2 min" in top.next_step
    assert top.next_step.endswith("Drain the node first (D under Slurm), so no new job lands on it before the reboot.")


def test_stuck_but_memory_shrinking_keeps_waiting_past_the_window():
    old = seed_stuck(T0)
    mid = seed_stuck(T0 + 125)
    used = tuple(u - 20000 for u in SEED_USED)
    now = replace(seed_stuck(T0 + 130), gpus=snap(used=used).gpus)
    top = diagnose(now, [old, mid])[0]
    assert top.rung == "wait" and "coming back" in top.next_step


def test_our_sigkill_starts_the_teardown_window():
    s = seed_stuck(T0 + 100)
    hist = [seed_stuck(T0)]
    kill = act("sigkill", T0 + 80, WORKERS)
    top = diagnose(s, hist, [kill])[0]
    assert top.rung == "wait" and top.evidence["wait_s"] == 100              # 20 s after our kill
    assert diagnose(s, hist, [kill], now=T0 + 210)[0].rung == "reboot"       # 130 s after it


def test_alive_process_in_d_gets_one_sigkill_then_no_more():
    p = worker(0, ppid=LAUNCHER, d=True)
    p = replace(p, state="D")
    hist = [snap([launcher(), p], t=T0), snap([launcher(), p], t=T0 + 60)]
    now = snap([launcher(), p], t=T0 + 130)
    f = only(diagnose(now, hist), "d-state")
    assert f.rung == "sigkill" and f.next_step.startswith("SIGKILL once")
    f2 = only(diagnose(now, hist, [act("sigkill", T0 + 125, [p.pid])]), "d-state")
    assert f2.rung == "wait" and "SIGKILL again cannot help" in f2.next_step


def test_zombie_holding_nothing_is_low_and_names_the_parent():
    z = Proc(pid=72300, ppid=LAUNCHER, state="Z", user="root", name="python3", cmdline="")
    f = only(diagnose(snap([launcher(), z])), "zombie")
    assert f.severity == "low" and f.rung is None
    assert f.pids == (72300,)
    assert "PID 72169 (python3)" in f.summary and "has not reaped" in f.summary
    assert f.next_step.startswith("Nothing to free")


def test_transient_d_outside_the_driver_is_info():
    p = Proc(pid=5000, ppid=1, state="D", user="root", name="rsync", cmdline="rsync -a /data /backup",
             d_threads=(ThreadInfo(tid=5000, state="D", wchan="io_schedule"),))
    f = only(diagnose(snap([p])), "d-state")
    assert f.severity == "info" and f.rung is None


# ---------------------------------------------------------------- orphan

def test_renamed_orphans_get_sigterm_then_grace_then_sigkill():
    s = seed_orphans(T0 + 30)
    f = only(diagnose(s), "orphan")
    assert f.severity == "high" and f.rung == "sigterm"
    assert f.pids == WORKERS
    assert "lost their launcher" in f.summary and "sglang::scheduler_TP0 … sglang::scheduler_TP7" in f.summary
    assert commands_for(f.rung, s, *step_args(f)) == ["kill -s TERM " + " ".join(map(str, WORKERS))]
    assert only(diagnose(s, (), [act("sigterm", T0 + 25, WORKERS)]), "orphan").rung == "wait"
    assert only(diagnose(s, (), [act("sigterm", T0 + 5, WORKERS)]), "orphan").rung == "sigkill"
    assert only(diagnose(s, (), [act("sigterm", T0, WORKERS), act("sigkill", T0 + 25, WORKERS)]),
                "orphan").rung == "wait"


def test_a_running_launcher_with_its_workers_is_not_an_orphan():
    assert "orphan" not in kinds(diagnose(seed_running()))


def test_orphan_adopted_by_a_subreaper():
    shim = Proc(pid=3000, ppid=1, state="S", user="root", name="containerd-shim",
                cmdline="/usr/bin/containerd-shim-runc-v2 -namespace moby -id 4f2a")
    w = worker(0, ppid=3000)
    f = only(diagnose(snap([shim, w])), "orphan")
    assert f.pids == (w.pid,) and "containerd-shim" in f.summary


def test_orphan_reparented_to_any_subreaper_is_seen_across_polls():
    """A subreaper with no well-known name: the poll before showed the worker under its launcher,
    this one under another parent and the launcher gone — reparented, so an orphan."""
    launcher = Proc(pid=5000, ppid=4000, state="S", user="root", name="python3", cmdline="python3 launch.py")
    keeper = Proc(pid=4000, ppid=1, state="S", user="root", name="python3", cmdline="python3 keeper.py")
    before = snap([keeper, launcher, worker(0, ppid=5000)])
    now = at(snap([keeper, worker(0, ppid=4000)]), T0 + 2)
    assert "orphan" not in kinds(diagnose(before))
    assert "orphan" not in kinds(diagnose(now)), "without history a python3 parent is just a parent"
    for history in ([before], History()):
        if isinstance(history, History):
            history.append(before)
        f = only(diagnose(now, history), "orphan")
        assert f.pids == (WORKERS[0],) and "PID 4000" in f.summary
    # the launcher still there (the worker merely moved): not an orphan
    moved = at(snap([keeper, launcher, worker(0, ppid=4000)]), T0 + 2)
    assert "orphan" not in kinds(diagnose(moved, [before]))


# ---------------------------------------------------------------- ghost memory / hidden holder

def test_ghost_memory_per_gpu_with_threshold():
    used = (4, 4, 4, 40004, 4, 4, 4, 4)
    s = snap([], used=used, driver=())
    f = only(diagnose(s), "ghost-memory")
    assert f.gpus == (3,) and f.evidence["ghost_mib"] == 40004
    assert "GPU 3" in f.summary and "no listed process" in f.summary
    assert f.rung == "reset" and commands_for("reset", s, *step_args(f)) == ["nvidia-smi -r -i 3"]
    assert "ghost-memory" not in kinds(diagnose(s, ghost_threshold_mib=50000))
    small = snap([], used=(4, 4, 4, 900, 4, 4, 4, 4), driver=())
    assert "ghost-memory" not in kinds(diagnose(small))
    assert "ghost-memory" in kinds(diagnose(small, ghost_threshold_mib=512))


def test_ghost_memory_on_gpus_with_one_cause_and_one_next_step_is_one_finding():
    """The seed after the workers are gone from the driver's list: eight GPUs, one story."""
    s = snap([], used=SEED_USED, driver=())
    f = only(diagnose(s), "ghost-memory")
    assert f.gpus == tuple(range(8))
    assert f.summary.startswith("GPUs 0-7: ")
    per_gpu = f.evidence["per_gpu"]
    assert len(per_gpu) == 8 and f.evidence["ghost_mib"] == sum(v["ghost_mib"] for v in per_gpu.values())
    assert f.evidence["ghost_mib"] > 590 * 1024
    assert f.rung == "reset" and commands_for("reset", s, *step_args(f)) == [f"nvidia-smi -r -i {i}" for i in range(8)]
    # a hidden holder on GPU 3 only: GPU 3's memory is its (one cause, one finding: the hidden
    # holder's, with GPU 3's unaccounted memory in it); the other seven stay one finding
    hidden = Proc(pid=81234, ppid=1, state="S", user="alice", name="python3", cmdline="python3 eval.py",
                  start_ticks=7_000_000, device_files=("/dev/nvidia3",))
    every = diagnose(snap([hidden], used=SEED_USED, driver=()))
    fs = [f for f in every if f.kind == "ghost-memory"]
    assert sorted(f.gpus for f in fs) == [(0, 1, 2, 4, 5, 6, 7)]
    h = only(every, "hidden-holder")
    assert h.gpus == (3,) and h.rung == "sigterm" and h.evidence["ghost_mib"] > 70 * 1024
    assert h.summary.endswith(" GiB)"), h.summary


def test_ghost_memory_waits_after_a_recent_kill_and_needs_blockers_cleared_before_reset():
    used = (4, 4, 4, 40004, 4, 4, 4, 4)
    s = snap([], used=used, driver=(), t=T0 + 20)
    assert only(diagnose(s, (), [act("sigkill", T0 + 5, [72173])]), "ghost-memory").rung == "wait"
    pm = snap([], used=used, driver=(), persistence=True)
    f = only(diagnose(pm), "ghost-memory")
    assert f.rung == "clear-blockers" and f.next_step.startswith("Turn persistence mode off on GPU 3 first")
    assert commands_for(f.rung, pm, *step_args(f)) == ["nvidia-smi -pm 0 -i 3"]


def test_unknown_per_process_memory_means_no_ghost_claim():
    dp = DriverProc(pid=72173, gpu_index=3, gpu_uuid=uuid(3), used_memory_mib=None, name="python3")
    s = snap([worker(3, ppid=1)], used=(4, 4, 4, 40004, 4, 4, 4, 4), driver=(dp,))
    assert "ghost-memory" not in kinds(diagnose(s))


def test_hidden_holder_with_a_cuda_context_is_killed_explicitly():
    hidden = Proc(pid=81234, ppid=1, state="S", user="alice", name="python3", cmdline="python3 eval.py",
                  start_ticks=7_000_000, device_files=("/dev/nvidia3", "/dev/nvidia-uvm", "/dev/nvidiactl"))
    s = snap([hidden], used=(4, 4, 4, 30004, 4, 4, 4, 4), driver=())
    fs = diagnose(s)
    f = only(fs, "hidden-holder")
    assert f.severity == "high" and f.rung == "sigterm" and f.pids == (81234,)
    assert "the driver lists none of them" in f.summary
    assert commands_for(f.rung, s, *step_args(f)) == ["kill -s TERM 81234"]
    assert "ghost-memory" not in kinds(fs), "GPU 3's memory is the hidden holder's finding"
    assert f.evidence["ghost_mib"] == 30004 and "(29.3 GiB)" in f.summary, f.summary
    # the same ladder as any target: a wait within SIGTERM's grace, then SIGKILL (kill-holders)
    soon = snap([hidden], used=(4, 4, 4, 30004, 4, 4, 4, 4), driver=(), t=T0 + 5)
    assert only(diagnose(soon, (), [act("sigterm", T0, [81234])]), "hidden-holder").rung == "wait"
    late = snap([hidden], used=(4, 4, 4, 30004, 4, 4, 4, 4), driver=(), t=T0 + 20)
    f = only(diagnose(late, (), [act("sigterm", T0, [81234])]), "hidden-holder")
    assert f.rung == "kill-holders" and "ignored SIGTERM for 20 s" in f.next_step
    assert commands_for(f.rung, late, *step_args(f)) == ["kill -s KILL 81234"]


def test_an_nvml_monitor_is_no_hidden_holder_but_one_named_so_with_memory_is_a_job():
    """A monitor reads NVML and makes no context (issue 30: monitors were "hidden holders" to signal)."""
    mon = Proc(pid=4400, ppid=812, state="S", user="bob", name="nvtop", cmdline="nvtop",
               device_files=("/dev/nvidiactl", "/dev/nvidia0"), exe="/usr/bin/nvtop")
    assert not [f for f in diagnose(snap([mon], used=(4,) * 8, driver=())) if 4400 in f.pids]
    # the same name on a python that the driver charges 70 GiB: a job under another name
    fake = replace(mon, exe="/usr/bin/python3.11")
    dp = DriverProc(pid=4400, gpu_index=0, gpu_uuid=uuid(0), used_memory_mib=70000, name="nvtop")
    f = only(diagnose(snap([fake], used=(70004,) + (4,) * 7, driver=(dp,))), "holder")
    assert f.pids == (4400,) and f.evidence["processes"][0]["role"] == "workload"


# ---------------------------------------------------------------- foreign pid

def test_foreign_pid_points_at_the_host_side_holders():
    dp = DriverProc(pid=41, gpu_index=0, gpu_uuid=uuid(0), used_memory_mib=76105, name="python3")
    host = Proc(pid=88001, ppid=88000, state="S", user="root", name="python3", cmdline="python3 serve.py",
                start_ticks=8_000_000, pid_ns="pid:[4026532890]",
                device_files=("/dev/nvidia0", "/dev/nvidia-uvm", "/dev/nvidiactl"))
    shim = Proc(pid=88000, ppid=1, state="S", user="root", name="containerd-shim",
                cmdline="/usr/bin/containerd-shim-runc-v2 -namespace k8s.io")
    s = snap([shim, host], used=(76109, 4, 4, 4, 4, 4, 4, 4), driver=(dp,))
    f = only(diagnose(s), "foreign-pid")
    assert f.pids == (41,) and f.severity == "high"
    assert "another PID namespace" in f.summary
    assert f.rung == "sigterm" and f.evidence["targets"] == [88001]
    assert commands_for(f.rung, s, *step_args(f)) == ["kill -s TERM 88001"]


def test_foreign_pid_without_visible_holders_says_find_the_container():
    dp = DriverProc(pid=41, gpu_index=0, gpu_uuid=uuid(0), used_memory_mib=76105, name="python3")
    f = only(diagnose(snap([], used=(76109, 4, 4, 4, 4, 4, 4, 4), driver=(dp,))), "foreign-pid")
    assert f.rung is None and f.next_step.startswith("Find the container")


# ---------------------------------------------------------------- node-level

def test_probe_hung_waits_then_says_reboot_when_it_lasts():
    from console.model import NodeSnapshot
    err = "probe timed out after 15 s"
    s = NodeSnapshot(name="demo", taken_at=T0 + 150, error=err)
    f = only(diagnose(s), "probe-hung")
    assert f.severity == "high" and f.rung == "wait"
    hist = [NodeSnapshot(name="demo", taken_at=T0 + k, error=err) for k in (0, 50, 100)]
    f = only(diagnose(s, hist), "probe-hung")
    assert f.severity == "critical" and f.rung == "reboot" and f.since == T0


@pytest.mark.parametrize("error, severity, rung", [
    ("driver/library version mismatch: Failed to initialize NVML: Driver/library version mismatch",
     "critical", "reboot"),
    ("NVIDIA driver not loaded: nvidia-smi couldn't communicate with the NVIDIA driver", "critical", None),
    ("no devices: nvidia-smi found no GPU", "high", None),
    ("nvidia-smi not found on the node's PATH", "low", None),
])
def test_driver_errors(error, severity, rung):
    from console.model import NodeSnapshot
    f = only(diagnose(NodeSnapshot(name="n", taken_at=T0, error=error)), "driver-error")
    assert (f.severity, f.rung) == (severity, rung) and f.next_step


def test_connection_trouble_is_not_a_gpu_finding():
    from console.model import NodeSnapshot
    assert diagnose(NodeSnapshot(name="n", taken_at=T0, error="unreachable: connection refused")) == ()


def test_lost_gpu_says_lost_with_its_bus_id_and_reboot():
    s = replace(snap([], used=(4,) * 7, driver=()), lost_gpus=("00000000:88:00.0",))
    f = only(diagnose(s), "driver-error")
    assert "lost" in f.summary and "00000000:88:00.0" in f.summary
    assert f.severity == "critical" and f.rung == "reboot"


XID_119 = ("[ 8123.456789] NVRM: Xid (PCI:0000:48:00): 119, pid=72173, name=sglang::schedul, Timeout after 6s "
           "of waiting for RPC response from GPU3 GSP! Expected function 76 (GSP_RM_CONTROL) (0x20800a4c 0x4).")
XID_154 = ("[ 8124.000001] NVRM: Xid (PCI:0000:48:00): 154, GPU recovery action changed from 0x0 (None) "
           "to 0x1 (GPU Reset Required)")


def test_xid_119_and_154_want_a_reset_behind_the_blockers():
    pers = Proc(pid=1400, ppid=1, state="S", user="nvidia-persistenced", name="nvidia-persiste",
                cmdline="/usr/bin/nvidia-persistenced --user nvidia-persistenced",
                device_files=tuple(f"/dev/nvidia{i}" for i in range(8)) + ("/dev/nvidiactl",))
    s = snap([pers], used=(4, 4, 4, 60004, 4, 4, 4, 4), driver=(), persistence=True,
             kernel_log=(XID_119, XID_154))
    fs = diagnose(s)
    x = {f.evidence["xid"]: f for f in fs if f.kind == "xid"}
    assert set(x) == {119, 154}
    assert x[154].severity == "critical" and "GPU Reset Required" in x[154].summary
    assert x[119].gpus == (3,) and "GSP" in x[119].summary
    assert x[154].rung == "clear-blockers" and x[119].rung == "clear-blockers"
    rb = only(fs, "reset-blocker")
    assert rb.severity == "high" and rb.rung == "clear-blockers" and rb.pids == (1400,)
    # the same step as the Xid's above it: said once, then named
    assert fs[0].next_step.startswith("Stop nvidia-persistenced (PID 1400) and turn persistence mode off on GPU 3 ")
    assert rb.next_step.startswith("The step of the xid finding above: ")
    assert "persistence mode on GPUs 0-7" in rb.summary and "nvidia-persistenced (PID 1400)" in rb.summary
    assert fs[0].kind == "xid"
    assert commands_for("clear-blockers", s, *step_args(x[154])) == [
        "systemctl stop nvidia-persistenced", "nvidia-smi -pm 0 -i 3"]
    # blockers gone: the reset itself
    clear = snap([], used=(4, 4, 4, 60004, 4, 4, 4, 4), driver=(), kernel_log=(XID_119, XID_154))
    x2 = [f for f in diagnose(clear) if f.kind == "xid"]
    assert {f.rung for f in x2} == {"reset"}
    # reset done after the lines were logged: they are history now
    after = diagnose(at(clear, T0 + 30), [clear], [act("reset", T0 + 10, gpus=[3])])
    assert {f.severity for f in after if f.kind == "xid"} == {"info"}


@pytest.mark.parametrize("line, severity, rung", [
    ("[ 9001.100000] NVRM: Xid (PCI:0000:18:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.",
     "critical", "reboot"),
    ("[ 9002.0] NVRM: Xid (PCI:0000:18:00): 154, GPU recovery action changed from 0x0 (None) to 0x2 "
     "(Node Reboot Required)", "critical", "reboot"),
    ("[ 9003.0] NVRM: Xid (PCI:0000:18:00): 154, GPU recovery action changed from 0x0 (None) to 0x4 "
     "(Drain and Reset)", "critical", "reset"),
    ("[  512.3] NVRM: Xid (PCI:0000:18:00): 13, pid=4242, name=python3, Graphics Exception: ESR 0x504648=0x2000d",
     "low", None),
    ("[ 9000.2] NVRM: Xid (PCI:0000:18:00): 45, pid=72170, name=sglang::schedul, Ch 00000008", "info", None),
    ("[ 9000.2] NVRM: Xid (PCI:0000:18:00): 48, pid=72170, name=python3, An uncorrectable double bit error",
     "critical", "reset"),
])
def test_xid_meanings_and_rungs(line, severity, rung):
    f = only(diagnose(snap([], used=(4,) * 8, driver=(), kernel_log=(line,))), "xid")
    assert (f.severity, f.rung) == (severity, rung)
    assert f.gpus == (0,) and "GPU 0 (0000:18:00)" in f.summary
    assert f.evidence["meaning"] and f.next_step


def test_xid_on_a_bus_no_gpu_answers_for_wants_a_reboot():
    line = "[ 1.0] NVRM: Xid (PCI:0000:99:00): 119, pid=1, name=x, Timeout after 6s of waiting for RPC"
    f = only(diagnose(snap([], used=(4,) * 8, driver=(), kernel_log=(line,))), "xid")
    assert f.gpus == () and f.rung == "reboot"


def test_reset_blocker_without_a_reset_wanted_is_low():
    mps = Proc(pid=2200, ppid=1, state="S", user="root", name="nvidia-cuda-mps", cmdline="nvidia-cuda-mps-control -d")
    f = only(diagnose(snap([mps], used=(4,) * 8, driver=())), "reset-blocker")
    assert f.severity == "low" and f.rung is None and "nvidia-cuda-mps-control" in f.summary


# ---------------------------------------------------------------- ordering, safety, --fail-on

def test_sorted_most_severe_first_and_worst_severity():
    fs = diagnose(seed_stuck())
    ranks = ["info", "low", "high", "critical"]
    assert [ranks.index(f.severity) for f in fs] == sorted((ranks.index(f.severity) for f in fs), reverse=True)
    assert worst_severity(fs) == "critical"
    assert worst_severity(()) is None
    assert fails(fs, "high") and fails(fs, "critical") and not fails((), "info")
    assert not fails([f for f in fs if f.severity == "high"], "critical")
    with pytest.raises(ValueError):
        fails(fs, "severe")


def test_a_clean_node_has_no_findings():
    assert diagnose(freed()) == ()


def test_never_targets_pid_1_kernel_threads_or_the_console():
    me = Proc(pid=CONSOLE_SHELL, ppid=812, state="S", user="root", name="sh", cmdline="sh",
              device_files=("/dev/nvidiactl", "/dev/nvidia0"))
    init_d = Proc(pid=1, ppid=0, state="D", user="root", name="systemd", cmdline="/sbin/init",
                  d_threads=(ThreadInfo(tid=1, state="D", wchan="uvm_va_space_destroy"),),
                  device_files=("/dev/nvidia0",))
    s = replace(snap([worker(i, ppid=1) for i in range(8)]),
                processes=(init_d, me) + tuple(p for p in snap([worker(i, ppid=1) for i in range(8)]).processes
                                               if p.pid not in (1, CONSOLE_SHELL)))
    for f in diagnose(s):
        pids, gpus = step_args(f)
        for line in commands_for(f.rung, s, pids, gpus) if f.rung else []:
            words = line.split()
            assert "1" not in words and str(CONSOLE_SHELL) not in words, (f.kind, line)
            assert "fuser" not in line and "pkill" not in line and "killall" not in line


# ---------------------------------------------------------------- fuzz: any snapshot, any history

from hypothesis import HealthCheck, given  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from console.rungs import proposable  # noqa: E402

RUNGS = proposable()
from console.model import Gpu, NodeSnapshot  # noqa: E402

_PIDS = st.sampled_from([1, 2, 812, CONSOLE_SHELL, 4000, 4001, 72169, *WORKERS])
_PROC = st.builds(
    Proc, pid=_PIDS, ppid=st.sampled_from([0, 1, 2, 812, 4000, 72169]), state=st.sampled_from("RSDZTI"),
    user=st.none() | st.just("root"), name=st.sampled_from(["python3", "sglang::schedul", "nvidia-persiste",
                                                             "nv-hostengine", "containerd-shim", "", "x" * 15]),
    cmdline=st.sampled_from(["", "python3 -m sglang.launch_server", "/usr/bin/nvidia-persistenced", "sh"]),
    start_ticks=st.none() | st.integers(0, 10**7),
    gpu_memory_mib=st.dictionaries(st.sampled_from(["0", "3", "7", "GPU-x"]), st.none() | st.integers(0, 10**5),
                                   max_size=2),
    device_files=st.lists(st.sampled_from(["/dev/nvidia0", "/dev/nvidia3", "/dev/nvidiactl", "/dev/nvidia-uvm"]),
                          max_size=3).map(tuple),
    d_threads=st.lists(st.builds(ThreadInfo, tid=st.integers(1, 10**6), state=st.just("D"),
                                 wchan=st.none() | st.sampled_from(["uvm_va_space_destroy", "io_schedule", "0"])),
                       max_size=2).map(tuple))
_DP = st.builds(DriverProc, pid=_PIDS | st.integers(1, 100), gpu_index=st.none() | st.integers(0, 8),
                gpu_uuid=st.sampled_from([uuid(0), uuid(3), "GPU-gone"]),
                used_memory_mib=st.none() | st.integers(0, 10**5),
                name=st.text(max_size=10))
_LINES = st.sampled_from([XID_119, XID_154, "[1.0] NVRM: Xid (PCI:0000:18:00): 79, GPU has fallen off the bus.",
                          "NVRM: Xid (PCI:zz): x", "garbage", "NVRM: Xid (PCI:0000:18:00): 154, GPU recovery action "
                          "changed from 0x0 (None) to 0x9 (Something New)"])


@st.composite
def snapshots(draw, t=T0):
    gpus = tuple(Gpu(index=i, uuid=uuid(i), name="g", bus_id=f"00000000:{0x18 + 0x10 * i:02X}:00.0",
                     memory_used_mib=draw(st.none() | st.integers(0, 97887)), memory_total_mib=97887,
                     persistence_mode=draw(st.none() | st.booleans()),
                     memory_reserved_mib=draw(st.none() | st.integers(0, 600)))
                 for i in range(draw(st.integers(0, 4))))
    procs = {p.pid: p for p in draw(st.lists(_PROC, max_size=8))}
    return NodeSnapshot(name="demo", taken_at=t, gpus=gpus, processes=tuple(procs.values()),
                        driver_processes=tuple(draw(st.lists(_DP, max_size=5))),
                        kernel_log=tuple(draw(st.lists(_LINES, max_size=3))),
                        lost_gpus=tuple(draw(st.lists(st.just("00000000:88:00.0"), max_size=1))),
                        own_pids=(CONSOLE_SHELL,),
                        error=draw(st.none() | st.sampled_from(["probe timed out after 15 s", "mismatch",
                                                                 "unreachable"])))


@examples(150, suppress_health_check=[HealthCheck.too_slow])
@given(snapshots(T0 + 100), st.lists(snapshots(T0 + 40), max_size=2),
       st.lists(st.builds(ActionRecord, rung=st.sampled_from(RUNGS), ts=st.floats(T0, T0 + 100),
                          node=st.just("demo"), pids=st.lists(_PIDS, max_size=2).map(tuple),
                          gpus=st.lists(st.integers(0, 3), max_size=1).map(tuple)), max_size=3))
def test_diagnose_never_raises_and_every_finding_is_actionable_text(s, hist, acts):
    fs = diagnose(s, hist, acts)
    order = ["info", "low", "high", "critical"]
    assert [order.index(f.severity) for f in fs] == sorted((order.index(f.severity) for f in fs), reverse=True)
    for f in fs:
        assert f.summary and "\n" not in f.summary
        assert f.next_step and "\n" not in f.next_step and f.next_step[0].isupper()
        assert f.rung is None or f.rung in RUNGS
        if f.rung:
            for line in commands_for(f.rung, s, *step_args(f)):
                words = line.split()
                if words[0] == "kill":
                    assert not {"0", "1", "2", str(CONSOLE_SHELL)} & set(words[3:]), line


# ---------------------------------------------------------------- holder

def test_a_running_job_is_an_info_holder_with_sigterm_to_its_launcher_and_workers():
    bash = Proc(pid=64479, ppid=812, state="S", user="mlops", name="bash", cmdline="-bash")
    s = snap([replace(launcher(), ppid=64479), bash] + [worker(i) for i in range(8)])
    f = only(diagnose(s), "holder")
    assert f.severity == "info" and f.rung == "sigterm"
    assert f.pids == (LAUNCHER,) + WORKERS and f.evidence["root"] == LAUNCHER
    assert "PID 72169 (python3 -m sglang.launch_server" in f.summary and "8 GPU processes" in f.summary
    assert commands_for(f.rung, s, *step_args(f)) == ["kill -s TERM " + " ".join(map(str, (LAUNCHER,) + WORKERS))]
    later = at(s, T0 + 20)
    assert only(diagnose(later, [s], [act("sigterm", T0, f.pids)]), "holder").rung == "sigkill"
    assert only(diagnose(at(s, T0 + 5), [s], [act("sigterm", T0, f.pids)]), "holder").evidence["wait_s"] == 10


def test_a_big_node_with_five_minutes_of_history_is_diagnosed_as_its_gpu_processes_say():
    """3000 unrelated services and 300 polls of history change nothing in the diagnosis (what
    that costs is measured by `gpu-incident bench`, not asserted here)."""
    filler = [Proc(pid=10000 + k, ppid=1, state="S", user="u", name=f"svc{k}", cmdline=f"/usr/bin/svc{k}")
              for k in range(3000)]
    base = seed_stuck()
    big = replace(base, processes=base.processes + tuple(filler))
    history = [at(big, T0 - 300 + k) for k in range(300)]
    diagnose(at(big, T0), history[:-1])          # the engine re-diagnoses every poll with this history
    got = diagnose(at(big, T0 + 1), history)
    small = [at(base, T0 - 300 + k) for k in range(300)]
    want = diagnose(at(base, T0 + 1), small)
    assert [(f.kind, f.severity, f.pids, f.gpus, f.rung) for f in got] == [
        (f.kind, f.severity, f.pids, f.gpus, f.rung) for f in want]
    assert got


def test_zombies_and_d_threads_are_reported_even_when_the_driver_does_not_answer():
    from console.diagnosis import diagnose
    from console.model import NodeSnapshot, Proc, ThreadInfo
    snap = NodeSnapshot(
        name="n", taken_at=1000.0, error="nvidia-smi timed out (the driver may be hung)",
        processes=(
            Proc(pid=1, ppid=0, state="S", user="root", name="systemd", cmdline="/sbin/init"),
            Proc(pid=500, ppid=1, state="S", user="root", name="python3", cmdline="python3 train.py"),
            Proc(pid=501, ppid=500, state="Z", user="root", name="python3", cmdline="",
                 d_threads=(ThreadInfo(tid=502, state="D", wchan="uvm_va_space_destroy"),)),
            Proc(pid=600, ppid=1, state="D", user="root", name="nvidia-smi", cmdline="nvidia-smi",
                 d_threads=(ThreadInfo(tid=600, state="D", wchan="_nv000923rm"),)),
        ))
    kinds = {f.kind: f for f in diagnose(snap)}
    assert 501 in kinds["zombie"].pids and "500" in kinds["zombie"].summary
    assert any(600 in f.pids for f in diagnose(snap) if f.kind == "d-state")
    assert "probe-hung" in kinds or "driver-error" in kinds


def test_an_unreachable_node_is_not_a_hung_driver():
    from console.diagnosis import diagnose, fails
    from console.model import NodeSnapshot
    history = [NodeSnapshot(name="n", taken_at=float(t),
                            error="unreachable: no SSH answer from 10.0.0.9:22 within 10 s (connect timed out)")
               for t in range(0, 400, 20)]
    now = NodeSnapshot(name="n", taken_at=400.0, error=history[0].error)
    findings = diagnose(now, history)
    assert not any(f.kind in ("probe-hung", "driver-error") for f in findings)
    assert not fails(findings, "high")          # unreachable is data, not a --fail-on hit
    hung = NodeSnapshot(name="n", taken_at=400.0, error="probe timed out after 10 s")
    assert [f.kind for f in diagnose(hung)] == ["probe-hung"]


def test_a_job_holding_memory_at_zero_percent_rises_in_severity_with_how_long():
    """The seed before the kill: 594 GiB at 0 % utilisation. A first look: info (a job may just
    be loading); a minute of history at 0 %: low; five minutes: high — what the fleet calls an
    idle-memory suspect, in the node's own view too. A busy poll in between restarts the count."""
    h = History(400)
    for s in range(0, 300, 10):
        h.append(seed_running(T0 + s))
    def holder(history, t):
        return only(diagnose(seed_running(t), history), "holder")
    assert only(diagnose(seed_running(T0)), "holder").severity == "info"
    low = holder(tuple(h)[:8], T0 + 80)
    assert low.severity == "low" and low.summary.endswith("holding 594.6 GiB on GPUs 0-7, at 0 % utilisation for 80 s")
    high = holder(h, T0 + 300)
    assert high.severity == "high" and high.evidence["idle_s"] == 300
    busy = replace(seed_running(T0 + 200), gpus=tuple(replace(g, utilization_pct=37) for g in seed_running().gpus))
    again = History(400)
    for s in list(range(0, 200, 10)):
        again.append(seed_running(T0 + s))
    again.append(busy)
    again.append(seed_running(T0 + 210))
    assert holder(again, T0 + 220).severity == "info"        # 10 s idle since the busy poll


def test_a_gpu_busy_with_nothing_is_a_latched_counter_not_a_hang():
    """~100 % utilisation, 0 MiB, no process, no Xid (Datura-ai/lium-io PR #1142): info, no reset."""
    s = snap([], used=(4,) * 8, driver=())
    s = replace(s, gpus=tuple(replace(g, utilization_pct=100) if g.index == 5 else g for g in s.gpus))
    f = only(diagnose(s), "latched-utilisation")
    assert f.severity == "info" and f.gpus == (5,) and f.rung is None
    assert "latched utilisation counter" in f.summary and "no reset is needed" in f.next_step
    # a real hang is not this: memory held (or a process) or an Xid on it
    held = replace(s, gpus=tuple(replace(g, memory_used_mib=40000) if g.index == 5 else g for g in s.gpus))
    assert "latched-utilisation" not in kinds(diagnose(held))
    bus = s.gpus[5].bus_id.split(":", 1)[1].rsplit(".", 1)[0].lower()          # "1d:00" of 00000000:1D:00.0
    xid = replace(s, kernel_log=(f"NVRM: Xid (PCI:0000:{bus}): 79, pid=0, GPU has fallen off the bus.",))
    assert "xid" in kinds(diagnose(xid)) and "latched-utilisation" not in kinds(diagnose(xid))


def _mps_node(idle_since: float | None = None):
    from console.model import DriverProc, Gpu, NodeSnapshot, Proc
    from console.sources.parse import credit_driver_memory
    gpus = (Gpu(index=0, uuid="GPU-0", name="NVIDIA H100 80GB HBM3", bus_id="00000000:18:00.0",
                memory_used_mib=40000, memory_total_mib=81559, utilization_pct=35, persistence_mode=True),)
    procs = [Proc(pid=1, ppid=0, state="S", user="root", name="systemd", cmdline="/sbin/init"),
             Proc(pid=500, ppid=1, state="S", user="root", name="nvidia-cuda-mps", cmdline="nvidia-cuda-mps-control -d",
                  create_time=1.0),
             Proc(pid=510, ppid=500, state="S", user="root", name="nvidia-cuda-mps", cmdline="nvidia-cuda-mps-server",
                  create_time=2.0, device_files=("/dev/nvidia0", "/dev/nvidiactl", "/dev/nvidia-uvm")),
             Proc(pid=900, ppid=1, state="S", user="alice", name="python3", cmdline="python3 train.py",
                  create_time=3.0, device_files=("/dev/nvidia-uvm",))]
    listed = [DriverProc(pid=510, gpu_index=0, gpu_uuid="GPU-0", used_memory_mib=40000, name="nvidia-cuda-mps-server")]
    credited, driver = credit_driver_memory(procs, listed, None)
    return NodeSnapshot(name="n", taken_at=1000.0, gpus=gpus, processes=tuple(credited), driver_processes=tuple(driver))


def test_memory_charged_to_the_mps_server_is_named_and_the_server_is_never_signalled():
    """Under MPS the driver lists nvidia-cuda-mps-server in place of its clients (issue 22 item
    4): the memory is named as the clients' (it was in no finding), the next step goes through
    nvidia-cuda-mps-control, and no step anywhere signals the server (SIGKILL to it would end
    every client on the GPU)."""
    snap = _mps_node()
    found = diagnose(snap)
    mps = [f for f in found if f.kind == "mps-server"]
    assert len(mps) == 1
    f = mps[0]
    assert "MPS server (PID 510)" in f.summary and "39.1 GiB" in f.summary and "python3" in f.summary
    assert f.rung == "mps-clients" and "Do not signal the MPS server" in f.next_step
    assert "echo get_client_list 510 | nvidia-cuda-mps-control" in f.next_step
    assert "terminate_client 510" in f.next_step
    from console.rungs import SIGNALLING
    for other in found:        # no signalling rung has the server among its targets
        if other.rung in SIGNALLING or other.rung == "signal":
            assert 510 not in other.evidence.get("targets", other.pids), other


def test_an_mps_server_with_no_memory_is_no_finding():
    import dataclasses
    snap = _mps_node()
    snap = dataclasses.replace(snap, driver_processes=(), processes=tuple(
        dataclasses.replace(p, gpu_memory_mib={}) for p in snap.processes))
    assert not [f for f in diagnose(snap) if f.kind == "mps-server"]
