"""Running an ActionPlan: policy, the record before the effect, guarded signals, verification.

``execute`` refuses under ``--read-only`` and records only under ``--dry-run`` (one ``action``
entry each). Otherwise it first writes the ``action`` entry — command, targets (PID, start
time, name), memory before, ``ts`` = the moment it is sent — and only once that entry is on
disk (fsynced) does it send anything; when it cannot be written (disk full, file gone) the
action is refused and nothing is sent. Then it runs the plan's commands — signals one target
at a time through ``source.signal`` with the start time the plan saw, so a PID reused since is
refused (rc 3) — and re-reads the node until the effect settles (the targets' memory back, the
blockers gone) or the verification window passes. What was seen is written as the action's
outcome: an ``observation`` entry with ``outcome: true`` naming the action's seq (rc, output,
memory after, freed, seconds to free); a cancelled execute (the console quitting) writes it
with what was seen by then. What changes later, until the rung's deadline, a background
``ActionWatch`` writes as plain ``observation`` entries naming the action. Time comes from an
injectable clock (the simulator's FakeClock in tests).
"""
from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping

from console.actions import mps as mps_rungs
from console.actions import slurm as slurm_rungs
from console.actions import verify
from console import rungs
from console.actions.ladder import COMMAND_TIMEOUT_S
from console.actions.plan import ActionPlan, ActionPolicy, own_session, sessions_of
from console.actions.ports import ActionSink, ActionSource, NvmlHolder, Reader, Reading, TimelineWriter
from console.actions.reset_output import parse_reset_output, reset_outcome_line
from console.clock import Clock
from console.diagnosis import text as t
from console.diagnosis import who
from console.model import ActionRecord, CommandResult, NodeSnapshot, TimelineEntry
from console.sources.slurm_parse import SlurmNode

log = logging.getLogger("gpu_incident.actions")
OUTPUT_LIMIT = 4000


@dataclass(frozen=True)
class ActionOutcome:
    plan: ActionPlan
    status: str                     # refused | dry-run | failed | settled | unsettled
    text: str                       # title + one outcome line (the outcome entry's text)
    refused: str | None = None      # why it did not run ("read-only: ...", typed name wrong, nothing to run)
    results: tuple[CommandResult, ...] = ()
    rc: int | None = None           # 0, the first failing command's rc, None when not run
    output: str = ""
    gpu_memory_before: Mapping[str, int | None] = field(default_factory=dict)
    gpu_memory_after: Mapping[str, int | None] | None = None
    freed_mib: int | None = None
    seconds_to_free: float | None = None
    fates: verify.TargetFates = verify.TargetFates()
    signalled: tuple[int, ...] = ()       # targets the signal reached (rc 0)
    entry: TimelineEntry | None = None    # the `action` entry (written before anything was sent)
    outcome_entry: TimelineEntry | None = None   # its outcome: `observation` with outcome true
    watch: "ActionWatch | None" = None    # watching on until the deadline (None when settled)
    timeline_error: str | None = None     # an entry could not be written (disk full, ...)


class ActionWatch:
    """The background watch after the first verification window; ``cancel()`` on quit."""

    def __init__(self, action_seq: int | None) -> None:
        self.action_seq = action_seq
        self.observations: list[TimelineEntry] = []
        self.settled = False
        #: cancelled: nothing more is written, even where a cancellation was lost (Python 3.11's
        #: wait_for returns a read that finished as it was cancelled, and the loop went on)
        self.stopped = False
        self._task: asyncio.Task[None] | None = None

    @property
    def done(self) -> bool:
        return self._task is None or self._task.done()

    @property
    def task(self) -> asyncio.Task[None] | None:
        return self._task

    def cancel(self) -> None:
        self.stopped = True
        if self._task is not None:
            self._task.cancel()

    async def wait(self) -> None:
        """Until the watch ends (settled, deadline, or cancelled)."""
        if self._task is not None:
            await asyncio.gather(self._task, return_exceptions=True)


class _Seen:
    """What verification has seen so far (kept outside the coroutine so a cancel can report it)."""

    def __init__(self, plan: ActionPlan) -> None:
        self.plan = plan
        self.after: dict[str, int | None] | None = None
        self.fates = verify.TargetFates()
        self.below = verify.TargetFates()             # the targets' descendants at plan time
        self.elapsed = 0.0
        self.settled_at: float | None = None
        self.snap: NodeSnapshot | None = None     # the last reading that answered
        self.hint = ""                            # what to do next, said in the outcome
        self.slurm: Reading | None = None         # a Slurm rung: the last `scontrol show node` read

    @property
    def freed(self) -> int | None:
        return None if self.after is None else verify.freed_mib(self.plan.memory_before, self.after)

    @property
    def seconds_to_free(self) -> float | None:
        return self.settled_at if self.settled_at is not None and (self.freed or 0) > 0 else None

    def take(self, snap: Reading | None, elapsed: float) -> bool:
        """Record one reading; True when the effect has now settled."""
        self.elapsed = elapsed
        if rungs.of(self.plan.rung).through_slurm and snap is not None:
            self.slurm = snap                     # a Slurm rung's re-read: the node's Slurm state
        if snap is None or snap.error is not None:
            return False
        plan = self.plan
        if isinstance(snap, SlurmNode):           # answered; it holds no GPU and no process
            self.after, self.fates = {}, verify.TargetFates()
        else:
            self.snap = snap
            self.after = verify.memory_of(snap, plan.gpus)
            self.fates = verify.target_fates(snap, plan.targets)
            self.below = verify.target_fates(snap, plan.descendants)
        if self.settled_at is None and self._settled(snap):
            self.settled_at = round(elapsed, 1)
        return self.settled_at is not None

    def _settled(self, snap: Reading) -> bool:
        plan = self.plan
        settles_on = rungs.of(plan.rung).settles_on
        if rungs.of(plan.rung).through_slurm:
            return slurm_rungs.settled(plan.rung, snap)
        if isinstance(snap, SlurmNode):
            return False
        if settles_on == "blockers-gone":
            return verify.blockers_cleared(snap, plan.gpus)
        if settles_on == "blockers-back":
            return verify.restored(snap, plan.commands)
        if settles_on in mps_rungs.SETTLES_ON:
            return mps_rungs.settled(plan, snap)
        if not plan.gpus:
            return bool(plan.targets) and not self.fates.running
        return verify.memory_settled(plan.memory_before, self.after or {}, plan.expected_mib)


# ---------------------------------------------------------------- execute

async def execute(plan: ActionPlan, source: ActionSource, *, policy: ActionPolicy | None = None,
                  timeline: TimelineWriter | None = None, read: Reader | None = None,
                  monitor: ActionSink | None = None, clock: Clock | None = None,
                  typed: str | None = None, hypothesis: int | None = None,
                  verify_window_s: float | None = None, deadline_s: float | None = None,
                  poll_s: float = 1.0, watch_poll_s: float = 2.0,
                  command_timeout: float = COMMAND_TIMEOUT_S) -> ActionOutcome:
    """Run ``plan`` on ``source`` (a console.sources.base.Source); never raises for node trouble.
    What each argument must provide is in console/actions/ports.py.

    ``timeline``: a console.incident.timeline.Timeline (or None: nothing is written).
    ``read``: how to re-read the node (default ``source.poll``).
    ``monitor``: a NodeMonitor (or anything with ``actions`` and ``poll_soon()``): the action is
    recorded there so diagnosis knows its teardown window, and a poll is asked for at once.
    ``clock``: a console.clock clock; default the source's own (a simulated node's time). ``typed``: what the operator typed for a plan with
    ``typed_confirmation`` (refused unless equal). ``verify_window_s`` and ``deadline_s`` default: the plan's.
    """
    policy = policy or ActionPolicy()
    clock = clock or source.clock
    read = read or source.poll
    window = plan.verify_s if verify_window_s is None else float(verify_window_s)
    deadline = plan.deadline_s if deadline_s is None else float(deadline_s)
    command = "\n".join(plan.commands)

    timeline_errors: list[str] = []

    def write(kind: str, text: str, **fields: Any) -> TimelineEntry | None:
        if timeline is None:
            return None
        try:
            return timeline.append(kind, text, node=plan.node, **fields)
        except OSError as exc:    # disk full, file gone after the action was sent: it happened; say so
            log.error("timeline write failed on %s: %s", plan.node, exc)
            timeline_errors.append(f"timeline not written: {exc}")
            return None

    def refused(reason: str, entry: TimelineEntry | None = None) -> ActionOutcome:
        return ActionOutcome(plan=plan, status="refused", text=f"{plan.title}: refused: {reason}",
                             refused=reason, gpu_memory_before=dict(plan.memory_before), entry=entry,
                             timeline_error=timeline_errors[0] if timeline_errors else None)

    reason = policy.refusal(plan)
    if reason is not None:
        entry = write("action", f"[read-only] refused: {plan.title}", command=command, rc=None, output=reason,
                      hypothesis=hypothesis, gpu_memory_before=dict(plan.memory_before), targets=_targets(plan),
                      **_named(plan))
        return refused(reason, entry)
    if plan.typed_confirmation is not None and (typed or "").strip() != plan.typed_confirmation:
        return refused(f"type the node's name ({plan.typed_confirmation}) to confirm")
    if not plan.commands:
        return refused("nothing to run" + (f": {'; '.join(plan.refusals)}" if plan.refusals else ""))
    if policy.dry_run:
        text = f"[dry-run] {plan.title}: not run"
        entry = write("action", text, command=command, rc=None, output="dry run: commands recorded, not run",
                      hypothesis=hypothesis, gpu_memory_before=dict(plan.memory_before), targets=_targets(plan),
                      **_named(plan))
        return ActionOutcome(plan=plan, status="dry-run", text=text, gpu_memory_before=dict(plan.memory_before),
                             entry=entry, timeline_error=timeline_errors[0] if timeline_errors else None)

    # record before effect: nothing is sent unless the action entry is on disk
    action_entry: TimelineEntry | None = None
    if timeline is not None:
        try:
            action_entry = timeline.append("action", plan.title, node=plan.node, command=command,
                                           hypothesis=hypothesis, gpu_memory_before=dict(plan.memory_before),
                                           targets=_targets(plan), **_named(plan))
        except OSError as exc:
            why = exc.strerror or str(exc)
            log.error("timeline write failed on %s, %s not sent: %s", plan.node, plan.title, exc)
            timeline_errors.append(f"timeline not written: {exc}")
            return refused(f"the timeline could not record it ({why}): nothing was sent")
    action_seq = action_entry.seq if action_entry is not None else None

    started = clock.now()
    results: list[CommandResult] = []
    seen = _Seen(plan)

    def finish(cancelled: bool) -> tuple[TimelineEntry | None, str, int | None, str]:
        rc = _overall_rc(results)
        output = _output(plan, results)
        text = f"{plan.title}: {_outcome_line(plan, results, seen, cancelled)}"
        entry: TimelineEntry | None = None
        if action_seq is not None:
            entry = write("observation", text, action=action_seq, outcome=True, rc=rc, output=output,
                          gpu_memory_before=dict(plan.memory_before), gpu_memory_after=seen.after,
                          freed_mib=seen.freed, seconds_to_free=seen.seconds_to_free)
        return entry, text, rc, output

    try:
        await _run(plan, source, results, command_timeout)
        ran = any(_issued(plan, r) for r in results)
        signalled = tuple(tgt.pid for tgt, r in zip(plan.targets, results) if r.ok) if plan.signal else ()
        if ran and monitor is not None:
            # the processes it reached: those signalled, or every target of a command rung (B's
            # daemons: what a restore starts again, diagnosis/node.py blockers_off)
            family = tuple((tg.pid, tg.ppid, tg.name) for tg in plan.targets
                           if tg.pid in signalled or not plan.signal)
            monitor.actions.append(ActionRecord(rung=plan.rung, ts=started, node=plan.node, family=family,
                                                pids=signalled, gpus=plan.gpus))
        if monitor is not None:
            monitor.poll_soon()
        await _verify(seen, read, clock, started, window if ran else 0.0, poll_s, _read_timeout(source))
        if not ran:
            seen.settled_at = None      # whatever changed, this action did not do it
        elif rungs.of(plan.rung).says_per_gpu and _overall_rc(results) == 0:
            seen.hint = restore_hint(plan, seen.snap, monitor.actions if monitor is not None else ())
    except asyncio.CancelledError:
        seen.elapsed = clock.now() - started
        finish(cancelled=True)
        raise
    outcome_entry, text, rc, output = finish(cancelled=False)
    settled = seen.settled_at is not None
    watch: ActionWatch | None = None
    if ran and not settled and deadline > seen.elapsed:
        watch = ActionWatch(action_seq)
        watch._task = asyncio.get_running_loop().create_task(
            _watch(watch, seen, read, clock, started, deadline, watch_poll_s, write, _read_timeout(source)),
            name=f"watch {plan.rung} on {plan.node}")
    return ActionOutcome(plan=plan, status="settled" if settled else ("unsettled" if ran else "failed"),
                         text=text, results=tuple(results), rc=rc, output=output,
                         gpu_memory_before=dict(plan.memory_before), gpu_memory_after=seen.after,
                         freed_mib=seen.freed, seconds_to_free=seen.seconds_to_free,
                         fates=seen.fates, signalled=signalled,
                         entry=action_entry, outcome_entry=outcome_entry, watch=watch,
                         timeline_error=timeline_errors[0] if timeline_errors else None)


def _named(plan: ActionPlan) -> dict[str, Any]:
    """What an `action` entry says it is: its rung and the GPUs it was aimed at (docs/timeline.md)."""
    return {"rung": plan.rung, "gpus": list(plan.gpus) or None}


def _targets(plan: ActionPlan) -> list[dict[str, Any]] | None:
    """The processes the action is sent to, as the `targets` field records them."""
    return [{"pid": tg.pid, "start_ticks": tg.start_ticks, "create_time": tg.create_time, "name": tg.name}
            for tg in plan.targets] or None


async def _run(plan: ActionPlan, source: ActionSource, results: list[CommandResult], timeout: float) -> None:
    """Signal each target (guarded by its start time) or run each command line, in order."""
    if plan.signal:
        for tgt in plan.targets:
            res = await source.signal(tgt.pid, plan.signal, start_ticks=tgt.start_ticks,
                                      create_time=tgt.create_time)
            results.append(res)
        return
    holder = source if rungs.of(plan.rung).releases_nvml and isinstance(source, NvmlHolder) else None
    if holder is not None:   # this console is an NVML client too: the driver refuses a reset while it holds on
        holder.nvml_paused = True
        await source.close()
    try:
        for line in plan.commands:
            results.append(await source.run(line, timeout))
    finally:
        if holder is not None:
            holder.nvml_paused = False


def _read_timeout(source: ActionSource) -> float:
    return float(source.probe_timeout) + 5.0


async def _read(read: Reader, timeout: float) -> Reading | None:
    try:
        reading = await asyncio.wait_for(read(), timeout)
    except asyncio.CancelledError:
        raise
    except Exception:  # noqa: BLE001 - a failed re-read is "not seen", never a crash
        return None
    task = asyncio.current_task()
    if task is not None and task.cancelling():
        # Python 3.11's wait_for returns a read that finished as it was cancelled and drops the
        # cancel: the console stopping (SIGTERM, q) then waited out the whole verification window
        # and quit before the outcome was written
        raise asyncio.CancelledError
    return reading


async def _verify(seen: _Seen, read: Reader, clock: Clock, started: float, window: float, poll_s: float,
                  timeout: float) -> None:
    """Re-read at once, then every ``poll_s``, until settled or ``window`` seconds since the start."""
    while True:
        snap = await _read(read, timeout)
        elapsed = clock.now() - started
        if seen.take(snap, elapsed) or elapsed >= window:
            return
        await clock.sleep(min(poll_s, window - elapsed))


async def _watch(watch: ActionWatch, seen: _Seen, read: Reader, clock: Clock, started: float,
                 deadline: float, poll_s: float, write: Callable[..., TimelineEntry | None],
                 timeout: float) -> None:
    plan = seen.plan
    words = rungs.of(plan.rung).after
    reported = set(verify.settled_gpus(plan.memory_before, seen.after or {}, plan.expected_mib)) \
        if seen.after is not None else set()

    def observe(text: str, seconds_to_free: float | None = None) -> None:
        if watch.stopped:          # the console stopped: its last entry is its own
            raise asyncio.CancelledError
        entry = write("observation", text, action=watch.action_seq, gpu_memory_before=dict(plan.memory_before),
                      gpu_memory_after=seen.after, freed_mib=seen.freed, seconds_to_free=seconds_to_free)
        if entry is not None:
            watch.observations.append(entry)

    try:
        await _watch_loop(watch, seen, read, clock, started, deadline, poll_s, observe, reported, words, timeout)
    except asyncio.CancelledError:
        raise
    except Exception:  # noqa: BLE001 - a background watch must never take the console down
        log.exception("watching %s on %s failed", plan.rung, plan.node)


async def _watch_loop(watch: ActionWatch, seen: _Seen, read: Reader, clock: Clock, started: float,
                      deadline: float, poll_s: float, observe: Callable[..., None], reported: set[int],
                      words: str, timeout: float) -> None:
    plan = seen.plan
    while True:
        elapsed = clock.now() - started
        if elapsed >= deadline:
            seen.elapsed = elapsed
            observe(_deadline_text(seen, words))
            return
        await clock.sleep(min(poll_s, deadline - elapsed))
        snap = await _read(read, timeout)
        if seen.take(snap, clock.now() - started):
            watch.settled = True
            observe(_settled_text(seen, words), seen.seconds_to_free)
            return
        if seen.after is None or snap is None or snap.error is not None or not rungs.of(plan.rung).frees_memory:
            continue
        newly = set(verify.settled_gpus(plan.memory_before, seen.after, plan.expected_mib)) - reported
        if newly:
            reported |= newly
            rest = [g for g in plan.gpus if g not in reported]
            part = {str(g): plan.memory_before.get(str(g)) for g in newly}
            now = {str(g): seen.after.get(str(g)) for g in newly}
            rest_mib = verify.used_mib({str(g): seen.after.get(str(g)) for g in rest})
            observe(f"{t.gpus(newly)} freed {t.mib(verify.freed_mib(part, now))} {verify.secs(seen.elapsed)} after "
                    f"{words}; {t.gpus(rest)} still {t.verb(len(rest), 'holds', 'hold')} {t.mib(rest_mib)}", round(seen.elapsed, 1))


def _outlived(seen: _Seen) -> str:
    """'2 of their 9 descendants outlived them: PID 812 (rank0, own session), 813 (rank1)' — a target gone
    while processes it started still run (a worker started with setsid keeps its GPU memory)."""
    plan = seen.plan
    alive = [d for d in plan.descendants if d.pid in seen.below.running or d.pid in seen.below.in_d]
    if not alive or not (seen.fates.gone or seen.fates.zombies):      # a target ended (exited or <defunct>)
        return ""
    sessions = sessions_of(plan.targets)
    shown = ", ".join(f"{d.pid} ({d.name}{', own session' if own_session(d.sid, sessions) else ''})"
                      for d in alive[:6]) + (f" and {len(alive) - 6} more" if len(alive) > 6 else "")
    n = len(plan.targets)
    return (f"{len(alive)} of {t.verb(n, 'its', 'their')} {t.plural(len(plan.descendants), 'descendant')} "
            f"outlived {t.verb(n, 'it', 'them')}: PID {shown}")


def _then(text: str) -> str:
    return f"; {text}" if text else ""


def _settled_text(seen: _Seen, words: str) -> str:
    plan = seen.plan
    fates = verify.fates_text(seen.fates, len(plan.targets)) if plan.signal else ""
    tail = (f"; targets {fates}" if fates else "") + _then(_outlived(seen) if plan.signal else "")
    settles_on = rungs.of(plan.rung).settles_on
    if settles_on == "blockers-gone":
        return f"reset blockers gone {verify.secs(seen.elapsed)} after {words}"
    if settles_on == "blockers-back":
        return f"back on {verify.secs(seen.elapsed)} after {words}: {', '.join(plan.commands)}"
    if plan.gpus and (seen.freed or 0) > 0:
        freed_on = verify.gpus_freed(plan.memory_before, seen.after or {}) or list(plan.gpus)
        return f"{t.gpus(freed_on)} freed {t.mib(seen.freed)} {verify.secs(seen.elapsed)} after {words}{tail}"
    return f"the targets have exited {verify.secs(seen.elapsed)} after {words}{tail}"


def _deadline_text(seen: _Seen, words: str) -> str:
    plan = seen.plan
    if seen.after is None:
        return f"{plan.node} did not answer in the {verify.secs(seen.elapsed)} after {words}"
    fates = verify.fates_text(seen.fates, len(plan.targets)) if plan.signal else ""
    settles_on = rungs.of(plan.rung).settles_on
    if settles_on == "blockers-gone":
        return f"reset blockers still there {verify.secs(seen.elapsed)} after {words}"
    if settles_on == "blockers-back":
        return f"not back on {verify.secs(seen.elapsed)} after {words} (look at the commands' output)"
    if not plan.gpus:
        return (f"targets {fates or 'unchanged'} {verify.secs(seen.elapsed)} after {words}"
                + _then(_outlived(seen) if plan.signal else ""))
    still = verify.used_mib({k: seen.after.get(k) for k in plan.memory_before})
    text = (f"{t.gpus(plan.gpus)} still {t.verb(len(plan.gpus), 'holds', 'hold')} {t.mib(still)} "
            f"{verify.secs(seen.elapsed)} after {words}")
    if seen.freed:
        text += f" ({t.mib(seen.freed)} freed)"
    return text + (f"; targets {fates}" if fates else "") + _then(_outlived(seen) if plan.signal else "")


# ---------------------------------------------------------------- texts

def _going_down(plan: ActionPlan, res: CommandResult) -> bool:
    """A reboot's connection closing under it is the reboot happening, not a failure."""
    return rungs.of(plan.rung).drops_connection and res.rc is None and res.error is not None


def _issued(plan: ActionPlan, res: CommandResult) -> bool:
    return res.ok or _going_down(plan, res)


def _overall_rc(results: list[CommandResult]) -> int | None:
    for r in results:
        if not r.ok:
            return r.rc
    return 0 if results else None


def _shown(plan: ActionPlan, res: CommandResult, index: int) -> str:
    """The command as the operator was shown it (a guarded kill renders as plain `kill -s`)."""
    if plan.signal and index < len(plan.targets):
        return f"kill -s {plan.signal} {plan.targets[index].pid}"
    return res.command


def _output(plan: ActionPlan, results: list[CommandResult]) -> str:
    parts: list[str] = []
    if plan.signal:
        ok = sum(1 for r in results if r.ok)
        parts.append(f"sent SIG{plan.signal} to {ok} of {len(plan.targets)}")
        for i, r in enumerate(results):
            if not r.ok:
                why = r.error or r.output.strip() or "failed"
                parts.append(f"{_shown(plan, r, i)}: {why} (rc {r.rc})")
    else:
        for r in results:
            body = r.output.strip() + (f"\n{r.error}" if r.error else "")
            parts.append(f"$ {r.command}\n{body}".rstrip() if len(plan.commands) > 1 else body.strip())
    text = "\n".join(p for p in parts if p)
    return text if len(text) <= OUTPUT_LIMIT else text[:OUTPUT_LIMIT] + "\n[output cut]"


def _outcome_line(plan: ActionPlan, results: list[CommandResult], seen: _Seen, cancelled: bool) -> str:
    bits: list[str] = []
    if plan.signal:
        ok = [i for i, r in enumerate(results) if r.ok]
        bad = [i for i, r in enumerate(results) if not r.ok]
        bits.append(f"sent to {len(ok)} of {len(plan.targets)}")
        refused = [plan.targets[i].pid for i in bad if results[i].rc == 3]
        if refused:
            bits.append(f"refused for {t.pid_list(refused)} (start time changed: not the same process)")
        elif bad:
            bits.append(f"failed for {t.pid_list([plan.targets[i].pid for i in bad])}")
    else:
        failed = [r for r in results if not r.ok]
        if results and all(_going_down(plan, r) for r in results):
            bits.append(f"issued; the connection closed ({results[0].error}): the node is going down")
        elif failed:
            first = failed[0]
            why = (first.error or first.output.strip().splitlines()[0] if (first.error or first.output.strip())
                   else "failed")
            if rungs.of(plan.rung).says_per_gpu and not first.error:    # name each GPU and why, not nvidia-smi's preamble
                why = reset_outcome_line(parse_reset_output(first.output, first.rc), first.rc) or why
            bits.append(f"failed (rc {first.rc}): {why}")
        elif results:
            said = reset_outcome_line(parse_reset_output("\n".join(r.output for r in results), 0), 0) \
                if rungs.of(plan.rung).says_per_gpu else ""
            bits.append(f"done: {said}" if said else "done")
    if len(results) < (len(plan.targets) if plan.signal else len(plan.commands)):
        bits.append("interrupted before every command ran")
    settles_on = rungs.of(plan.rung).settles_on
    if rungs.of(plan.rung).through_slurm:
        if results and results[-1].ok:
            bits.append(slurm_rungs.state_line(plan, seen.slurm, seen.elapsed, seen.settled_at is not None))
    elif settles_on == "blockers-gone":
        if seen.settled_at is not None:
            bits.append(f"blockers gone after {verify.secs(seen.settled_at)}")
        elif seen.after is not None:
            bits.append(f"blockers still there after {verify.secs(seen.elapsed)}")
    elif settles_on == "blockers-back":
        if seen.settled_at is not None:
            bits.append(f"back on after {verify.secs(seen.settled_at)}")
        elif seen.after is not None:
            bits.append(f"not back on after {verify.secs(seen.elapsed)}")
    else:
        bits.append(verify.memory_line(plan.gpus, plan.memory_before, seen.after, elapsed=seen.elapsed,
                                   freed_at=seen.seconds_to_free))
    if plan.signal:
        bits.append(verify.fates_text(seen.fates, len(plan.targets)) if seen.after is not None else "")
        bits.append(_outlived(seen) if seen.after is not None else "")
    if cancelled:
        bits.append(f"cancelled after {verify.secs(seen.elapsed)}: what was seen by then")
    if seen.hint:
        bits.append(seen.hint)
    return "; ".join(b for b in bits if b)


def restore_hint(plan: ActionPlan, snap: NodeSnapshot | None, actions: Iterable[ActionRecord]) -> str:
    """After a verified reset on a node whose reset blockers were cleared (B): what B turned
    off is still off — say how to turn it back on (persistence mode on the GPUs that have it
    off, nvidia-persistenced when it is not running)."""
    if snap is None or snap.error is not None:
        return ""
    if not any(rungs.of(a.rung).stops_blockers and a.node in (None, plan.node) for a in actions):
        return ""
    steps = who.restore_commands(snap, ("nvidia-persistenced",), plan.gpus)     # as the restore x offers will
    if not steps:
        return ""
    what = " and ".join(w for w, on in (("persistence mode", steps[0].startswith("nvidia-smi")),
                                         ("nvidia-persistenced", "systemctl" in steps[-1])) if on)
    return f"{what} still off since B: once the GPU is healthy, restore {'them' if ' and ' in what else 'it'} " \
           f"with `{'`, `'.join(steps)}` (x: the next step does it, Confirm first)"


__all__ = ["ActionOutcome", "ActionWatch", "execute"]
