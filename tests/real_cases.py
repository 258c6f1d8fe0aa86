"""Real cases: public threads whose pasted output AND outcome are known, as data for replay tests.

Each entry names a fixture in tests/fixtures/real/ (see its README: the output is byte for byte what
the thread shows; the fixture's ``# outcome:`` header says, in our words, what the thread established).
The cases exist because verdicts reasoned from one signal at a time went wrong on real nodes: a daemon
that holds /dev/nvidia0 by design is not a hidden holder, a process with PPID 1 is not by itself an
orphan, a process in D state is not a zombie and will not die of SIGKILL, a GPU that answers
"Unknown Error" / "(rev ff)" is off the bus and no reset of it can run. A replay builds a node from
``setup`` (taken only from the paste and the thread), runs the console's diagnosis and gate, and
checks what is encoded here:

- ``gate_clean``: would the node be fit for the next job (None: not a gate case);
- ``kinds`` / ``not_kinds``: finding kinds that must / must not be among the findings;
- ``rung``: the action id of the next step for the top finding (None: nothing to do) - asserted only
  when ``rung_established`` is True; where the thread shows what is wrong but not what cleared it,
  ``rung_established`` is False and only ``not_rungs`` are asserted;
- ``not_rungs``: action ids that must not be proposed for this evidence.

Only what the thread supports is encoded; everything else is left out rather than guessed. ``setup``
uses these keys (all optional; None where the paste does not say):

    gpus:             [{index, bus_id, name, memory_used_mib, memory_total_mib, util_pct, recovery_action}]
    driver_processes: [{gpu, pid, name, used_mib}]      rows of nvidia-smi's process list
    processes:        [{pid, ppid, pgid, sid, state, user, program, exe, cgroup, holds, busy}]
                      holds: the /dev/nvidia* paths the process has open; busy: on-CPU / doing work
    kernel:           [lines]                           dmesg / journal lines, verbatim from the fixture
    unreachable:      [bus ids]                         GPUs nvidia-smi could not get a handle for
    smi_error:        str                               what nvidia-smi printed instead of its table
    probe:            {hung: bool, for_s: seconds}      nvidia-smi did not return
    lspci:            {bus id: revision}                e.g. "ff" for a device whose config space reads all ones
    job_alive:        bool                              whether the scheduler still knows the owning job
"""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Case:
    fixture: str            # file name in tests/fixtures/real/
    theme: str              # "infrastructure" | "liveness" | "unkillable" | "lost-gpu" | "ghost"
    outcome: str            # what the thread established, one line
    gate_clean: bool | None
    kinds: tuple[str, ...]
    not_kinds: tuple[str, ...]
    rung: str | None
    not_rungs: tuple[str, ...]
    setup: dict = field(default_factory=dict)
    rung_established: bool = True   # False: the thread does not say what cleared it; assert not_rungs only


def _lines(*xs: str) -> list[str]:
    return list(xs)


CASES: tuple[Case, ...] = (
    # ------------------------------------------------------------------ infrastructure
    Case(
        fixture="fuser-persistenced-holds-nvidia0-dra-driver-nvidia-gpu-1037.txt",
        theme="infrastructure",
        outcome="nvidia-persistenced holds /dev/nvidia0 by design while persistence is on; it is released "
                "with `nvidia-smi -i <gpu> -pm 0`, not by killing the daemon",
        gate_clean=True,
        kinds=(),
        not_kinds=("hidden-holder", "orphan", "foreign-pid", "zombie"),
        rung=None,
        not_rungs=("sigterm", "sigkill", "kill-holders"),
        setup={
            "gpus": [{"index": 0, "bus_id": None, "memory_used_mib": None, "memory_total_mib": None,
                      "util_pct": None, "recovery_action": None}],
            "driver_processes": [],
            "processes": [{"pid": 37526, "ppid": None, "pgid": None, "sid": None, "state": None,
                           "user": "root", "program": "nvidia-persiste",       # comm, cut to 15 characters
                           "exe": "/usr/bin/nvidia-persistenced", "cgroup": None,
                           "holds": ["/dev/nvidia0"], "busy": False}],
        },
    ),
    Case(
        fixture="ps-dcgm-exporter-exiting-hung-dcgm-exporter-215.txt",
        theme="infrastructure",
        outcome="stopping dcgm-exporter and the device plugin together (containerd stop) on MIG A100s left the "
                "exporter exiting and every GPU call hung for minutes; only a system restart recovered",
        gate_clean=False,
        kinds=("probe-hung",),
        not_kinds=("zombie", "orphan", "hidden-holder"),
        rung="reboot",          # once the hang has lasted (the thread: more than 5 minutes); a first hang is "wait"
        not_rungs=("sigkill", "kill-holders", "reset"),
        setup={
            "probe": {"hung": True, "for_s": 300},
            "processes": [{"pid": 63634, "ppid": None, "pgid": None, "sid": None, "state": "R",
                           "user": "root", "program": "dcgm-exporter", "exe": None,   # "[dcgm-exporter]": exiting, no mm
                           "cgroup": None, "holds": None, "busy": True}],
        },
    ),
    Case(
        fixture="xid-120-119-after-exporter-sigkill-dcgm-exporter-84.log",
        theme="infrastructure",
        outcome="SIGKILL of dcgm-exporter froze an A100 (Xid 120 then Xid 119 GSP timeouts); nvidia-smi hung and "
                "nothing could use the GPU until the server was restarted",
        gate_clean=False,
        kinds=("xid", "probe-hung"),
        not_kinds=("hidden-holder", "orphan"),
        rung="reboot",
        not_rungs=("wait", "sigterm", "sigkill", "kill-holders"),
        setup={
            "gpus": [{"index": 0, "bus_id": "00000000:3B:00.0", "name": "A100", "memory_used_mib": None,
                      "memory_total_mib": None, "util_pct": None, "recovery_action": None}],
            "probe": {"hung": True, "for_s": 300},
            "kernel": _lines(
                "[Mon Jul 25 16:46:04 2022] NVRM: Xid (PCI:0000:3b:00): 120, pid='<unknown>', name=<unknown>, GSP Error: Task 1 raised error code 0x5 for reason 0x0 at 0x63f01ac (0 more errors skipped)",
                "[Mon Jul 25 16:46:20 2022] NVRM: Xid (PCI:0000:3b:00): 119, pid='<unknown>', name=<unknown>, Timeout waiting for RPC from GSP! Expected function FREE (0x0 0x0).",
            ),
        },
    ),

    # ------------------------------------------------------------------ unkillable (D state, defunct)
    Case(
        fixture="ps-d-state-nvidia-daemons-nvidia-docker-377.txt",
        theme="unkillable",
        outcome="nvidia-smi, nvidia-persistenced and nvidia-docker-plugin all in D: blocked in the driver (a GPU or "
                "kernel problem), not zombies; restarting the VM brought the same state back",
        gate_clean=False,
        kinds=("d-state",),
        not_kinds=("zombie", "orphan"),
        rung=None,
        rung_established=False,
        not_rungs=("sigterm", "sigkill", "kill-holders"),
        setup={
            "processes": [
                {"pid": 935, "ppid": None, "pgid": None, "sid": None, "state": "D", "user": "root",
                 "program": "nvidia-smi", "exe": "/usr/bin/nvidia-smi", "cgroup": None, "holds": None, "busy": False},
                {"pid": 953, "ppid": None, "pgid": None, "sid": 953, "state": "D", "user": "nvidia-+",   # ps cut the name
                 "program": "nvidia-persistenced", "exe": "/usr/bin/nvidia-persistenced", "cgroup": None,
                 "holds": None, "busy": False},
                {"pid": 1368, "ppid": None, "pgid": None, "sid": 1368, "state": "D", "user": "nvidia-+",
                 "program": "nvidia-docker-plugin", "exe": "/usr/bin/nvidia-docker-plugin", "cgroup": None,
                 "holds": None, "busy": False},
            ],
            "probe": {"hung": True, "for_s": None},
        },
    ),
    Case(
        fixture="ps-xorg-d-state-and-defunct-coolgpus-8.txt",
        theme="unkillable",
        outcome="X servers started by coolgpus were left in D and defunct after coolgpus crashed and was restarted; "
                "they could not be killed and coolgpus hung waiting for them",
        gate_clean=False,
        kinds=("d-state", "zombie"),
        not_kinds=("orphan",),
        rung=None,
        rung_established=False,
        not_rungs=("sigterm", "sigkill"),
        setup={
            "processes": [
                {"pid": 1422, "ppid": None, "pgid": None, "sid": 1422, "state": "D", "user": "root",
                 "program": "Xorg", "exe": None, "cgroup": None, "holds": None, "busy": False},
                {"pid": 1423, "ppid": None, "pgid": None, "sid": 1423, "state": "Z", "user": "root",
                 "program": "Xorg", "exe": None, "cgroup": None, "holds": None, "busy": False},
                {"pid": 1424, "ppid": None, "pgid": None, "sid": 1424, "state": "D", "user": "root",
                 "program": "Xorg", "exe": None, "cgroup": None, "holds": None, "busy": False},
                {"pid": 1425, "ppid": None, "pgid": None, "sid": 1425, "state": "Z", "user": "root",
                 "program": "Xorg", "exe": None, "cgroup": None, "holds": None, "busy": False},
            ],
        },
    ),
    Case(
        fixture="xid-45-hung-task-d-state-gpud-117.log",
        theme="unkillable",
        outcome="after an Xid 45 run, processes calling the driver (nvidia-smi, cache_mgr_event) stuck in D state "
                "for good; gpud's answer is to suggest a reboot",
        gate_clean=False,
        kinds=("xid", "d-state"),
        not_kinds=("zombie", "orphan"),
        rung="reboot",
        not_rungs=("sigterm", "sigkill", "kill-holders"),
        setup={
            "gpus": [{"index": None, "bus_id": "00000000:61:00.0", "name": None, "memory_used_mib": None,
                      "memory_total_mib": None, "util_pct": None, "recovery_action": None}],
            "processes": [{"pid": 620917, "ppid": 620571, "pgid": None, "sid": None, "state": "D", "user": None,
                           "program": "cache_mgr_event", "exe": None, "cgroup": None, "holds": None, "busy": False}],
            "kernel": _lines(
                "[Sat Oct 12 18:35:32 2024] NVRM: Xid (PCI:0000:61:00): 45, pid=1496200, name=distprovers-gpu, Ch 0000000a",
                "[Sat Oct 12 18:38:44 2024] INFO: task cache_mgr_event:620917 blocked for more than 120 seconds.",
                "[Sat Oct 12 18:38:44 2024] task:cache_mgr_event state:D stack:    0 pid:620917 ppid:620571 flags:0x00000002",
            ),
        },
    ),
    Case(
        fixture="hung-task-nvidia-rm-lock-nvidia-persistenced-15.log",
        theme="unkillable",
        outcome="a process blocked in D on the nvidia driver's RM lock (driver hang); the node came back only by a "
                "reboot, which nvidia-persistenced's stop stalled for a long time",
        gate_clean=False,
        kinds=("d-state",),
        not_kinds=("zombie", "orphan"),
        rung="reboot",
        not_rungs=("sigterm", "sigkill", "reset"),
        setup={
            "processes": [{"pid": 509579, "ppid": 11174, "pgid": None, "sid": None, "state": "D", "user": None,
                           "program": "gdscheck", "exe": None, "cgroup": None, "holds": None, "busy": False}],
            "kernel": _lines(
                "[ 7510.129324] INFO: task gdscheck:509579 blocked for more than 120 seconds.",
                "[ 7510.131217] task:gdscheck        state:D stack:    0 pid:509579 ppid: 11174 flags:0x00000006",
                "[ 7510.131288]  os_acquire_rwlock_read+0x35/0x50 [nvidia]",
            ),
        },
    ),

    # ------------------------------------------------------------------ liveness (PPID 1)
    Case(
        fixture="processes-orphans-after-slurm-job-sglang-23627.txt",
        theme="liveness",
        outcome="sglang DP scheduler workers survived their Slurm job (gone from squeue), reparented to PID 1, "
                "holding ~100 GB on each of 4 GPUs; the next job OOMed: orphans to stop, healthy GPUs",
        gate_clean=False,
        kinds=("orphan",),
        not_kinds=("zombie", "d-state", "ghost-memory", "driver-error"),
        rung="sigterm",
        not_rungs=("reset", "reboot", "drain"),
        setup={
            "job_alive": False,
            "driver_processes": [
                {"gpu": 0, "pid": 2505781, "name": "sglang::scheduler_DP0_TP0_EP0", "used_mib": 100998},
                {"gpu": 1, "pid": 2505782, "name": "sglang::scheduler_DP1_TP1_EP1", "used_mib": 101044},
                {"gpu": 2, "pid": 2505783, "name": "sglang::scheduler_DP2_TP2_EP2", "used_mib": 101044},
                {"gpu": 3, "pid": 2505784, "name": "sglang::scheduler_DP3_TP3_EP3", "used_mib": 100804},
            ],
            # ps was shown for 2505781 only; the issue says all four were reparented to init
            "processes": [{"pid": pid, "ppid": 1, "pgid": None, "sid": None, "state": None, "user": "user",
                           "program": f"sglang::scheduler_DP{i}_TP{i}_EP{i}", "exe": None,
                           "cgroup": None, "holds": None, "busy": None}
                          for i, pid in enumerate((2505781, 2505782, 2505783, 2505784))],
        },
    ),
    Case(
        fixture="ps-ppid-1-orphan-sglang-23627.txt",
        theme="liveness",
        outcome="the worker's PPID is 1 and its Slurm job is gone: an orphan of a finished job still holding "
                "~100 GB on GPU 0",
        gate_clean=False,
        kinds=("orphan",),
        not_kinds=("zombie", "d-state", "ghost-memory"),
        rung="sigterm",
        not_rungs=("reset", "reboot", "drain"),
        setup={
            "job_alive": False,
            "driver_processes": [{"gpu": 0, "pid": 2505781, "name": "sglang::scheduler_DP0_TP0_EP0", "used_mib": 100998}],
            "processes": [{"pid": 2505781, "ppid": 1, "pgid": None, "sid": None, "state": None, "user": "user",
                           "program": "sglang::scheduler_DP0_TP0_EP0", "exe": None, "cgroup": None,
                           "holds": None, "busy": None}],
        },
    ),

    # ------------------------------------------------------------------ ghost (memory held, holder not listed)
    Case(
        fixture="fuser-holder-not-in-table-gluon-nlp-338.txt",
        theme="ghost",
        outcome="a dangling python process (4411) that nvidia-smi's table did not list still held /dev/nvidia0; "
                "killing it gave the memory back",
        gate_clean=False,
        kinds=("hidden-holder",),
        not_kinds=("driver-error", "xid", "d-state"),
        rung="sigterm",
        not_rungs=("reset", "reboot", "drain"),
        setup={
            "gpus": [{"index": 0, "bus_id": None, "name": None, "memory_used_mib": None,
                      "memory_total_mib": None, "util_pct": None, "recovery_action": None}],
            "driver_processes": [{"gpu": 0, "pid": 17750, "name": "...ntu/anaconda3/envs/mxnet_p36/bin/python",
                                  "used_mib": 1576}],
            "processes": [
                {"pid": 17750, "ppid": None, "pgid": None, "sid": None, "state": None, "user": None,
                 "program": "python", "exe": None, "cgroup": None,
                 "holds": None, "busy": None},              # the reporter's evaluation, the one listed row
                {"pid": 4411, "ppid": None, "pgid": None, "sid": None, "state": None, "user": "ubuntu",
                 "program": "python", "exe": None, "cgroup": None,
                 "holds": ["/dev/nvidia0", "/dev/nvidiactl", "/dev/nvidia-uvm"], "busy": False},
            ],
        },
    ),

    # ------------------------------------------------------------------ lost GPU
    Case(
        fixture="handle-unknown-error-hoth-shine-cluster-171.txt",
        theme="lost-gpu",
        outcome="GPU 1C stopped answering after a user job failed (node drained by Slurm); lspci showed it rev ff; "
                "a physical reboot brought the node back",
        gate_clean=False,
        kinds=("driver-error",),
        not_kinds=("ghost-memory", "orphan", "hidden-holder"),
        rung="reboot",
        not_rungs=("reset", "sigterm", "sigkill", "kill-holders"),
        setup={
            "unreachable": ["00000000:1C:00.0"],
            "smi_error": "Unable to determine the device handle for GPU 0000:1C:00.0: Unknown Error",
            "lspci": {"1c:00.0": "ff", "1a:00.0": "a1", "1d:00.0": "a1"},
        },
    ),
    Case(
        fixture="lspci-rev-ff-shine-cluster-171.txt",
        theme="lost-gpu",
        outcome="the GPU at 1c (all four functions rev ff) had dropped off the bus; a physical reboot restored it",
        gate_clean=False,
        kinds=("driver-error",),
        not_kinds=("ghost-memory", "orphan"),
        rung="reboot",
        not_rungs=("reset", "sigterm", "sigkill"),
        setup={
            "unreachable": ["00000000:1C:00.0"],
            "lspci": {"1a:00.0": "a1", "1c:00.0": "ff", "1c:00.1": "ff", "1c:00.2": "ff", "1c:00.3": "ff",
                      "1d:00.0": "a1"},
        },
    ),
    Case(
        fixture="handle-unknown-error-no-space-syno-nvidia-gpu-driver-22.txt",
        theme="lost-gpu",
        outcome="a passively cooled Tesla P4 without a fan overheated and shut down; a reboot did not bring it "
                "back - a cooling (hardware) fault",
        gate_clean=False,
        kinds=("driver-error",),
        not_kinds=("ghost-memory", "orphan"),
        rung="drain",
        # the console advises drain, then reboot or power-cycle (rung "reboot"): that a reboot had
        # already failed here (a cooling fault) is not in the evidence a console can read
        rung_established=False,
        not_rungs=("reset", "sigterm", "sigkill", "resume"),
        setup={
            "unreachable": ["00000000:07:00.0"],
            "smi_error": "Unable to determine the device handle for GPU0000:07:00.0: Unknown Error",
        },
    ),
    Case(
        fixture="handle-gpu-is-lost-owod-81.txt",
        theme="lost-gpu",
        outcome="a GPU was lost mid-training; nvidia-smi's own words prescribe a reboot and the maintainer sent it "
                "to the system administrator as a driver / system fault",
        gate_clean=False,
        kinds=("driver-error",),
        not_kinds=("ghost-memory", "orphan"),
        rung="reboot",
        not_rungs=("reset", "sigterm", "sigkill", "wait"),
        setup={
            "unreachable": ["00000000:02:00.0"],
            "smi_error": "Unable to determine the device handle for GPU 0000:02:00.0: GPU is lost. "
                         "Reboot the system to recover this GPU",
        },
    ),
)

BY_FIXTURE: dict[str, Case] = {c.fixture: c for c in CASES}
