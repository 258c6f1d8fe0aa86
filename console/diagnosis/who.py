"""Who is who on a node: a process's readable name and program, the reset-blocker daemons, the
processes this console never touches, and who holds which GPU.

One home for these rules: diagnosis reasons with them, the action layer (console/actions/)
plans with them, checks and the UI name processes with them. Pure; reads only the snapshot.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence, Iterable

from console.model import NodeSnapshot, Proc
# the windows after SIGTERM and SIGKILL live with the rungs they follow (re-exported for the advice)
from console.rungs import SIGTERM_GRACE_S, TEARDOWN_WINDOW_S  # noqa: F401
from console.probe import guarded_kill_command
from console.diagnosis.roles import (BLOCKER_DAEMONS, DISPLAY_MANAGER_STOP, MPS_CONTROL, MPS_TIMEOUT_S,  # noqa: F401
                                     BlockerDaemon, blocker_daemon, daemon_role, label, mps_line, program_of)

# ---------------------------------------------------------------- time windows the advice turns on
WAIT_S = 10.0               # one "wait" step when the evidence suggests no other length
FREED_MIB = 1024            # a GPU at or below this is free (driver reservations, idle contexts)


# ---------------------------------------------------------------- names and the node's own daemons
# (their home is console/diagnosis/roles.py: a role rests on evidence, not on the name)

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


@dataclass(frozen=True)
class BlockerStop:
    command: str | None     # the exact line that stops it here; None: nothing can be run for it here
    note: str = ""          # why not, or what to know before


def stop_of(proc: Proc, node: str = "NODE") -> BlockerStop:
    """How to stop this blocker daemon on its node, exactly: its systemd unit (read from its
    cgroup), its docker / podman container, the daemon's usual command, or SIGTERM to its PID
    (start time checked). One run by Kubernetes (or another container runtime) has no command
    here: systemctl cannot stop it and its DaemonSet would start it again."""
    d = blocker_daemon(proc)
    snap_host = node
    name = f"{label(proc)} (PID {proc.pid})"
    cg = proc.cgroup
    if cg is not None and cg.kubernetes:
        how = (f"`kubectl label node {snap_host} {d.operator_label}=false --overwrite` makes its pod leave, "
               f"`=true` brings it back" if d is not None and d.operator_label else
               "for the GPU operator: label the node so its pod leaves")
        return BlockerStop(None, f"{name} runs in Kubernetes ({cg.describe()}): systemctl cannot stop it and "
                                 "a SIGKILL only makes its DaemonSet start it again; stop it through Kubernetes "
                                 f"({how}) — nothing is run for it here")
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
