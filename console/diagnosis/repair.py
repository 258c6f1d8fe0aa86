"""Findings about a GPU's memory repair (model.MemoryRepair): row-remap-pending, row-remap-failure,
retired-pages-pending.

On Ampere and later GPUs the driver remaps a memory row after an uncorrectable error; the remap
takes effect only when the GPU is reset (or the node rebooted), even when no process holds the
GPU. Before Ampere, pages pending retirement wait for a reset the same way. A remap that failed
means the GPU can no longer map its bad memory out: drain the node and have the GPU inspected or
replaced (DCGM field 395; aws/eks-node-monitoring-agent#245); a reset does not fix it. A pending
remap can take more than one reset or reboot to go (leptonai/gpud#987).
"""
from __future__ import annotations

from console import rungs
from console.diagnosis import text as t
from console.diagnosis.advice import Advice, finding, reset_step
from console.diagnosis.context import Situation
from console.diagnosis.who import WAIT_S
from console.model import Finding, Gpu, MemoryRepair


def remap_known(g: Gpu | None) -> bool:
    """Does the driver tell this GPU's row-remap state? Then it, not the GPU's Xid 63/64 lines
    (a row remapped or failed to), says what the GPU needs (leptonai/gpud#987)."""
    r = g.memory_repair if g is not None else None
    return r is not None and (r.remap_pending is not None or r.remap_failure is not None)


def _rows(r: MemoryRepair) -> str:
    """'4 rows remapped after uncorrectable errors, 1 after correctable ones'."""
    if r.rows_uncorrectable is None:
        words = "rows remapped after uncorrectable errors not reported"
    else:
        words = f"{t.plural(r.rows_uncorrectable, 'row')} remapped after uncorrectable errors"
    if r.rows_correctable:
        words += f", {r.rows_correctable} after correctable ones"
    return words


def _evidence(g: Gpu, r: MemoryRepair, holders: list[int]) -> dict:
    return {"gpu": g.index, "bus": g.bus_id, "remap_pending": r.remap_pending, "remap_failure": r.remap_failure,
            "rows_uncorrectable": r.rows_uncorrectable, "rows_correctable": r.rows_correctable,
            "pages_pending": r.pages_pending, "holders": holders}


def _users(sit: Situation, g: Gpu) -> tuple[list[int], str]:
    """The PIDs that keep the GPU busy (its live holders and what the driver lists on it, a
    container's host PIDs included), and their names."""
    procs = sit.live_holders([g.index])
    pids = [p.pid for p in procs]
    pids += [dp.pid for dp in sit.snap.driver_processes
             if (dp.gpu_index == g.index or dp.gpu_uuid == g.uuid) and dp.pid not in pids]
    named = sit.names(procs) if procs else ""
    return pids, (named or t.pid_list(pids)) if pids else ""


#: kind -> (the summary's words, the subject of the reason) for what waits for a reset
_DUE = {"row-remap-pending": ("a row remap is pending", "the row remap"),
        "retired-pages-pending": ("pages are pending retirement", "the page retirement")}


def _due(sit: Situation, g: Gpu, kind: str, words: str, r: MemoryRepair) -> Finding:
    """A remap or a page retirement waits for a reset: now when nothing uses the GPU, else
    after the job."""
    what, subject = _DUE[kind]
    pids, who = _users(sit, g)
    ev = _evidence(g, r, pids)
    if pids:
        summary = f"GPU {g.index}: {what} ({words}); reset after the job ends: {who} use it"
        step = Advice(None, f"Nothing to do while the job runs: reset GPU {g.index} (or reboot) once {who} "
                          f"{t.verb(len(pids), 'has', 'have')} ended — {subject} takes effect only at a reset, "
                          "and a reset refuses while anything uses the GPU; the other work can keep running.",
                    (), (g.index,))
        return finding(kind, "low", summary, step, (), (g.index,), ev)
    tried = sit.last_action(rungs.ids(plans="reset"), gpus=(g.index,))
    if tried is not None and sit.age(tried.ts) >= WAIT_S:
        step = Advice("reboot", f"Reboot the node: {subject} on GPU {g.index} is still pending after the reset "
                              f"{t.ago(sit.age(tried.ts))}; it can take a reboot, or more than one.", (), (g.index,))
    else:
        step = reset_step(sit, [g.index], f"{subject} pending on GPU {g.index} takes effect only when the "
                                          "GPU is reset")
    first = " once its reset blockers are cleared" if rungs.of(step.rung).stops_blockers else " now"
    summary = f"GPU {g.index}: {what} ({words}); no process uses it: it can be reset{first}"
    return finding(kind, "high", summary, step, (), (g.index,), ev)


def memory_repair(sit: Situation) -> list[Finding]:
    out = []
    for g in sit.snap.gpus:
        r = g.memory_repair
        if r is None:
            continue
        if r.remap_failure:
            summary = (f"GPU {g.index}: a row remap failed ({_rows(r)}): the GPU can no longer map its bad "
                       "memory out")
            step = Advice(None, f"Drain the node and have GPU {g.index} inspected or "
                              "replaced (NVIDIA's field diagnostic decides an RMA): a failed remap is a hardware "
                              "fault, and a reset does not fix it.", (), (g.index,))
            out.append(finding("row-remap-failure", "critical", summary, step, (), (g.index,),
                               _evidence(g, r, [])))
        elif r.remap_pending:
            out.append(_due(sit, g, "row-remap-pending", _rows(r), r))
        if r.pages_pending:
            out.append(_due(sit, g, "retired-pages-pending", "dynamic page retirement", r))
    return out
