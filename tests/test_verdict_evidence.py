"""Verdicts from evidence (issue 30), on hand-built snapshots: a holder's role rests on its owner,
executable and cgroup, not its name; a job's liveness on its leaders, its SM share, its GPU's
utilisation and its CPU time over the polls; the gate's fitness on every health signal, closed on
what it cannot read. The same rules on real processes: tests/test_real_liveness.py."""
from __future__ import annotations

from dataclasses import replace

from console.diagnosis import diagnose
from console.diagnosis import fitness
from console.actions.ladder import top_step
from console.model import ActionRecord, Cgroup, DriverProc, MemoryRepair, PciGpu, Proc, ThreadInfo
from test_diagnose_builders import T0, bus, gpus, snap, uuid

KUBE = Cgroup(path="/kubepods/besteffort/pod9d1e2c3b-0a1b-4c2d-8e3f-0a1b2c3d4e5f/" + "a" * 64,
              container_id="a" * 64, pod_uid="9d1e2c3b-0a1b-4c2d-8e3f-0a1b2c3d4e5f")


def present(n: int = 8) -> tuple[PciGpu, ...]:
    return tuple(PciGpu(bus_id=bus(i), present=True) for i in range(n))


def idle_node(procs=(), **kw):
    kw.setdefault("pci_gpus", present())
    kw.setdefault("driver_list_ok", True)
    kw.setdefault("driver_version", "535.104.05")
    return snap(procs, used=(4,) * 8, driver=kw.pop("driver", ()), **kw)


def job(pid=5000, *, ppid=4000, pgid=4000, sid=3000, ticks=1000, mib=70000, gpu=0, sm=None, user="alice",
        state="S", exe="/usr/bin/python3.11", name="python3", pending=None) -> Proc:
    return Proc(pid=pid, ppid=ppid, state=state, user=user, name=name, cmdline=f"{name} train.py",
                start_ticks=777, pgid=pgid, sid=sid, cpu_ticks=ticks, exe=exe, gpu_sm_pct=sm,
                gpu_memory_mib={str(gpu): mib}, device_files=(f"/dev/nvidia{gpu}", "/dev/nvidiactl"),
                sigkill_pending=pending)


def held(procs, *, used0=70004, util0=0, t=T0, **kw):
    s = snap(procs, used=(used0,) + (4,) * 7, t=t, pci_gpus=present(), driver_list_ok=True, **kw)
    g0 = replace(s.gpus[0], utilization_pct=util0)
    return replace(s, gpus=(g0,) + s.gpus[1:])


def by_kind(findings, kind):
    return [f for f in findings if f.kind == kind]


# ---------------------------------------------------------------- roles

def test_a_device_plugin_in_a_kubepods_cgroup_is_infrastructure_and_the_gate_passes():
    plugin = Proc(pid=2100, ppid=2090, state="S", user="root", name="nvidia-device-p",
                  cmdline="nvidia-device-plugin", exe="/usr/bin/nvidia-device-plugin", cgroup=KUBE,
                  device_files=("/dev/nvidiactl", "/dev/nvidia0", "/dev/nvidia1"))
    s = idle_node([plugin])
    fs = diagnose(s)
    assert not [f for f in fs if 2100 in f.pids and f.kind in ("hidden-holder", "orphan", "holder")]
    sig = {x.name: x for x in fitness.signals(s)}
    assert fitness.clean(list(sig.values())), fitness.why_not(list(sig.values()))
    assert "nvidia-device-plugin" in sig["workloads"].said


def test_a_users_process_renamed_xorg_is_a_workload_and_fails_the_gate():
    fake = Proc(pid=6100, ppid=6000, state="S", user="mallory", name="Xorg", cmdline="Xorg :9",
                exe="/usr/bin/python3.11", device_files=("/dev/nvidia0", "/dev/nvidiactl"))
    real = replace(fake, pid=1550, user="gdm", exe="/usr/lib/xorg/Xorg")
    ok = fitness.signals(idle_node([real]))
    assert fitness.clean(ok), fitness.why_not(ok)
    bad = fitness.signals(idle_node([fake]))
    assert not fitness.clean(bad) and "PID 6100" in fitness.why_not(bad)
    # and the ladder may act on it, where it never signals the node's display server
    assert [f for f in diagnose(idle_node([fake])) if 6100 in f.pids and f.kind == "hidden-holder"]


def test_a_display_server_whose_executable_cannot_be_read_is_unconfirmed_and_unknown_is_not_clean():
    xorg = Proc(pid=1550, ppid=1549, state="S", user="gdm", name="Xorg", cmdline="/usr/lib/xorg/Xorg vt1",
                device_files=("/dev/nvidia0",))
    sig = {x.name: x for x in fitness.signals(idle_node([xorg]))}
    assert sig["workloads"].status == fitness.UNKNOWN and "executable could not be read" in sig["workloads"].said


def test_a_daemon_name_under_another_user_is_no_daemon():
    fake = Proc(pid=7000, ppid=1, state="S", user="bob", name="nvidia-persiste", cmdline="nvidia-persistenced",
                device_files=("/dev/nvidia0",))
    fs = diagnose(idle_node([fake]))
    assert not by_kind(fs, "reset-blocker") or all(7000 not in f.pids for f in by_kind(fs, "reset-blocker"))
    assert not fitness.clean(fitness.signals(idle_node([fake])))


# ---------------------------------------------------------------- liveness

def test_a_setsid_job_computing_at_ppid_1_is_no_orphan_and_gets_no_signal_advice():
    j = job(ppid=1, pgid=5000, sid=5000, sm=95)
    fs = diagnose(held([j], util0=100))
    assert not by_kind(fs, "orphan")
    (h,) = by_kind(fs, "holder")
    assert h.rung is None and h.next_step.startswith("Nothing stuck") and "`t`" in h.next_step
    ev = h.evidence["processes"][0]
    assert ev["role"] == "workload" and ev["liveness"] == "detached" and ev["computing"] is True
    assert ev["ppid"] == 1 and ev["group_leader_alive"] is True and ev["sm_pct"] == 95
    assert top_step(fs) is None


def test_cpu_time_over_the_polls_says_computing_or_idle():
    before = held([job(ppid=1, pgid=4000, ticks=1000)], t=T0, util0=40)
    busy = held([job(ppid=1, pgid=4000, ticks=1090)], t=T0 + 1, util0=40)
    ev = by_kind(diagnose(busy, [before]), "holder")[0].evidence["processes"][0]
    assert ev["computing"] is True and ev["cpu_pct"] == 90.0 and ev["liveness"] == "detached"
    # the same CPU over GPUs that read 0 %: a spin (a hang in a busy loop), not GPU work
    spin = held([job(ppid=1, pgid=4000, ticks=1090)], t=T0 + 1)
    (o,) = by_kind(diagnose(spin, [held([job(ppid=1, pgid=4000, ticks=1000)], t=T0)]), "orphan")
    assert o.evidence["processes"][0]["computing"] is None
    assert "spinning" in " ".join(o.evidence["processes"][0]["liveness_why"])
    still = held([job(ppid=1, pgid=4000, ticks=1000)], t=T0 + 1)
    (o,) = by_kind(diagnose(still, [before]), "orphan")
    ev = o.evidence["processes"][0]
    assert ev["computing"] is False and ev["group_leader_alive"] is False and o.rung == "sigterm"


def test_workers_whose_group_leader_died_under_a_subreaper_of_any_name_are_orphans():
    reaper = Proc(pid=3900, ppid=1, state="S", user="alice", name="supervise", cmdline="supervise", pgid=3900,
                  sid=3000, start_ticks=5)
    w = [job(pid=5000 + i, ppid=3900, pgid=4000, ticks=10, gpu=i) for i in range(2)]
    s0 = snap([reaper] + w, t=T0)
    s1 = snap([reaper] + w, t=T0 + 2)
    (o,) = by_kind(diagnose(s1, [s0]), "orphan")
    assert set(o.pids) == {5000, 5001} and "adopted by PID 3900 (supervise)" in o.summary
    assert o.evidence["processes"][0]["adopted_by"] == "supervise (PID 3900)"


def test_a_computing_job_whose_launcher_was_signalled_is_an_orphan():
    w = job(ppid=1, pgid=4000, sm=90)
    kill = ActionRecord(rung="sigkill", ts=T0 - 5, node="demo", pids=(4000,))
    (o,) = by_kind(diagnose(held([w], util0=100), (), [kill]), "orphan")
    assert "sigkill" in o.evidence["processes"][0]["launcher_signalled"]


def test_a_pending_sigkill_is_never_signalled_again_then_drain_capture_reboot():
    stuck = job(state="D", pending=True, ppid=1, pgid=4000)
    stuck = replace(stuck, d_threads=(ThreadInfo(tid=5001, state="D", wchan="uvm_va_space_destroy"),))
    fs = diagnose(held([stuck], t=T0))
    assert all(f.rung not in ("sigterm", "sigkill", "kill-holders") for f in fs if 5000 in f.pids)
    assert any(f.rung == "wait" and "SIGKILL pending" in f.next_step for f in fs)
    later = [held([stuck], t=T0 + s) for s in (0, 60, 130)]
    fs = diagnose(later[-1], later[:-1])
    top = next(f for f in fs if 5000 in f.pids)
    assert top.rung == "reboot" and "capture" in top.next_step and "Drain" in top.next_step
    assert not fitness.clean(fitness.signals(later[-1]))


# ---------------------------------------------------------------- the gate's signals

def signal(s, name, **kw):
    return {x.name: x for x in fitness.signals(s, **kw)}[name]


def test_an_idle_node_is_clean_and_says_every_signal():
    sigs = fitness.signals(idle_node())
    assert [x.name for x in sigs] == list(fitness.SIGNALS) and fitness.clean(sigs)
    assert {x.status for x in sigs} <= {fitness.OK, fitness.NA}


def test_a_recovery_action_alone_makes_a_node_unfit():
    s = idle_node(driver_version="570.86.15")
    s = replace(s, gpus=tuple(replace(g, recovery_action="gpu_reset" if g.index == 3 else "none") for g in s.gpus))
    assert signal(s, "recovery_action").status == fitness.BAD
    assert not fitness.clean(fitness.signals(s))
    unknown = replace(s, gpus=tuple(replace(g, recovery_action=None) for g in s.gpus))
    assert signal(unknown, "recovery_action").status == fitness.UNKNOWN


def test_a_gpu_missing_from_the_list_or_reading_ff_is_not_present():
    s = idle_node()
    missing = replace(s, gpus=s.gpus[:7])
    assert signal(missing, "gpus_present").status == fitness.BAD and bus(7) in signal(missing, "gpus_present").said
    ff = replace(s, pci_gpus=present()[:7] + (PciGpu(bus(7), False),))
    assert "rev ff" in signal(ff, "gpus_present").said
    unread = replace(s, pci_gpus=None)
    assert signal(unread, "gpus_present").status == fitness.UNKNOWN


def test_a_fresh_xid_fails_the_gate_an_old_one_passes_and_a_clean_verdict_moves_the_mark():
    line = "[ 5000.123456] NVRM: Xid (PCI:0000:18:00): 79, pid=0, name=, GPU has fallen off the bus."
    s = idle_node(kernel_log=(line,), boot_time=T0 - 6000)          # uptime 6000 s: the line 1000 s old
    assert signal(s, "kernel_log").status == fitness.BAD
    assert signal(s, "kernel_log", window_s=600).status == fitness.OK
    assert signal(s, "kernel_log", clean_uptime_s=5100).status == fitness.OK
    denied = replace(idle_node(), warnings=("dmesg not permitted: Xid lines unavailable",))
    assert signal(denied, "kernel_log").status == fitness.UNKNOWN


def test_pending_remap_and_an_unanswered_process_list_are_not_clean():
    s = idle_node()
    remap = replace(s, gpus=tuple(replace(g, memory_repair=MemoryRepair(remap_pending=g.index == 2,
                                                                           remap_failure=False)) for g in s.gpus))
    assert signal(remap, "memory_repair").status == fitness.BAD
    blind = replace(s, driver_list_ok=False)
    assert signal(blind, "workloads").status == fitness.UNKNOWN and not fitness.clean(fitness.signals(blind))


def test_memory_held_by_infrastructure_is_allowed_but_a_jobs_is_not():
    xorg = Proc(pid=1550, ppid=1549, state="S", user="root", name="Xorg", cmdline="/usr/lib/xorg/Xorg",
                exe="/usr/lib/xorg/Xorg", device_files=("/dev/nvidia0",))
    dp = DriverProc(pid=1550, gpu_index=0, gpu_uuid=uuid(0), used_memory_mib=1800, name="/usr/lib/xorg/Xorg")
    s = replace(idle_node([xorg], driver=(dp,)), gpus=gpus((1804,) + (4,) * 7))
    assert fitness.clean(fitness.signals(s)), fitness.why_not(fitness.signals(s))
    j = job(pid=5000, mib=1800)
    dj = DriverProc(pid=5000, gpu_index=0, gpu_uuid=uuid(0), used_memory_mib=1800, name="python3")
    s2 = replace(idle_node([j], driver=(dj,)), gpus=gpus((1804,) + (4,) * 7))
    assert "the driver lists PID 5000" in fitness.why_not(fitness.signals(s2))


def test_the_findings_details_say_the_evidence_in_words():
    from console.ui.details import finding_detail
    j = job(ppid=1, pgid=5000, sid=5000, sm=95, name="[bold]x\x1b[31m")
    s = held([j], util0=100)
    (h,) = by_kind(diagnose(s), "holder")
    text = finding_detail(h, s).plain
    assert "Why the console thinks so" in text
    assert "PID 5000" in text and "workload (job)" in text and "detached" in text and "SM share is 95 %" in text
    assert "\x1b" not in text and "[bold]x" in text          # a hostile name renders literally


# ---------------------------------------------------------------- a lost GPU, however it shows

def test_a_gpu_off_the_bus_is_a_driver_error_naming_its_bus_and_never_a_reset():
    s = idle_node()
    for gone in (replace(s, gpus=s.gpus[:7]),                                           # missing from the list
                 replace(s, pci_gpus=present()[:7] + (PciGpu(bus(7), False),))):         # rev ff
        errs = [f for f in diagnose(gone) if f.kind == "driver-error"]
        assert len(errs) == 1 and bus(7) in errs[0].summary and errs[0].severity == "critical"
        assert errs[0].rung == "reboot" and "Drain" in errs[0].next_step and "reset" not in (errs[0].rung or "")
    lines = ("NVRM: The NVIDIA GPU 0000:b3:00.0", "NVRM: (PCI ID: 10de:1eb8) installed in this system has",
             "NVRM: fallen off the bus and is not responding to commands.")
    (f,) = [f for f in diagnose(replace(s, kernel_log=lines)) if f.kind == "driver-error"]
    assert "0000:b3:00.0" in f.summary and f.rung == "reboot"


def test_nv_err_reset_required_wants_that_gpus_reset():
    line = ("NVRM: GPU 00000000:18:00.0: nvAssertOkFailedNoLog: Assertion failed: Reset required "
            "[NV_ERR_RESET_REQUIRED] (0x00000066) returned from kgspWaitForRmInitDone")
    fs = diagnose(replace(idle_node(), kernel_log=(line,)))
    (f,) = [f for f in fs if f.kind == "driver-error"]
    assert f.gpus == (0,) and f.rung in ("reset", "clear-blockers") and "NV_ERR_RESET_REQUIRED" in f.summary


def test_a_hung_task_report_inside_the_driver_wants_drain_capture_reboot():
    from tests.real_fixtures import load
    body = load("hung-task-nvidia-rm-lock-nvidia-persistenced-15.log").body.splitlines()
    fs = diagnose(replace(idle_node(), kernel_log=tuple(body)))
    (f,) = [f for f in fs if f.evidence.get("hung_task")]
    assert f.severity == "critical" and f.rung == "reboot" and "os_acquire_rwlock_read" in f.summary
    assert "capture" in f.next_step and f.evidence["pid"] == 509579
    assert {s.name: s for s in fitness.signals(replace(idle_node(), kernel_log=tuple(body)))}["stuck"].status \
        == fitness.BAD


def test_a_gpu_nvidia_smi_cannot_get_a_handle_for_is_lost_whatever_the_words():
    s = replace(idle_node(), warnings=("GPU 00000000:1C:00.0 cannot be reached: Unknown Error",),
                pci_gpus=None)
    (f,) = [f for f in diagnose(s) if f.kind == "driver-error"]
    assert "00000000:1C:00.0" in f.summary and "Unknown Error" in f.summary and f.rung == "reboot"
    assert {x.name: x for x in fitness.signals(s)}["gpus_present"].status == fitness.BAD
    alone = replace(s, warnings=(), gpus=(), error="driver error: nvidia-smi cannot reach GPU 00000000:07:00.0 "
                                                    "(Unknown Error)")
    (f,) = [f for f in diagnose(alone) if f.kind == "driver-error"]
    assert "00000000:07:00.0" in f.summary and f.rung == "reboot" and "Drain" in f.next_step


def test_confirm_marks_a_busy_target_and_says_each_targets_gpu_and_sm_use():
    from console.actions.plan import plan_action
    from console.ui.confirm import plan_text
    j = job(ppid=1, pgid=5000, sid=5000, sm=95)
    plan = plan_action(held([j], util0=100), "sigterm", pids=[5000])
    (tg,) = plan.targets
    assert tg.busy and tg.usage == "GPU 0 at 100 %, SM 95 %"
    text = plan_text(plan, read_only=False, dry_run=False).plain
    assert "BUSY, computing: GPU 0 at 100 %, SM 95 %" in text and "1 of the targets is computing" in text
    idle = plan_action(held([job(ppid=1, pgid=4000)]), "sigterm", pids=[5000])
    assert not idle.targets[0].busy and "computing" not in plan_text(idle, read_only=False, dry_run=False).plain


def test_x_with_nothing_to_do_names_the_computing_job_or_says_the_incident_is_done():
    from console.actions.ladder import no_step_words
    busy = held([job(ppid=1, pgid=5000, sid=5000, sm=95)], util0=100)
    busy = replace(busy, findings=diagnose(busy))
    assert no_step_words(busy).startswith("Nothing stuck: PID 5000 is computing")
    done = replace(idle_node(), findings=diagnose(idle_node()))
    assert no_step_words(done).startswith("done on demo: every GPU is back at idle") and "`e`" in no_step_words(done)


def test_one_reading_says_liveness_is_not_known_yet_and_proposes_a_second_not_a_signal():
    """Whether a job computes shows in its CPU time between two readings: on the first, a job
    whose group leader lives (no other signal against it) is not proposed a SIGTERM but a short
    wait for the next reading, which decides."""
    leader = Proc(pid=4000, ppid=3000, state="S", user="alice", name="torchrun", cmdline="torchrun train.py",
                  start_ticks=700, pgid=4000, sid=3000, cpu_ticks=50)
    first = held([leader, job(ticks=1000)], t=T0)
    (h,) = by_kind(diagnose(first), "holder")
    assert h.rung == "wait" and h.next_step.startswith("Wait for a second reading: whether this job computes")
    assert "`t` stops PID 4000 and its 1 GPU process anyway" in h.next_step
    # a second reading with its CPU time still: idle, and the step is the SIGTERM as before
    still = held([leader, job(ticks=1000)], t=T0 + 1)
    (h,) = by_kind(diagnose(still, [first]), "holder")
    assert h.rung == "sigterm", h.next_step
    # ... with its CPU time rising over a GPU at work: computing, nothing stuck
    busy = held([leader, job(ticks=1090)], t=T0 + 1, util0=40)
    (h,) = by_kind(diagnose(busy, [first]), "holder")
    assert h.rung is None and h.next_step.startswith("Nothing stuck")
