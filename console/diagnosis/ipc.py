"""Memory one process shared with another through CUDA IPC, left charged to the importer once
the exporter is gone (LMCache/LMCache#4014, fixed in #4015: the importer had to call
``torch.cuda.ipc_collect()``). A live server then "holds" a dead client's memory: signalling the
dead PID does nothing, and the next step is the importer.

The evidence the driver's list allows: on one GPU, a process the driver charged (the exporter)
is gone — from the driver's list and from /proc, or <defunct> — and in the same readings another
live process's share (the importer) grew by about what the exporter held, while the GPU's memory
did not come back. Looked for across the node's recent history (``Situation.history``): the
finding lasts while the hand-off is within it and the importer still holds the memory.
"""
from __future__ import annotations

from console.diagnosis import text as t
from console.diagnosis.advice import finding, signal_step
from console.diagnosis.context import Situation
from console.diagnosis.history import memo
from console.diagnosis.who import label
from console.model import Finding, NodeSnapshot

#: the exporter held at least this much (smaller hand-offs are noise)
MIN_MIB = 1024
#: the importer's growth matches the exporter's share within this fraction
MATCH = 0.2


def _charged(snap: NodeSnapshot) -> dict[tuple[int, int], int]:
    """(GPU, PID) -> MiB the driver charges there; worked out once per snapshot (history.memo:
    the same history is read again every poll)."""
    return memo(snap, "ipc_charged", _charge)


def _charge(snap: NodeSnapshot) -> dict[tuple[int, int], int]:
    out: dict[tuple[int, int], int] = {}
    for d in snap.driver_processes:
        if d.gpu_index is not None and d.used_memory_mib:
            out[(d.gpu_index, d.pid)] = out.get((d.gpu_index, d.pid), 0) + d.used_memory_mib
    return out


def _name(snap: NodeSnapshot, pid: int) -> str:
    """The exporter's name as that reading had it (the process table, else the driver's list)."""
    proc = snap.proc(pid)
    if proc is not None:
        return label(proc)
    named = next((d.name for d in snap.driver_processes if d.pid == pid and d.name), "")
    return named.rsplit("/", 1)[-1] or "?"


def _used(snap: NodeSnapshot, gpu: int) -> int:
    g = snap.gpu(gpu)
    return (g.memory_used_mib or 0) if g is not None else 0


def handoffs(sit: Situation) -> list[Finding]:
    snap = sit.snap
    now = _charged(snap)
    out: list[Finding] = []
    seen: set[tuple[int, int]] = set()
    for older, newer in zip(sit.history, (*sit.history[1:], snap)):
        before, after = _charged(older), _charged(newer)      # memoised: each reading once
        if before.keys() <= after.keys():
            continue                             # no (GPU, PID) charge ended here: no exporter gone
        for (gpu, exporter), held in before.items():
            if held < MIN_MIB or (gpu, exporter) in after:
                continue
            proc = sit.proc(exporter)            # (history keeps no process table: now decides)
            if proc is not None and proc.state not in ("Z", "X"):
                continue                         # still running: it let go of the memory itself
            if _used(newer, gpu) < _used(older, gpu) - MATCH * held:
                continue                         # the memory came back: nothing was handed over
            for (g2, importer), mib in after.items():
                grew = mib - before.get((g2, importer), 0)
                if g2 != gpu or importer == exporter or abs(grew - held) > MATCH * held:
                    continue
                keep = sit.proc(importer)
                if (gpu, importer) in seen or keep is None or keep.state in ("Z", "X") \
                        or now.get((gpu, importer), 0) < grew:
                    continue                     # gone since, or it let go of the memory since
                seen.add((gpu, importer))
                out.append(_finding(sit, keep, exporter, _name(older, exporter), gpu, grew, newer.taken_at))
    return out


def _finding(sit: Situation, importer, exporter: int, exporter_name: str, gpu: int, mib: int,
             when: float) -> Finding:
    summary = (f"PID {importer.pid} ({label(importer)}) took over {t.mib(mib)} on GPU {gpu} when PID "
               f"{exporter} ({exporter_name}) exited {t.ago(sit.age(when))}: memory the exporter shared "
               "through CUDA IPC stays charged to the process that imported it")
    why = (" — it holds what the dead exporter shared (CUDA IPC): signalling the dead PID frees nothing; "
           "a server that can be told to drop its imported handles (torch.cuda.ipc_collect()) frees it "
           "without a restart")
    step = signal_step(sit, [importer], [gpu], f"PID {importer.pid} ({label(importer)})", purpose=why)
    return finding("cuda-ipc", "high", summary, step, [importer.pid], [gpu],
                   {"importer": importer.pid, "exporter": exporter, "gpu": gpu, "mib": mib,
                    "targets": [importer.pid]})
