"""Verifying an action from fresh readings: memory before/after, what became of the targets.

Pure: snapshots and numbers in, numbers and one-line texts out (no clock, no I/O). The
action layer (console/actions.py) re-reads the node and asks these functions whether the
effect it was after has come: the targets' memory back, the reset blockers gone.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Protocol, Sequence

from console.diagnosis import text as t
from console.diagnosis.who import BLOCKER_DAEMONS, FREED_MIB, blocker_daemon, program_of
from console.model import NodeSnapshot, Proc

Memory = Mapping[str, "int | None"]

def secs(value: float) -> str:
    """'3 s', '91 s', '12 min': exact seconds while they still read as seconds."""
    return f"{value:.0f} s" if value < 300 else t.seconds(value)


def memory_of(snap: NodeSnapshot, gpus: Sequence[int]) -> dict[str, int | None]:
    """Used MiB per GPU of interest ("3" -> MiB); None where the GPU or its value is missing."""
    out: dict[str, int | None] = {}
    for index in gpus:
        gpu = snap.gpu(index)
        out[str(index)] = gpu.memory_used_mib if gpu is not None else None
    return out


def freed_mib(before: Memory, after: Memory) -> int:
    """MiB that came back across the GPUs (a GPU whose use grew counts 0, not negative)."""
    total = 0
    for key, was in before.items():
        now = after.get(key)
        if was is not None and now is not None and was > now:
            total += was - now
    return total


def gpus_freed(before: Memory, after: Memory) -> list[int]:
    """GPUs whose use went down between the two readings (the ones to name as freed)."""
    out = []
    for key, was in before.items():
        now = after.get(key)
        if was is not None and now is not None and was > now and str(key).isdecimal():
            out.append(int(key))
    return sorted(out)


def used_mib(memory: Memory) -> int:
    return sum(v for v in memory.values() if v)


def gpu_settled(key: str, before: Memory, after: Memory, expected: Memory) -> bool:
    """Has this GPU given back what the action was after?

    Free (at or under FREED_MIB) always counts. Where the targets' own share is known
    (``expected``), its return counts too: other processes may keep the rest. A GPU the
    targets held nothing on (expected 0) has nothing to wait for.
    """
    now = after.get(key)
    if now is not None and now <= FREED_MIB:
        return True
    want = expected.get(key)
    if want is None:
        return False
    if want <= 0:
        return True
    was = before.get(key)
    return now is not None and was is not None and was - now >= want - FREED_MIB


def settled_gpus(before: Memory, after: Memory, expected: Memory) -> list[int]:
    return sorted(int(k) for k in before if gpu_settled(k, before, after, expected))


def memory_settled(before: Memory, after: Memory, expected: Memory) -> bool:
    return bool(before) and all(gpu_settled(k, before, after, expected) for k in before)


def restored(snap: NodeSnapshot, commands: Sequence[str]) -> bool:
    """What a restore (B undone) ran shows in this reading: persistence mode on where it asked,
    each daemon it started running."""
    running = {program_of(p) for p in snap.processes if p.state != "Z"}
    for line in commands:
        if line.startswith("nvidia-smi -pm 1"):
            want = line.partition(" -i ")[2]
            gpus = [snap.gpu(int(i)) for i in want.split(",")] if want else list(snap.gpus)
            if any(g is None or g.persistence_mode is not True for g in gpus):
                return False
        elif line.startswith("systemctl start "):
            unit = line.removeprefix("systemctl start ")
            if not any(d.unit == unit and d.program in running for d in BLOCKER_DAEMONS):
                return False
    return True


def blockers_cleared(snap: NodeSnapshot, gpus: Sequence[int]) -> bool:
    """No reset-blocker daemon alive, nvidia_drm's modeset gone and persistence mode off on these
    GPUs (all when empty)."""
    want = set(gpus)
    if any(blocker_daemon(p) is not None and p.state != "Z" for p in snap.processes) or snap.drm_modeset:
        return False
    return not any(g.persistence_mode for g in snap.gpus if not want or g.index in want)


@dataclass(frozen=True)
class TargetFates:
    """What a re-read shows of the targets (same PID *and* same start time = same process)."""
    gone: tuple[int, ...] = ()
    zombies: tuple[int, ...] = ()       # <defunct>, with or without threads in D
    in_d: tuple[int, ...] = ()          # any thread in D state (zombies included)
    running: tuple[int, ...] = ()       # alive and not a zombie


class Target(Protocol):
    """A process as an action saw it (console/actions/plan.py ActionTarget)."""

    @property
    def pid(self) -> int: ...
    @property
    def start_ticks(self) -> int | None: ...
    @property
    def create_time(self) -> float | None: ...


def _same(proc: Proc, tgt: Target) -> bool:
    """The PID's process now is the one the action saw (its start time unchanged where known)."""
    return ((tgt.start_ticks is None or proc.start_ticks is None or proc.start_ticks == tgt.start_ticks)
            and (tgt.create_time is None or proc.create_time is None
                 or abs(proc.create_time - tgt.create_time) < 1e-2))


def target_fates(snap: NodeSnapshot, targets: Sequence[Target]) -> TargetFates:
    """``targets``: ActionTarget-like rows (pid, start_ticks, create_time)."""
    gone: list[int] = []
    zombies: list[int] = []
    in_d: list[int] = []
    running: list[int] = []
    for tgt in targets:
        proc = snap.proc(tgt.pid)
        if proc is None or not _same(proc, tgt):
            gone.append(tgt.pid)
            continue
        if proc.d_threads or proc.state == "D":
            in_d.append(tgt.pid)
        (zombies if proc.state == "Z" else running).append(tgt.pid)
    return TargetFates(tuple(gone), tuple(zombies), tuple(in_d), tuple(running))


def fates_text(fates: TargetFates, total: int) -> str:
    """'8 <defunct> with threads in D, 1 gone' / 'all 3 gone' / '2 still running'."""
    if total and len(fates.gone) == total:
        return "all gone" if total > 2 else ("gone" if total == 1 else "both gone")
    parts = []
    stuck_z = [p for p in fates.zombies if p in fates.in_d]
    plain_z = len(fates.zombies) - len(stuck_z)
    if stuck_z:
        parts.append(f"{len(stuck_z)} <defunct> with threads in D state")
    if plain_z:
        parts.append(f"{plain_z} <defunct>")
    live_d = [p for p in fates.running if p in fates.in_d]
    if live_d:
        parts.append(f"{len(live_d)} stuck in D state")
    if len(fates.running) - len(live_d):
        parts.append(f"{len(fates.running) - len(live_d)} still running")
    if fates.gone:
        parts.append(f"{len(fates.gone)} gone")
    return ", ".join(parts)


def memory_line(gpus: Sequence[int], before: Memory, after: Memory | None, *, elapsed: float,
                freed_at: float | None) -> str:
    """'GPUs 0-1 freed 138.7 GiB in 3 s' / 'after 10 s nothing freed on GPUs 0-7 (594.6 GiB still used)'."""
    if not gpus:
        return ""
    if after is None:
        return f"memory not re-read in {secs(elapsed)} (the node did not answer)"
    freed = freed_mib(before, after)
    if freed_at is not None and freed > 0:
        return f"{t.gpus(gpus)} freed {t.mib(freed)} in {secs(freed_at)}"
    still = used_mib(after)
    if elapsed < 1:
        return f"{t.gpus(gpus)} {t.verb(len(gpus), 'holds', 'hold')} {t.mib(still)}"
    if freed < 256:
        return f"after {secs(elapsed)} nothing freed on {t.gpus(gpus)} ({t.mib(still)} still used)"
    return f"after {secs(elapsed)} {t.mib(freed)} freed on {t.gpus(gpus)}, {t.mib(still)} still used"
