"""The escalation ladder: its rungs, the exact commands each rung shows, and running them.

Rungs, gentlest first::

    wait            let the driver finish tearing down (nothing is run)
    sigterm         kill -s TERM <pids>            ask the processes to exit
    sigkill         kill -s KILL <pids>            force them
    kill-holders    kill -s KILL <pids>            every process holding the GPUs' device files,
                                                   listed one by one (never `fuser -k`, never by name)
    clear-blockers  stop persistenced / MPS / DCGM / fabric manager, `nvidia-smi -pm 0 -i N`
    reset           nvidia-smi -r -i N
    reboot          systemctl reboot

Which rung to take is decided by diagnosis (console/diagnosis/advice.py) from the
evidence; this module renders and applies a rung.  It never targets PID 0/1, kernel
threads or the console's own processes (``NodeSnapshot.own_pids``), whatever it is given.
"""
from __future__ import annotations

import asyncio
import os
from dataclasses import dataclass
from typing import Awaitable, Callable, Iterable, Sequence

from console.checks.parse import parse_memory_read
from console.model import CommandResult, Finding, NodeSnapshot, Proc
from console.sources.parse import program_name
from console.probe import QUERY_MEMORY

RUNGS = ("wait", "sigterm", "sigkill", "kill-holders", "clear-blockers", "reset", "reboot")
RUNG_TITLES = {
    "wait": "wait and re-check",
    "sigterm": "SIGTERM",
    "sigkill": "SIGKILL",
    "kill-holders": "kill the device holders",
    "clear-blockers": "clear the reset blockers",
    "reset": "reset the GPU",
    "reboot": "reboot the node",
}
DESTRUCTIVE = frozenset(RUNGS) - {"wait"}

WAIT_S = 10.0               # one "wait" step when the evidence suggests no other length
WAIT_SLICE_S = 5.0          # a wait re-reads the memory this often and ends once it is back
SETTLE_SLICE_S = 1.0        # after SIGTERM, how often the targets are looked at
SIGTERM_GRACE_S = 15.0      # a process given SIGTERM gets this long before SIGKILL is advised
# after SIGKILL the driver may take this long to tear contexts down: 26 s for large pinned buffers
# and ~90 s for the seed's workers stuck in the driver have been seen; escalating sooner is the mistake
TEARDOWN_WINDOW_S = 120.0
FREED_MIB = 1024            # a GPU at or below this is free (driver reservations, idle contexts)
COMMAND_TIMEOUT_S = 60.0    # nvidia-smi -r and systemctl stop can be slow

_SIGNAL_OF = {"sigterm": "TERM", "sigkill": "KILL", "kill-holders": "KILL"}


@dataclass(frozen=True)
class BlockerDaemon:
    program: str        # argv[0] basename
    stop: str           # the command that stops it


BLOCKER_DAEMONS: tuple[BlockerDaemon, ...] = (
    BlockerDaemon("nvidia-cuda-mps-control", "echo quit | nvidia-cuda-mps-control"),    # MPS
    BlockerDaemon("nvidia-cuda-mps-server", "echo quit | nvidia-cuda-mps-control"),
    BlockerDaemon("nv-hostengine", "systemctl stop nvidia-dcgm"),                       # DCGM
    BlockerDaemon("nvidia-persistenced", "systemctl stop nvidia-persistenced"),
    BlockerDaemon("nv-fabricmanager", "systemctl stop nvidia-fabricmanager"),
)


# ---------------------------------------------------------------- who may be touched

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


def blocker_daemon(proc: Proc) -> BlockerDaemon | None:
    prog = program_of(proc)
    for d in BLOCKER_DAEMONS:
        if prog == d.program or (proc.name and proc.name == d.program[:15]):
            return d
    return None


def is_protected(snap: NodeSnapshot, pid: int) -> bool:
    """PID 0/1, kernel threads and the console's own processes are never signalled."""
    if pid <= 2 or pid in snap.own_pids:
        return True
    proc = snap.proc(pid)
    return proc is not None and proc_protected(snap, proc)


def proc_protected(snap: NodeSnapshot, proc: Proc) -> bool:
    """is_protected for a process already in hand (no lookup)."""
    return proc.pid <= 2 or proc.ppid == 2 or proc.pid in snap.own_pids


def device_gpus(proc: Proc) -> set[int]:
    """GPU minors of the /dev/nvidiaN files a process holds (nvidiactl, -uvm: none)."""
    return set(proc.device_gpus)


def driver_gpus(snap: NodeSnapshot, pid: int) -> set[int]:
    """GPUs the driver lists this PID on."""
    by_uuid = {g.uuid: g.index for g in snap.gpus}
    out = set()
    for dp in snap.driver_processes_here():
        if dp.pid == pid:
            idx = dp.gpu_index if dp.gpu_index is not None else by_uuid.get(dp.gpu_uuid)
            if idx is not None:
                out.add(idx)
    return out


def holder_pids(snap: NodeSnapshot, gpus: Iterable[int] = ()) -> list[int]:
    """Processes in /proc holding these GPUs (device files or the driver's list); all GPUs if empty.

    Excludes protected PIDs and the reset-blocker daemons (clear-blockers stops those).
    """
    want = set(gpus)
    out = []
    listed = {dp.pid for dp in snap.driver_processes_here()}
    for proc in snap.processes:
        if not (proc.holds_devices or proc.pid in listed):
            continue
        if proc_protected(snap, proc) or blocker_daemon(proc) is not None:
            continue
        on = device_gpus(proc) | driver_gpus(snap, proc.pid)
        if (on & want) if want else (on or proc.holds_devices):
            out.append(proc.pid)
    return out


def _signal_targets(snap: NodeSnapshot, pids: Sequence[int], gpus: Sequence[int],
                    rung: str) -> tuple[list[int], list[int]]:
    """(PIDs to signal, PIDs refused). Default targets when none are given."""
    if not pids:
        pids = holder_pids(snap, gpus)
        if rung in ("sigterm", "sigkill"):   # a bare zombie cannot be signalled away
            pids = [p for p in pids if _signallable(snap.proc(p))]
    ok, refused = [], []
    for pid in dict.fromkeys(int(p) for p in pids):
        (refused if is_protected(snap, pid) else ok).append(pid)
    return ok, refused


def _signallable(proc: Proc | None) -> bool:
    return proc is not None and (proc.state != "Z" or bool(proc.gpu_memory_mib) or proc.holds_devices)


def _blocker_commands(snap: NodeSnapshot, gpus: Sequence[int]) -> list[str]:
    lines: list[str] = []
    for d in BLOCKER_DAEMONS:
        if any(blocker_daemon(p) == d for p in snap.processes) and d.stop not in lines:
            lines.append(d.stop)
    want = set(gpus)
    for g in snap.gpus:
        if g.persistence_mode and (not want or g.index in want):
            lines.append(f"nvidia-smi -pm 0 -i {g.index}")
    return lines


def _reset_gpus(snap: NodeSnapshot, gpus: Sequence[int]) -> list[int]:
    if gpus:
        return sorted(dict.fromkeys(int(g) for g in gpus))
    return [g.index for g in snap.gpus if (g.memory_used_mib or 0) > FREED_MIB]


# ---------------------------------------------------------------- rendering

def commands_for(rung: str, snap: NodeSnapshot, pids: Sequence[int] = (),
                 gpus: Sequence[int] = ()) -> list[str]:
    """The exact shell lines a rung runs, as the operator is shown them ("wait" runs nothing)."""
    if rung not in RUNGS:
        raise ValueError(f"unknown rung {rung!r}; one of {', '.join(RUNGS)}")
    if rung == "wait":
        return []
    if rung in _SIGNAL_OF:
        targets, _ = _signal_targets(snap, pids, gpus, rung)
        return [f"kill -s {_SIGNAL_OF[rung]} {' '.join(map(str, targets))}"] if targets else []
    if rung == "clear-blockers":
        return _blocker_commands(snap, gpus)
    if rung == "reset":
        return [f"nvidia-smi -r -i {g}" for g in _reset_gpus(snap, gpus)]
    return ["systemctl reboot"]


def targets_for(rung: str, snap: NodeSnapshot, pids: Sequence[int] = (),
                gpus: Sequence[int] = ()) -> tuple[int, ...]:
    """The PIDs a signalling rung would signal (for the Confirm modal's process rows)."""
    if rung not in _SIGNAL_OF:
        return ()
    return tuple(_signal_targets(snap, pids, gpus, rung)[0])


def top_step(findings: Sequence[Finding]) -> Finding | None:
    """The most severe finding that proposes a rung (findings come sorted from diagnose)."""
    for f in findings:
        if f.rung is not None:
            return f
    return None


# ---------------------------------------------------------------- running

async def apply_rung(source, rung: str, snap: NodeSnapshot, pids: Sequence[int] = (),
                     gpus: Sequence[int] = (), *,
                     sleep: Callable[[float], Awaitable[object]] | None = None,
                     wait_s: float | None = None, settle_s: float | None = None,
                     timeout: float = COMMAND_TIMEOUT_S) -> list[CommandResult]:
    """Run one rung on ``source`` (a console.sources.base.Source). Never raises for node trouble.

    - Signals go through ``source.signal`` with the snapshot's start time, so a PID reused
      since the snapshot is refused; protected PIDs come back as refused results, unsignalled.
      SIGTERM then watches its targets (``ps``) for up to ``settle_s`` (default the SIGTERM
      grace) and returns as soon as they have exited; ``settle_s=0`` returns at once.
    - "wait" sleeps up to ``wait_s`` (default WAIT_S; a finding suggests one in
      ``evidence["wait_s"]``), re-reading per-GPU memory every WAIT_SLICE_S, and ends as soon
      as the GPUs in ``gpus`` (all when empty) are back under FREED_MIB.
    - Everything else runs ``commands_for`` through ``source.run``.
    ``sleep`` is injectable (the simulator's fake clock).
    """
    if rung not in RUNGS:
        raise ValueError(f"unknown rung {rung!r}; one of {', '.join(RUNGS)}")
    sleep = sleep or asyncio.sleep
    if rung == "wait":
        return await _wait(source, gpus, wait_s if wait_s else WAIT_S, sleep)
    if rung in _SIGNAL_OF:
        sig = _SIGNAL_OF[rung]
        targets, refused = _signal_targets(snap, pids, gpus, rung)
        results = [CommandResult(command=f"kill -s {sig} {pid}", rc=None,
                                 error=f"refused: PID {pid} is PID 1, a kernel thread or the console itself")
                   for pid in refused]
        sent = []
        for pid in targets:
            proc = snap.proc(pid)
            if proc is None:
                results.append(CommandResult(
                    command=f"kill -s {sig} {pid}", rc=None,
                    error=f"refused: PID {pid} is not in the snapshot (cannot guard against PID reuse)"))
                continue
            res = await source.signal(pid, sig, start_ticks=proc.start_ticks, create_time=proc.create_time)
            results.append(res)
            if res.ok:
                sent.append(pid)
        settle = (SIGTERM_GRACE_S if rung == "sigterm" else 0.0) if settle_s is None else settle_s
        if sent and settle > 0:
            results += await _settle(source, sent, settle, sleep)
        return results
    return [await source.run(line, timeout) for line in commands_for(rung, snap, pids, gpus)]


async def _wait(source, gpus: Sequence[int], budget: float, sleep) -> list[CommandResult]:
    results: list[CommandResult] = []
    elapsed = 0.0
    want = {str(g) for g in gpus}
    while elapsed < budget:
        step = min(WAIT_SLICE_S, budget - elapsed)
        await sleep(step)
        elapsed += step
        res = await source.run(QUERY_MEMORY, 15.0)
        results.append(res)
        used = {k: v for k, v in parse_memory_read(res.stdout).items() if not want or k in want}
        if used and all(v is not None and v <= FREED_MIB for v in used.values()):
            break
    return results


async def _settle(source, pids: Sequence[int], budget: float, sleep) -> list[CommandResult]:
    """Watch signalled PIDs until none is left running (gone or <defunct>) or the budget is spent."""
    command = f"ps -o pid=,stat= -p {','.join(map(str, pids))}"
    elapsed = 0.0
    res = CommandResult(command=command, rc=None)
    while elapsed < budget:
        step = min(SETTLE_SLICE_S, budget - elapsed)
        await sleep(step)
        elapsed += step
        res = await source.run(command, 15.0)
        running = [ln for ln in res.stdout.splitlines() if len(ln.split()) >= 2 and not ln.split()[1].startswith("Z")]
        if res.error is None and not running:
            break
    return [res]

def step_args(finding: Finding) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(pids, gpus) to hand to commands_for/apply_rung for a finding's rung.

    A finding's ``pids`` are what it is about; the rung may act on others (the host-side
    holders of a container's GPUs): those are in ``evidence["targets"]``.
    """
    targets = finding.evidence.get("targets") if finding.evidence else None
    pids = tuple(int(p) for p in targets) if targets else finding.pids
    if finding.rung in ("clear-blockers", "reset", "reboot", "wait"):
        pids = ()
    return pids, finding.gpus
