"""Frozen data model shared by sources, diagnosis, actions and the UI.

Nothing here imports Textual, asyncssh or pynvml. Values the driver cannot
report (``[N/A]``, ``[Not Supported]``, ``[Insufficient Permissions]``) are
``None``, never 0.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

# a per-GPU device file: /dev/nvidiaN (or a file named nvidiaN under a --device-glob)
_GPU_DEVICE_FILE = re.compile(r"nvidia(\d+)$")

SEVERITIES = ("info", "low", "high", "critical")
FINDING_KINDS = (
    "zombie", "d-state", "orphan", "ghost-memory", "hidden-holder", "foreign-pid",
    "probe-hung", "driver-error", "xid", "reset-blocker",
    "holder",   # a live GPU holder no other finding is about (info; where to start to free memory)
)


def severity_rank(severity: str) -> int:
    """Position of a severity in SEVERITIES; unknown words rank lowest."""
    try:
        return SEVERITIES.index(severity)
    except ValueError:
        return -1


@dataclass(frozen=True)
class MigInstance:
    """One MIG device inside a GPU in MIG mode (from `nvidia-smi -L` or NVML)."""
    gpu_index: int
    profile: str            # e.g. "1g.12gb"
    uuid: str
    device_index: int | None = None


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


@dataclass(frozen=True)
class ThreadInfo:
    """A thread of interest (today: threads in D state)."""
    tid: int
    state: str
    wchan: str | None = None
    name: str | None = None


@dataclass(frozen=True)
class Proc:
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

    @property
    def holds_devices(self) -> bool:
        return bool(self.device_files)

    @property
    def device_gpus(self) -> tuple[int, ...]:
        """GPU indices of the per-GPU device files (/dev/nvidiaN) this process holds open."""
        found = {int(m.group(1)) for f in self.device_files if (m := _GPU_DEVICE_FILE.search(f))}
        return tuple(sorted(found))

    @property
    def threads_in_d(self) -> int:
        return len(self.d_threads)

    @property
    def is_gpu_holder(self) -> bool:
        return bool(self.gpu_memory_mib) or self.holds_devices

    @property
    def gpu_memory_total_mib(self) -> int:
        return sum(v for v in self.gpu_memory_mib.values() if v)


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
    """One line of an incident's JSON-lines file (the README's "Incident timeline" section is the contract)."""
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
    # added by record-before-effect (README "Incident timeline"): an `action` names what it is
    # sent to; the `observation` that closes it says so with `outcome: true`
    targets: Sequence[Mapping[str, Any]] | None = None   # [{"pid", "start_ticks", "create_time", "name"}]
    outcome: bool | None = None
    # a check's output summed up in a few lines (holders per process, threads in D, memory per
    # read), worked out from the whole output when it ran: `output` itself may be cut
    digest: Sequence[str] | None = None


@dataclass(frozen=True)
class ActionRecord:
    """A rung applied to a node, remembered so diagnosis can judge teardown windows."""
    rung: str
    ts: float
    node: str | None = None
    pids: tuple[int, ...] = ()
    gpus: tuple[int, ...] = ()
