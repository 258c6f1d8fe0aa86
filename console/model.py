"""Frozen data model shared by sources, diagnosis, actions and the UI.

Nothing here imports Textual, asyncssh or pynvml. Values the driver cannot
report (``[N/A]``, ``[Not Supported]``, ``[Insufficient Permissions]``) are
``None``, never 0.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field, fields
from typing import Any, Mapping, Sequence

# a per-GPU device file: /dev/nvidiaN (or a file named nvidiaN under a --device-glob)
_GPU_DEVICE_FILE = re.compile(r"nvidia(\d+)$")

SEVERITIES = ("info", "low", "high", "critical")
FINDING_KINDS = (
    "zombie", "d-state", "orphan", "ghost-memory", "hidden-holder", "foreign-pid",
    "probe-hung", "driver-error", "xid", "reset-blocker",
    "holder",   # a live GPU holder no other finding is about (info; where to start to free memory)
    "recovery-action",   # the driver's current recovery action for a GPU (reset, reboot, drain, ...)
    "idle-memory",   # a fleet GPU held memory at 0 % utilisation for the whole suspicion window (Prometheus)
    "respawn",       # a parent started again what an action killed (its new children hold the GPU)
    "cuda-ipc",      # an importer kept memory a dead exporter shared through CUDA IPC
    "fabric-not-ready",      # the NVLink fabric manager has not (or not successfully) set a GPU up
    "latched-utilisation",   # ~100 % utilisation with no memory and no process: telemetry, not a hang
    "gpu-health",    # a GPU hot while it idles, or its PCIe link narrower than its slot (low; hardware)
    "row-remap-pending",     # a row remap waits for a reset (Ampere and later): reset once nothing holds the GPU
    "row-remap-failure",     # a row remap failed: drain the node, the GPU wants inspection or replacing
    "retired-pages-pending",  # pages wait to be retired (before Ampere): as a pending remap
    "firmware-boot",         # the GPU's firmware could not start (WPR2 already up, RmInitAdapter failed): reboot
    "mps-server",            # the driver charges the MPS server: its clients' memory, ended through MPS control
    "blockers-off",          # what B stopped is still off: restore it (or decline in the timeline)
)


def severity_rank(severity: str) -> int:
    """Position of a severity in SEVERITIES; unknown words rank lowest."""
    try:
        return SEVERITIES.index(severity)
    except ValueError:
        return -1


#: the GPU recovery actions, in NVML's order (nvmlDeviceGpuRecoveryAction_t: NONE 0, GPU_RESET 1,
#: NODE_REBOOT 2, DRAIN_P2P 3, DRAIN_AND_RESET 4, and in newer drivers RECOVER_IMEX_DOMAIN 5,
#: BUS_RESET 6, SYSTEM_REBOOT 7): the values ``Gpu.recovery_action`` takes
GPU_RECOVERY_ACTIONS = ("none", "gpu_reset", "node_reboot", "drain_p2p", "drain_and_reset",
                        "recover_imex_domain", "bus_reset", "system_reboot")
#: the same actions in the driver's own words (nvidia-smi -q, Xid 154 lines)
RECOVERY_ACTION_WORDS = ("None", "GPU Reset", "Node Reboot", "Drain P2P", "Drain and Reset",
                         "Recover IMEX Domain", "Bus Reset", "System Reboot")
# what nvidia-smi (``--query-gpu=gpu_recovery_action``: "None", "Reset") and Xid 154 lines ("GPU Reset
# Required", "Node Reboot Required", "Drain P2P", "Drain and Reset"; newer drivers "PF FLR", "OS Reboot")
# print, lower case, with single spaces
_RECOVERY_SYNONYMS = {
    "none": "none", "reset": "gpu_reset", "gpu reset": "gpu_reset", "gpu reset required": "gpu_reset",
    "pf flr": "gpu_reset", "reboot": "node_reboot", "node reboot": "node_reboot",
    "node reboot required": "node_reboot", "drain p2p": "drain_p2p", "drain and reset": "drain_and_reset",
    "recover imex domain": "recover_imex_domain", "imex domain recovery": "recover_imex_domain",
    "bus reset": "bus_reset", "system reboot": "system_reboot", "os reboot": "system_reboot",
}
_NA_WORDS = {"", "n/a", "[n/a]", "[not supported]", "not supported", "[insufficient permissions]",
             "[unknown error]", "[requested functionality has been deprecated]"}


def recovery_token(words: object) -> str | None:
    """The driver's words for a recovery action -> one of GPU_RECOVERY_ACTIONS; words it does not
    know stay as they are (lower case, one line, at most 60 characters); None where the driver
    does not say (``[N/A]``, ``[Not Supported]``, nothing)."""
    text = " ".join(str(words or "").split()).lower()
    if text in _NA_WORDS:
        return None
    token = text.replace(" ", "_")
    if token in GPU_RECOVERY_ACTIONS:
        return token
    return _RECOVERY_SYNONYMS.get(text, "".join(c for c in text if c.isprintable())[:60] or None)


def recovery_words(token: str | None) -> str:
    """'GPU Reset' for "gpu_reset"; an unknown token as it is; "unknown" for None."""
    if token is None:
        return "unknown"
    if token in GPU_RECOVERY_ACTIONS:
        return RECOVERY_ACTION_WORDS[GPU_RECOVERY_ACTIONS.index(token)]
    return token


def bus_key(bus_id: str | None) -> str | None:
    """Comparable (domain, bus, device) of a PCI address: '00000000:3B:00.0' and '0000:3b:00' agree."""
    if not bus_id:
        return None
    text = bus_id.strip().removeprefix("PCI:").split(".")[0]
    parts = text.split(":")
    if len(parts) == 2:
        parts = ["0"] + parts
    if len(parts) != 3:
        return None
    try:
        dom, bus, dev = (int(p, 16) for p in parts)
    except ValueError:
        return None
    return f"{dom:x}:{bus:02x}:{dev:02x}"


@dataclass(frozen=True)
class MemoryRepair:
    """What the driver says of a GPU's memory repair: row remapping (Ampere and later: a remap
    waits for a GPU reset to take effect; a failed one means the GPU should be replaced) and page
    retirement (older GPUs: pages pending retirement wait for a reset as well). From
    ``nvidia-smi -q -d ROW_REMAPPER,PAGE_RETIREMENT`` (console/sources/parse_repair.py) or NVML
    (nvmlDeviceGetRemappedRows, nvmlDeviceGetRetiredPagesPendingStatus). None: not reported
    (``N/A``, not supported, an older driver)."""
    remap_pending: bool | None = None
    remap_failure: bool | None = None
    rows_uncorrectable: int | None = None    # rows remapped for uncorrectable errors
    rows_correctable: int | None = None      # rows remapped for correctable errors
    pages_pending: bool | None = None        # pages pending retirement ("Pending Page Blacklist")

    @classmethod
    def from_data(cls, data: object) -> "MemoryRepair | None":
        """One from its JSON data (a follower's copy of the snapshot); a value of another type is
        None, and so is anything but a mapping."""
        if not isinstance(data, Mapping):
            return None
        out = {}
        for f in fields(cls):
            value = data.get(f.name)
            want_int = f.name.startswith("rows_")
            ok = isinstance(value, int) and not isinstance(value, bool) if want_int else isinstance(value, bool)
            out[f.name] = value if ok else None
        return cls(**out)


@dataclass(frozen=True)
class MigInstance:
    """One MIG device inside a GPU in MIG mode (from `nvidia-smi -L` or NVML).

    Its memory and GPU/compute instance ids come from NVML only (the local source): nvidia-smi's
    CSV queries do not give them, so over SSH they are None."""
    gpu_index: int
    profile: str            # e.g. "1g.12gb"
    uuid: str
    device_index: int | None = None
    gpu_instance_id: int | None = None
    compute_instance_id: int | None = None
    memory_used_mib: int | None = None
    memory_total_mib: int | None = None


@dataclass(frozen=True)
class Gpu:
    index: int
    uuid: str
    name: str
    bus_id: str
    memory_used_mib: int | None
    memory_total_mib: int | None
    utilization_pct: int | None = None
    memory_reserved_mib: int | None = None   # NVML memory v2 only
    persistence_mode: bool | None = None
    mig_mode: bool | None = None             # True when MIG is enabled
    mig_instances: tuple[MigInstance, ...] = ()
    # what the driver says it takes to recover this GPU: one of GPU_RECOVERY_ACTIONS (or the
    # driver's own words for one this console does not know); None where the driver does not
    # say (older drivers, NotSupported)
    recovery_action: str | None = None
    # row remapping / page retirement; None where not read (an older driver, not asked yet)
    memory_repair: MemoryRepair | None = None
    # health beside memory (the GPU query's HEALTH_FIELDS, or NVML); None where not reported
    temperature_c: int | None = None
    power_w: float | None = None
    clock_sm_mhz: int | None = None
    pcie_gen: int | None = None
    pcie_width: int | None = None
    ecc_uncorrected: int | None = None      # volatile: since the driver loaded
    # the link the GPU and its slot could train to (a width below it is a degraded link; the
    # generation drops by itself while the GPU idles) and the temperature the GPU slows down at
    # (NVML only: None over SSH)
    pcie_gen_max: int | None = None
    pcie_width_max: int | None = None
    temperature_slowdown_c: int | None = None
    # NVLink fabric registration on an NVSwitch system ("Completed"/"Success" when ready; None:
    # not asked, no fabric, or an nvidia-smi that does not know the fields)
    fabric_state: str | None = None
    fabric_status: str | None = None

    def __post_init__(self) -> None:
        # a Gpu rebuilt from its JSON data (console/incident/mirror.py: Gpu(**fields)) gets its
        # MemoryRepair back, not the dict it was written as
        if self.memory_repair is not None and not isinstance(self.memory_repair, MemoryRepair):
            object.__setattr__(self, "memory_repair", MemoryRepair.from_data(self.memory_repair))

    def mig_instance(self, gpu_instance_id: int | None, compute_instance_id: int | None = None
                     ) -> MigInstance | None:
        """The MIG device with these GPU (and compute) instance ids, or None."""
        if gpu_instance_id is None:
            return None
        for m in self.mig_instances:
            if m.gpu_instance_id == gpu_instance_id and (
                    compute_instance_id is None or m.compute_instance_id in (None, compute_instance_id)):
                return m
        return None


@dataclass(frozen=True)
class Cgroup:
    """Where a process runs, read from /proc/PID/cgroup: a container (and its Kubernetes pod), or
    a systemd service. Every field may be None: the path says what it says."""
    path: str                           # the cgroup path the rest was read from
    runtime: str | None = None          # "docker", "containerd", "cri-o", "podman", or None
    container_id: str | None = None     # the container's id (hex)
    pod_uid: str | None = None          # a Kubernetes pod's UID
    unit: str | None = None             # a systemd service ("nvidia-dcgm.service"), outside containers

    @property
    def in_container(self) -> bool:
        return self.container_id is not None or self.pod_uid is not None

    @property
    def kubernetes(self) -> bool:
        return self.pod_uid is not None

    def describe(self, short: bool = False) -> str:
        """'container 4f2a0c1e9b7d… (docker)', 'pod 9d1e2c3b-…-0a1b2c3d4e5f, container 2b3c…
        (containerd)' ('pod 9d1e2c3b…' when ``short``), 'systemd unit nvidia-dcgm.service', or ''."""
        parts = []
        if self.pod_uid:
            parts.append(f"pod {self.pod_uid[:8]}…" if short else f"pod {self.pod_uid}")
        if self.container_id:
            short = self.container_id[:12] + ("…" if len(self.container_id) > 12 else "")
            parts.append(f"container {short}" + (f" ({self.runtime})" if self.runtime else ""))
        elif self.runtime and parts:
            parts[-1] += f" ({self.runtime})"
        if parts:
            return ", ".join(parts)
        return f"systemd unit {self.unit}" if self.unit else ""


@dataclass(frozen=True)
class ThreadInfo:
    """A thread of interest (today: threads in D state)."""
    tid: int
    state: str
    wchan: str | None = None
    name: str | None = None


class _ProcMemo:
    """Values worked out once per Proc object and kept on it (a Proc has slots, no __dict__:
    a real-size node's 2,000 of them, 256 nodes, are most of the console's memory): the GPUs of
    its device files, its daemon role (console/diagnosis/roles.py). Not fields: not compared,
    not in its JSON."""
    __slots__ = ("_device_gpus", "_daemon_role")


@dataclass(frozen=True, slots=True)
class Proc(_ProcMemo):
    pid: int
    ppid: int
    state: str                      # leader state letter: R S D Z T I X ...
    user: str | None
    name: str
    cmdline: str
    create_time: float | None = None            # epoch seconds (PID-reuse guard)
    start_ticks: int | None = None              # /proc/PID/stat field 22 (remote guard)
    gpu_memory_mib: Mapping[str, int | None] = field(default_factory=dict)  # GPU index (str) -> MiB
    device_files: tuple[str, ...] = ()          # open handles matching --device-glob
    d_threads: tuple[ThreadInfo, ...] = ()
    num_threads: int | None = None
    pid_ns: str | None = None                   # e.g. "pid:[4026531836]"
    cgroup: Cgroup | None = None                # read for GPU holders only (container / unit)
    pgid: int | None = None                     # process group (/proc/PID/stat field 5)
    sid: int | None = None                      # session (field 6): setsid starts a new one
    # SM utilisation the driver reports for this process (nvidia-smi pmon over SSH, NVML's
    # process utilisation locally): the busiest of its GPUs, in %; None where not reported
    # (not asked yet, not supported, no sample, not a process the driver lists)
    gpu_sm_pct: int | None = None
    # CPU time the process has used, in clock ticks (/proc/PID/stat utime + stime, fields 14 and
    # 15; psutil's cpu_times locally, in ticks of 1/100 s): a job whose ticks rise is computing
    cpu_ticks: int | None = None
    # the executable (readlink /proc/PID/exe; " (deleted)" kept where the kernel says so): read
    # for GPU holders only, None where unread or unreadable (another user's, without root). A
    # role rests on it, not on the name: a renamed process keeps its executable
    exe: str | None = None
    # a SIGKILL sent but not taken (bit 9 of /proc/PID/status ShdPnd or SigPnd): read for GPU
    # holders and processes with a thread in D; None where unread. Pending while the process sits
    # in D (or in R inside the driver): no further signal helps
    sigkill_pending: bool | None = None

    @property
    def holds_devices(self) -> bool:
        return bool(self.device_files)

    @property
    def device_gpus(self) -> tuple[int, ...]:
        """GPU indices of the per-GPU device files (/dev/nvidiaN) this process holds open
        (worked out once per object: the parser hands back the same object while nothing changed)."""
        known = getattr(self, "_device_gpus", None)
        if known is None:
            found = {int(m.group(1)) for f in self.device_files if (m := _GPU_DEVICE_FILE.search(f))}
            known = tuple(sorted(found))
            object.__setattr__(self, "_device_gpus", known)
        return known

    @property
    def threads_in_d(self) -> int:
        return len(self.d_threads)

    @property
    def is_gpu_holder(self) -> bool:
        return bool(self.gpu_memory_mib) or self.holds_devices

    @property
    def gpu_memory_total_mib(self) -> int:
        return sum(v for v in self.gpu_memory_mib.values() if v)


_PROC_FIELDS = tuple(f.name for f in fields(Proc))
_PROC_FIELD_SET = frozenset(_PROC_FIELDS)


def proc_with(proc: Proc, **changes: Any) -> Proc:
    """``dataclasses.replace(proc, **changes)`` at about half its cost (the parser credits the
    driver's memory and SM share to a node's GPU processes every poll): a Proc has no
    ``__post_init__`` to run, and the new object's memo slots are unset, as replace leaves them."""
    if not changes.keys() <= _PROC_FIELD_SET:
        raise TypeError(f"Proc has no field(s) {', '.join(sorted(changes.keys() - _PROC_FIELD_SET))}")
    new = object.__new__(Proc)
    put = object.__setattr__
    for name in _PROC_FIELDS:
        put(new, name, changes[name] if name in changes else getattr(proc, name))
    return new


@dataclass(frozen=True)
class DriverProc:
    """A process as the driver lists it (nvidia-smi --query-compute-apps / NVML)."""
    pid: int
    gpu_index: int | None
    gpu_uuid: str
    used_memory_mib: int | None
    name: str
    # False: the PID exists here but is another process (a host PID seen from a container that
    # collides with a local one); None: not decided (treated as here when /proc has the PID)
    local: bool | None = None
    # MIG: the GPU instance and compute instance it runs in (NVML only; None without MIG)
    gpu_instance_id: int | None = None
    compute_instance_id: int | None = None


@dataclass(frozen=True)
class PciGpu:
    """An NVIDIA GPU the kernel module knows (a directory of /proc/driver/nvidia/gpus/, named by its
    bus id), and whether the device still answers on the PCI bus: its config space's first bytes
    read (True), read all ones, "rev ff" in lspci (False: fallen off the bus), or could not be
    read (None)."""
    bus_id: str
    present: bool | None = None


@dataclass(frozen=True)
class Finding:
    kind: str
    severity: str
    summary: str
    next_step: str
    pids: tuple[int, ...] = ()
    gpus: tuple[int, ...] = ()
    reason: str = ""
    evidence: Mapping[str, Any] = field(default_factory=dict)
    since: float | None = None
    # machine-readable next step: a ladder rung ("wait", "sigterm", "sigkill", "kill-holders",
    # "clear-blockers", "reset", "reboot") or None when nothing is to be done
    rung: str | None = None


@dataclass(frozen=True)
class NodeSnapshot:
    name: str
    taken_at: float                              # epoch seconds
    error: str | None = None
    warnings: tuple[str, ...] = ()
    probe_ms: float | None = None
    gpus: tuple[Gpu, ...] = ()
    processes: tuple[Proc, ...] = ()
    driver_processes: tuple[DriverProc, ...] = ()
    lost_gpus: tuple[str, ...] = ()              # bus ids the driver reported as lost
    kernel_log: tuple[str, ...] = ()             # NVRM Xid lines, oldest first
    findings: tuple[Finding, ...] = ()
    hostname: str | None = None
    own_pids: tuple[int, ...] = ()               # the console itself / its SSH session on this node
    driver_version: str | None = None
    # /sys/module/nvidia_drm/parameters/modeset: True "Y" (the kernel's DRM client holds the GPUs:
    # a reset blocker), False "N", None when nvidia_drm is not loaded or it could not be read
    drm_modeset: bool | None = None
    # /dev/nvidia-nvswitch* device files: an NVSwitch system (its NVLink peers need the fabric
    # manager, or must be reset together); None when not read
    nvswitches: int | None = None
    # the NVIDIA GPUs the kernel module knows (/proc/driver/nvidia/gpus, the PCI bus): what the
    # GPU count nvidia-smi/NVML gives is compared with; None when not read
    pci_gpus: tuple[PciGpu, ...] | None = None
    # did the driver's process list answer (nvidia-smi --query-compute-apps exit 0, NVML's
    # process calls)? False: it failed, so no list of who holds memory; None: not asked
    driver_list_ok: bool | None = None
    # when the node booted (epoch seconds, /proc/stat btime): kernel-log lines carry seconds
    # since boot; None when not read
    boot_time: float | None = None
    # a node not on screen keeps only the processes a verdict rests on (the watched set,
    # sources/watch.py ``kept``): then the count of every process it has; None: ``processes``
    # is the whole table
    table_size: int | None = None

    def proc(self, pid: int) -> Proc | None:
        for p in self.processes:
            if p.pid == pid:
                return p
        return None

    def gpu(self, index: int) -> Gpu | None:
        for g in self.gpus:
            if g.index == index:
                return g
        return None

    def driver_processes_here(self) -> tuple[DriverProc, ...]:
        """The driver's processes that are the /proc processes of the same PID on this node
        (worked out once per snapshot: the ladder asks for every holder candidate)."""
        cached = self.__dict__.get("_driver_here")
        if cached is None:
            pids = {p.pid for p in self.processes}
            cached = tuple(d for d in self.driver_processes if d.local is not False and d.pid in pids)
            object.__setattr__(self, "_driver_here", cached)
        return cached

    @property
    def holders(self) -> tuple[Proc, ...]:
        return tuple(p for p in self.processes if p.is_gpu_holder)


@dataclass(frozen=True)
class CommandResult:
    """What running one shell command on a node gave back."""
    command: str
    rc: int | None                 # None: did not finish (timed out / connection lost)
    stdout: str = ""
    stderr: str = ""
    duration_s: float = 0.0
    error: str | None = None       # one human line when the command could not run

    @property
    def ok(self) -> bool:
        return self.rc == 0 and self.error is None

    @property
    def output(self) -> str:
        return (self.stdout + (("\n" if self.stdout and self.stderr else "") + self.stderr)).strip("\n")


TIMELINE_KINDS = ("hypothesis", "check", "action", "observation", "verdict", "note")
VERDICTS = ("confirmed", "refuted", "inconclusive")


@dataclass(frozen=True)
class TimelineEntry:
    """One line of an incident's JSON-lines file (docs/timeline.md is the contract)."""
    ts: str
    seq: int
    by: str
    kind: str
    node: str | None = None
    text: str = ""
    hypothesis: int | None = None
    action: int | None = None
    command: str | None = None
    rc: int | None = None
    output: str | None = None
    gpu_memory_before: Mapping[str, int | None] | None = None
    gpu_memory_after: Mapping[str, int | None] | None = None
    freed_mib: int | None = None
    seconds_to_free: float | None = None
    verdict: str | None = None
    # added by record-before-effect (docs/timeline.md): an `action` names what it is
    # sent to; the `observation` that closes it says so with `outcome: true`
    targets: Sequence[Mapping[str, Any]] | None = None   # [{"pid", "start_ticks", "create_time", "name"}]
    outcome: bool | None = None
    # a check's output summed up in a few lines (holders per process, threads in D, memory per
    # read), worked out from the whole output when it ran: `output` itself may be cut
    digest: Sequence[str] | None = None
    # an `action` names its rung (sigterm, clear-blockers, reset, …: readers never work it out from
    # the title) and the GPUs it was aimed at; absent in files written before (docs/timeline.md)
    rung: str | None = None
    gpus: Sequence[int] | None = None
    # a console's "console started watching" and "console stopped" notes name the process that
    # writes the incident ({"pid", "host", "start_ticks"}): one that died without a word is told
    # apart from one still attached (console/incident/consoles.py)
    console: Mapping[str, Any] | None = None
    # what the console itself diagnosed (docs/timeline.md): a node's first reading and every
    # change of its findings carry them ([{"kind", "severity", "summary", "pids", "gpus",
    # "evidence"}]); the first reading also names the node (``facts``: driver, GPUs, kernel,
    # whether it is a simulated demo node) and what holds its memory (``workload``: per owner,
    # job and container, the holders' commands). Absent in files written before
    findings: Sequence[Mapping[str, Any]] | None = None
    facts: Mapping[str, Any] | None = None
    workload: Sequence[Mapping[str, Any]] | None = None


@dataclass(frozen=True)
class ActionRecord:
    """A rung applied to a node, remembered so diagnosis can judge teardown windows."""
    rung: str
    ts: float
    node: str | None = None
    pids: tuple[int, ...] = ()
    gpus: tuple[int, ...] = ()
    #: (pid, parent, name) of each process the signal reached, as planned: a parent that starts
    #: the same program again after it is a respawn (console/diagnosis/respawn.py)
    family: tuple[tuple[int, int | None, str], ...] = ()


# --- the fleet: per-node GPU telemetry read from Prometheus (dcgm-exporter metrics) -------------

@dataclass(frozen=True)
class FleetGpu:
    """One GPU of a fleet node, as dcgm-exporter's series describe it (labels ``gpu``, ``UUID``,
    ``modelName``; ``namespace``/``pod`` when the exporter maps pods). Values Prometheus does not
    have are None, never 0."""
    index: int | None
    uuid: str | None = None
    model: str | None = None
    memory_used_mib: float | None = None        # DCGM_FI_DEV_FB_USED
    memory_total_mib: float | None = None       # FB_USED + FB_FREE
    utilization_pct: float | None = None        # DCGM_FI_DEV_GPU_UTIL
    last_xid: int | None = None                 # DCGM_FI_DEV_XID_ERRORS (0: none)
    pod: str | None = None                      # "namespace/pod" when the labels are there
    # the least memory the GPU held over the suspicion window when its utilisation stayed 0 for
    # all of it (min_over_time of FB_USED); None when it was busy, or its data is younger
    idle_held_mib: float | None = None


@dataclass(frozen=True)
class FleetNode:
    """One node of the fleet (the ``Hostname`` label). ``suspicion`` is None, or one line saying
    why the node is suspect (memory held at zero utilisation for the window, an Xid);
    ``suspicion_rank`` orders suspects (higher first; 0 for none)."""
    hostname: str
    gpus: tuple[FleetGpu, ...] = ()
    suspicion: str | None = None
    suspicion_rank: int = 0


@dataclass(frozen=True)
class FleetSnapshot:
    """One round of fleet queries: every node the queries returned, suspects first."""
    source: str                                  # the target as given (prometheus://HOST:PORT)
    taken_at: float                              # epoch seconds
    nodes: tuple[FleetNode, ...] = ()
    error: str | None = None                     # one human line when the round failed as a whole
    warnings: tuple[str, ...] = ()
    query_ms: float | None = None
    window_s: float | None = None                # the suspicion window the round asked about
