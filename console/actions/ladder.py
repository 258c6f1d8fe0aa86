"""The escalation ladder: its rungs and the exact commands each rung shows.

Rungs, gentlest first::

    wait            let the driver finish tearing down (nothing is run: the wait-and-reread check)
    sigterm         kill -s TERM <pids>            ask the processes to exit
    sigkill         kill -s KILL <pids>            force them
    kill-holders    kill -s KILL <pids>            every process holding the GPUs' device files,
                                                   listed one by one (never `fuser -k`, never by name)
    clear-blockers  stop the display server, MPS, DCGM (and its exporter), NVSM, IMEX, the fabric
                    manager and persistenced (each by its unit, container or PID: who.stop_of),
                    `modprobe -r nvidia_drm` (modeset=Y), `nvidia-smi -pm 0 -i N`
    reset           nvidia-smi -r -i N
    mps-clients     echo get_server_list | nvidia-cuda-mps-control, then get_client_list <server> (a
                    read-only check: the MPS server's clients), then Confirm of ``mps-terminate``
    mps-terminate   echo terminate_client <server> <client> | nvidia-cuda-mps-control   per client
    mps-quit        echo quit | nvidia-cuda-mps-control   stop MPS: every client on every GPU it serves
    signal          kill -s SIG <pids>             a signal of the operator's choice (the F9 menu; SIGNALS)
    reload-driver   modprobe -r ... && modprobe nvidia      (palette only, the node's name typed)
    reboot          systemctl reboot                        (palette only, the node's name typed)

Where Slurm knows the node, two more rungs run through Slurm's client, not on the node
(console/actions/slurm.py): ``drain`` (before clear-blockers, reset, driver reload and reboot)
and ``resume`` (only after a verified recovery).

Which rung to take is decided by diagnosis (console/diagnosis/advice.py) from the evidence;
this module renders a rung; console/actions/plan.py plans it and console/actions/run.py
carries it out. Who may be touched is console/diagnosis/who.py's rule, whatever is asked.
"""
from __future__ import annotations

from typing import Sequence

from console.diagnosis.who import (BLOCKER_DAEMONS, FREED_MIB, MODESET_STOP, blocker_daemon, holder_pids,
                                   is_protected, mps_line, restore_commands, stop_of)
from console.model import Finding, NodeSnapshot, Proc

#: what diagnosis may propose (Finding.rung), gentlest first
RUNGS = ("wait", "sigterm", "sigkill", "kill-holders", "clear-blockers", "reset", "reboot", "restore",
         "mps-clients", "mps-quit")
#: what the action layer runs ("wait" is the wait-and-reread check, not an action)
ACTION_RUNGS = ("sigterm", "sigkill", "kill-holders", "clear-blockers", "reset", "reload-driver", "reboot",
                "signal", "restore", "mps-terminate", "mps-quit")
#: a command line of the operator's own (console/actions/plan.py plan_custom): an action, not a rung
#: diagnosis proposes, and not in ACTION_RUNGS (plan_action never builds it)
CUSTOM_RUNG = "custom"
#: the signal each signalling rung sends ("signal": the operator's choice, SIGNALS)
SIGNAL_OF = {"sigterm": "TERM", "sigkill": "KILL", "kill-holders": "KILL", "signal": "TERM"}
#: what the signal menu offers (htop's F9), SIGTERM first: names as `kill -s` takes them
SIGNALS = ("TERM", "INT", "HUP", "QUIT", "USR1", "USR2", "ABRT", "CONT", "STOP", "TSTP", "KILL")
#: rungs that must release a local NVML handle first (the driver refuses while a client holds it)
RELEASES_NVML = frozenset({"reset", "reload-driver"})
RELOAD_DRIVER_COMMAND = "modprobe -r nvidia_uvm nvidia_drm nvidia_modeset nvidia && modprobe nvidia"
COMMAND_TIMEOUT_S = 60.0    # nvidia-smi -r and systemctl stop can be slow
#: the MPS rungs: the server is never signalled (that ends every client on its GPUs); the
#: control daemon is asked instead (console/actions/mps.py plans them)
MPS_RUNGS = ("mps-clients", "mps-terminate", "mps-quit")

def _signal_targets(snap: NodeSnapshot, pids: Sequence[int], gpus: Sequence[int],
                    rung: str) -> tuple[list[int], list[int]]:
    """(PIDs to signal, PIDs refused). Default targets when none are given."""
    if not pids:
        pids = holder_pids(snap, gpus)
        if rung in ("sigterm", "sigkill", "signal"):   # a bare zombie cannot be signalled away
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
    if rung not in RUNGS and rung not in ACTION_RUNGS:
        raise ValueError(f"unknown rung {rung!r}; one of {', '.join(RUNGS)}")
    if rung == "wait":
        return []
    if rung in SIGNAL_OF:
        sig = signal_name(signal) if rung == "signal" and signal else SIGNAL_OF[rung]
        targets, _ = _signal_targets(snap, pids, gpus, rung)
        return [f"kill -s {sig} {' '.join(map(str, targets))}"] if targets else []
    if rung == "clear-blockers":
        return _blocker_commands(snap, gpus)
    if rung == "reset":
        return [f"nvidia-smi -r -i {g}" for g in _reset_gpus(snap, gpus)]
    if rung == "reload-driver":
        return [RELOAD_DRIVER_COMMAND]
    if rung == "restore":      # without a finding's own list: persistence mode and its daemon
        return restore_commands(snap, ("nvidia-persistenced",), gpus)
    if rung == "mps-clients":
        return [mps_line("get_server_list")] + [mps_line(f"get_client_list {int(p)}") for p in pids[:1]]
    if rung == "mps-terminate":
        if server is None:
            return []
        return [mps_line(f"terminate_client {int(server)} {int(p)}") for p in dict.fromkeys(pids)
                if not is_protected(snap, int(p)) and int(p) != int(server)]
    if rung == "mps-quit":
        return [mps_line("quit")]
    return ["systemctl reboot"]


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
    busy = next((f for f in snap.findings if f.kind == "holder" and f.rung is None
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
    if finding.rung in ("clear-blockers", "reset", "reboot", "wait"):
        pids = ()
    return pids, finding.gpus
