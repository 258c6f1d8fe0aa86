"""Findings about the node and its GPUs: probe-hung, driver-error, xid, ghost-memory, reset-blocker."""
from __future__ import annotations

import re
from dataclasses import replace
from typing import Sequence

from console import rungs
from console.diagnosis.who import FREED_MIB, TEARDOWN_WINDOW_S, WAIT_S, program_of, restore_commands
from console.model import Finding, NodeSnapshot, recovery_words
from console.diagnosis import text as t
from console.diagnosis.advice import (CAPTURE_THEN_REBOOT, Advice, blocker_words, blockers, clear_words, finding, in_d, kill_step, reset_step,
                     signal_step)
from console.diagnosis.context import Situation
from console.diagnosis.repair import remap_known
from console.diagnosis.xid import (XidEvent, bus_key, fallen_off_bus, firmware_failures, hung_tasks, parse_xid_line,
                                   recovery_action)

HUNG_PROBES_BEFORE_REBOOT = 3     # consecutive timed-out probes (and at least the teardown window)
_CONNECTION_WORDS = ("unreachable", "refused", "authentication", "host key")


def _hung(error: str | None) -> bool:
    """A probe that reached the node and timed out there — not a node we could not reach."""
    low = (error or "").lower()
    return "timed out" in low and not any(w in low for w in _CONNECTION_WORDS)


def probe_hung(snap: NodeSnapshot, history: Sequence[NodeSnapshot]) -> list[Finding]:
    if not _hung(snap.error):
        return []
    streak = [snap]
    for h in sorted((h for h in history if h.name == snap.name and h.taken_at < snap.taken_at),
                    key=lambda h: h.taken_at, reverse=True):
        if not _hung(h.error):
            break
        streak.append(h)
    since = streak[-1].taken_at
    lasted = snap.taken_at - since
    summary = (f"the probe timed out ({snap.error})"
               + (f", {len(streak)} times in a row over {t.seconds(lasted)}" if len(streak) > 1 else ""))
    ev = {"error": snap.error, "consecutive": len(streak), "since": since}
    if len(streak) >= HUNG_PROBES_BEFORE_REBOOT and lasted >= TEARDOWN_WINDOW_S:
        step = Advice("reboot", f"Reboot the node: nvidia-smi has not answered for {t.seconds(lasted)}; "
                              "a driver call is stuck (callers hang in D state) and only a reboot clears it.")
        return [finding("probe-hung", "critical", summary, step, evidence=ev, since=since)]
    step = Advice("wait", "Wait and re-poll: a driver call is probably hung (nvidia-smi stuck in D state); "
                        "if it keeps timing out, read the kernel log for Xids from a plain shell.", wait_s=WAIT_S)
    return [finding("probe-hung", "high", summary, step, evidence=ev, since=since)]


def driver_errors(snap: NodeSnapshot) -> list[Finding]:
    out = []
    err = (snap.error or "").strip()
    low = err.lower()
    if err and "timed out" not in low and not any(w in low for w in _CONNECTION_WORDS) \
            and not unreachable(snap):          # GPUs nvidia-smi cannot reach: gone_gpus names each
        if "mismatch" in low:
            out.append(finding("driver-error", "critical", f"driver/library version mismatch: {err}",
                          Advice("reboot", "Reboot the node (or reload the nvidia kernel modules): the loaded "
                                         "kernel module and the user-space library differ after a driver "
                                         "upgrade, and no GPU works until they match."),
                          evidence={"error": err}))
        elif "not loaded" in low or "couldn't communicate" in low:
            out.append(finding("driver-error", "critical", f"the NVIDIA driver is not loaded: {err}",
                          Advice(None, "Read `dmesg` for why the module is gone, then load it (`modprobe nvidia`) "
                                     "or reboot: nothing on the GPUs can run without it."),
                          evidence={"error": err}))
        elif "no devices" in low:
            out.append(finding("driver-error", "high", f"nvidia-smi found no GPU: {err}",
                          Advice(None, "Check `lspci | grep -i nvidia` and `dmesg`: the driver is loaded but "
                                     "sees no GPU (fallen off the bus, or not bound)."),
                          evidence={"error": err}))
        elif "shared library not found" in low:
            out.append(finding("driver-error", "high", f"no NVIDIA driver here: {err}",
                          Advice(None, "Install or load the NVIDIA driver if this node should have GPUs; the "
                                     "processes below are still read."),
                          evidence={"error": err}))
        elif "not found" in low and "nvidia-smi" in low:
            out.append(finding("driver-error", "low", f"nvidia-smi is not installed here: {err}",
                          Advice(None, "Install the NVIDIA driver utilities or point PATH at nvidia-smi; "
                                     "without it this node cannot be read."),
                          evidence={"error": err}))
        elif "driver" in low or "nvml" in low:
            out.append(finding("driver-error", "critical", err if low.startswith("driver error") else f"driver error: {err}",
                          Advice(None, "Read `dmesg` for NVRM lines: the driver answers with an error."),
                          evidence={"error": err}))
    for bus in snap.lost_gpus:
        why = _unreachable_words(snap, bus)
        out.append(finding("driver-error", "critical",
                      f"GPU {bus} lost: the driver cannot reach it (nvidia-smi: {why})",
                      Advice("reboot", _OFF_BUS_STEP.format(bus=bus)),
                      evidence={"bus_id": bus, "said": why, "off_bus": True}))
    return out


#: what every GPU gone from the bus calls for: a reset cannot reach it, a resumed node would take jobs
_OFF_BUS_STEP = ("Drain the node, then reboot it (power-cycle it if GPU {bus} stays gone): the GPU is off the "
                 "bus, so no reset reaches it and no job can use it; do not resume the node before.")


def _unreachable_words(snap: NodeSnapshot, bus: str) -> str:
    """What nvidia-smi said of a GPU it could not reach ("GPU is lost", "Unknown Error", …)."""
    for w in snap.warnings:
        if bus in w and "(" in w:
            return w[w.rindex("(") + 1:].rstrip(")") or "unreachable"
    return "GPU is lost"


_UNREACHABLE_WARNING = re.compile(r"GPU (\S+) cannot be reached: (.*)")
_UNREACHABLE_ERROR = re.compile(r"GPU ([0-9A-Fa-f:.]+) \(([^)]*)\)")


def unreachable(snap: NodeSnapshot) -> list[tuple[str, str]]:
    """(bus id, what nvidia-smi said) of each GPU it could get no handle for ("Unknown Error", "Not
    Found", …: the wordings other than "GPU is lost", which snap.lost_gpus holds), from the node's
    warnings (other GPUs answered) or its error (none did)."""
    out = [(m.group(1), m.group(2).strip()) for w in snap.warnings if (m := _UNREACHABLE_WARNING.fullmatch(w))]
    if snap.error and "cannot reach" in snap.error:
        out += [(m.group(1), m.group(2).strip()) for m in _UNREACHABLE_ERROR.finditer(snap.error)]
    return out


def gone_gpus(snap: NodeSnapshot) -> list[Finding]:
    """GPUs off the bus however they show: the kernel module knows a GPU nvidia-smi does not list,
    its PCI config space reads all ones ("rev ff"), or the kernel log says it fell off the bus over
    several lines without an Xid. Each a driver-error naming the bus: drain, reboot — never a
    reset or a resume. A GPU already named lost (snap.lost_gpus) is not named twice."""
    named = {bus_key(b) for b in snap.lost_gpus}
    listed = {bus_key(g.bus_id) for g in snap.gpus}
    out = []

    def add(bus: str, summary: str, ev: dict) -> None:
        key = bus_key(bus) or bus
        if key in named:
            return
        named.add(key)
        out.append(finding("driver-error", "critical", summary, Advice("reboot", _OFF_BUS_STEP.format(bus=bus)),
                           evidence={"bus_id": bus, "off_bus": True, **ev}))
    for bus, why in unreachable(snap):
        add(bus, f"GPU {bus} unreachable: nvidia-smi cannot get a handle for it ({why}) — off the bus or "
                 "wedged", {"said": why})
    for p in snap.pci_gpus or ():
        if p.present is False:
            add(p.bus_id, f"GPU {p.bus_id} reads all ones on the PCI bus (rev ff): it fell off the bus",
                {"pci": "ff"})
        elif snap.error is None and snap.gpus and bus_key(p.bus_id) not in listed:
            add(p.bus_id, f"GPU {p.bus_id} is on the PCI bus but the driver does not list it: unreachable "
                          f"({len(snap.gpus)} of {len(snap.pci_gpus or ())} GPUs listed)", {"pci": "missing"})
    xid79 = {bus_key(ev.bus) for ev in map(parse_xid_line, snap.kernel_log) if ev is not None and ev.code == 79}
    for bus in fallen_off_bus("\n".join(snap.kernel_log)):
        if bus_key(bus) not in xid79:
            add(bus, f"GPU {bus} fell off the bus (kernel log, no Xid): it is not responding to commands",
                {"kernel": "fallen off the bus"})
    return out


def reset_required(sit: Situation) -> list[Finding]:
    """NVRM lines saying NV_ERR_RESET_REQUIRED (an assertion in the driver, often with no Xid): the
    GPU they name wants a reset; one they do not name leaves the node's GPUs to reset or a reboot."""
    lines = [ln.strip() for ln in sit.snap.kernel_log if "NV_ERR_RESET_REQUIRED" in ln]
    if not lines:
        return []
    by_bus = {bus_key(g.bus_id): g.index for g in sit.snap.gpus}
    gpus = sorted({by_bus[k] for ln in lines for k in map(bus_key, _BUS_IN_LINE.findall(ln)) if k in by_bus})
    why = "the driver says NV_ERR_RESET_REQUIRED"
    step = (reset_step(sit, gpus, f"{why} for {t.gpus(gpus)}") if gpus else
            Advice("reboot", f"Reboot the node: {why} and names no GPU, so none can be reset alone."))
    where = t.gpus(gpus) if gpus else "a GPU it does not name"
    return [finding("driver-error", "high", f"{where}: {why} ({t.plural(len(lines), 'kernel line')})",
                    step, (), tuple(gpus), {"lines": lines[-3:], "gpus": gpus})]


#: a hung-task report older than this whose task is gone is history
HUNG_TASK_HISTORY_S = 3600.0


def hung_task_reports(sit: Situation) -> list[Finding]:
    """The kernel's hung-task reports (a task in D for more than its 120 s): one blocked inside the
    NVIDIA driver — a frame of the nvidia module in its trace, or on a node whose log has Xid lines
    — holds the driver's locks, and every GPU call behind it waits: drain, capture, reboot
    (leptonai/gpud#117, NVIDIA/nvidia-persistenced#15). A report whose task left D, or an old one
    whose task is gone, is history."""
    reports = hung_tasks(sit.snap.kernel_log)
    if not reports:
        return []
    xid_here = any(parse_xid_line(ln) is not None for ln in sit.snap.kernel_log)
    uptime = sit.snap.taken_at - sit.snap.boot_time if sit.snap.boot_time else None
    out = []
    for r in reports:
        proc = sit.proc(r.pid)
        same = [p for p in sit.snap.processes if p.name == r.name[:15] and in_d(p)]
        now_in_d = (proc is not None and in_d(proc)) or bool(same)
        age = uptime - r.uptime_s if uptime is not None and r.uptime_s is not None else None
        driver = r.driver_frame is not None or xid_here
        where = (f"inside the NVIDIA driver ({r.driver_frame})" if r.driver_frame
                 else "on a node whose kernel log has Xid lines" if xid_here else "outside the GPU driver")
        summary = (f"the kernel reports task {r.name} (PID {r.pid}) blocked in D for more than "
                   f"{t.seconds(r.seconds)} {where}")
        ev = {"hung_task": r.name, "pid": r.pid, "blocked_s": r.seconds, "driver_frame": r.driver_frame,
              "line": r.line, "uptime_s": r.uptime_s, "still_in_d": now_in_d}
        if (proc is not None and not in_d(proc)) or (not now_in_d and age is not None and age > HUNG_TASK_HISTORY_S):
            out.append(finding("d-state", "info", summary + " (history: it is no longer in D)",
                               Advice(None, "Nothing to do: the task has left D since the report."), evidence=ev))
        elif driver:
            step = Advice("reboot", f"Stop signalling: {r.name} (PID {r.pid}) waits inside the driver, holding "
                                  f"what every other GPU call needs. {CAPTURE_THEN_REBOOT}.")
            pids = tuple(p.pid for p in ([proc] if proc is not None else same))
            out.append(finding("d-state", "critical", summary, step, pids, (), ev))
        else:
            out.append(finding("d-state", "low", summary, Advice(None, "Watch it: D outside the GPU driver is "
                                                                     "usually I/O; it matters only if it lasts."),
                               evidence=ev))
    return out


_BUS_IN_LINE = re.compile(r"\b([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}(?:\.[0-9A-Fa-f])?)\b")


# ---------------------------------------------------------------- ghost memory

def ghost_memory(sit: Situation) -> list[Finding]:
    """Memory no listed process accounts for. GPUs whose next step is the same (the same rung on
    the same processes) make ONE finding — "GPUs 0-7: 594 GiB …" — so the panel leads with what
    differs; the per-GPU figures stay in the evidence."""
    per_gpu = []
    for g in sit.snap.gpus:
        ghost = sit.ghost(sit.snap, g.index, g.memory_used_mib, g.memory_reserved_mib)
        if ghost is None or ghost <= sit.ghost_threshold_mib:
            continue
        since = sit.snap.taken_at
        for h in reversed(sit.history):
            hg = h.gpu(g.index)
            if hg is None or sit.snap.taken_at - h.taken_at > 2 * TEARDOWN_WINDOW_S:
                break
            hv = sit.ghost(h, g.index, hg.memory_used_mib, hg.memory_reserved_mib)
            if hv is None or hv <= sit.ghost_threshold_mib:
                break
            since = h.taken_at
        accounted = (g.memory_used_mib or 0) - ghost - (g.memory_reserved_mib or 0)
        step = _ghost_step(sit, [g.index], ghost)
        per_gpu.append((g, ghost, accounted, since, (step.rung, step.targets, step.wait_s)))
    groups: dict[tuple, list] = {}
    for item in per_gpu:
        groups.setdefault(item[4], []).append(item)
    out = []
    for items in groups.values():
        gpus = [g.index for g, *_ in items]
        ghost = sum(x[1] for x in items)
        used = sum(g.memory_used_mib or 0 for g, *_ in items)
        listed = sum(x[2] for x in items)
        since = min(x[3] for x in items)
        where = f"GPU {gpus[0]}" if len(gpus) == 1 else t.gpus(gpus)
        summary = (f"{where}: {t.mib(ghost)} in use that no listed process accounts for "
                   f"({t.mib(used)} used, {t.mib(listed)} listed)")
        step = _ghost_step(sit, gpus, ghost)
        evidence = {"gpus": gpus, "ghost_mib": ghost, "used_mib": used, "listed_mib": listed,
                    "threshold_mib": sit.ghost_threshold_mib, "since": since,
                    "per_gpu": {str(g.index): {"ghost_mib": x_ghost, "used_mib": g.memory_used_mib,
                                               "listed_mib": x_listed, "reserved_mib": g.memory_reserved_mib}
                                for g, x_ghost, x_listed, *_ in items}}
        if len(gpus) == 1:
            evidence["gpu"] = gpus[0]
            evidence["reserved_mib"] = items[0][0].memory_reserved_mib
        out.append(finding("ghost-memory", "high", summary, step, (), tuple(gpus), evidence, since))
    return out


def _ghost_step(sit: Situation, gpus: list[int], ghost: int) -> Advice:
    listed = sit.driver_pids()
    holders = sit.live_holders(gpus)
    hidden = [p for p in holders if p.pid not in listed and not in_d(p) and p.state != "Z"]
    where = f"GPU {gpus[0]}" if len(gpus) == 1 else t.gpus(gpus)
    why = f"{t.mib(ghost)} on {where} belongs to no listed process"
    if hidden:
        return kill_step(sit, hidden, gpus, sit.names(hidden),
                         f"{why}, and they hold {'its' if len(gpus) == 1 else 'their'} device files without "
                         "being listed")
    stuck = [p for p in holders if in_d(p) or p.state == "Z"]
    if stuck:
        return signal_step(sit, stuck, gpus, t.plural(len(stuck), "dying process", "dying processes"))
    kill = sit.last_action(rungs.SIGNALLING)
    if kill and sit.age(kill.ts) < TEARDOWN_WINDOW_S:
        return Advice("wait", f"Wait: the last kill was {t.ago(sit.age(kill.ts))} and {why}; pinned memory "
                            "can take half a minute or more to come back.", (), tuple(gpus),
                    max(WAIT_S, TEARDOWN_WINDOW_S - sit.age(kill.ts)))
    if sit.shrinking(gpus):
        return Advice("wait", f"Wait: {why}, but it is shrinking — the driver is still freeing it.", (), tuple(gpus),
                    WAIT_S * 3)
    return reset_step(sit, gpus, f"{why} and nothing is freeing it")


# ---------------------------------------------------------------- Xid

def _xid_handled(sit: Situation, ev: XidEvent, gpu: int | None) -> bool:
    """A reset/reboot was done after this line was already in the log."""
    act = sit.last_action(("reset", "reboot"), gpus=(gpu,) if gpu is not None else ())
    if act is None:
        return False
    logged = sit.logged_before(ev.line, act.ts)
    return logged is None or logged


def action_step(sit: Situation, action: str, gpu: int | None, where: str, describe: str, *,
                drain_first: bool = False) -> Advice | None:
    """The step an Xid's or a recovery action's ``action`` (reboot, reset, drain) calls for on one
    GPU; None for the others (the caller says why nothing is to be done). One home for what a
    reset / reboot / drain request means: Xid lines and the driver's recovery action both use it."""
    gpus = (gpu,) if gpu is not None else ()
    if action == "reboot":
        return Advice("reboot", f"Reboot the node (power-cycle if the GPU does not return): {describe} "
                              f"on {where} — a GPU reset will not recover it.", (), gpus)
    if action == "reset":
        if gpu is None:
            return Advice("reboot", f"Reboot the node: {describe} names a GPU the driver no longer "
                                  "lists, so it cannot be reset.")
        step = reset_step(sit, [gpu], f"{describe} says GPU {gpu} needs a reset")
        if drain_first:
            step = replace(step, text=f"{step.text} Drain first: stop the jobs that use GPU {gpu} "
                                      "over NVLink or peer-to-peer.")
        return step
    if action == "drain":
        return Advice(None, f"Drain peer-to-peer traffic to {where}: stop the jobs that use it over NVLink "
                          f"or P2P; {describe} asks for no reset.", (), gpus)
    return None


def xids(sit: Situation) -> list[Finding]:
    by_bus = {bus_key(g.bus_id): g.index for g in sit.snap.gpus}
    groups: dict[tuple, list[XidEvent]] = {}
    for line in sit.snap.kernel_log:
        ev = parse_xid_line(line)
        if ev is None:
            continue
        key = (ev.code, bus_key(ev.bus) or ev.bus)
        groups.setdefault(key, []).append(ev)
    out = []
    for (code, bkey), evs in groups.items():
        ev = evs[-1]                          # the latest says the current state (154: current action)
        gpu = by_bus.get(bkey)
        current = sit.snap.gpu(gpu).recovery_action if gpu is not None else None
        if code == 154 and current not in (None, "none"):
            continue                          # the driver's current recovery action says it: recovery_actions()
        if code in (63, 64) and gpu is not None and remap_known(sit.snap.gpu(gpu)):
            continue                          # the GPU's current remap state says it: repair.py
        where = f"GPU {gpu} ({ev.bus})" if gpu is not None else f"GPU {ev.bus}"
        count = f" ×{len(evs)}" if len(evs) > 1 else ""
        if code == 154 and ev.recovery:
            summary = f"{ev.describe} on {where}{count}: the driver says {ev.recovery}"
        else:
            summary = f"{ev.describe} on {where}{count}: {ev.info.meaning}"
        severity = ev.severity
        gpus = (gpu,) if gpu is not None else ()
        pids = (ev.pid,) if ev.pid and sit.proc(ev.pid) else ()
        step = None
        if _xid_handled(sit, ev, gpu):
            severity, step = "info", Advice(None, "Nothing to do: the GPU was reset or the node rebooted after "
                                                "this line was logged.")
        elif code == 154 and current == "none":
            severity, step = "info", Advice(None, f"Nothing to do: the driver now reports no recovery action for "
                                                f"GPU {gpu}; this line is history.", (), gpus)
        elif ev.action in ("reboot", "reset", "drain"):
            step = action_step(sit, ev.action, gpu, where, ev.describe,
                               drain_first=ev.code == 154 and "drain" in (ev.recovery or "").lower())
            if ev.action == "reset" and gpu is not None and ev.info.workflow:
                step = replace(step, text=f"{step.text} {ev.info.workflow}")
        elif ev.action == "app":
            step = Advice(None, f"Restart the application{f' (PID {ev.pid})' if ev.pid else ''}: {ev.describe} "
                              "is the program's fault; the GPU itself is fine.", (), gpus)
        elif ev.info.catalog == "CONTACT_SUPPORT":
            step = Advice(None, f"Nothing to do on the node: report {ev.describe} on {where} to NVIDIA support "
                              "(the Xid catalogue's advice).", (), gpus)
        if step is None:
            step = Advice(None, f"Nothing to do now: {ev.info.meaning}", (), gpus)
        out.append(finding("xid", severity, summary, step, pids, gpus,
                      {"xid": code, "bus": ev.bus, "gpu": gpu, "count": len(evs), "line": ev.line,
                       "recovery": ev.recovery, "action": ev.action, "meaning": ev.info.meaning,
                       "catalog": ev.info.catalog,
                       "uptime_s": ev.uptime_s}))
    return out


# ---------------------------------------------------------------- the driver's recovery action

def firmware_boot(sit: Situation) -> list[Finding]:
    """GPUs the kernel log says could not start: their GSP firmware found WPR2 already up, and the
    adapter's init failed (no Xid; open-gpu-kernel-modules #1230, #1259). The driver retries and
    fails again; a GPU reset does not clear it (the driver cannot reach the GPU to reset it, and
    nvidia-smi no longer lists it): drain, then reboot or power-cycle. After a reboot the kernel
    log starts anew, so the finding goes."""
    out = []
    by_bus = {bus_key(g.bus_id): g.index for g in sit.snap.gpus}
    for fail in firmware_failures(sit.snap.kernel_log):
        gpu = by_bus.get(bus_key(fail.bus)) if fail.bus else None
        if fail.bus is None:
            where = "a GPU"
        elif gpu is None:
            where = f"the GPU at {fail.bus} (nvidia-smi no longer lists it)"
        else:
            where = f"GPU {gpu} ({fail.bus})"
        why = "its firmware (GSP) found WPR2 already up" if fail.wpr2 else "its adapter init failed"
        code = f" ({fail.code})" if fail.code else ""
        summary = f"{where[0].upper()}{where[1:]} could not start: {why}{code}; the driver keeps retrying"
        step = Advice("reboot", f"Drain the node first (its jobs cannot use {where}), then reboot it; power-cycle "
                              "it if the GPU does not come back. A GPU reset does not clear a firmware that "
                              "cannot boot.", (), (gpu,) if gpu is not None else ())
        out.append(finding("firmware-boot", "critical", summary, step, (), step.gpus,
                           {"bus": fail.bus, "gpu": gpu, "wpr2": fail.wpr2, "code": fail.code,
                            "lines": list(fail.lines)}))
    return out


def recovery_actions(sit: Situation) -> list[Finding]:
    """GPUs whose recovery action (NVML's field, nvidia-smi's ``gpu_recovery_action``) is not
    "none": the driver's own, current word on what the GPU needs. It supersedes the Xid 154
    lines of that GPU (their latest is kept in the evidence)."""
    out = []
    xid154: dict[str, str] = {}
    for line in sit.snap.kernel_log:
        ev = parse_xid_line(line)
        if ev is not None and ev.code == 154:
            xid154[bus_key(ev.bus) or ev.bus] = ev.line
    for g in sit.snap.gpus:
        token = g.recovery_action
        if token is None or token == "none":
            continue
        action, severity = recovery_action(token)
        words = recovery_words(token)
        where = f"GPU {g.index} ({g.bus_id})"
        describe = f"the driver's recovery action ({words})"
        line = xid154.get(bus_key(g.bus_id) or "")
        summary = f"GPU {g.index}: the driver's recovery action is {words}" + (" (Xid 154 logged)" if line else "")
        step = action_step(sit, action, g.index, where, describe,
                           drain_first="drain" in token)
        if step is None and token == "recover_imex_domain":
            step = Advice(None, f"Recover the IMEX domain {where} belongs to (its nvidia-imex daemons across the "
                              "NVLink domain's nodes): the driver asks for no reset of this GPU.", (), (g.index,))
        if step is None:
            step = Advice(None, f"Look up {words!r} in NVIDIA's documentation of nvmlDeviceGpuRecoveryAction_t: "
                              "this console does not know this recovery action.", (), (g.index,))
        out.append(finding("recovery-action", severity, summary, step, (), (g.index,),
                           {"gpu": g.index, "recovery_action": token, "words": words, "action": action,
                            "xid_154": line}))
    return out


# ---------------------------------------------------------------- reset blockers

def reset_blockers(sit: Situation) -> list[Finding]:
    """Run after the other findings: it is severe only when some advice wants a reset."""
    found = blockers(sit, ())
    if not found:
        return []
    wanted = sorted(sit.reset_wanted)
    summary = f"reset blockers: {blocker_words(found)}"
    pids = [p.pid for p in found.daemons]
    ev = {"pids": pids, "persistence_gpus": list(found.persistence), "daemons": [program_of(p) for p in found.daemons],
          "drm_modeset": found.modeset, "reset_wanted": wanted}
    for_reset = blockers(sit, wanted) if wanted else None
    if for_reset is not None and (found.daemons or found.modeset or for_reset.persistence):
        step = Advice("clear-blockers", f"{clear_words(for_reset)} before the reset of {t.gpus(wanted)}: "
                                      "`nvidia-smi -r` refuses while persistence mode, MPS, DCGM, the fabric "
                                      "manager, a display server or nvidia_drm hold the GPU.", tuple(pids), tuple(wanted))
        return [finding("reset-blocker", "high", summary, step, pids, wanted, ev)]
    step = Advice(None, "Nothing to do unless a GPU reset is needed: then clear these first, since "
                      "`nvidia-smi -r` refuses while they hold the GPU.", tuple(pids), found.persistence)
    return [finding("reset-blocker", "low", summary, step, pids, found.persistence, ev)]


# ---------------------------------------------------------------- what B stopped

def blockers_off(sit: Situation) -> list[Finding]:
    """After B (clear-blockers), what it turned off and is still off: persistence mode, the
    daemons it stopped. While a reset is still wanted it stays off (info); once no advice wants
    one, putting it back is the node's next step (low, rung "restore": x, through Confirm)."""
    b = sit.last_action(("clear-blockers",))
    restore = sit.last_action(("restore",))
    if b is None or (restore is not None and restore.ts >= b.ts):
        return []
    stopped = [name for _pid, _parent, name in b.family]
    lines = restore_commands(sit.snap, stopped, b.gpus)
    if not lines:
        return []
    off = [g.index for g in sit.snap.gpus if g.persistence_mode is False and (not b.gpus or g.index in b.gpus)]
    what = []
    if off:
        what.append(f"persistence mode on {t.gpus(off)}")
    what += [line.removeprefix("systemctl start ") for line in lines if line.startswith("systemctl start ")]
    summary = f"off since B ({t.ago(sit.age(b.ts))}): {', '.join(what)}"
    commands = ", ".join(f"`{line}`" for line in lines)
    if sit.reset_wanted:
        step = Advice(None, f"Leave them off until the reset of {t.gpus(sorted(sit.reset_wanted))} is done; then "
                          f"restore them ({commands}).", (), tuple(off))
        return [finding("blockers-off", "info", summary, step, (), off, {"commands": lines})]
    step = Advice("restore", f"Restore what B stopped: {commands}; the node runs without them until then "
                           "(new CUDA jobs start slower without persistence mode; NVLink and DCGM need their "
                           "daemons).", (), tuple(off))
    return [finding("blockers-off", "low", summary, step, (), off, {"commands": lines})]


# ---------------------------------------------------------------- busy with nothing

#: utilisation at or above this with no memory and no process: a latched counter
LATCHED_UTIL_PCT = 90


def latched_utilisation(sit: Situation) -> list[Finding]:
    """A GPU reading ~100 % utilisation with no memory in use, no process in the driver's list
    and no holder of its device file, and no Xid: telemetry, not a hang (Datura-ai/lium-io PR
    #1142 saw it at ~100 W). Opening and closing a CUDA context from a fresh process clears the
    counter; a reset is not needed. A real hang holds memory, or a process, or logs an Xid."""
    # the GPUs first (nearly always none): the processes and the kernel log only for those
    busy = [g.index for g in sit.snap.gpus
            if (g.utilization_pct or 0) >= LATCHED_UTIL_PCT and (g.memory_used_mib or 0) <= FREED_MIB]
    if not busy:
        return []
    by_uuid = {g.uuid: g.index for g in sit.snap.gpus}
    listed = {dp.gpu_index if dp.gpu_index is not None else by_uuid.get(dp.gpu_uuid)
              for dp in sit.snap.driver_processes}
    held = {g for p in sit.snap.processes if p.holds_devices for g in sit.gpus_of(p)}
    by_bus = {bus_key(g.bus_id): g.index for g in sit.snap.gpus}
    xid_gpus = {by_bus.get(bus_key(ev.bus) or ev.bus) for line in sit.snap.kernel_log
                if (ev := parse_xid_line(line)) is not None}
    gpus = [g for g in busy if g not in listed and g not in held and g not in xid_gpus]
    if not gpus:
        return []
    summary = (f"{t.gpus(gpus)} {t.verb(len(gpus), 'reads', 'read')} ~100 % utilisation with no memory in use and "
               "no process: a latched utilisation counter, not work and not a hang")
    step = Advice(None, "Nothing is stuck: open and close a CUDA context from a fresh process (any short CUDA "
                      "program, e.g. `python -c 'import torch; torch.zeros(1, device=\"cuda\")'`) and the counter "
                      "reads 0 again; no reset is needed.", (), tuple(gpus))
    return [finding("latched-utilisation", "info", summary, step, (), gpus, {"gpus": gpus})]
