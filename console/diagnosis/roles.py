"""What a process holding a GPU is: a workload (a job), the node's infrastructure, a GPU monitor,
the console itself — and the evidence for it.

A role rests on what a user cannot forge by renaming a process: who owns it, the executable the
kernel says it runs (/proc/PID/exe), the cgroup it was placed in (a systemd service, a Kubernetes
pod: only root and the orchestrator create those), and the memory the driver lists for it. The
name only says which entry of the catalogue to hold the evidence against. A process named like
a daemon whose evidence contradicts it (another user, another executable) is a workload; one
whose evidence cannot be read is *unconfirmed*, and unconfirmed is not infrastructure.

One home for the catalogue of the node's own GPU programs (the reset blockers among them:
``BLOCKER_DAEMONS``, in the order B stops them) and for a process's readable name. Pure.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Iterable

from console.model import Proc
from console.sources.parse import program_name

WORKLOAD = "workload"
INFRASTRUCTURE = "infrastructure"
MONITOR = "monitor"
CONSOLE = "console"
KERNEL = "kernel"
UNCONFIRMED = "unconfirmed"
ROLES = (WORKLOAD, INFRASTRUCTURE, MONITOR, CONSOLE, KERNEL, UNCONFIRMED)


# ---------------------------------------------------------------- names

def program_of(proc: Proc) -> str:
    """The program a process runs: argv[0]'s basename, else its (possibly truncated) comm."""
    return program_name(proc.cmdline) if proc.cmdline.strip() else proc.name


def label(proc: Proc) -> str:
    """A readable name: comm is cut at 15 characters, renamed workers show in argv."""
    words = proc.cmdline.split()
    if words and len(proc.name) >= 15:
        for word in (words[0], os.path.basename(words[0])):
            if word.startswith(proc.name):
                return word
    return proc.name or (words[0] if words else "?")


def exe_name(proc: Proc) -> str | None:
    """The basename of the executable the kernel says the process runs (None: not read)."""
    if not proc.exe:
        return None
    return os.path.basename(proc.exe.removesuffix(" (deleted)").rstrip("/")) or None


_PYTHON = "python*"


def _exe_fits(name: str, allowed: tuple[str, ...]) -> bool:
    return any(name == a or (a == _PYTHON and name.startswith("python")) for a in allowed)


# ---------------------------------------------------------------- the catalogue

@dataclass(frozen=True)
class BlockerDaemon:
    """A program of the node's own that holds the GPUs (NVML handles, device files) all the time:
    its hold makes `nvidia-smi -r` refuse ("In use by another client"), it is never a leak, and a
    supervisor (systemd, a DaemonSet) starts it again when it is killed."""
    program: str                # argv[0] basename (a prefix of it where ``prefix``)
    what: str                   # a few words
    stop: str | None            # the command that usually stops it; None: none known (its PID is sent TERM)
    unit: str | None = None     # the systemd unit it usually runs as (the blockers check asks systemctl)
    needs_device: bool = False  # a blocker only while it holds /dev/nvidia* (a display server)
    prefix: bool = False        # every program whose name starts with ``program`` (NVSM's services)
    #: the users the real daemon runs as (None: any, a display server runs as the session's user);
    #: a process of another user merely named like it is no blocker, and B never stops the real
    #: service because of it
    users: tuple[str, ...] | None = ("root",)
    #: the executables it runs as (basenames; "python*": any Python): a process whose executable
    #: is another is not this daemon, whatever its name. Empty: the program's own name
    exes: tuple[str, ...] = ()
    kubernetes: bool = False    # usually a DaemonSet pod (the GPU operator's components)
    #: the GPU operator's node label that makes its pod leave the node (``=false``) and come back
    #: (``=true``): how such a daemon is stopped and restarted without its DaemonSet fighting it
    operator_label: str | None = None

    def exe_names(self) -> tuple[str, ...]:
        return self.exes or (self.program,)


DISPLAY_MANAGER_STOP = "systemctl stop display-manager"
#: the MPS control daemon: it is asked on its stdin (its servers are never signalled)
MPS_CONTROL = "nvidia-cuda-mps-control"
#: how long one command to the MPS control daemon may take: a wedged MPS server can keep it from
#: ever answering (every command to it, the read-only check's and the actions', runs under timeout)
MPS_TIMEOUT_S = 10


def mps_line(words: str, timeout_s: int | None = MPS_TIMEOUT_S) -> str:
    """One command to the MPS control daemon on its stdin, as a shell reads it, under ``timeout``
    (``timeout_s`` None: bare, as the advice names it)."""
    return f"echo {words} | " + (f"timeout {timeout_s} " if timeout_s else "") + MPS_CONTROL


_DISPLAY_EXES = ("Xorg", "X", "Xwayland", "gnome-shell")
#: in the order B stops them: the display servers, the clients and the Kubernetes components
#: first, the persistence daemon last
BLOCKER_DAEMONS: tuple[BlockerDaemon, ...] = (
    *(BlockerDaemon(prog, "display server", DISPLAY_MANAGER_STOP, needs_device=True, users=None,
                    exes=_DISPLAY_EXES) for prog in _DISPLAY_EXES),
    BlockerDaemon(MPS_CONTROL, "MPS control daemon", mps_line("quit")),
    BlockerDaemon("nvidia-cuda-mps-server", "MPS server", mps_line("quit")),
    BlockerDaemon("nvidia-device-plugin", "Kubernetes device plugin", None, kubernetes=True,
                  operator_label="nvidia.com/gpu.deploy.device-plugin"),
    BlockerDaemon("gpu-feature-discovery", "GPU feature discovery", None, kubernetes=True,
                  operator_label="nvidia.com/gpu.deploy.gpu-feature-discovery"),
    BlockerDaemon("nvidia-mig-manager", "MIG manager", None, kubernetes=True,
                  operator_label="nvidia.com/gpu.deploy.mig-manager",
                  exes=("nvidia-mig-manager", "nvidia-mig-parted", "bash", "sh")),
    BlockerDaemon("gpu-kubelet-plugin", "Kubernetes DRA driver", None, kubernetes=True),
    BlockerDaemon("compute-domain-kubelet-plugin", "Kubernetes DRA driver (compute domains)", None,
                  kubernetes=True),
    BlockerDaemon("dcgm-exporter", "DCGM exporter", None, kubernetes=True,
                  operator_label="nvidia.com/gpu.deploy.dcgm-exporter"),
    BlockerDaemon("nv-hostengine", "DCGM host engine", "systemctl stop nvidia-dcgm", unit="nvidia-dcgm"),
    BlockerDaemon("nvsm", "NVSM", "systemctl stop nvsm", unit="nvsm", prefix=True, exes=(_PYTHON, "nvsm")),
    BlockerDaemon("nvidia-imex", "IMEX daemon", "systemctl stop nvidia-imex", unit="nvidia-imex"),
    BlockerDaemon("nv-fabricmanager", "fabric manager", "systemctl stop nvidia-fabricmanager",
                  unit="nvidia-fabricmanager"),
    BlockerDaemon("nvidia-persistenced", "persistence daemon", "systemctl stop nvidia-persistenced",
                  unit="nvidia-persistenced", users=("root", "nvidia-persistenced")),   # --user drops to it
)


@dataclass(frozen=True)
class Monitor:
    """A GPU monitor: it reads NVML (an open /dev/nvidiactl, often /dev/nvidiaN) and never makes a
    CUDA context, so the driver lists no memory for it. It blocks a reset while it runs; being an
    operator's tool, not a service, it may be signalled like any holder."""
    program: str
    exes: tuple[str, ...]


MONITORS: tuple[Monitor, ...] = (
    Monitor("nvitop", (_PYTHON, "nvitop")), Monitor("gpustat", (_PYTHON, "gpustat")),
    Monitor("nvtop", ("nvtop",)), Monitor("nvidia-smi", ("nvidia-smi",)),
    Monitor("nvidia-settings", ("nvidia-settings",)), Monitor("dcgmi", ("dcgmi",)),
    Monitor("glances", (_PYTHON, "glances")), Monitor("btop", ("btop",)),
)


# ---------------------------------------------------------------- a role, with its evidence

@dataclass(frozen=True)
class Role:
    kind: str                       # one of ROLES
    what: str                       # "job", "Kubernetes device plugin", "GPU monitor (nvtop)", ...
    why: tuple[str, ...] = ()       # the evidence, a few words each
    daemon: BlockerDaemon | None = None

    @property
    def infrastructure(self) -> bool:
        """The node's own: never a leak, never signalled as a holder, never makes a gate fail."""
        return self.kind in (INFRASTRUCTURE, MONITOR, CONSOLE, KERNEL)

    def evidence(self) -> dict[str, Any]:
        return {"role": self.kind, "role_what": self.what, "role_why": list(self.why)}

    def words(self) -> str:
        """'Kubernetes device plugin (node infrastructure: runs as root, in Kubernetes pod 9d1e2c3b…)'."""
        head = {INFRASTRUCTURE: "node infrastructure", MONITOR: "a GPU monitor", CONSOLE: "this console",
                KERNEL: "the kernel", UNCONFIRMED: "unconfirmed", WORKLOAD: "a workload"}[self.kind]
        inner = head + (": " + ", ".join(self.why) if self.why else "")
        return f"{self.what} ({inner})"


def _matches(d: BlockerDaemon, prog: str, comm: str) -> bool:
    if d.prefix:
        return prog.startswith(d.program) or comm.startswith(d.program)
    return prog == d.program or (bool(comm) and comm == d.program[:15])


def _catalogued(proc: Proc) -> BlockerDaemon | None:
    prog = program_of(proc)
    for d in BLOCKER_DAEMONS:
        # on the device: a file of it open, or memory the driver lists (credited to the process)
        if _matches(d, prog, proc.name) and (proc.holds_devices or bool(proc.gpu_memory_mib) or not d.needs_device):
            return d
    return None


def gpu_program(proc: Proc) -> str | None:
    """The GPU program a process is named as (a daemon of the catalogue, a monitor, nvidia-smi),
    whether or not it holds a device now; None for any other. Only for what the name alone may
    say: such a program in D waits in the driver (NVIDIA/nvidia-docker#377: nvidia-smi and
    nvidia-persistenced in D; andyljones/coolgpus#8: Xorg in D)."""
    prog, comm = program_of(proc), proc.name
    for d in BLOCKER_DAEMONS:
        if _matches(d, prog, comm):
            return d.program
    for m in MONITORS:
        if prog == m.program or comm == m.program[:15]:
            return m.program
    return None


def _judge(d: BlockerDaemon, proc: Proc) -> Role:
    """Hold a process named like daemon ``d`` against the evidence."""
    named = f"named {label(proc)}"
    if d.users is not None and proc.user is not None and proc.user not in d.users:
        return Role(WORKLOAD, f"a process named like the {d.what}",
                    (named, f"runs as {proc.user}, the {d.what} as {' or '.join(d.users)}"))
    why: list[str] = []
    confirmed = False
    exe = exe_name(proc)
    if exe is not None:
        if not _exe_fits(exe, d.exe_names()):
            return Role(WORKLOAD, f"a process named like the {d.what}", (named, f"its executable is {proc.exe}"))
        why.append(f"executable {proc.exe}")
        confirmed = True
    if proc.user is not None and (d.users is not None or proc.user == "root"):
        why.append(f"runs as {proc.user}")        # only root makes a process of root's (or a system user's)
        confirmed = True
    cg = proc.cgroup
    if cg is not None and (cg.kubernetes or cg.in_container or cg.unit):
        why.append(f"in {cg.describe(short=True)}")
        confirmed = True
    if not confirmed:
        lack = "its executable could not be read" if proc.exe is None else "nothing places it"
        return Role(UNCONFIRMED, f"named like the {d.what}", (named, lack))
    return Role(INFRASTRUCTURE, d.what, tuple(why), d)


_UNSET = object()


def daemon_role(proc: Proc | None) -> Role | None:
    """The role of a process named like one of the node's own daemons (BLOCKER_DAEMONS), held
    against its evidence; None when it is named like none. Worked out once per Proc object (the
    parser hands back the same object while a process's lines do not change)."""
    if proc is None:
        return None
    known = getattr(proc, "_daemon_role", _UNSET)
    if known is not _UNSET:
        return known
    d = _catalogued(proc)
    found = _judge(d, proc) if d is not None else None
    object.__setattr__(proc, "_daemon_role", found)   # a memo slot (model._ProcMemo), not a field
    return found


def blocker_daemon(proc: Proc | None) -> BlockerDaemon | None:
    """The reset-blocker daemon a process is — the evidence confirms it — or None."""
    role = daemon_role(proc)
    return role.daemon if role is not None and role.kind == INFRASTRUCTURE else None


def running_blockers(procs: Iterable[Proc]) -> list[Proc]:
    """The processes ``blocker_daemon`` names, zombies left out, in order: one pass that reads
    each Proc's memo (a real-size node's 2,000 processes, a few of them daemons)."""
    out = []
    for p in procs:
        role = getattr(p, "_daemon_role", _UNSET)
        if role is _UNSET:
            role = daemon_role(p)
        if role is not None and role.kind == INFRASTRUCTURE and role.daemon is not None and p.state != "Z":
            out.append(p)
    return out


def monitor_role(proc: Proc, listed_mib: int) -> Role | None:
    """A GPU monitor: named like one, running the executable one runs, and holding no memory the
    driver lists (a monitor reads NVML and makes no context; a "monitor" holding memory is a job
    under another name). None when it is not one."""
    prog, comm = program_of(proc), proc.name
    for m in MONITORS:
        if prog != m.program and comm != m.program[:15]:
            continue
        if listed_mib > 0 or proc.gpu_memory_total_mib > 0:
            return None
        exe = exe_name(proc)
        if exe is not None and not _exe_fits(exe, m.exes):
            return None
        why = ("the driver lists no memory for it",) + ((f"executable {proc.exe}",) if exe else ())
        return Role(MONITOR, f"GPU monitor ({m.program})", why)
    return None


def role_of(proc: Proc, *, own: bool = False, kernel: bool = False, listed_mib: int = 0) -> Role:
    """The role of a GPU holder. ``own``: the console or its session; ``kernel``: a kernel thread;
    ``listed_mib``: the memory the driver lists for it."""
    if own:
        return Role(CONSOLE, "this console", ("its own process or session",))
    if kernel:
        return Role(KERNEL, "kernel thread", ("child of kthreadd",))
    role = daemon_role(proc)
    if role is not None:
        return role
    mon = monitor_role(proc, listed_mib)
    if mon is not None:
        return mon
    return Role(WORKLOAD, "job")
