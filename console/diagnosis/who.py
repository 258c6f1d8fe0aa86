"""Who is who on a node: a process's readable name and program, the reset-blocker daemons, the
processes this console never touches, and who holds which GPU.

One home for these rules: diagnosis reasons with them, the action layer (console/actions/)
plans with them, checks and the UI name processes with them. Pure; reads only the snapshot.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Sequence, Iterable

from console.model import NodeSnapshot, Proc
from console.probe import guarded_kill_command
from console.sources.parse import program_name

# ---------------------------------------------------------------- time windows the advice turns on
WAIT_S = 10.0               # one "wait" step when the evidence suggests no other length
SIGTERM_GRACE_S = 15.0      # a process given SIGTERM gets this long before SIGKILL is advised
# after SIGKILL the driver may take this long to tear contexts down: 26 s for large pinned buffers
# and ~90 s for the seed's workers stuck in the driver have been seen; escalating sooner is the mistake
TEARDOWN_WINDOW_S = 120.0
FREED_MIB = 1024            # a GPU at or below this is free (driver reservations, idle contexts)


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


# ---------------------------------------------------------------- reset blockers

@dataclass(frozen=True)
class BlockerDaemon:
    """A program whose hold on the GPUs makes `nvidia-smi -r` refuse ("In use by another client")."""
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
#: in the order B stops them: the display servers and the clients first, the persistence daemon last
BLOCKER_DAEMONS: tuple[BlockerDaemon, ...] = (
    *(BlockerDaemon(prog, "display server", DISPLAY_MANAGER_STOP, needs_device=True, users=None)
      for prog in ("Xorg", "X", "Xwayland", "gnome-shell")),
    BlockerDaemon(MPS_CONTROL, "MPS control daemon", mps_line("quit")),
    BlockerDaemon("nvidia-cuda-mps-server", "MPS server", mps_line("quit")),
    BlockerDaemon("dcgm-exporter", "DCGM exporter", None),
    BlockerDaemon("nv-hostengine", "DCGM host engine", "systemctl stop nvidia-dcgm", unit="nvidia-dcgm"),
    BlockerDaemon("nvsm", "NVSM", "systemctl stop nvsm", unit="nvsm", prefix=True),
    BlockerDaemon("nvidia-imex", "IMEX daemon", "systemctl stop nvidia-imex", unit="nvidia-imex"),
    BlockerDaemon("nv-fabricmanager", "fabric manager", "systemctl stop nvidia-fabricmanager",
                  unit="nvidia-fabricmanager"),
    BlockerDaemon("nvidia-persistenced", "persistence daemon", "systemctl stop nvidia-persistenced",
                  unit="nvidia-persistenced", users=("root", "nvidia-persistenced")),   # --user drops to it
)
def restore_commands(snap: NodeSnapshot, stopped: Sequence[str] = (), gpus: Sequence[int] = ()) -> list[str]:
    """What puts back what B (clear-blockers) turned off and is still off: persistence mode on
    ``gpus`` (every GPU when empty) where it reads off, and each of the ``stopped`` programs
    (their names: program or comm, which the kernel cuts at 15 characters) that runs under a
    known unit and is not running now."""
    off = [g.index for g in snap.gpus if g.persistence_mode is False and (not gpus or g.index in gpus)]
    out = []
    if off:
        out.append("nvidia-smi -pm 1" + ("" if len(off) == len(snap.gpus) else " -i " + ",".join(map(str, off))))
    running = {program_of(p) for p in snap.processes if p.state != "Z"}
    for d in BLOCKER_DAEMONS:
        if d.unit and (d.program in stopped or d.program[:15] in stopped) and d.program not in running:
            line = f"systemctl start {d.unit}"
            if line not in out:
                out.append(line)
    return out


#: the non-process blocker: nvidia_drm loaded with modeset=Y is a kernel client of every GPU
#: (NVIDIA/mig-parted#181: resets refused "In use by another client" until it is unloaded)
MODESET_STOP = "modprobe -r nvidia_drm"
FABRIC_MANAGER = "nv-fabricmanager"


def _matches(d: BlockerDaemon, prog: str, comm: str) -> bool:
    if d.prefix:
        return prog.startswith(d.program) or comm.startswith(d.program)
    return prog == d.program or (bool(comm) and comm == d.program[:15])


_UNSET = object()


def blocker_daemon(proc: Proc | None) -> BlockerDaemon | None:
    """The reset-blocker daemon a process is, or None. Worked out once per Proc object (the
    parser hands back the same object while a process's lines do not change: a poll costs the
    new and changed processes only)."""
    if proc is None:
        return None
    known = proc.__dict__.get("_blocker_daemon", _UNSET)
    if known is not _UNSET:
        return known
    prog = program_of(proc)
    found = None
    for d in BLOCKER_DAEMONS:
        if _matches(d, prog, proc.name) and (proc.holds_devices or not d.needs_device) \
                and (d.users is None or proc.user is None or proc.user in d.users):
            found = d
            break
    proc.__dict__["_blocker_daemon"] = found       # a frozen dataclass: its fields stay as they are
    return found


@dataclass(frozen=True)
class BlockerStop:
    command: str | None     # the exact line that stops it here; None: nothing can be run for it here
    note: str = ""          # why not, or what to know before


def stop_of(proc: Proc) -> BlockerStop:
    """How to stop this blocker daemon on its node, exactly: its systemd unit (read from its
    cgroup), its docker / podman container, the daemon's usual command, or SIGTERM to its PID
    (start time checked). One run by Kubernetes (or another container runtime) has no command
    here: systemctl cannot stop it and its DaemonSet would start it again."""
    d = blocker_daemon(proc)
    name = f"{label(proc)} (PID {proc.pid})"
    cg = proc.cgroup
    if cg is not None and cg.kubernetes:
        return BlockerStop(None, f"{name} runs in Kubernetes ({cg.describe()}): systemctl cannot stop it and "
                                 "its DaemonSet would start it again; stop it through Kubernetes (for the GPU "
                                 "operator: label the node so its pod leaves) — nothing is run for it here")
    if cg is not None and cg.in_container:
        if cg.runtime in ("docker", "podman") and cg.container_id:
            return BlockerStop(f"{cg.runtime} stop {cg.container_id[:12]}",
                               f"{name} runs in {cg.describe()}: stopping the container stops it")
        return BlockerStop(None, f"{name} runs in {cg.describe()}: stop it with its container runtime — "
                                 "nothing is run for it here")
    if cg is not None and cg.unit:
        return BlockerStop(f"systemctl stop {cg.unit.removesuffix('.service')}")
    if d is not None and d.stop:
        return BlockerStop(d.stop)
    return BlockerStop(guarded_kill_command(proc.pid, "TERM", proc.start_ticks),
                       f"{name} runs under no service this console can see: it is sent SIGTERM")


def fabric_manager_running(snap: NodeSnapshot) -> bool:
    return any(p.state != "Z" and (program_of(p) == FABRIC_MANAGER or p.name == FABRIC_MANAGER[:15])
               for p in snap.processes)


# ---------------------------------------------------------------- who is never touched

def protection_reason(snap: NodeSnapshot, pid: int, proc: Proc | None = None) -> str | None:
    """Why this PID is never signalled by the console, whatever it is asked (None: it may be).

    PID 0 and below, PID 1, kernel threads (PID 2 and its children), and the console's own
    processes and session (``NodeSnapshot.own_pids``).
    """
    if pid <= 0:
        return f"PID {pid} is not a process"
    if pid == 1:
        return "PID 1 (init) is never signalled"
    if pid in snap.own_pids:
        return f"PID {pid} is this console or the session it runs in"
    proc = proc if proc is not None else snap.proc(pid)
    if pid == 2 or (proc is not None and proc.ppid == 2):
        return f"PID {pid} is a kernel thread"
    return None


def is_protected(snap: NodeSnapshot, pid: int, proc: Proc | None = None) -> bool:
    return protection_reason(snap, pid, proc) is not None


def descendants(snap: NodeSnapshot, pids: Iterable[int]) -> list[Proc]:
    """Every process below these in the snapshot's tree (children, grandchildren, …), once each."""
    children: dict[int, list[Proc]] = {}
    for p in snap.processes:
        children.setdefault(p.ppid, []).append(p)
    seen = set(pids)
    out: list[Proc] = []
    todo = list(seen)
    while todo:
        for child in children.get(todo.pop(), ()):
            if child.pid not in seen:
                seen.add(child.pid)
                out.append(child)
                todo.append(child.pid)
    return out


# ---------------------------------------------------------------- who holds which GPU

def device_gpus(proc: Proc) -> set[int]:
    """GPU minors of the /dev/nvidiaN files a process holds (nvidiactl, -uvm: none)."""
    return set(proc.device_gpus)


def driver_gpu_map(snap: NodeSnapshot) -> dict[int, set[int]]:
    """{pid: GPUs the driver lists it on}, for the driver's processes that are in this /proc."""
    by_uuid = {g.uuid: g.index for g in snap.gpus}
    out: dict[int, set[int]] = {}
    for dp in snap.driver_processes_here():
        on = out.setdefault(dp.pid, set())
        idx = dp.gpu_index if dp.gpu_index is not None else by_uuid.get(dp.gpu_uuid)
        if idx is not None:
            on.add(idx)
    return out


def driver_gpus(snap: NodeSnapshot, pid: int) -> set[int]:
    """GPUs the driver lists this PID on."""
    return set(driver_gpu_map(snap).get(pid, ()))


def holder_candidates(snap: NodeSnapshot, gpus: Iterable[int] = ()) -> list[Proc]:
    """Every process in /proc holding these GPUs (all GPUs when empty): an open device file or a
    line in the driver's list. Protected processes and blocker daemons included."""
    want = set(gpus)
    listed = driver_gpu_map(snap)
    out = []
    for proc in snap.processes:
        if not (proc.holds_devices or proc.pid in listed):
            continue
        on = device_gpus(proc) | listed.get(proc.pid, set())
        if (on & want) if want else (on or proc.holds_devices):
            out.append(proc)
    return out


def holder_pids(snap: NodeSnapshot, gpus: Iterable[int] = ()) -> list[int]:
    """The holders a rung may signal: holder_candidates less the protected processes and the
    reset-blocker daemons (clear-blockers stops those)."""
    return [p.pid for p in holder_candidates(snap, gpus)
            if not is_protected(snap, p.pid, p) and blocker_daemon(p) is None]
