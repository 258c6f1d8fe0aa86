"""Is the job around a GPU process alive? Decided from evidence, never from PPID alone.

The signals, each kept in the finding's evidence so a person can argue with the verdict:
- re-parented: its parent is PID 1 or a child subreaper (systemd --user, tini, a supervisor:
  adopted), a poll saw its parent change, or it sits under a parent outside its own process
  group whose leader is gone (the kernel moved it there: the structure says so, whatever the
  adopter is called);
- the leaders of its process group and its session: does the process that started the group
  (torchrun, the launcher, the job's shell) still exist?
- is it computing: its own SM share, its GPU's utilisation where it is the GPU's only process, and
  its CPU time over the last polls;
- was its launcher signalled by an action in the timeline;
- a SIGKILL sent but not taken (pending while it sits in D, or in R inside the driver).

Verdicts: *unkillable* (SIGKILL pending and not taken: no signal helps), *orphaned* (re-parented,
and positive evidence that the job around it is gone: its launcher was signalled, or its group's
leader is gone and it is not computing), *detached* (re-parented or its own session, but not
orphaned: nohup, setsid, a container's init, a service — a normal job), *computing*, *idle*,
*unknown* (no evidence either way yet). Pure.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from console import rungs
from console.diagnosis import text as t
from console.diagnosis.context import Situation
from console.diagnosis.history import same_process
from console.diagnosis.roles import label
from console.model import Proc

UNKILLABLE = "unkillable"
ORPHANED = "orphaned"
DETACHED = "detached"
COMPUTING = "computing"
IDLE = "idle"
UNKNOWN = "unknown"

#: CPU time rising this fast (clock ticks a second; USER_HZ is 100 on Linux: 10 % of a core)
#: means the process computes; under IDLE_TICKS_PER_S it does not
BUSY_TICKS_PER_S = 10.0
IDLE_TICKS_PER_S = 1.0
USER_HZ = 100
#: a GPU this busy (its only process's), or a process's SM share this high, means it computes; below,
#: telemetry noise and a spinning wait look alike (a stuck orphan's GPU can read 2-3 %)
BUSY_UTIL_PCT = 10
BUSY_SM_PCT = 5
#: parents that adopt orphans instead of PID 1 (PR_SET_CHILD_SUBREAPER users) by their name;
#: any other adopter shows in the structure (see the module's doc)
SUBREAPERS = ("systemd", "containerd-shim", "containerd-shim-runc-v2", "tini", "docker-init",
              "dumb-init", "catatonit", "conmon", "s6-svscan", "runsv", "supervisord")


@dataclass(frozen=True)
class Liveness:
    pid: int
    verdict: str
    ppid: int
    adopted_by: str | None = None          # "PID 1", "systemd (PID 812)": re-parented to it
    former_parent: int | None = None       # the parent a poll saw it lose
    pgid: int | None = None
    group_leader_alive: bool | None = None
    sid: int | None = None
    session_leader_alive: bool | None = None
    sm_pct: int | None = None
    gpu_util: dict[int, int | None] = field(default_factory=dict)
    cpu_ticks_per_s: float | None = None
    computing: bool | None = None
    launcher_signalled: str | None = None  # "sigkill 40 s ago": an action reached its launcher
    sigkill_pending: bool | None = None
    pending_for_s: float | None = None
    state: str = ""
    why: tuple[str, ...] = ()              # the evidence in words, most telling first
    work: tuple[str, ...] = ()             # ... of them, what it is doing (SM share, CPU, GPU utilisation)
    job: tuple[str, ...] = ()              # ... and whether the job around it is there (group leader, launcher)

    def evidence(self) -> dict[str, Any]:
        return {"liveness": self.verdict, "ppid": self.ppid, "adopted_by": self.adopted_by,
                "former_parent": self.former_parent, "pgid": self.pgid,
                "group_leader_alive": self.group_leader_alive, "sid": self.sid,
                "session_leader_alive": self.session_leader_alive, "sm_pct": self.sm_pct,
                "gpu_util_pct": {str(k): v for k, v in sorted(self.gpu_util.items())},
                "cpu_pct": None if self.cpu_ticks_per_s is None else round(100 * self.cpu_ticks_per_s / USER_HZ, 1),
                "computing": self.computing, "launcher_signalled": self.launcher_signalled,
                "sigkill_pending": self.sigkill_pending, "pending_for_s": self.pending_for_s,
                "state": self.state, "liveness_why": list(self.why)}

    def words(self) -> str:
        return f"{self.verdict}: " + "; ".join(self.why) if self.why else self.verdict


def _alive(sit: Situation, pid: int | None, me: Proc) -> bool | None:
    if pid is None or pid <= 0:
        return None                 # not read, or a leader in a namespace this reader cannot see
    if pid == me.pid:
        return True
    leader = sit.proc(pid)
    return leader is not None and leader.state not in ("Z", "X")


def cpu_rate(sit: Situation, proc: Proc) -> float | None:
    """Clock ticks of CPU a second since the last poll that read this process (None: no such poll)."""
    if proc.cpu_ticks is None:
        return None
    if sit.tracks is not None:
        track = sit.tracks.get(proc.pid)
        if track is None or not same_process(track, proc) or track.cpu_ticks is None or track.cpu_at is None:
            return None
        before, at = track.cpu_ticks, track.cpu_at
    else:
        before = at = None
        for h in reversed(sit.history):
            old = sit.pmap(h).get(proc.pid)
            if old is None or not same_process(old, proc):
                break
            if old.cpu_ticks is not None:
                before, at = old.cpu_ticks, h.taken_at
                break
        if before is None or at is None:
            return None
    dt = sit.snap.taken_at - at
    if dt <= 0:
        return None
    return max(0.0, (proc.cpu_ticks - before) / dt)


def pending_since(sit: Situation, proc: Proc) -> float | None:
    """Since when a SIGKILL has been pending on it (this poll's time when first seen now)."""
    if not proc.sigkill_pending:
        return None
    if sit.tracks is not None:
        track = sit.tracks.get(proc.pid)
        if track is not None and same_process(track, proc) and track.pending is not None:
            return track.pending
        return sit.snap.taken_at
    since = sit.snap.taken_at
    for h in reversed(sit.history):
        old = sit.pmap(h).get(proc.pid)
        if old is None or not same_process(old, proc) or not old.sigkill_pending:
            break
        since = h.taken_at
    return since


def _adopter(sit: Situation, proc: Proc, leader_alive: bool | None) -> str | None:
    """Who adopted it, when it was re-parented (None: it runs under its own launcher)."""
    if proc.ppid == 1:
        return "PID 1"
    parent = sit.proc(proc.ppid)
    if parent is None:
        return None
    name = f"{label(parent)} (PID {parent.pid})"
    if parent.name in SUBREAPERS or label(parent) in SUBREAPERS or parent.name.startswith("containerd-shim"):
        return name
    former = sit.former_parent(proc.pid)
    if former is not None and former != proc.ppid and sit.proc(former) is None:
        return name
    # the kernel put it under a parent outside its own process group, whose leader is gone
    if (leader_alive is False and proc.pgid is not None and proc.pgid != proc.pid
            and parent.pgid is not None and parent.pgid != proc.pgid):
        return name
    return None


def _sole_holder(sit: Situation, proc: Proc, gpu: int) -> bool:
    listed = [pid for pid, on in sit.driver_gpus().items() if gpu in on]
    return listed == [proc.pid]


def _signalled(sit: Situation, proc: Proc, leaders: set[int]) -> str | None:
    for a in reversed(sit.actions):
        if a.rung not in rungs.SIGNALLING:
            continue
        reached = set(a.pids) | {pid for pid, _parent, _name in a.family}
        if reached & leaders:
            return f"{a.rung} {t.ago(sit.age(a.ts))} to PID {min(reached & leaders)}"
    return None


def liveness(sit: Situation, proc: Proc) -> Liveness:
    """The verdict on one GPU process and every signal it rests on (see the module's doc)."""
    return sit.per_proc("liveness", proc, lambda p: _judge(sit, p))


def _judge(sit: Situation, proc: Proc) -> Liveness:
    work: list[str] = []          # what it is doing: its SM share, CPU time, GPU utilisation
    gl = _alive(sit, proc.pgid, proc)
    sl = _alive(sit, proc.sid, proc)
    adopted = _adopter(sit, proc, gl)
    former = sit.former_parent(proc.pid)
    gpus = sorted(sit.gpus_of(proc))
    util = {g: (sit.snap.gpu(g).utilization_pct if sit.snap.gpu(g) else None) for g in gpus}
    rate = cpu_rate(sit, proc)
    computing: bool | None = None
    if proc.gpu_sm_pct is not None and proc.gpu_sm_pct >= BUSY_SM_PCT:
        computing = True
        work.append(f"its SM share is {proc.gpu_sm_pct} %")
    gpus_idle = bool(util) and all(u == 0 for u in util.values())
    if rate is not None and rate >= BUSY_TICKS_PER_S:
        # (the words say no figure: a rate moves from poll to poll; the evidence has it, cpu_pct)
        if gpus_idle:       # a CPU spin over idle GPUs (a hang in a busy loop, the seed's capture) is no GPU work
            work.append("its CPU busy while its GPUs read 0 %: spinning, not computing on the GPU")
        else:
            computing = True
            work.append("its CPU time rising")
    busy_gpus = [g for g, u in util.items() if u is not None and u >= BUSY_UTIL_PCT and _sole_holder(sit, proc, g)]
    if busy_gpus:
        computing = True
        work.append(f"{t.gpus(busy_gpus)} at {max(util[g] or 0 for g in busy_gpus)} % with no other process")
    if computing is None and rate is not None and rate < IDLE_TICKS_PER_S \
            and all((u or 0) < BUSY_UTIL_PCT for u in util.values()) and (proc.gpu_sm_pct or 0) < BUSY_SM_PCT:
        computing = False
        work.append(f"idle: {t.gpus(gpus) if gpus else 'its GPUs'} under {BUSY_UTIL_PCT} %, no CPU time used")
    leaders = {p for p in (proc.pgid, proc.sid, former) if p and p > 0 and p != proc.pid}
    signalled = _signalled(sit, proc, leaders)
    pending = pending_since(sit, proc)
    in_driver = bool(proc.d_threads) or proc.state in ("D", "R")
    base = dict(pid=proc.pid, ppid=proc.ppid, adopted_by=adopted, former_parent=former, pgid=proc.pgid,
                group_leader_alive=gl, sid=proc.sid, session_leader_alive=sl, sm_pct=proc.gpu_sm_pct,
                gpu_util=util, cpu_ticks_per_s=None if rate is None else round(rate, 1), computing=computing,
                launcher_signalled=signalled, sigkill_pending=proc.sigkill_pending,
                pending_for_s=None if pending is None else round(sit.snap.taken_at - pending, 1),
                state=proc.state)
    if pending is not None and in_driver and proc.state != "Z":
        where = "in D" if proc.d_threads or proc.state == "D" else "running inside the driver"
        why = (f"a SIGKILL pending for {t.seconds(sit.snap.taken_at - pending)}, not taken ({where})", *work)
        return Liveness(verdict=UNKILLABLE, why=why, work=tuple(work), **base)
    group = (f"its process group's leader PID {proc.pgid} is gone" if gl is False
             else "it leads its own process group" if proc.pgid == proc.pid
             else f"its process group's leader PID {proc.pgid} lives" if gl else None)
    # what says whether the job around it is there: its group's leader, its launcher
    job = ([group] if group and gl is not None and proc.pgid != proc.pid else []) + (
        [f"its launcher was signalled ({signalled})"] if signalled else [])
    session = [f"its session's leader PID {proc.sid} is gone"] if sl is False and proc.sid else []
    why = ((f"re-parented to {adopted}",) if adopted is not None else ()) + tuple(work) + (
        (group,) if group else ()) + tuple(session) + ((job[-1],) if signalled else ())
    words = dict(why=why, work=tuple(work), job=tuple(job))
    if adopted is not None:
        if signalled or (gl is not True and computing is not True):
            return Liveness(verdict=ORPHANED, **words, **base)
        return Liveness(verdict=DETACHED, **words, **base)
    if proc.sid == proc.pid and proc.ppid == 1:
        return Liveness(verdict=DETACHED, **words, **base)
    verdict = COMPUTING if computing else IDLE if computing is False else UNKNOWN
    return Liveness(verdict=verdict, **words, **base)


def process_evidence(sit: Situation, procs) -> list[dict[str, Any]]:
    """Per process, every signal a verdict about it rests on: its role and why, its parent and
    leaders, its utilisation and CPU time, re-parenting, a pending SIGKILL (snapshot --json's
    ``evidence.processes``; the finding's details show it in words)."""
    out = []
    for p in list(procs)[:32]:
        role = sit.role(p)
        ev = {"pid": p.pid, "name": sit.name(p), "user": p.user, "exe": p.exe, **role.evidence(),
              **liveness(sit, p).evidence()}
        out.append(ev)
    return out


def evidence_words(ev: dict[str, Any]) -> str:
    """One process's evidence (process_evidence) in words, for the finding's details: 'PID 5000
    python3 (alice): a workload (job); detached: re-parented to PID 1; it leads its own process group'."""
    def clean(v: object) -> str:
        return " ".join(str(v).split())[:200]
    head = f"PID {ev.get('pid')} {clean(ev.get('name') or '?')}" + (f" ({clean(ev['user'])})" if ev.get("user") else "")
    role = f"{ev.get('role', '?')} ({clean(ev.get('role_what') or '')})"
    role_why = [clean(w) for w in (ev.get("role_why") or [])][:4]
    if role_why:
        role += " — " + ", ".join(role_why)
    live = clean(ev.get("liveness") or "?")
    if isinstance(ev.get("cpu_pct"), (int, float)):
        live += f" (CPU {ev['cpu_pct']:g} % of a core)"
    why = [clean(w) for w in (ev.get("liveness_why") or [])][:6]
    return f"{head}: {role}; {live}" + (": " + "; ".join(why) if why else "")


def usage(sit: Situation, proc: Proc) -> tuple[str, bool]:
    """("GPU 0 at 100 %, SM 95 %", computing?) of a process, for Confirm's targets: what its GPUs
    and its own SM share read now, and whether the evidence says it computes."""
    util = liveness(sit, proc).gpu_util
    mine = {int(k) for k in proc.gpu_memory_mib if str(k).isdigit()} & set(util) or set(util)
    by_pct: dict[int, list[int]] = {}
    for g in sorted(mine):
        if util[g] is not None:
            by_pct.setdefault(util[g], []).append(g)
    parts = [f"{t.gpus(gs)} at {pct} %" for pct, gs in sorted(by_pct.items(), key=lambda x: x[1])]
    if proc.gpu_sm_pct is not None:
        parts.append(f"SM {proc.gpu_sm_pct} %")
    return ", ".join(parts), bool(liveness(sit, proc).computing)
