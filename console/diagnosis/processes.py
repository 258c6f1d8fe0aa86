"""Findings about processes: zombie, d-state, orphan, hidden-holder, foreign-pid."""
from __future__ import annotations

from collections import defaultdict

from console import rungs
from console.diagnosis.who import FREED_MIB, MPS_CONTROL, TEARDOWN_WINDOW_S, WAIT_S, label, program_of
from console.model import Finding, Proc
from console.diagnosis import text as t
from console.diagnosis.advice import Advice, finding, in_d, kill_step, reset_step, signal_step
from console.diagnosis.context import DEVICES, IN_D, PARENT, ZOMBIE, Situation
from console.diagnosis.history import memo
from console.diagnosis.liveness import (DETACHED, ORPHANED, SUBREAPERS, UNKILLABLE, UNKNOWN, liveness,
                                        process_evidence)
#: where a thread waits inside the NVIDIA driver: the prefixes of its functions (wchan)
DRIVER_WCHAN = ("uvm_", "_nv", "nv_", "nvidia", "os_", "rm_", "gsp")
#: programs that start jobs without being part of them: a job's tree ends below these
SESSION_PROGRAMS = frozenset({"bash", "sh", "dash", "zsh", "fish", "ksh", "tcsh", "csh", "sshd", "tmux",
                              "screen", "su", "sudo", "login", "init", "cron", "nohup", "setsid", "runuser",
                              "slurmstepd", "srun", "sbatch", "mosh-server", "code-server"}) | set(SUBREAPERS)


def _gpus(sit: Situation, procs) -> set[int]:
    out: set[int] = set()
    for p in procs:
        out |= sit.gpus_of(p)
    return out


def _mib(sit: Situation, procs) -> int:
    return sum(sit.mib_of(p) for p in procs)


def _parent_words(sit: Situation, ppid: int) -> str:
    parent = sit.proc(ppid)
    return f"PID {ppid} ({label(parent)})" if parent else f"PID {ppid}"


def zombies(sit: Situation) -> list[Finding]:
    """<defunct> leaders; above all those whose threads still sit in the driver keeping memory."""
    groups: dict[tuple[int, str], list[Proc]] = defaultdict(list)
    for p in sit.snap.processes:
        if p.state != "Z":
            continue
        holds = sit.holds_gpu(p) or sit.mib_of(p) > 0
        cls = "stuck" if in_d(p) else ("holding" if holds else "empty")
        groups[(p.ppid, cls)].append(p)
    out = []
    for (ppid, cls), procs in sorted(groups.items()):
        pids = [p.pid for p in procs]
        gpus = _gpus(sit, procs)
        held = _mib(sit, procs)
        since = min(sit.since(p.pid, ZOMBIE) for p in procs)
        ev = {"pids": pids, "gpus": sorted(gpus), "mib": held, "parent": ppid,
              "threads_in_d": sum(p.threads_in_d for p in procs)}
        if cls == "empty":
            summary = (f"{t.plural(len(procs), '<defunct> process', '<defunct> processes')} ({sit.names(procs)}) "
                       f"holding no GPU memory; parent {_parent_words(sit, ppid)} has not reaped them")
            step_text = (f"Nothing to free: these zombies hold no GPU memory; they go when parent "
                         f"{_parent_words(sit, ppid)} reaps them or exits.")
            out.append(finding("zombie", "low", summary, Advice(None, step_text), pids, gpus, ev, since))
            continue
        if cls == "stuck":
            holding = f"still hold {t.mib(held)} on {t.gpus(gpus)}: " if held else "have "
            summary = (f"{t.plural(len(procs), '<defunct> process', '<defunct> processes')} ({sit.names(procs)}) "
                       f"{holding}threads alive in D inside the driver ({t.wchans(procs)}), so parent "
                       f"{_parent_words(sit, ppid)} cannot reap them")
            severity = "critical" if held > 0 else "high"
        else:
            summary = (f"{t.plural(len(procs), '<defunct> process', '<defunct> processes')} ({sit.names(procs)}) "
                       f"still listed with {t.mib(held)} on {t.gpus(gpus)}; parent {_parent_words(sit, ppid)}")
            severity = "high"
        step = signal_step(sit, procs, gpus, t.plural(len(procs), "worker") if len(procs) > 1 else f"PID {pids[0]}")
        out.append(finding("zombie", severity, summary, step, pids, gpus, ev, since))
    return out


def dstate(sit: Situation) -> list[Finding]:
    """Threads in uninterruptible sleep, grouped by where they wait (wchan)."""
    by_wchan: dict[str, list[tuple[Proc, object]]] = defaultdict(list)
    for p in sit.snap.processes:
        for th in p.d_threads:
            by_wchan[th.wchan or "?"].append((p, th))
        if p.state == "D" and not p.d_threads:
            by_wchan["?"].append((p, None))
    out = []
    for wchan, items in sorted(by_wchan.items()):
        procs = list({p.pid: p for p, _ in items}.values())
        pids = [p.pid for p in procs]
        gpus = _gpus(sit, procs)
        since = min(sit.since(p.pid, IN_D) for p in procs)
        on_gpu = any(sit.holds_gpu(p) for p in procs) or wchan.startswith(DRIVER_WCHAN)
        lasting = since < sit.snap.taken_at or any(p.state == "Z" for p in procs)
        severity = "high" if on_gpu and lasting else ("low" if on_gpu or lasting else "info")
        threads = [{"pid": p.pid, "tid": th.tid, "name": th.name, "wchan": th.wchan}
                   for p, th in items if th is not None]
        n = len(items)
        summary = (f"{t.plural(n, 'thread')} of {t.plural(len(procs), 'process', 'processes')} "
                   f"({sit.names(procs)}) in D state at {wchan}"
                   + (f" on {t.gpus(gpus)}" if gpus else "")
                   + (f" for {t.seconds(sit.age(since))}" if since < sit.snap.taken_at else ""))
        if on_gpu:
            step = signal_step(sit, procs, gpus, t.plural(len(procs), "process", "processes"))
        else:
            step = Advice(None, "Watch it: D state outside the GPU driver is usually I/O; it matters only if it lasts.")
        out.append(finding("d-state", severity, summary, step, pids, gpus,
                            {"pids": pids, "gpus": sorted(gpus), "wchan": wchan, "threads": threads,
                             "mib": _mib(sit, procs)}, since))
    return out


def orphans(sit: Situation) -> list[Finding]:
    """Live GPU workloads whose job is gone: re-parented, with positive evidence that the job
    around them ended (console/diagnosis/liveness.py). A detached job — nohup, setsid, a
    container's init, a service — is not one."""
    groups: dict[int, list[Proc]] = defaultdict(list)
    for p in sit.gpu_holders():
        if p.state in ("Z", "X") or in_d(p) or not sit.touchable(p) or not sit.workload(p):
            continue
        # a launcher that still runs its workers is their parent, not an orphan of anyone's
        if p.pid in sit.gpu_parents():
            continue
        if liveness(sit, p).verdict != ORPHANED:
            continue
        groups[p.ppid].append(p)
    out = []
    for ppid, procs in sorted(groups.items()):
        pids = [p.pid for p in procs]
        gpus = _gpus(sit, procs)
        held = _mib(sit, procs)
        since = min(sit.since(p.pid, PARENT, ppid) for p in procs)
        parent = "PID 1" if ppid == 1 else _parent_words(sit, ppid)
        # what says the job is gone (its group's leader, its launcher signalled), shared by the group
        gone = liveness(sit, procs[0]).job
        summary = (f"{t.plural(len(procs), 'GPU process', 'GPU processes')} ({sit.names(procs)}) "
                   f"lost their launcher: adopted by {parent}; {t.mib(held)} on {t.gpus(gpus)}"
                   + (f" ({gone[0]})" if gone else ""))
        who = t.plural(len(procs), "orphaned worker") if len(procs) > 1 else f"PID {pids[0]} ({label(procs[0])})"
        step = signal_step(sit, procs, gpus, who)
        out.append(finding("orphan", "high" if held > 0 else "low", summary, step, pids, gpus,
                            {"pids": pids, "gpus": sorted(gpus), "mib": held, "parent": ppid,
                             "processes": process_evidence(sit, procs)}, since))
    return out


def hidden_holders(sit: Situation, ghost_gpus: set[int], named: set[int] = frozenset()) -> list[Finding]:
    """Processes with /dev/nvidia* open that the driver does not list.

    On a GPU with memory no listed process accounts for, such a process is the suspect
    (high); elsewhere it holds no memory anyone can see and merely blocks a reset (low).
    """
    listed = sit.driver_pids()
    mps = mps_charged_gpus(sit)
    suspects: list[Proc] = []
    others: list[Proc] = []
    for p in sit.snap.processes:
        if not p.device_files or p.pid in listed or p.state == "Z" or not sit.touchable(p) \
                or not sit.workload(p) or is_mps_server(p) or p.pid in named:
            continue      # the node's own programs, monitors and MPS (mps_servers) hold devices all the
            # time; ``named``: host-side holders another finding names (a container's, foreign_pids)
        on = sit.gpus_of(p)
        if on & ghost_gpus or (not on and ghost_gpus):
            suspects.append(p)
        elif not (mps and (on & mps or not on)):     # under MPS the driver lists the server, not its clients:
            others.append(p)                          # the mps-server finding names them
    out = []
    for procs, severity in ((suspects, "high"), (others, "low")):
        if not procs:
            continue
        pids = [p.pid for p in procs]
        gpus = _gpus(sit, procs)
        files = sorted({f for p in procs for f in p.device_files})
        since = min(sit.since(p.pid, DEVICES) for p in procs)
        shown = f"{', '.join(files[:4])}{' …' if len(files) > 4 else ''}"
        who = f"{t.plural(len(procs), 'process', 'processes')} ({sit.names(procs)}){t.containers(procs)}"
        holds = t.verb(len(procs), "holds", "hold")
        if severity == "high":
            where = gpus & ghost_gpus or ghost_gpus
            summary = (f"{who} {holds} {shown} but the driver lists none of them; {t.gpus(where)} "
                       f"{t.verb(len(where), 'has', 'have')} memory no listed process accounts for")
            why = "they keep GPU contexts alive that the driver does not attribute to anyone"
        else:
            summary = f"{who} {holds} {shown} without memory the driver lists; they block a GPU reset"
            why = "only if a reset is needed: a reset refuses while any process holds the device"
        if severity == "low" and sit.last_action(rungs.SIGNALLING, pids) is None:
            # they hold no memory anyone can see: nothing to do unless a reset is needed (x does not stop them)
            step = Advice(None, f"Nothing to do unless a GPU reset is needed: a reset refuses while {who} "
                                f"{holds} the device; then stop {t.verb(len(procs), 'it', 'them')} first (t, "
                                "Confirm first).", tuple(pids), tuple(sorted(gpus)))
        else:           # the suspects, or holders the operator began to stop: the ladder
            step = kill_step(sit, procs, gpus, sit.names(procs), why)
        out.append(finding("hidden-holder", severity, summary, step, pids, gpus,
                           {"pids": pids, "gpus": sorted(gpus), "device_files": files,
                            "containers": t.container_places(procs),
                            "processes": process_evidence(sit, procs)}, since))
    return out


def foreign_pids(sit: Situation) -> list[Finding]:
    """PIDs the driver lists that /proc lacks: processes in another PID namespace (a container)."""
    if not sit.snap.processes:
        return []
    pmap = sit.pmap(sit.snap)
    missing = [dp for dp in sit.snap.driver_processes if dp.pid not in pmap or dp.local is False]
    if not missing:
        return []
    by_uuid = {g.uuid: g.index for g in sit.snap.gpus}
    gpus = {dp.gpu_index if dp.gpu_index is not None else by_uuid.get(dp.gpu_uuid) for dp in missing}
    gpus.discard(None)
    pids = sorted({dp.pid for dp in missing})
    held = sum(dp.used_memory_mib or 0 for dp in missing)
    names = sorted({t.clip(dp.name, 60) for dp in missing
                    if dp.name.strip() and not (dp.name.startswith("[") and dp.name.endswith("]"))})
    named = f" ({', '.join(names[:3])})" if names else ""
    summary = (f"the driver lists {t.plural(len(pids), 'PID')} {t.pids(pids)}{named} "
               f"that /proc does not have (or has as another process) — another PID namespace (a container); {t.mib(held)} on {t.gpus(gpus)}")
    host_side = [p for p in sit.live_holders(gpus) if p.pid not in sit.driver_pids()]
    if host_side and t.containers(host_side):
        summary += f"; held here by {sit.names(host_side)}{t.containers(host_side)}"
    if host_side:
        step = kill_step(sit, host_side, gpus, f"the processes holding these GPUs' device files here, "
                         f"{sit.names(host_side)}{t.containers(host_side, short=False)}",
                         "the driver reports them under PIDs of another namespace, which cannot be "
                         "signalled from here")
    else:
        dying = [p for p in sit.snap.processes if (in_d(p) or p.state == "Z") and p.pid not in sit.driver_pids()
                 and sit.touchable(p)]
        kill = sit.last_action(("kill-holders", "sigkill"), gpus=tuple(gpus))
        if kill and sit.age(kill.ts) < TEARDOWN_WINDOW_S:
            step = (signal_step(sit, dying, gpus, t.plural(len(dying), "killed holder")) if dying else
                    Advice("wait", f"Wait: the holders were killed {t.ago(sit.age(kill.ts))} and the driver "
                                 "still lists the container's PIDs while it tears their contexts down.", (),
                         tuple(gpus), max(WAIT_S, TEARDOWN_WINDOW_S - sit.age(kill.ts))))
        elif kill:
            step = reset_step(sit, tuple(gpus), f"the container's processes were killed and {t.mib(held)} "
                                                 "is still listed")
        else:
            step = Advice(None, "Find the container: no process visible here holds these GPUs; run the checks "
                              "on the host (or `docker top` / `crictl ps`) and stop the container there.")
    return [finding("foreign-pid", "high" if held > 0 else "low", summary, step, pids, gpus,
                     {"pids": pids, "gpus": sorted(gpus), "mib": held, "names": names,
                      "host_holders": [p.pid for p in host_side],
                      "containers": t.container_places(host_side)})]



def _session_like(proc: Proc) -> bool:
    prog = program_of(proc).lstrip("-")
    return (prog in SESSION_PROGRAMS or proc.name.lstrip("-") in SESSION_PROGRAMS
            or proc.name.startswith(("containerd-shim", "tmux")) or prog.startswith("sshd"))


def _other_job(parent: Proc, child: Proc) -> bool:
    """The parent is not part of the child's job: another session, or another process group of
    which the child's leader is not the parent (a launcher leads its workers' group; whatever
    started the launcher — a wrapper, a test runner — does not)."""
    if parent.sid is not None and child.sid is not None and parent.sid != child.sid:
        return True
    return (parent.pgid is not None and child.pgid is not None and parent.pgid != child.pgid
            and parent.pid != child.pgid)


def _job_root(sit: Situation, proc: Proc) -> Proc:
    """The top of a GPU job's process tree: climb parents until a shell, init or subreaper."""
    cur = proc
    seen = {cur.pid}
    while True:
        parent = sit.proc(cur.ppid)
        if (parent is None or parent.pid in seen or not sit.touchable(parent) or parent.state in ("Z", "X")
                or _session_like(parent) or _other_job(parent, cur)):
            return cur
        seen.add(parent.pid)
        cur = parent


#: the MPS server's program (a reset blocker: who.BLOCKER_DAEMONS), the driver charges its
#: clients' memory to it, and the control program that speaks to it
MPS_SERVER = "nvidia-cuda-mps-server"


#: after terminate_client, how long its verification window runs before diagnosis judges it
MPS_VERIFY_S = 10.0


def is_mps_server(proc: Proc) -> bool:
    return program_of(proc) == MPS_SERVER or proc.name == MPS_SERVER[:15]


def mps_charged_gpus(sit: Situation) -> set[int]:
    """GPUs on which the driver charges memory to an MPS server (its clients' memory)."""
    return {g for p in sit.gpu_holders() if is_mps_server(p) and sit.mib_of(p) > FREED_MIB
            for g in sit.gpus_of(p)}


def mps_servers(sit: Situation) -> list[Finding]:
    """GPU memory the driver charges to an MPS server (``nvidia-cuda-mps-server``): under MPS the
    driver lists the server in place of its clients, so the memory is the clients', and a signal
    to the server ends every client on its GPUs at once. The ladder never signals it (a reset
    blocker, not touchable); the next step goes through ``nvidia-cuda-mps-control``:

    - ``mps-clients``: ask the daemon for its servers and this server's clients (a read-only
      check), then Confirm ``terminate_client`` for the client that must go (the step's plan is
      made from the daemon's answer: console/actions/mps.py);
    - ``mps-quit``: once a terminate_client brought nothing back (its window over, the GPUs
      holding what they held before it), stop MPS as a whole (``quit``: every client);
    - after a quit the server still there: no rung (its clients are gone already; SIGTERM to the
      server itself, then a reset, are the operator's call)."""
    out = []
    for p in sit.gpu_holders():
        if not is_mps_server(p):
            continue
        held = sit.mib_of(p)
        if held <= FREED_MIB:
            continue
        gpus = sorted(sit.gpus_of(p))
        clients = [c for c in sit.snap.processes
                   if c.pid != p.pid and c.holds_devices and not sit.mib_of(c) and sit.touchable(c)]
        seen = f"; processes here that may be its clients: {sit.names(clients)}" if clients else ""
        summary = (f"the MPS server (PID {p.pid}) holds {t.mib(held)} on {t.gpus(gpus)}: its clients' memory, "
                   f"charged to the server{seen}")
        step = _mps_step(sit, p, gpus, clients, held)
        idle, severity, idle_words = _idle(sit, gpus)
        summary += idle_words
        out.append(finding("mps-server", severity, summary, step, (p.pid,), gpus,
                           {"server": p.pid, "mib": held, "gpus": gpus, "clients": [c.pid for c in clients],
                            "idle_s": round(idle)}))
    return out


def _mps_step(sit: Situation, server: Proc, gpus: list[int], clients: list[Proc], held: int) -> Advice:
    dont = f"Do not signal the MPS server: that ends every client on {t.gpus(gpus)}."
    ask = (f"`echo get_server_list | {MPS_CONTROL}`, `echo get_client_list {server.pid} | {MPS_CONTROL}`")
    last = sit.last_action(rungs.MPS_ACTIONS, gpus=gpus)
    running = [c for c in clients if c.state not in ("Z", "D", "T", "t") and not in_d(c)]
    if last is not None and sit.age(last.ts) >= MPS_VERIFY_S and _mps_freed_since(sit, gpus, last.ts) \
            and running and len(running) == len(clients):
        # what the stuck client held came back; what is left belongs to clients that run
        return Advice(None, f"Nothing stuck: {'terminate_client' if rungs.of(last.rung).settles_on == 'mps' else 'MPS'}"
                            f" {t.ago(sit.age(last.ts))} brought memory back on {t.gpus(gpus)}; the {t.mib(held)} "
                            f"left is its running clients' (PID {', '.join(str(c.pid) for c in running)}: "
                            f"{sit.names(running)}). `c` → mps-clients lists the "
                            f"daemon's clients; `t` stops one anyway. {dont}", (), tuple(gpus))
    if last is not None and sit.age(last.ts) >= MPS_VERIFY_S and not _mps_freed_since(sit, gpus, last.ts):
        if rungs.of(last.rung).settles_on == "mps-gone":
            return Advice(None, f"`echo quit | {MPS_CONTROL}` {t.seconds(sit.age(last.ts))} ago did not stop the MPS "
                              f"server (PID {server.pid}): every client has lost its GPU work already. What is "
                              f"left is SIGTERM to the server itself (t on PID {server.pid}, Confirm first), then a "
                              f"reset of {t.gpus(gpus)} (R, blockers first)", (), tuple(gpus))
        return Advice("mps-quit", f"terminate_client {t.seconds(sit.age(last.ts))} ago brought nothing back: stop MPS "
                                f"with every client (`echo quit | {MPS_CONTROL}`): every client on every GPU it "
                                f"serves loses its GPU work. {dont}", (server.pid,), tuple(gpus))
    return Advice("mps-clients", f"{dont} Ask the control daemon who its clients are ({ask}), then end the one that "
                               f"must go (`echo terminate_client {server.pid} CLIENT_PID | {MPS_CONTROL}`, Confirm "
                               f"first); stopping MPS (`echo quit | {MPS_CONTROL}`) ends every client.",
                (server.pid,), tuple(gpus))


def _mps_freed_since(sit: Situation, gpus: list[int], ts: float) -> bool:
    """The GPUs hold at least FREED_MIB less now than in the last reading before ``ts``."""
    before = None
    for h in sit.history:
        if h.taken_at <= ts:
            before = h
    if before is None:
        return False
    was = sum((g.memory_used_mib or 0) for g in before.gpus if g.index in gpus)
    now = sum((g.memory_used_mib or 0) for g in sit.snap.gpus if g.index in gpus)
    return was - now >= FREED_MIB


def holders(sit: Situation, covered: set[int]) -> list[Finding]:
    """Live GPU workloads no other finding is about: normal work. A job that computes, or runs
    detached (nohup, setsid, a container's init, a service), gets no signal advice — `t` stops it
    if the operator wants; an idle one is where to start if the memory must come back (SIGTERM
    the job's launcher and its GPU processes)."""
    jobs: dict[int, list[Proc]] = defaultdict(list)
    roots: dict[int, Proc] = {}
    for p in sit.gpu_holders():
        if (p.pid in covered or p.state in ("Z", "X") or in_d(p) or not sit.touchable(p)
                or not sit.workload(p) or is_mps_server(p)):
            continue          # an MPS server is never signalled by the ladder (mps_servers)
        root = _job_root(sit, p)
        roots[root.pid] = root
        jobs[root.pid].append(p)
    out = []
    for rpid, procs in sorted(jobs.items()):
        root = roots[rpid]
        members = ([root] if root not in procs else []) + procs
        pids = [p.pid for p in members]
        gpus = _gpus(sit, procs)
        held = _mib(sit, procs)
        if len(members) == 1:
            summary = f"PID {root.pid} ({label(root)}) is running and holds {t.mib(held)} on {t.gpus(gpus)}"
            who = f"PID {root.pid} ({label(root)})"
        else:
            workers = [p for p in procs if p is not root]
            summary = (f"PID {root.pid} ({_command_of(root)}) is running with "
                       f"{t.plural(len(workers), 'GPU process', 'GPU processes')} ({sit.names(workers)}) "
                       f"holding {t.mib(held)} on {t.gpus(gpus)}")
            who = f"PID {root.pid} and its {t.plural(len(workers), 'GPU process', 'GPU processes')}"
        lives = [liveness(sit, p) for p in members]
        busy = next((lv for lv in lives if lv.computing), None)
        detached = next((lv for lv in lives if lv.verdict == DETACHED), None)
        idle, severity, idle_words = _idle(sit, gpus)
        targeted = sit.last_action(rungs.SIGNALLING, pids) is not None
        unkillable = [lv for lv in lives if lv.verdict == UNKILLABLE]
        if unkillable:
            severity = "high" if held > 0 else "low"
            summary += f"; PID {unkillable[0].pid} does not die ({unkillable[0].why[0]})"
        if targeted or unkillable:            # the operator chose to stop it: the ladder goes on from there
            step = signal_step(sit, members, gpus, who, purpose=" if this memory must come back")
        elif busy is not None:
            doing = busy.work or busy.why
            step = Advice(None, f"Nothing stuck: PID {busy.pid} is computing ({'; '.join(doing[:2])}); "
                              f"`t` stops {who} anyway (Confirm first).", (), tuple(gpus))
            severity, idle_words = "info", ""
        elif detached is not None:
            step = Advice(None, f"A normal job, detached ({'; '.join(detached.why[:2])}): nothing says it is stuck; "
                              f"`t` stops {who} if its memory must come back (Confirm first).", (), tuple(gpus))
        elif (all(lv.verdict == UNKNOWN and lv.cpu_ticks_per_s is None for lv in lives)
              and all(p.cpu_ticks is not None for p in members)):
            # one reading: whether it computes shows in its CPU time between two (unknown is not idle)
            step = Advice("wait", "Wait for a second reading: whether this job computes shows in its CPU time "
                                  f"between two, and one is in; `t` stops {who} anyway (Confirm first).", (),
                          tuple(gpus), wait_s=LIVENESS_WAIT_S)
        else:
            step = signal_step(sit, members, gpus, who, purpose=" if this memory must come back")
        summary += idle_words
        out.append(finding("holder", severity, summary, step, pids, gpus,
                           {"pids": pids, "gpus": sorted(gpus), "mib": held, "root": root.pid,
                            "idle_s": round(idle), "processes": process_evidence(sit, members)}))
    return out


#: the wait a first reading proposes before a job's liveness is known (its CPU time over two readings)
LIVENESS_WAIT_S = 2.0
#: a job holding memory at 0 % utilisation this long is a low finding, and this long a high one
#: (the node's history goes back 5 minutes; the fleet's window is 10 by default)
IDLE_LOW_S = 60.0
IDLE_HIGH_S = 290.0


def _idle(sit: Situation, gpus) -> tuple[float, str, str]:
    """How long ``gpus`` have held memory at 0 % (idle_for), the severity that gives memory held
    there (info, then low, then high: what the fleet calls an idle-memory suspect), and the
    words the summary gains ("" while info)."""
    idle = idle_for(sit, gpus)
    severity = "high" if idle >= IDLE_HIGH_S else "low" if idle >= IDLE_LOW_S else "info"
    return idle, severity, (f", at 0 % utilisation for {t.seconds(idle)}" if severity != "info" else "")


def idle_for(sit: Situation, gpus) -> float:
    """How long every one of ``gpus`` has held memory at 0 % utilisation (0 when one is busy now)."""
    want = frozenset(gpus)

    def idle(snap) -> bool:
        return bool(want) and want <= memo(snap, "idle_gpus", _idle_gpus)
    if not idle(sit.snap):
        return 0.0
    since = sit.snap.taken_at
    for h in reversed(sit.history):
        if not idle(h):
            break
        since = h.taken_at
    return max(0.0, sit.snap.taken_at - since)


def _idle_gpus(snap) -> frozenset[int]:
    """The GPUs of a reading that held memory at 0 % utilisation (the last of an index that
    repeats decides), once per reading: the history's are read again every diagnosis."""
    by = {g.index: g for g in snap.gpus}
    return frozenset(i for i, g in by.items() if g.utilization_pct == 0 and (g.memory_used_mib or 0) > FREED_MIB)


def _command_of(proc: Proc) -> str:
    return t.clip(proc.cmdline or proc.name, 60) or "?"
