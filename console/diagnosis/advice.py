"""The ladder's judgement: which rung the evidence calls for next, and why (one line).

Rules, in the order they are applied:
- A thread in D state cannot be interrupted: no SIGKILL is advised while threads sit in
  the driver; inside the teardown window (ladder.TEARDOWN_WINDOW_S from our SIGKILL, or
  from when the D state was first seen) or while memory is still shrinking, wait.
- A SIGTERM gets ladder.SIGTERM_GRACE_S before SIGKILL is advised; a SIGKILL gets the
  teardown window before anything stronger.
- A reset needs the GPU free: reset blockers are cleared first, then live holders are
  killed; a process stuck in the driver cannot be killed, so then only a reboot helps.
- A reset that was tried and did not free the memory leaves a reboot.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from console.diagnosis.who import SIGTERM_GRACE_S, TEARDOWN_WINDOW_S, WAIT_S
from console.model import Finding, Proc
from console import rungs
from console.diagnosis import text as t
from console.diagnosis.context import IN_D, Situation
from console.diagnosis.liveness import pending_since


@dataclass(frozen=True)
class Advice:
    rung: str | None
    text: str                        # Finding.next_step: imperative, with its reason
    targets: tuple[int, ...] = ()    # PIDs the rung acts on
    gpus: tuple[int, ...] = ()       # GPUs it acts on
    wait_s: float | None = None      # "wait": how long the evidence says patience is worth


def _patience(window: float, age: float) -> float:
    """What is left of a window, but at least one ordinary wait step."""
    return round(max(WAIT_S, window - age), 1)


#: what every reboot step says last: the node's jobs go elsewhere before it goes down (gpud's
#: reboot suggestion for a thread in D in the driver, leptonai/gpud#1299, is a drain first too)
DRAIN_FIRST = " Drain the node first (D under Slurm), so no new job lands on it before the reboot."


def finding(kind: str, severity: str, summary: str, step: Advice, pids=(), gpus=(), evidence=None,
            since: float | None = None) -> Finding:
    """A Finding carrying a Advice: its text, rung, and (in evidence) its targets and wait."""
    ev = dict(evidence or {})
    if step.targets and tuple(step.targets) != tuple(pids):
        ev["targets"] = list(step.targets)
    if step.wait_s:      # only a wait has a length
        ev["wait_s"] = step.wait_s
    if since is not None:
        ev.setdefault("since", since)
    text = step.text
    if rungs.of(step.rung).drops_connection and "drain" not in text.lower():     # the reboot
        text += DRAIN_FIRST
    return Finding(kind=kind, severity=severity, summary=summary, next_step=text, pids=tuple(pids),
                   gpus=tuple(sorted(set(gpus))), reason=step.text.split(":", 1)[-1].strip(),
                   evidence=ev, since=since, rung=step.rung)


def in_d(p: Proc) -> bool:
    return bool(p.d_threads) or p.state == "D"


def signal_step(sit: Situation, procs: Sequence[Proc], gpus: Sequence[int], who: str,
                purpose: str = "") -> Advice:
    """Next step for processes that should go: TERM, then KILL, then patience or beyond.

    ``purpose`` is added to a first SIGTERM ("SIGTERM x if the memory must come back: ...").
    """
    pids = tuple(p.pid for p in procs)
    gpus = tuple(sorted(set(gpus)))
    kill = sit.last_action(rungs.KILLING, pids)
    term = sit.last_action(rungs.TERMINATING, pids)
    n = len(procs)
    are, have, were = t.verb(n, "is", "are"), t.verb(n, "has", "have"), t.verb(n, "was", "were")
    they, their = t.verb(n, "it", "they"), t.verb(n, "its", "their")
    pending = [p for p in procs if p.sigkill_pending and p.state != "Z"]
    if pending:
        return _pending_step(sit, pending, gpus, who, kill)
    stuck = [p for p in procs if in_d(p)]
    if stuck:
        defunct = all(p.state == "Z" for p in stuck)
        start = kill.ts if kill else min(sit.since(p.pid, IN_D) for p in stuck)
        age = sit.age(start)
        shrinking = sit.shrinking(gpus)
        desc = (f"{who} {f'{are} <defunct> with' if defunct else have} threads in D state inside "
                f"the driver ({t.wchans(stuck)})")
        if age < TEARDOWN_WINDOW_S or shrinking:
            why = ("memory is coming back" if shrinking
                   else f"the driver is still tearing down ({t.seconds(age)} so far)" if age >= 1
                   else "the driver is still tearing down")
            return Advice("wait", f"Wait: {desc}; SIGKILL again cannot help — {why}.", pids, gpus,
                        _patience(TEARDOWN_WINDOW_S, age))
        alive = [p for p in stuck if p.state != "Z"]
        if alive and kill is None:
            return Advice("sigkill", f"SIGKILL once: {desc} for {t.seconds(age)}; the signal stays pending "
                                   f"until {they} leave the driver, and nothing else can end {their} threads.",
                        tuple(p.pid for p in alive), gpus)
        return beyond_stuck(sit, stuck, gpus, f"{desc} for {t.seconds(age)} and memory is not coming back")
    zombies = [p for p in procs if p.state == "Z"]
    if zombies and len(zombies) == len(procs):
        if kill and sit.age(kill.ts) < TEARDOWN_WINDOW_S:
            return Advice("wait", f"Wait: {who} {are} <defunct> and {were} sent SIGKILL {t.ago(sit.age(kill.ts))}; "
                                "the driver frees the memory as the last threads exit.", pids, gpus,
                        _patience(TEARDOWN_WINDOW_S, sit.age(kill.ts)))
        return Advice("sigkill", f"SIGKILL {who}: {they} {are} <defunct> but the driver still lists {their} "
                               "memory; a thread other than the leader is alive and holds it.", pids, gpus)
    if kill:
        age = sit.age(kill.ts)
        if age < SIGTERM_GRACE_S:
            return Advice("wait", f"Wait: {who} {were} sent SIGKILL {t.ago(age)}; give the driver "
                                "time to free the memory.", pids, gpus, _patience(SIGTERM_GRACE_S, age))
        return Advice("sigkill", f"SIGKILL {who} again: {they} still {t.verb(n, 'runs', 'run')} {t.seconds(age)} "
                               "after SIGKILL (refused? look at the action's output).", pids, gpus)
    if term:
        age = sit.age(term.ts)
        if age < SIGTERM_GRACE_S:
            return _term_grace(who, n, age, pids, gpus)
        return Advice("sigkill", f"SIGKILL {who}: {they} ignored SIGTERM for {t.seconds(age)}.", pids, gpus)
    return Advice("sigterm", f"SIGTERM {who}{purpose}: a clean exit frees GPU memory fastest, and gives "
                           f"{t.verb(n, 'it', 'them')} the chance to stop {their} own workers.", pids, gpus)


#: what to do once a SIGKILL has been pending too long: no signal helps any more
CAPTURE_THEN_REBOOT = ("Drain the node (D under Slurm) so no new job lands on it, capture the evidence "
                       "(c: stack, states, kernel-log), then reboot")


def _pending_step(sit: Situation, pending: Sequence[Proc], gpus: tuple[int, ...], who: str, kill) -> Advice:
    """Processes with a SIGKILL sent but not taken (/proc/PID/status ShdPnd/SigPnd): signalling
    again cannot help. Inside the teardown window (or while memory comes back) wait; then drain,
    capture, reboot."""
    pids = tuple(p.pid for p in pending)
    n = len(pending)
    start = min(pending_since(sit, p) or sit.snap.taken_at for p in pending)
    if kill is not None:
        start = min(start, kill.ts)
    age = sit.age(start)
    where = t.wchans(pending) if any(in_d(p) for p in pending) else "running inside the driver"
    desc = (f"{who} {t.verb(n, 'has', 'have')} a SIGKILL pending that {t.verb(n, 'it', 'they')} cannot take "
            f"({where})")
    shrinking = sit.shrinking(gpus)
    if age < TEARDOWN_WINDOW_S or shrinking:
        why = "memory is coming back" if shrinking else f"the driver may still let go ({t.seconds(age)} so far)"
        return Advice("wait", f"Wait, do not signal again: {desc}; {why}.", pids, gpus,
                    _patience(TEARDOWN_WINDOW_S, age))
    return Advice("reboot", f"Stop signalling: {desc} for {t.seconds(age)}, so no signal can end "
                          f"{t.verb(n, 'it', 'them')}. {CAPTURE_THEN_REBOOT}.", (), gpus)


def _term_grace(who: str, n: int, age: float, pids: tuple[int, ...], gpus: tuple[int, ...]) -> Advice:
    """The wait within SIGTERM's grace (every target kind's ladder: signal_step, kill_step)."""
    return Advice("wait", f"Wait: {who} {t.verb(n, 'was', 'were')} sent SIGTERM {t.ago(age)}; a clean shutdown "
                        f"gets {t.seconds(SIGTERM_GRACE_S)} before SIGKILL.", pids, gpus,
                _patience(SIGTERM_GRACE_S, age))


def beyond_stuck(sit: Situation, stuck: Sequence[Proc], gpus: Sequence[int], why: str) -> Advice:
    """Past the teardown window with processes stuck in the driver."""
    stuck_pids = {p.pid for p in stuck}
    others = [p for p in sit.live_holders(gpus) if p.pid not in stuck_pids and not in_d(p)]
    if others:
        return kill_step(sit, others, gpus, f"{t.plural(len(others), 'other holder')} ({sit.names(others)})",
                         f"{why}; the driver may be waiting for them to let go")
    return Advice("reboot", f"Reboot the node: {why}; a GPU reset cannot run while processes are "
                          "stuck inside the driver.", (), tuple(gpus))


def kill_step(sit: Situation, procs: Sequence[Proc], gpus: Sequence[int], who: str, why: str) -> Advice:
    """The ladder for holders, as for any other target: SIGTERM first (a clean exit), SIGKILL
    (kill-holders) once they ignored it past the grace, a wait after each."""
    pids = tuple(p.pid for p in procs)
    gpus = tuple(sorted(set(gpus)))
    n = len(pids)
    last = sit.last_action(rungs.KILLING, pids)
    if last and sit.age(last.ts) < SIGTERM_GRACE_S:
        return Advice("wait", f"Wait: {who} {t.verb(n, 'was', 'were')} sent SIGKILL "
                            f"{t.ago(sit.age(last.ts))}; let the driver free the memory.", pids, gpus,
                    _patience(SIGTERM_GRACE_S, sit.age(last.ts)))
    if last:
        return Advice("kill-holders", f"Kill {who} ({t.pid_list(pids)}) again: {why}.", pids, gpus)
    term = sit.last_action(rungs.TERMINATING, pids)
    if term:
        age = sit.age(term.ts)
        if age < SIGTERM_GRACE_S:
            return _term_grace(who, n, age, pids, gpus)
        return Advice("kill-holders", f"Kill {who} ({t.pid_list(pids)}): {why}; "
                                    f"{t.verb(n, 'it', 'they')} ignored SIGTERM for {t.seconds(age)}.", pids, gpus)
    return Advice("sigterm", f"SIGTERM {who} ({t.pid_list(pids)}): {why}; a clean exit first "
                           f"(SIGKILL after {t.seconds(SIGTERM_GRACE_S)} if ignored).", pids, gpus)


@dataclass(frozen=True)
class Blockers:
    """What keeps `nvidia-smi -r` from running: daemons, persistence mode, nvidia_drm's modeset."""
    daemons: tuple[Proc, ...] = ()
    persistence: tuple[int, ...] = ()       # GPUs with persistence mode on
    modeset: bool = False                   # nvidia_drm loaded with modeset=Y

    def __bool__(self) -> bool:
        return bool(self.daemons or self.persistence or self.modeset)


def blockers(sit: Situation, gpus: Sequence[int]) -> Blockers:
    """The blockers of a reset of ``gpus`` (all when empty): a daemon or nvidia_drm blocks every
    GPU, persistence mode only its own."""
    want = set(gpus)
    pm = tuple(g.index for g in sit.snap.gpus if g.persistence_mode and (not want or g.index in want))
    return Blockers(tuple(sit.blocker_daemons()), pm, sit.snap.drm_modeset is True)


def blocker_words(b: Blockers) -> str:
    parts = []
    if b.persistence:
        parts.append(f"persistence mode on {t.gpus(b.persistence)}")
    for p in b.daemons:
        parts.append(f"{t.label(p)} (PID {p.pid})")
    if b.modeset:
        parts.append("nvidia_drm loaded with modeset=Y")
    return ", ".join(parts)


def clear_words(b: Blockers) -> str:
    """'Stop nvidia-persistenced (PID 1563) and turn persistence mode off on GPU 3'."""
    parts = []
    if b.daemons:
        parts.append("stop " + ", ".join(f"{t.label(p)} (PID {p.pid})" for p in b.daemons))
    if b.modeset:
        parts.append("unload nvidia_drm (modeset=Y)")
    if b.persistence:
        parts.append(f"turn persistence mode off on {t.gpus(b.persistence)}")
    text = " and ".join(parts)
    return text[:1].upper() + text[1:]


def reset_step(sit: Situation, gpus: Sequence[int], why: str) -> Advice:
    """Toward `nvidia-smi -r`: blockers first, then holders, then the reset; reboot if it failed."""
    gpus = tuple(sorted(set(gpus)))
    sit.reset_wanted.update(gpus)
    found = blockers(sit, gpus)
    if found:
        return Advice("clear-blockers", f"{clear_words(found)} first: {why}, and `nvidia-smi -r` "
                                      "refuses while they hold the GPU.",
                    tuple(p.pid for p in found.daemons), gpus)
    holders = sit.live_holders(gpus)
    stuck = [p for p in holders if in_d(p)]
    if stuck:
        return Advice("reboot", f"Reboot the node: {why}, but {t.plural(len(stuck), 'process', 'processes')} "
                              f"sit in the driver ({t.wchans(stuck)}) and a reset cannot run while they hold it.",
                    (), gpus)
    if holders:
        return kill_step(sit, holders, gpus, sit.names(holders),
                         f"{why}, and a reset refuses while any process holds the GPU")
    tried = sit.last_action(("reset",), gpus=gpus)
    if tried:
        age = sit.age(tried.ts)
        if age < WAIT_S:
            return Advice("wait", f"Wait: the reset of {t.gpus(gpus)} was issued {t.ago(age)}; "
                                "re-read the memory.", (), gpus, WAIT_S)
        return Advice("reboot", f"Reboot the node: {why}, and the reset {t.ago(age)} did not free it.",
                    (), gpus)
    return Advice("reset", f"Reset {t.gpus(gpus)}: {why}; nothing holds it any more.", (), gpus)
