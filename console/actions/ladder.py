"""The escalation ladder's exact commands: what each rung runs, as the operator is shown them.

The rungs themselves (their keys, words, flags, windows) are records in console/rungs.py; which
rung to take is decided by diagnosis (console/diagnosis/advice.py) from the evidence; this module
renders a rung's commands, console/actions/plan.py plans it and console/actions/run.py carries it
out. Who may be touched is console/diagnosis/who.py's rule, whatever is asked.

    sigterm / sigkill / kill-holders / signal    kill -s SIG <pids>   (never `fuser -k`, never by name)
    clear-blockers  stop the display server, MPS, DCGM (and its exporter), NVSM, IMEX, the fabric
                    manager and persistenced (each by its unit, container or PID: who.stop_of),
                    `modprobe -r nvidia_drm` (modeset=Y), `nvidia-smi -pm 0 -i N`
    reset           nvidia-smi -r -i N
    mps-clients     echo get_server_list | nvidia-cuda-mps-control, then get_client_list <server>
    mps-terminate   echo terminate_client <server> <client> | nvidia-cuda-mps-control   per client
    mps-quit        echo quit | nvidia-cuda-mps-control
    reload-driver   modprobe -r ... && modprobe nvidia
    reboot          systemctl reboot

Where Slurm knows the node, ``drain`` and ``resume`` run through Slurm's client, not on the
node (console/actions/slurm.py).
"""
from __future__ import annotations

from typing import Sequence

from console.diagnosis.who import (BLOCKER_DAEMONS, FREED_MIB, MODESET_STOP, blocker_daemon, holder_pids,
                                   is_protected, mps_line, restore_commands, stop_of)
from console import rungs
from console.model import Finding, NodeSnapshot, Proc

#: what the signal menu offers (htop's F9), SIGTERM first: names as `kill -s` takes them
SIGNALS = ("TERM", "INT", "HUP", "QUIT", "USR1", "USR2", "ABRT", "CONT", "STOP", "TSTP", "KILL")
RELOAD_DRIVER_COMMAND = "modprobe -r nvidia_uvm nvidia_drm nvidia_modeset nvidia && modprobe nvidia"
COMMAND_TIMEOUT_S = 60.0    # nvidia-smi -r and systemctl stop can be slow


def _signal_targets(snap: NodeSnapshot, pids: Sequence[int], gpus: Sequence[int],
                    rung: str) -> tuple[list[int], list[int]]:
    """(PIDs to signal, PIDs refused). Default targets when none are given."""
    if not pids:
        pids = holder_pids(snap, gpus)
        if not rungs.of(rung).whole_first:   # a bare zombie cannot be signalled away (F: every holder)
            pids = [p for p in pids if _signallable(snap.proc(p))]
    ok: list[int] = []
    refused: list[int] = []
    for pid in dict.fromkeys(int(p) for p in pids):
        (refused if is_protected(snap, pid) else ok).append(pid)
    return ok, refused


def _signallable(proc: Proc | None) -> bool:
    return proc is not None and (proc.state != "Z" or bool(proc.gpu_memory_mib) or proc.holds_devices)


def blocker_processes(snap: NodeSnapshot) -> list[Proc]:
    """The reset-blocker daemons running, in the order B stops them (who.BLOCKER_DAEMONS)."""
    order = {d: i for i, d in enumerate(BLOCKER_DAEMONS)}
    found = [(order[d], p.pid, p) for p in snap.processes
             if p.state != "Z" and (d := blocker_daemon(p)) is not None]
    return [p for *_, p in sorted(found, key=lambda x: x[:2])]


def _blocker_commands(snap: NodeSnapshot, gpus: Sequence[int]) -> list[str]:
    lines: list[str] = []
    for p in blocker_processes(snap):
        command = stop_of(p).command
        if command is not None and command not in lines:
            lines.append(command)
    if snap.drm_modeset is True:
        lines.append(MODESET_STOP)
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

def signal_name(name: str) -> str:
    """A signal of the menu as `kill -s` takes it ("SIGHUP", "hup" -> "HUP"); ValueError else."""
    sig = str(name).strip().upper().removeprefix("SIG")
    if sig not in SIGNALS:
        raise ValueError(f"signal {name!r} is not offered; one of {', '.join(SIGNALS)}")
    return sig


def commands_for(rung: str, snap: NodeSnapshot, pids: Sequence[int] = (),
                 gpus: Sequence[int] = (), *, signal: str | None = None, server: int | None = None) -> list[str]:
    """The exact shell lines a rung runs, as the operator is shown them ("wait" runs nothing).
    ``signal``: the "signal" rung's signal (one of SIGNALS). The MPS rungs: ``pids`` are the
    server (mps-clients, mps-quit) or the clients of ``server`` (mps-terminate)."""
    r = rungs.BY_ID.get(rung)
    if r is None or r.through_slurm or r is rungs.CUSTOM:
        raise ValueError(f"unknown rung {rung!r}; one of {', '.join(rungs.proposable())}")
    return _COMMANDS[r.plans](r, snap, pids, gpus, signal, server)


def _signal_commands(r: rungs.Rung, snap: NodeSnapshot, pids: Sequence[int], gpus: Sequence[int],
                     signal: str | None, server: int | None) -> list[str]:
    sig = signal_name(signal) if r.chooses_signal and signal else r.signal
    targets, _ = _signal_targets(snap, pids, gpus, r.id)
    return [f"kill -s {sig} {' '.join(map(str, targets))}"] if targets else []


def _mps_clients_commands(r: rungs.Rung, snap: NodeSnapshot, pids: Sequence[int], gpus: Sequence[int],
                          signal: str | None, server: int | None) -> list[str]:
    """The MPS clients check asks the control daemon for the server's clients."""
    return [mps_line("get_server_list")] + [mps_line(f"get_client_list {int(p)}") for p in pids[:1]]


def _mps_terminate_commands(r: rungs.Rung, snap: NodeSnapshot, pids: Sequence[int], gpus: Sequence[int],
                            signal: str | None, server: int | None) -> list[str]:
    if server is None:
        return []
    return [mps_line(f"terminate_client {int(server)} {int(p)}") for p in dict.fromkeys(pids)
            if not is_protected(snap, int(p)) and int(p) != int(server)]


_COMMANDS = {
    "signal": _signal_commands,
    "wait": lambda *_: [],
    "mps-clients": _mps_clients_commands,
    "blockers": lambda r, snap, pids, gpus, *_: _blocker_commands(snap, gpus),
    "reset": lambda r, snap, pids, gpus, *_: [f"nvidia-smi -r -i {g}" for g in _reset_gpus(snap, gpus)],
    "driver": lambda *_: [RELOAD_DRIVER_COMMAND],
    # without a finding's own list: persistence mode and its daemon
    "restore": lambda r, snap, pids, gpus, *_: restore_commands(snap, ("nvidia-persistenced",), gpus),
    "mps-terminate": _mps_terminate_commands,
    "mps-quit": lambda *_: [mps_line("quit")],
    "reboot": lambda *_: ["systemctl reboot"],
}


def top_step(findings: Sequence[Finding]) -> Finding | None:
    """The most severe finding that proposes a rung (findings come sorted from diagnose)."""
    for f in findings:
        if f.rung is not None:
            return f
    return None


def no_step_words(snap: NodeSnapshot) -> str:
    """What `x` says when no finding proposes a step: a job that computes is why (its own words,
    and how to stop it anyway); every GPU back at idle with nothing of B's left off is the
    incident done (the verdict and the export next); else nothing to do now."""
    busy = next((f for f in snap.findings if f.rung is None
                 and f.next_step.startswith(("Nothing stuck", "A normal job"))), None)
    if busy is not None:
        return busy.next_step
    idle = bool(snap.gpus) and snap.error is None and all(
        g.memory_used_mib is not None and g.memory_used_mib <= FREED_MIB for g in snap.gpus)
    if idle and not any(f.kind == "blockers-off" for f in snap.findings):
        return (f"done on {snap.name}: every GPU is back at idle and nothing is stuck — `v` gives the verdict "
                "on the open hypothesis, `e` exports the postmortem")
    return "nothing to do on this node now"


def step_args(finding: Finding) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(pids, gpus) to hand to commands_for/plan_action for a finding's rung.

    A finding's ``pids`` are what it is about; the rung may act on others (the host-side
    holders of a container's GPUs): those are in ``evidence["targets"]``.
    """
    targets = finding.evidence.get("targets") if finding.evidence else None
    pids = tuple(int(p) for p in targets) if targets else finding.pids
    if not rungs.of(finding.rung).on_processes:
        pids = ()
    return pids, finding.gpus
