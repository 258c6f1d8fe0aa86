"""The action layer: what a key does to a node, shown before it runs, guarded while it runs.

``plan_action`` turns a snapshot, a rung and the operator's selection into an ``ActionPlan``:
the exact command lines as a shell would read them (even where signals go through psutil or
a pidfd), one row per process it touches, and why any selected process was left out (PID 1,
the console itself or its SSH session, kernel threads, processes no longer there). It is pure.

``execute`` (console/actions/run.py) runs a plan under an ``ActionPolicy`` (``--read-only``
refuses, ``--dry-run`` records without running), records the action before sending anything,
re-checks every target's start time as it signals it, re-reads the node to verify the effect
and writes the outcome::

    plan = plan_action(snap, "sigkill", pids=tagged)
    outcome = await execute(plan, source, policy=ActionPolicy(), timeline=tl, monitor=mon)
    outcome.entry                    # the `action` entry, on disk before the first signal
    outcome.outcome_entry.freed_mib  # what the first verification window saw
    outcome.watch                    # still watching until the rung's deadline (cancel() on quit)

Rungs: console/rungs.py (``rungs.actions()``; "wait" is the wait-and-reread check, not an
action); reload-driver and reboot are palette-only and ask for the node's name.

``plan_custom`` plans a command line of the operator's own (the last entry of the check
picker, "Check: custom" in the palette): whatever it does, it may change the node, so it is
an action like any rung — Confirm shows the exact line, ``--read-only`` refuses it,
``--dry-run`` records it, and it is recorded as an ``action`` entry. Only the built-in
checks (console/checks/registry.py) run without Confirm: they are read-only by construction.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Iterable, Mapping, Sequence

from console import rungs
from console.actions import ladder
from console.actions.verify import memory_of
from console.diagnosis import text as t
from console.diagnosis import who
from console.diagnosis.context import Situation
from console.diagnosis.liveness import usage
from console.model import NodeSnapshot, Proc
from console.textsafe import one_line

VERIFY_WINDOW_S = rungs.VERIFY_WINDOW_S
#: the custom entry as the check picker and the palette list it (always the picker's last)
CUSTOM_DESCRIPTION = ("Run a command of your own on the node: an action (Confirm first; refused under "
                      "--read-only, recorded only under --dry-run)")
CUSTOM_COMMAND_LIMIT = 4096


@dataclass(frozen=True)
class ActionTarget:
    """One process an action touches, as the Confirm modal lists it (and the guard checks it)."""
    pid: int
    user: str | None
    state: str
    name: str                       # readable name (renamed workers show as in argv)
    cmdline: str
    gpu_memory_mib: Mapping[str, int | None] = field(default_factory=dict)
    start_ticks: int | None = None  # /proc/PID/stat field 22 at plan time (PID-reuse guard)
    create_time: float | None = None
    threads_in_d: int = 0
    why: str = ""                   # why it is a target ("holds /dev/nvidia3"), where it is not obvious
    usage: str = ""                 # its GPUs' utilisation and its SM share at plan time ("GPU 0 at 100 %, SM 95 %")
    busy: bool = False              # the evidence says it computes (diagnosis/liveness.py): Confirm marks it
    ppid: int | None = None         # its parent at plan time (a parent that starts it again: a respawn)
    pgid: int | None = None         # its process group and session at plan time: a worker started
    sid: int | None = None          # with setsid does not go with its parent's group or terminal

    @property
    def gpu_total_mib(self) -> int:
        return sum(v for v in self.gpu_memory_mib.values() if v)

    @classmethod
    def of(cls, proc: Proc) -> "ActionTarget":
        return cls(pid=proc.pid, user=proc.user, state=proc.state, name=who.label(proc),
                   cmdline=proc.cmdline, gpu_memory_mib=dict(proc.gpu_memory_mib),
                   start_ticks=proc.start_ticks, create_time=proc.create_time,
                   threads_in_d=proc.threads_in_d, ppid=proc.ppid, pgid=proc.pgid, sid=proc.sid)


@dataclass(frozen=True)
class ActionPlan:
    node: str
    rung: str
    title: str                                  # "SIGKILL 9 processes"
    commands: tuple[str, ...]                   # exactly as a shell would read them
    targets: tuple[ActionTarget, ...] = ()      # processes signalled (or, for B, stopped)
    gpus: tuple[int, ...] = ()                  # GPUs of interest (verified before/after)
    refusals: tuple[str, ...] = ()              # why selected processes were left out
    notes: tuple[str, ...] = ()                 # preconditions not met (shown, not enforced)
    destructive: bool = True
    typed_confirmation: str | None = None       # the node name to type (driver reload, reboot)
    memory_before: Mapping[str, int | None] = field(default_factory=dict)   # from the snapshot
    expected_mib: Mapping[str, int | None] = field(default_factory=dict)    # targets' share per GPU
    taken_at: float | None = None               # the snapshot's time
    deadline_s: float = VERIFY_WINDOW_S
    verify_s: float = VERIFY_WINDOW_S          # the first verification window (the outcome's)
    signal_name: str | None = None              # the "signal" rung's choice (ladder.SIGNALS)
    #: the targets' descendants at plan time (other process groups and sessions included): each
    #: is verified after the action, so one that outlives its parent is named in the outcome
    descendants: tuple[ActionTarget, ...] = ()

    @property
    def signal(self) -> str | None:
        """TERM/KILL for the signalling rungs, the chosen signal for "signal", else None."""
        return self.signal_name or rungs.of(self.rung).signal


@dataclass(frozen=True)
class ActionPolicy:
    read_only: bool = False     # --read-only: every destructive plan is refused here
    dry_run: bool = False       # --dry-run: commands go to the timeline, nothing runs

    def refusal(self, plan: ActionPlan) -> str | None:
        if self.read_only and plan.destructive:
            return (f"read-only: {plan.title} on {plan.node} not run "
                    "(the console was started with --read-only)")
        return None


# ---------------------------------------------------------------- planning

def plan_action(snap: NodeSnapshot, rung: str, *, pids: Sequence[int] = (),
                gpus: Sequence[int] = (), signal: str | None = None) -> ActionPlan:
    """The plan for one rung on one node, from the latest snapshot. Pure; never signals anything.

    - sigterm/sigkill: the selected/tagged ``pids`` (nothing is ever chosen by name).
    - signal: the same with the operator's ``signal`` (one of ladder.SIGNALS, the F9 menu);
      TERM and KILL are planned as sigterm and sigkill.
    - kill-holders: ``pids`` when given (a finding's targets), else every process the snapshot
      found holding the ``gpus``' device files or listed by the driver on them (all GPUs when
      empty), each listed by PID; reset-blocker daemons are left to clear-blockers.
    - clear-blockers: stop each reset-blocker daemon running (display server, MPS, DCGM and its
      exporter, NVSM, IMEX, fabric manager, persistenced: who.stop_of), unload nvidia_drm when
      modeset=Y, then persistence mode off on the ``gpus`` (all with it on when empty); a daemon
      run by Kubernetes gets a note, not a command.
    - reset: ``nvidia-smi -r -i N`` for the ``gpus`` (default: every GPU still holding memory).
    - reload-driver / reboot: the node's name must be typed to confirm.
    PID 0-2, kernel threads and ``snap.own_pids`` are refused with a reason, whatever is asked.
    """
    r = rungs.BY_ID.get(rung)
    if r is None or rung not in rungs.actions():
        extra = f" ('{rung}' is the {r.check} check)" if r is not None and r.check else ""
        raise ValueError(f"unknown action {rung!r}; one of {', '.join(rungs.actions())}{extra}")
    gpus = tuple(sorted(dict.fromkeys(int(g) for g in gpus)))
    pids = tuple(dict.fromkeys(int(p) for p in pids))
    sig = None
    if r.chooses_signal:             # a TERM or a KILL chosen from the menu is that rung's own
        sig = ladder.signal_name(signal or r.signal or "TERM")
        r = rungs.sending(sig) or r
    return _PLANS[r.plans](snap, r.id, pids, gpus, sig if r.chooses_signal else None)


def _mps_plan(snap: NodeSnapshot, rung: str, *_: object) -> ActionPlan:
    raise ValueError(f"{rung} is planned from the MPS control daemon's answer (console/actions/mps.py)")


def plan_restore(snap: NodeSnapshot, commands: Sequence[str], gpus: Sequence[int] = ()) -> ActionPlan:
    """Put back what B stopped: ``commands`` (a finding's, diagnosis/node.py blockers_off), each
    one of the lines who.restore_commands makes — persistence mode on, a blocker daemon's unit
    started — and still needed in this reading; anything else is refused, never run."""
    every = who.restore_commands(snap, tuple(d.program for d in who.BLOCKER_DAEMONS), gpus)
    lines = [c for c in commands if c in every]
    refusals = [f"not a restore step (or no longer needed): {c}" for c in commands if c not in every]
    if not lines and not refusals:
        refusals = ["nothing B stopped is still off"]
    on = tuple(sorted(gpus)) or tuple(g.index for g in snap.gpus if g.persistence_mode is False)
    what = ", ".join(c.removeprefix("systemctl start ") if c.startswith("systemctl") else "persistence mode"
                     for c in lines)
    return finish_plan(snap, "restore", f"Restore what B stopped: {what}" if what else "Restore what B stopped",
                   lines, on, refusals=refusals)


def plan_custom(node: str, command: str, snap: NodeSnapshot | None = None) -> ActionPlan:
    """A command line of the operator's own, exactly as typed, as an action on ``node``.

    ``snap`` (the node's latest snapshot, if any) gives the memory before; the line itself is
    kept byte for byte (Confirm and the timeline show it escaped). ValueError (one line) for
    an empty line, one with a NUL, or one longer than CUSTOM_COMMAND_LIMIT characters.
    """
    line = command.strip()
    if not line:
        raise ValueError("custom: type a command line")
    if "\x00" in line:
        raise ValueError("custom: a command line cannot hold a NUL byte")
    if len(line) > CUSTOM_COMMAND_LIMIT:
        raise ValueError(f"custom: the command line is longer than {CUSTOM_COMMAND_LIMIT} characters")
    gpus = tuple(g.index for g in snap.gpus) if snap is not None else ()
    custom = rungs.CUSTOM
    return ActionPlan(node=node, rung=custom.id, title=f"Run your own command `{one_line(line, 60)}`",
                      commands=(line,), gpus=gpus, destructive=True,
                      notes=("a command of your own may change the node: it runs as the console's user "
                             "(often root), exactly as shown",),
                      memory_before=memory_of(snap, gpus) if snap is not None else {},
                      taken_at=snap.taken_at if snap is not None else None,
                      deadline_s=custom.deadline_s, verify_s=custom.verify_s)


def finish_plan(snap: NodeSnapshot, rung: str, title: str, commands: Sequence[str], gpus: Sequence[int], *,
            targets: Sequence[ActionTarget] = (), refusals: Sequence[str] = (), notes: Sequence[str] = (),
            expected: Mapping[str, int | None] | None = None, typed: str | None = None,
            signal: str | None = None, descendants: Sequence[Proc] = ()) -> ActionPlan:
    gpus = tuple(sorted(set(gpus)))
    return ActionPlan(node=snap.name, rung=rung, title=title, commands=tuple(commands), targets=tuple(targets),
                      gpus=gpus, refusals=tuple(refusals), notes=tuple(notes), destructive=True,
                      typed_confirmation=typed, memory_before=memory_of(snap, gpus),
                      expected_mib=dict(expected or {}), taken_at=snap.taken_at,
                      deadline_s=rungs.of(rung).deadline_s, verify_s=rungs.of(rung).verify_s,
                      signal_name=signal, descendants=tuple(ActionTarget.of(p) for p in descendants))


def refusal_reason(snap: NodeSnapshot, pid: int) -> str | None:
    """Why this PID must not be signalled from this snapshot, or None when it may be: the
    protected processes (console/diagnosis/who.py), and what the snapshot cannot vouch for."""
    protected = who.protection_reason(snap, pid)
    if protected is not None:
        return protected
    proc = snap.proc(pid)
    if proc is None:
        if any(dp.pid == pid for dp in snap.driver_processes):
            return (f"PID {pid} is listed by the driver but not visible here (another PID namespace); "
                    "its holders are found through their device files")
        return f"PID {pid} is gone (not in the latest snapshot)"
    if proc.start_ticks is None and proc.create_time is None:
        return f"PID {pid}: start time unknown, so a reused PID could not be told apart"
    return None


def _signal_plan(snap: NodeSnapshot, rung: str, pids: tuple[int, ...], gpus: tuple[int, ...],
                 signal: str | None = None) -> ActionPlan:
    refusals: list[str] = []
    notes: list[str] = []
    every_holder = rungs.of(rung).every_holder
    if every_holder and not pids:
        pids = tuple(_holder_candidates(snap, gpus, refusals))
        if gpus:
            pids = _this_gpus_holders(snap, pids, gpus, refusals)
    chosen: list[Proc] = []
    for pid in pids:
        reason = refusal_reason(snap, pid)         # None: the snapshot has the process
        proc = snap.proc(pid)
        if reason is None and proc is not None and every_holder and who.blocker_daemon(proc) is not None:
            reason = f"PID {pid} ({who.label(proc)}) is a reset blocker: clear-blockers (B) stops it"
        if reason is None and proc is not None:
            chosen.append(proc)
        else:
            refusals.append(reason or f"PID {pid} is gone (not in the latest snapshot)")
    ok = [p.pid for p in chosen]
    targets = [ActionTarget.of(p) for p in chosen]
    if chosen:
        targets = _with_usage(snap, targets, chosen)
        busy = [tg for tg in targets if tg.busy]
        if busy:
            notes.append(f"{len(busy)} of the targets {'is' if len(busy) == 1 else 'are'} computing "
                         f"({', '.join(f'PID {tg.pid}: {tg.usage}' for tg in busy[:3])}): a running job, "
                         "not a stuck one — stop it only if that is what you mean")
    if every_holder and gpus:     # F on GPU 3: say why each one is a holder of GPU 3
        targets = [dataclasses.replace(tgt, why=holder_reason(snap, p, gpus)) for tgt, p in zip(targets, chosen)]
    lines = ladder.commands_for(rung, snap, pids=ok, signal=signal) if ok else []
    if not pids and not refusals:
        refusals.append("no process selected" if not every_holder
                        else f"nothing holds {t.gpus(gpus) if gpus else 'the GPUs'}")
    on = set(gpus)
    expected: dict[str, int | None] = {}
    # what the signal brings down: the targets and their descendants (a launcher's workers
    # exit with it), so memory before/after covers every GPU any of them holds
    below = who.descendants(snap, ok)
    family = chosen + below
    for proc in family:
        held = {int(k) for k in proc.gpu_memory_mib if str(k).isdecimal()}
        held |= who.device_gpus(proc) | who.driver_gpus(snap, proc.pid)
        if not gpus:
            on |= held
        for k, v in proc.gpu_memory_mib.items():
            if str(k).isdecimal():
                expected[str(k)] = (expected.get(str(k)) or 0) + (v or 0)
    if expected:   # the targets' share is known: GPUs they hold nothing on have nothing to give back
        expected = {str(g): expected.get(str(g), 0) for g in on}
    sig = signal or rungs.of(rung).signal
    n = len(targets)
    noun = t.plural(n, "process", "processes")
    if every_holder:
        title = f"SIGKILL {t.plural(n, 'holder')} of {t.gpus(gpus) if gpus else 'the GPUs'}"
        if gpus:
            reach = _reach(snap, family) | set(gpus)
            if reach - set(gpus):        # a shared node: say how far the kill goes before anyone confirms
                title += f" (affects {t.gpus(sorted(reach))})"
                notes += _wider(snap, targets, gpus)
    else:
        title = f"SIG{sig} {noun}"
    notes += _own_sessions(chosen, below)
    return finish_plan(snap, rung, title, lines, sorted(on), targets=targets, refusals=refusals, notes=notes,
                   expected=expected, signal=signal, descendants=below)


def _with_usage(snap: NodeSnapshot, targets: Sequence[ActionTarget], procs: Sequence[Proc]) -> list[ActionTarget]:
    """Each target with its GPUs' utilisation, its SM share and whether it computes (Confirm marks
    a busy one: a signal to a running job is the operator's choice, never the console's advice)."""
    sit = Situation.build(snap, (), (), None, 1 << 30)
    out = []
    for tg, p in zip(targets, procs):
        words, busy = usage(sit, p)
        out.append(dataclasses.replace(tg, usage=words, busy=busy))
    return out


def sessions_of(targets: Iterable[Proc | ActionTarget]) -> set[int]:
    return {p.sid for p in targets if p.sid is not None}


def own_session(sid: int | None, sessions: set[int]) -> bool:
    """A descendant started in a session of its own (setsid), apart from its targets'."""
    return sid is not None and bool(sessions) and sid not in sessions


def _own_sessions(targets: Sequence[Proc], below: Sequence[Proc]) -> list[str]:
    """Descendants in a session of their own (setsid: MPI ranks, some launchers' workers): the
    signal reaches only the PIDs listed, and what the parent passes on may not reach them."""
    sessions = sessions_of(targets)
    apart = [p for p in below if own_session(p.sid, sessions)]
    if not apart:
        return []
    return [f"{t.plural(len(apart), 'descendant')} in a session of {t.verb(len(apart), 'its', 'their')} own "
            f"({t.pid_list([p.pid for p in apart])}): {t.verb(len(apart), 'it', 'they')} may outlive the parent; "
            "each is checked after"]


def _this_gpus_holders(snap: NodeSnapshot, pids: Sequence[int], gpus: Sequence[int],
                       refusals: list[str]) -> tuple[int, ...]:
    """F on a GPU acts on that GPU's holders: a process the driver charges on other GPUs only
    (CUDA opens every /dev/nvidiaN, so it holds this GPU's device file too) is left alone, with
    the reason; a holder the driver lists nowhere (a hidden one) stays."""
    want = set(gpus)
    listed = who.driver_gpu_map(snap)
    keep: list[int] = []
    elsewhere: list[int] = []
    for pid in pids:
        on = listed.get(pid) or set()
        (elsewhere if on and not on & want else keep).append(pid)
    if len(elsewhere) == 1:
        pid = elsewhere[0]
        proc, where = snap.proc(pid), sorted(listed[pid])
        refusals.append(f"PID {pid} ({who.label(proc) if proc else '?'}) has the device file of "
                        f"{t.gpus(sorted(want))} open but its memory is on {t.gpus(where)}: left alone "
                        f"(F on {t.gpus(where)} acts on it)")
    elif elsewhere:
        where = sorted(set().union(*(listed[p] for p in elsewhere)))
        shown = ", ".join(map(str, elsewhere[:6])) + (f" and {len(elsewhere) - 6} more" if len(elsewhere) > 6 else "")
        refusals.append(f"{len(elsewhere)} processes have the device file of {t.gpus(sorted(want))} open but their "
                        f"memory is on {t.gpus(where)} (PIDs {shown}): left alone (F on their GPU acts on them)")
    return tuple(keep)


def _reach(snap: NodeSnapshot, family: Sequence[Proc]) -> set[int]:
    """The GPUs the processes hold memory on (the driver's list and their own accounts)."""
    out: set[int] = set()
    for proc in family:
        out |= {int(k) for k, v in proc.gpu_memory_mib.items() if str(k).isdecimal() and v}
        out |= who.driver_gpus(snap, proc.pid)
    return out


def _wider(snap: NodeSnapshot, targets: Sequence[ActionTarget], gpus: Sequence[int]) -> list[str]:
    """A note per target whose kill reaches past ``gpus`` (its own or its children's memory)."""
    want = set(gpus)
    out = []
    for tgt in targets:
        proc = snap.proc(tgt.pid)
        if proc is None:
            continue
        reach = _reach(snap, [proc] + who.descendants(snap, [proc.pid])) - want
        if reach:
            out.append(f"PID {tgt.pid} ({who.label(proc)}) also holds memory on {t.gpus(sorted(reach))}: "
                       f"killing it frees (or kills the jobs on) those GPUs too")
    return out


def holder_reason(snap: NodeSnapshot, proc: Proc, gpus: Sequence[int]) -> str:
    """Why ``proc`` holds the ``gpus`` ("holds /dev/nvidia3", "listed by the driver on GPU 3
    (74.3 GiB)"), and where its memory is when that is elsewhere ("its memory: 74.3 GiB on GPU 5")."""
    want = set(gpus)
    bits = []
    files = sorted({f for f in proc.device_files if (g := _minor(f)) is not None and g in want})
    if files:
        bits.append("holds " + ", ".join(files))
    listed = sorted(who.driver_gpus(snap, proc.pid) & want)
    if listed:
        mib = sum(v or 0 for k, v in proc.gpu_memory_mib.items() if str(k).isdecimal() and int(k) in want)
        bits.append(f"listed by the driver on {t.gpus(listed)}" + (f" ({t.mib(mib)})" if mib else ""))
    elsewhere = {int(k): v for k, v in proc.gpu_memory_mib.items()
                 if str(k).isdecimal() and int(k) not in want and v}
    if elsewhere:
        bits.append(f"its memory: {t.mib(sum(elsewhere.values()))} on {t.gpus(elsewhere)}")
    elif not listed and files:
        bits.append("no memory of its own on it")
    return "; ".join(bits)


def _minor(path: str) -> int | None:
    name = path.rsplit("/", 1)[-1]
    return int(name[6:]) if name.startswith("nvidia") and name[6:].isdecimal() else None


def _holder_candidates(snap: NodeSnapshot, gpus: Sequence[int], refusals: list[str]) -> list[int]:
    """Every holder of the GPUs the snapshot found: open device files and the driver's list.

    Protected processes and the blocker daemons stay in (the caller refuses them with a reason);
    a PID the driver lists from another PID namespace is added (refused too, with the reason).
    """
    want = set(gpus)
    out = [p.pid for p in who.holder_candidates(snap, gpus)]
    here = set(snap.driver_processes_here())
    for dp in snap.driver_processes:
        if dp in here or (want and dp.gpu_index not in want):
            continue
        if snap.proc(dp.pid) is None:
            if dp.pid not in out:
                out.append(dp.pid)      # refused by refusal_reason: another PID namespace
        else:
            note = (f"PID {dp.pid} as the driver lists it is a process of another PID namespace; "
                    f"the PID {dp.pid} here is a different process and is left alone")
            if note not in refusals:
                refusals.append(note)
    return out


def _blockers_plan(snap: NodeSnapshot, gpus: tuple[int, ...]) -> ActionPlan:
    lines = ladder.commands_for("clear-blockers", snap, gpus=gpus)
    daemons = ladder.blocker_processes(snap)
    pm = [g.index for g in snap.gpus if g.persistence_mode and (not gpus or g.index in gpus)]
    modeset = snap.drm_modeset is True
    on = gpus or tuple(pm) or tuple(g.index for g in snap.gpus)
    what = []
    if daemons:
        what.append(", ".join(dict.fromkeys(who.program_of(p) for p in daemons)))
    if modeset:
        what.append("nvidia_drm (modeset=Y)")
    if pm:
        what.append(f"persistence mode on {t.gpus(pm)}")
    title = "Clear the reset blockers" + (f": {' and '.join(what)}" if what else "")
    notes = [note for p in daemons if (note := who.stop_of(p, snap.hostname or snap.name).note)]
    notes += _container_notes(snap, daemons)
    if daemons or modeset:
        names = list(dict.fromkeys([*(who.program_of(p) for p in daemons), *(["nvidia_drm"] if modeset else [])]))
        one = len(names) == 1
        notes.append(f"stopping {', '.join(names)} affects every GPU on {snap.name}, not only {t.gpus(on)}: "
                     f"{'it serves' if one else 'they serve'} all of them (start {'it' if one else 'them'} "
                     "again after the reset)")
    if any(who.program_of(p) == who.FABRIC_MANAGER for p in daemons) and snap.nvswitches:
        notes.append("an NVSwitch system: with nvidia-fabricmanager stopped, NVLink peers must be reset "
                     "together (the reset, R, says so) and no new CUDA job gets NVLink until it runs again")
    if modeset:
        notes.append(f"`{who.MODESET_STOP}` refuses while a display server or the framebuffer console uses "
                     "nvidia_drm (\"Module nvidia_drm is in use\"): then reboot with nvidia-drm.modeset=0")
    refusals = [] if lines else [f"no reset blocker on {t.gpus(on)} that can be stopped from here"]
    return finish_plan(snap, "clear-blockers", title, lines, on, targets=[ActionTarget.of(p) for p in daemons],
                   refusals=refusals, notes=notes)


def _container_notes(snap: NodeSnapshot, daemons: Sequence[Proc]) -> list[str]:
    """Whose processes a container stop takes down, as far as this reading saw them (cgroups are
    read for the GPU's processes)."""
    out = []
    for cid in dict.fromkeys(p.cgroup.container_id for p in daemons
                             if p.cgroup is not None and p.cgroup.container_id and not p.cgroup.kubernetes):
        members = [q for q in snap.processes if q.cgroup is not None and q.cgroup.container_id == cid]
        users = sorted({q.user or "?" for q in members})
        out.append(f"container {cid[:12]} runs {t.plural(len(members), 'process', 'processes')} seen here "
                   f"(user{'s' if len(users) > 1 else ''} {', '.join(users)}): stopping it stops them all")
    return out


def reset_notes(snap: NodeSnapshot, on: Sequence[int]) -> list[str]:
    """What the operator must know before `nvidia-smi -r -i N` on these GPUs: holders, blockers,
    MIG (the whole GPU is reset), NVSwitch peers without the fabric manager."""
    notes = []
    holders = [p for p in (snap.proc(pid) for pid in who.holder_pids(snap, on)) if p is not None]
    if holders:
        notes.append(f"{t.plural(len(holders), 'process', 'processes')} still hold {t.gpus(on)} "
                     f"({t.pid_list([p.pid for p in holders])}): the reset refuses while any does")
    daemons = ladder.blocker_processes(snap)
    pm = [g.index for g in snap.gpus if g.persistence_mode and g.index in on]
    if daemons or pm or snap.drm_modeset:
        bits = [f"persistence mode on {t.gpus(pm)}"] if pm else []
        bits += [f"{who.label(p)} (PID {p.pid})" for p in daemons]
        bits += ["nvidia_drm loaded with modeset=Y"] if snap.drm_modeset else []
        notes.append(f"reset blockers: {', '.join(bits)}; clear them first (B)")
    for g in snap.gpus:
        if g.index in on and g.mig_mode:
            inst = g.mig_instances
            which = (f" and its {t.plural(len(inst), 'MIG instance')} ({', '.join(m.profile for m in inst)})"
                     if inst else " and every MIG instance on it")
            notes.append(f"GPU {g.index} is in MIG mode: `nvidia-smi -r -i {g.index}` resets the whole GPU{which}; "
                         "every process on any of its instances loses its work")
    if snap.nvswitches and not who.fabric_manager_running(snap):
        notes.append(f"an NVSwitch system ({t.plural(snap.nvswitches, 'NVSwitch', 'NVSwitches')}) without "
                     "nvidia-fabricmanager running: NVLink peers must be reset together — reset every GPU "
                     "at once (`nvidia-smi -r`, no -i), or start the fabric manager first")
    return notes


def _reset_plan(snap: NodeSnapshot, gpus: tuple[int, ...]) -> ActionPlan:
    lines = ladder.commands_for("reset", snap, gpus=gpus)
    on = [int(line.rsplit(" ", 1)[1]) for line in lines]
    refusals = [] if lines else ["no GPU selected and none holds memory"]
    title = f"Reset {t.gpus(on)}" if on else "Reset"
    return finish_plan(snap, "reset", title, lines, on, refusals=refusals, notes=reset_notes(snap, on))


def _node_plan(snap: NodeSnapshot, rung: str, title: str, *notes_after: str) -> ActionPlan:
    """A driver reload or a reboot: every process holding the GPUs is lost; the node's name is typed."""
    every = [g.index for g in snap.gpus]
    holders = [p for pid in who.holder_pids(snap) if (p := snap.proc(pid)) is not None]
    notes = []
    if holders:
        notes.append(f"{t.plural(len(holders), 'process', 'processes')} hold the GPUs and will be lost "
                     f"({t.pid_list([p.pid for p in holders])})")
        notes += notes_after
    lines = ladder.commands_for(rung, snap)
    return finish_plan(snap, rung, title, lines, every, targets=[ActionTarget.of(p) for p in holders if p],
                   notes=notes, typed=snap.name)


#: how each family of rungs is planned (rungs.Rung.plans): (snap, rung, pids, gpus, signal)
_PLANS = {
    "signal": _signal_plan,
    "blockers": lambda snap, rung, pids, gpus, sig: _blockers_plan(snap, gpus),
    "reset": lambda snap, rung, pids, gpus, sig: _reset_plan(snap, gpus),
    "restore": lambda snap, rung, pids, gpus, sig: plan_restore(snap, ladder.commands_for(rung, snap, gpus=gpus),
                                                                gpus),
    "driver": lambda snap, rung, pids, gpus, sig: _node_plan(
        snap, rung, f"Reload the NVIDIA driver on {snap.name}",
        "modprobe -r refuses while any process holds the driver (\"Module nvidia is in use\")"),
    "reboot": lambda snap, rung, pids, gpus, sig: _node_plan(snap, rung, f"Reboot {snap.name}"),
    "mps-terminate": _mps_plan,
    "mps-quit": _mps_plan,
}
