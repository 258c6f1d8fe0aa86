"""The MPS rungs: the control daemon is asked, the MPS server is never signalled.

Under MPS the driver lists ``nvidia-cuda-mps-server`` in place of its clients and charges it
their memory; a signal to the server ends every client on its GPUs at once. The way through is
``nvidia-cuda-mps-control`` (console/diagnosis/who.py ``mps_line``)::

    mps-clients    echo get_server_list | nvidia-cuda-mps-control          the read-only check
                   echo get_client_list <server> | nvidia-cuda-mps-control  (checks/registry.py)
    mps-terminate  echo terminate_client <server> <client> | nvidia-cuda-mps-control   per client
    mps-quit       echo quit | nvidia-cuda-mps-control                      every client, every GPU

``plan_after_check`` turns the check's answer into the plan Confirm shows: terminate_client for
the clients that look stuck (gone from /proc while the daemon still counts them, <defunct>, a
thread in D, stopped) — or those the operator tagged, or, when none looks stuck, every client
with a note — and ``quit`` when the server has no client left. No plan when no daemon answered
(with the reason). ``settled`` says when verification (the driver's list re-read) has seen it
work: the GPUs gave back at least who.FREED_MIB (terminate_client), the MPS server is gone
(quit). Pure: snapshots and the check's data in, plans out.
"""
from __future__ import annotations

from typing import Any, Mapping, Sequence

from console.actions import verify
from console import rungs
from console.actions.ladder import commands_for
from console.actions.plan import ActionPlan, ActionTarget, finish_plan
from console.diagnosis import text as t
from console.diagnosis import who
from console.model import NodeSnapshot, Proc

MPS_SERVER = "nvidia-cuda-mps-server"
MPS_CONTROL_DAEMON = who.MPS_CONTROL
#: what an MPS rung's verification waits for (rungs.Rung.settles_on)
SETTLES_ON = ("mps", "mps-gone")


def _is(proc: Proc, program: str) -> bool:
    return who.program_of(proc) == program or proc.name == program[:15]


def server_procs(snap: NodeSnapshot) -> list[Proc]:
    """The MPS servers running (not <defunct>)."""
    return [p for p in snap.processes if p.state != "Z" and _is(p, MPS_SERVER)]


def server_gpus(snap: NodeSnapshot, server: int) -> list[int]:
    """The GPUs the driver charges the server on (its device files when it is charged nothing)."""
    on = who.driver_gpus(snap, server)
    proc = snap.proc(server)
    if proc is not None:
        on |= {int(k) for k, v in proc.gpu_memory_mib.items() if str(k).isdecimal() and v}
        if not on:
            on |= who.device_gpus(proc)
    return sorted(on)


def stuck(snap: NodeSnapshot, pid: int) -> str | None:
    """Why an MPS client looks stuck ("gone from /proc", "<defunct>", …), or None."""
    proc = snap.proc(pid)
    if proc is None:
        return "gone from /proc here, still counted as a client"
    if proc.state == "Z":
        return "<defunct>"
    if proc.d_threads or proc.state == "D":
        return "a thread stuck in D state"
    if proc.state in ("T", "t"):
        return "stopped"
    return None


def _target(snap: NodeSnapshot, pid: int, server: int) -> ActionTarget:
    why = stuck(snap, pid)
    role = f"MPS client of server {server} (get_client_list)" + (f"; {why}" if why else "")
    proc = snap.proc(pid)
    if proc is None:
        return ActionTarget(pid=pid, user=None, state="?", name="(not in /proc here)",
                            cmdline="(exited, or a process of another PID namespace)", why=role)
    return ActionTarget(pid=proc.pid, user=proc.user, state=proc.state, name=who.label(proc), cmdline=proc.cmdline,
                        start_ticks=proc.start_ticks, create_time=proc.create_time, threads_in_d=proc.threads_in_d,
                        ppid=proc.ppid, pgid=proc.pgid, sid=proc.sid, why=role)


def plan_terminate(snap: NodeSnapshot, server: int, clients: Sequence[int], *,
                   chosen: Sequence[int] = ()) -> ActionPlan:
    """terminate_client for ``server``'s clients that must go: those of ``chosen`` (the operator's
    tagged or selected PIDs) that are its clients, else those that look stuck; none when every
    client runs (plan_after_check says so: a running client is not ended unless chosen)."""
    clients = list(dict.fromkeys(int(c) for c in clients))
    refusals: list[str] = []
    notes: list[str] = []
    picked = [c for c in clients if c in set(int(p) for p in chosen)]
    if picked:
        notes.append(f"the {t.plural(len(picked), 'client')} you selected")
    else:
        picked = [c for c in clients if stuck(snap, c) is not None]
    ok: list[int] = []
    for pid in picked:
        reason = who.protection_reason(snap, pid) if pid != server else f"PID {pid} is the server itself"
        if reason is not None:
            refusals.append(reason)
        else:
            ok.append(pid)
    lines = commands_for("mps-terminate", snap, pids=ok, server=server)
    gpus = server_gpus(snap, server)
    rest = [c for c in clients if c not in ok]
    notes.append(f"terminate_client ends the client's GPU work on MPS server {server}; no signal is sent to any "
                 "process (its next CUDA call fails: cudaErrorMpsClientTerminated)")
    if rest:
        n = len(rest)
        notes.append(f"server {server} and its other {t.verb(n, 'client', 'clients')} ({t.pids(rest)}) "
                     f"{t.verb(n, 'goes', 'go')} on")
    notes.append("the driver charges every client's memory to the server: how much comes back shows only after "
                 "the client has ended, as the server's memory in the driver's list")
    if not clients:
        refusals.append(f"server {server} has no client connected")
    title = (f"End MPS {t.verb(len(ok), 'client', 'clients')} {t.pids(ok)} of server {server}" if ok
             else f"End MPS clients of server {server}")
    return finish_plan(snap, "mps-terminate", title, lines, gpus,
                       targets=[_target(snap, pid, server) for pid in ok], refusals=refusals, notes=notes)


def plan_quit(snap: NodeSnapshot, clients: Mapping[int, Sequence[int]] | None = None) -> ActionPlan:
    """``echo quit | nvidia-cuda-mps-control``: the control daemon and every MPS server stop; every
    client loses its GPU work. ``clients``: what get_client_list said, per server (for Confirm)."""
    servers = server_procs(snap)
    daemons = [p for p in snap.processes if p.state != "Z" and _is(p, MPS_CONTROL_DAEMON)]
    gpus = sorted({g for p in servers for g in server_gpus(snap, p.pid)})
    targets = [ActionTarget.of(p) for p in daemons + servers]
    notes = ["every client of every MPS server loses its GPU work, on every GPU MPS serves"
             + (f" ({t.gpus(gpus)})" if gpus else "")]
    known = sorted({int(c) for cs in (clients or {}).values() for c in cs})
    if known:
        notes.append(f"clients the daemon listed: {t.pid_list(known)}")
    notes.append(f"MPS is not started again: start the control daemon (`{MPS_CONTROL_DAEMON} -d`, or its service) "
                 "once the GPU is clean")
    refusals = [] if daemons else ["no MPS control daemon runs here: quit would find none to ask"]
    return finish_plan(snap, "mps-quit", "Stop MPS (quit the control daemon and its servers)",
                       [who.mps_line("quit")] if daemons else [], gpus, targets=targets, refusals=refusals, notes=notes)


def plan_after_check(snap: NodeSnapshot, server: int, data: Mapping[str, Any], *,
                     chosen: Sequence[int] = ()) -> tuple[ActionPlan | None, str]:
    """The plan the ``mps-clients`` check's answer leads to (None when there is none), and why."""
    if data.get("daemon") is False:
        return None, ("no MPS control daemon answered: nothing to ask it; if it runs with another "
                      "CUDA_MPS_PIPE_DIRECTORY, ask it there by hand")
    servers = [int(s) for s in data.get("servers") or ()]
    if int(server) not in servers:
        why = data.get("error") or f"server {server} is not among the MPS servers ({t.pids(servers) or 'none'})"
        return None, str(why)
    clients = [int(c) for c in data.get("clients") or ()]
    if not clients:
        return plan_quit(snap, {server: []}), f"server {server} has no client: its memory is nobody's now"
    if not set(clients) & {int(p) for p in chosen} and not any(stuck(snap, c) is not None for c in clients):
        return None, (f"nothing stuck: server {server} serves {t.pid_list(clients)}, and none looks stuck (gone, "
                      "<defunct>, in D, stopped); to end one anyway, tag it (space) and press x again")
    return plan_terminate(snap, server, clients, chosen=chosen), f"server {server} serves {t.pid_list(clients)}"


def settled(plan: ActionPlan, snap: NodeSnapshot) -> bool:
    """Verification: the driver's list shows the effect the MPS rung was after."""
    after = verify.memory_of(snap, plan.gpus)
    freed = verify.freed_mib(plan.memory_before, after) >= who.FREED_MIB
    if rungs.of(plan.rung).settles_on == "mps-gone":
        return not server_procs(snap) and (freed or all((v or 0) <= who.FREED_MIB for v in after.values()))
    return freed


__all__ = ["SETTLES_ON", "plan_after_check", "plan_quit", "plan_terminate", "server_procs", "settled", "stuck"]
