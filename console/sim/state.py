"""The mutable pieces of one simulated machine: processes, GPUs, driver contexts.

Plain data; the rules that move it (signals, teardown, reset) live in host.py.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

#: what ``demo`` and ``simulate`` run when no scenario is named
DEFAULT_SCENARIO = "seed"
HOST_PID_NS = "pid:[4026531836]"        # the initial PID namespace's inode on every Linux
CLK_TCK = 100

# phases of a process
ALIVE = "alive"          # running normally
EXITING = "exiting"      # killed: leader is a zombie, one thread still in the driver (D)
ZOMBIE = "zombie"        # dead, waiting for its parent to reap it
GONE = "gone"            # reaped: no longer in /proc


@dataclass(frozen=True)
class GroundTruth:
    """What really happened in a scenario, and the shortest correct way out."""
    root_cause: str
    shortest_path: tuple[str, ...]     # rung ids (console/rungs.py)
    end_state: str



@dataclass(frozen=True)
class Scenario:
    """One incident (the catalogue is scenarios.py)."""
    name: str
    title: str
    truth: GroundTruth
    build: Callable[[Any], None]       # puts the incident on a fresh SimHost (host.py)
    uptime_s: float = 12 * 86400 + 3 * 3600 + 17 * 60


@dataclass(eq=False)
class SimProc:
    pid: int
    ppid: int
    comm: str                       # as the kernel keeps it (15 chars at most)
    args: str                       # /proc/PID/cmdline joined by spaces; "" for kernel threads
    user: str = "root"
    uid: int = 0
    start: float = 0.0              # epoch seconds
    state: str = "S"                # alive leader state: R S I D, or "spin" (alternates R and S)
    wchan: str = "do_epoll_wait"    # where the alive leader sleeps
    nthreads: int = 1
    thread_names: tuple[str, ...] = ()   # names for threads 2..n (cycled)
    kthread: bool = False
    pgrp: int = 0
    sid: int = 0
    tty: str = "?"
    pid_ns: str = HOST_PID_NS
    fds: list[str] = field(default_factory=list)       # device files open (links in /proc/PID/fd)
    ports: list[tuple[str, int]] = field(default_factory=list)   # listening TCP (address, port)
    vsz_kb: int = 0
    rss_kb: int = 0
    cpu: float = 0.0                # fraction of one CPU while alive
    utime0: int = 0                 # ticks of user time at ``start`` + cpu * age
    # signal behaviour
    ignored: frozenset[str] = frozenset()      # SIG_IGN (e.g. HUP under nohup)
    caught: frozenset[str] = frozenset()       # a handler is installed
    on_term: str = "default"        # "default" (die), "hung" (handler never runs), "graceful"
    grace_s: float = 0.0            # graceful: seconds from the signal to exit
    group: str | None = None        # graceful exits take the whole group down
    pdeathsig: str | None = None    # signal sent when the parent dies (prctl PR_SET_PDEATHSIG)
    teardown_s: float = 0.0         # after death, seconds the driver needs before contexts are freed
    teardown_wchan: str = ""
    teardown_thread: str = ""       # name of the thread left in D during teardown
    reaps: bool = True              # reaps its dead children promptly
    unit: str | None = None         # systemd unit that runs it
    cgroup: str | None = None       # /proc/PID/cgroup as it reads (default: from unit / kthread)
    exe: str | None = None          # readlink /proc/PID/exe (default: from its command line, procfs.exe_path)
    sigkill_pending: bool = False   # a SIGKILL sent and not taken (SigPnd and ShdPnd show bit 8)
    # dynamic
    phase: str = ALIVE
    stopped: bool = False
    died_at: float | None = None
    exit_signal: str | None = None
    stuck_tid: int | None = None

    @property
    def alive(self) -> bool:
        return self.phase == ALIVE

    @property
    def visible(self) -> bool:
        return self.phase != GONE


@dataclass(eq=False)
class SimContext:
    """GPU memory the driver keeps for a client until every holder lets go."""
    gpu: int
    mib: int
    driver_pid: int                 # the PID the driver reports (host namespace)
    name: str                       # the process name nvidia-smi reports
    holders: set[int] = field(default_factory=set)   # PIDs (our namespace) whose exit releases it
    listed: bool = True             # False: the driver keeps the memory but lists no process


@dataclass(eq=False)
class SimMps:
    """An MPS control daemon and its servers: the driver lists each server (its context) in place
    of its clients; ``clients`` is what each server's clients have of that memory (MiB)."""
    control_pid: int
    servers: dict[int, SimContext] = field(default_factory=dict)        # server PID -> its context
    clients: dict[int, dict[int, int]] = field(default_factory=dict)    # server PID -> {client PID: MiB}
    hang: bool = False              # a wedged server: the control program never answers
    terminate_s: float = 1.5        # terminate_client: the client's work ends and its memory comes back


@dataclass(eq=False)
class SimGpu:
    index: int
    uuid: str
    name: str
    bus_id: str                     # 00000000:41:00.0
    total_mib: int
    reserved_mib: int = 4           # used with no client (driver/NVML reserved)
    stuck_mib: int = 0              # memory nobody owns any more (only a reset frees it)
    persistence: bool = True
    util_busy: int = 0              # utilization.gpu while a live context is busy
    lost: bool = False
    reset_required: bool = False
    # row remapping (nvidia-smi -q -d ROW_REMAPPER): rows remapped so far, a remap waiting for a
    # reset (a reset or reboot applies it), a remap that failed; pages pending retirement: None on
    # a GPU that remaps rows (nvidia-smi prints N/A), else whether pages wait for a reset
    rows_correctable: int = 0
    rows_uncorrectable: int = 0
    remap_pending: bool = False
    # the link and the errors nvidia-smi reports beside temperature and power
    pcie_gen: int = 5
    pcie_width: int = 16
    pcie_gen_max: int = 5
    pcie_width_max: int = 16
    ecc_uncorrected: int = 0
    # NVLink fabric registration on an NVSwitch system (host.nvswitches): what the fabric manager set
    fabric_state: str = "Completed"
    fabric_status: str = "Success"
    remap_failure: bool = False
    pages_pending: bool | None = None
    temp_c: int = 34
    power_w: float = 78.0
    serial: str = ""
    # the PCI side: its vendor:device ID (the first bytes of its config space; a lost GPU reads all
    # ones) and whether the kernel module lists it in /proc/driver/nvidia/gpus
    pci_id: str = "10de:2bb5"
    in_kernel_tree: bool = True

    @property
    def pci_short(self) -> str:
        """0000:41:00 as NVRM Xid lines print it."""
        return self.bus_id[4:-2]

    @property
    def pci_dir(self) -> str:
        """0000:41:00.0: its name in /proc/driver/nvidia/gpus and /sys/bus/pci/devices."""
        return self.bus_id[4:].lower()

    def config_head(self) -> bytes:
        """The first four bytes of its PCI config space: vendor and device ID, little-endian; all
        ones once it is lost (fallen off the bus: lspci's "rev ff")."""
        if self.lost:
            return b"\xff" * 4
        vendor, device = (int(x, 16) for x in self.pci_id.split(":"))
        return vendor.to_bytes(2, "little") + device.to_bytes(2, "little")
