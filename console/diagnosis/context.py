"""What diagnosis knows besides the snapshot: time, recent history, the actions taken.

``Situation`` is built once per ``diagnose`` call and answers the timing questions the
ladder's advice turns on: when did we last kill these PIDs, how long have they sat in
D state, is memory coming back.  Pure: nothing here reads a clock or a node.  What it
derives from the snapshot (the driver's list by PID, who holds which GPU) is worked out once
per call; what it derives from a history snapshot (its PID map, its ghost accounting) is
remembered for as long as that snapshot lives (history.memo), which never changes an answer.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, Sequence

from console.diagnosis import who
from console.diagnosis.who import TEARDOWN_WINDOW_S, blocker_daemon, device_gpus, is_protected, label
from console.diagnosis.roles import Role, role_of, running_blockers
from console.model import ActionRecord, NodeSnapshot, Proc
from console.diagnosis import text
from console.diagnosis.history import (DEVICES, IN_D, PARENT, STREAKS, ZOMBIE, History, Track, memo, pid_map,
                                       processes_read, same_process, streak_start, track_of)

SHRINK_MIB = 256            # a drop this large between polls means the driver is still freeing
TREND_SPAN_S = 15.0         # compare memory with a poll at most this old
DEVICE_HOLDER_GONE = ("Z", "X")
STREAK_SPAN_S = 2 * TEARDOWN_WINDOW_S     # since() looks back no further than this

__all__ = ["Situation", "SHRINK_MIB", "TREND_SPAN_S", "DEVICE_HOLDER_GONE", "STREAK_SPAN_S",
           "ZOMBIE", "IN_D", "DEVICES", "PARENT", "STREAKS"]


def _accounted(snap: NodeSnapshot, index: int) -> int | None:
    """MiB the driver lists on GPU ``index`` of ``snap`` (None: some process has no figure)."""
    table = memo(snap, "accounted", lambda s: {})
    if index in table:
        return table[index]
    uuid = next((g.uuid for g in snap.gpus if g.index == index), None)
    total: int | None = 0
    for dp in snap.driver_processes:
        if dp.gpu_index == index or (dp.gpu_index is None and dp.gpu_uuid == uuid):
            if dp.used_memory_mib is None:
                total = None         # the driver does not say (MIG, containers): cannot tell
                break
            total += dp.used_memory_mib
    table[index] = total
    return total


def _kernel_lines(snap: NodeSnapshot) -> frozenset[str]:
    return memo(snap, "kernel_lines", lambda s: frozenset(ln.strip() for ln in s.kernel_log))


@dataclass
class Situation:
    snap: NodeSnapshot
    now: float
    history: tuple[NodeSnapshot, ...]       # older snapshots of the same node, oldest first
    actions: tuple[ActionRecord, ...]       # oldest first
    ghost_threshold_mib: int
    reset_wanted: set[int] = field(default_factory=set)   # GPUs some advice wants reset
    _listed: set[int] | None = None
    tracks: dict[int, Track] | None = None  # process streaks up to history[-1] (from a History)
    _memo: dict = field(default_factory=dict, repr=False)

    @classmethod
    def build(cls, snap: NodeSnapshot, history: Sequence[NodeSnapshot], actions: Sequence[ActionRecord],
              now: float | None, ghost_threshold_mib: int) -> "Situation":
        now = snap.taken_at if now is None else now
        read = history.read_processes if isinstance(history, History) else processes_read
        hist = tuple(sorted((h for h in history if h is not snap and h.name == snap.name
                             and h.taken_at < snap.taken_at and read(h)),
                            key=lambda h: h.taken_at))
        acts = tuple(sorted((a for a in actions if a.node in (None, snap.name) and a.ts <= now),
                            key=lambda a: a.ts))
        tracks = history.tracks_for(snap) if isinstance(history, History) else None
        return cls(snap=snap, now=now, history=hist, actions=acts, ghost_threshold_mib=ghost_threshold_mib,
                   tracks=tracks)

    def _once(self, what: str, build):
        try:
            return self._memo[what]
        except KeyError:
            value = self._memo[what] = build()
            return value

    def per_proc(self, what: str, proc: Proc, build):
        """build(proc), once per process object of this call (for the modules that judge one
        process at a time: roles, liveness)."""
        return self._per_proc(what, proc, build)

    def _per_proc(self, what: str, proc: Proc, build):
        """build(proc), once per process object of this call."""
        table = self._memo.setdefault(what, {})
        hit = table.get(id(proc))
        if hit is not None and hit[0] is proc:
            return hit[1]
        value = build(proc)
        table[id(proc)] = (proc, value)
        return value

    # ------------------------------------------------------------ the driver's list

    def _driver(self) -> tuple[dict[int, str], dict[int, int], dict[int, set[int]]]:
        """Of the driver's processes that are here: ({pid: first name}, {pid: MiB}, {pid: GPUs})."""
        def build():
            by_uuid = {g.uuid: g.index for g in self.snap.gpus}
            names: dict[int, str] = {}
            mib: dict[int, int] = {}
            gpus: dict[int, set[int]] = {}
            for dp in self.snap.driver_processes_here():
                if dp.name:
                    names.setdefault(dp.pid, dp.name)
                mib[dp.pid] = mib.get(dp.pid, 0) + (dp.used_memory_mib or 0)
                on = gpus.setdefault(dp.pid, set())
                idx = dp.gpu_index if dp.gpu_index is not None else by_uuid.get(dp.gpu_uuid)
                if idx is not None:
                    on.add(idx)
            return names, mib, gpus
        return self._once("driver", build)

    # ------------------------------------------------------------ processes

    def pmap(self, snap: NodeSnapshot) -> dict[int, Proc]:
        return pid_map(snap)

    def proc(self, pid: int) -> Proc | None:
        return pid_map(self.snap).get(pid)

    def name(self, proc: Proc) -> str:
        """A readable name; a zombie has no argv left, so the driver's name for it is used."""
        if not proc.cmdline.strip() or proc.cmdline.rstrip().endswith("<defunct>"):
            listed = self._driver()[0].get(proc.pid)
            if listed:
                return listed.rsplit("/", 1)[-1]
        return label(proc)

    def names(self, procs: Sequence[Proc]) -> str:
        return text.names(procs, self.name)

    def driver_gpus(self) -> dict[int, set[int]]:
        """{pid: GPUs the driver lists it on}, for the driver's processes that are here."""
        return self._driver()[2]

    def role(self, proc: Proc) -> Role:
        """What the process is (console/diagnosis/roles.py): a workload, the node's
        infrastructure, a GPU monitor, this console — with the evidence."""
        return self._per_proc("role", proc, lambda p: role_of(
            p, own=p.pid in self.snap.own_pids, kernel=p.pid == 2 or p.ppid == 2,
            listed_mib=self._driver()[1].get(p.pid, 0)))

    def workload(self, proc: Proc) -> bool:
        """A holder that is a job (or unconfirmed): not the node's own, not this console."""
        return not self.role(proc).infrastructure

    def driver_pids(self) -> set[int]:
        if self._listed is None:
            self._listed = {dp.pid for dp in self.snap.driver_processes_here()}
        return self._listed

    def _device_gpus(self, proc: Proc) -> set[int]:
        return self._per_proc("device_gpus", proc, device_gpus)

    def gpus_of(self, proc: Proc) -> set[int]:
        """GPUs a process is on: the driver's list, its /dev/nvidiaN files, its memory keys."""
        def build(p: Proc) -> frozenset[int]:
            out = self._device_gpus(p) | self._driver()[2].get(p.pid, set())
            out |= {int(k) for k in p.gpu_memory_mib if str(k).isdigit()}
            return frozenset(out)
        return set(self._per_proc("gpus_of", proc, build))

    def mib_of(self, proc: Proc) -> int:
        if proc.gpu_memory_mib:
            return proc.gpu_memory_total_mib
        return self._driver()[1].get(proc.pid, 0)

    def holds_gpu(self, proc: Proc) -> bool:
        return self._per_proc("holds_gpu", proc, lambda p: p.is_gpu_holder or p.pid in self.driver_pids()
                              or bool(p.d_threads and self.gpus_of(p)))

    def gpu_holders(self) -> list[Proc]:
        """The processes holds_gpu says yes to, in /proc order, found once per call (a cheap
        test of each process's own fields first: most of a node's processes have none)."""
        def build() -> list[Proc]:
            drv = self.driver_pids()
            return [p for p in self.snap.processes
                    if (p.gpu_memory_mib or p.device_files or p.d_threads or p.pid in drv) and self.holds_gpu(p)]
        return self._once("gpu_holders", build)

    def _blocker(self, proc: Proc) -> bool:
        return self._per_proc("blocker", proc, lambda p: blocker_daemon(p) is not None)

    def touchable(self, proc: Proc) -> bool:
        """May the ladder signal it? (not PID 1, not a kernel thread, not us, not a blocker daemon)"""
        return self._per_proc("touchable", proc,
                              lambda p: not is_protected(self.snap, p.pid, p) and not self._blocker(p))

    def blocker_daemons(self) -> list[Proc]:
        """Reset-blocker daemons running (persistenced, MPS, DCGM, fabric manager), in /proc order."""
        return list(self._once("blocker_daemons", lambda: running_blockers(self.snap.processes)))

    def holder_pids(self, gpus: Iterable[int] = ()) -> list[int]:
        """who.holder_pids(self.snap, gpus), worked out once per call for each set of GPUs."""
        want = frozenset(gpus)
        return list(self._once(("holders", want), lambda: who.holder_pids(self.snap, want)))

    def live_holders(self, gpus: Iterable[int]) -> list[Proc]:
        """who.holder_pids (signallable holders of these GPUs, all when empty) as processes,
        leaving out zombies that no longer hold anything."""
        pmap = self.pmap(self.snap)
        out = []
        for pid in self.holder_pids(gpus):
            p = pmap[pid]
            if p.state in DEVICE_HOLDER_GONE and not p.d_threads and not p.holds_devices:
                continue
            out.append(p)
        return out

    def gpu_parents(self) -> set[int]:
        """PIDs that are the parent of a process holding a GPU."""
        def build() -> set[int]:
            drv = self.driver_pids()
            # holds_gpu is false without any of these (gpu_holders' cheap test): 2,000 processes
            # a real-size node, a handful of which have one
            return {c.ppid for c in self.pmap(self.snap).values()
                    if (c.gpu_memory_mib or c.device_files or c.d_threads or c.pid in drv) and self.holds_gpu(c)}
        return self._once("gpu_parents", build)

    # ------------------------------------------------------------ time

    def age(self, ts: float) -> float:
        return max(0.0, self.now - ts)

    def last_action(self, rungs: Iterable[str], pids: Iterable[int] = (),
                    gpus: Iterable[int] = ()) -> ActionRecord | None:
        """Most recent action of these rungs aimed at any of these PIDs/GPUs (or node-wide)."""
        rungs, pids, gpus = set(rungs), set(pids), set(gpus)
        for a in reversed(self.actions):
            if a.rung not in rungs:
                continue
            if (not a.pids and not a.gpus) or (not pids and not gpus) \
                    or pids & set(a.pids) or gpus & set(a.gpus):
                return a
        return None

    def _span_start(self) -> int:
        """Index of the oldest history poll since() may look back on (len(history): none)."""
        def build() -> int:
            i = len(self.history)
            while i > 0 and not self.snap.taken_at - self.history[i - 1].taken_at > STREAK_SPAN_S:
                i -= 1
            return i
        return self._once("span", build)

    def since(self, pid: int, what: str, ppid: int | None = None) -> float:
        """Since when (earliest consecutive poll) process ``pid`` has been ``what``: ZOMBIE, IN_D,
        DEVICES, or PARENT (a child of ``ppid``).

        Looks back no further than twice the teardown window; the same process means the
        same start time, so a reused PID does not extend the streak.
        """
        if what not in STREAKS:
            raise ValueError(f"unknown streak {what!r}; one of {', '.join(STREAKS)}")
        first = self.snap.taken_at
        cur = self.proc(pid)
        if cur is None:
            return first
        span = self._span_start()
        if span >= len(self.history):
            return first
        if self.tracks is not None:
            track = self.tracks.get(pid)
        else:
            track = self._per_proc("track", cur, lambda p: track_of(p, reversed(self.history[span:])))
        start = streak_start(track, cur, what, ppid)
        if start is None:
            return first
        return max(start, self.history[span].taken_at)

    def former_parent(self, pid: int) -> int | None:
        """The parent process ``pid`` had before its current one, when a poll this diagnosis
        may look back on saw the change (its launcher exited and it was reparented), else None."""
        cur = self.proc(pid)
        span = self._span_start()
        if cur is None or span >= len(self.history):
            return None
        if self.tracks is not None:
            track = self.tracks.get(pid)
        else:
            track = self._per_proc("track", cur, lambda p: track_of(p, reversed(self.history[span:])))
        if track is None or not same_process(track, cur):
            return None
        if track.ppid != cur.ppid:             # changed at this very poll
            return track.ppid
        if track.parent is not None and track.parent > self.history[span].taken_at:
            return track.former_ppid
        return None

    def used_mib(self, snap: NodeSnapshot, gpus: Iterable[int]) -> int | None:
        want = set(gpus)
        vals = [g.memory_used_mib for g in snap.gpus if not want or g.index in want]
        if not vals or any(v is None for v in vals):
            return None
        return sum(v for v in vals if v is not None)

    def shrinking(self, gpus: Iterable[int] = ()) -> bool:
        """Is memory on these GPUs coming back (dropped by SHRINK_MIB against a recent poll)?"""
        gpus = tuple(gpus)
        cur = self.used_mib(self.snap, gpus)
        if cur is None or not self.history:
            return False

        def build() -> list[NodeSnapshot]:
            recent = [h for h in self.history if self.snap.taken_at - h.taken_at <= TREND_SPAN_S]
            return (recent[:1] + list(self.history[-1:])) if recent else []
        for h in self._once("trend", build):
            old = self.used_mib(h, gpus)
            if old is not None and old - cur >= SHRINK_MIB:
                return True
        return False

    def ghost(self, snap: NodeSnapshot, index: int, used: int | None, reserved: int | None) -> int | None:
        """Memory used on GPU ``index`` of ``snap`` that no listed process accounts for (None when
        it cannot be told)."""
        if used is None:
            return None
        accounted = _accounted(snap, index)
        if accounted is None:
            return None
        return used - accounted - (reserved or 0)

    def logged_before(self, line: str, ts: float) -> bool | None:
        """Was this kernel-log line in a poll taken at or before ``ts``? None: no such poll."""
        before = [h for h in self.history if h.taken_at <= ts]
        if not before:
            return None
        seen: set[int] = set()
        for h in before:
            if id(h.kernel_log) in seen:
                continue
            seen.add(id(h.kernel_log))
            if line in _kernel_lines(h):
                return True
        return False
