"""Is this node's every GPU fit for the next job? Every health signal, each ok, bad, unknown or
not applicable — and unknown is not clean.

The signals (``SIGNALS``, in the order `gate --json` lists them):
- ``answered``: the node answered the probe and its driver (no node error);
- ``gpus_present``: every GPU the kernel module knows (/proc/driver/nvidia/gpus, the PCI bus) is
  in nvidia-smi's/NVML's list, none is lost or unreachable, none reads all ones on the PCI bus
  ("rev ff": fallen off);
- ``recovery_action``: "None" on every GPU (not applicable where the driver is older than the
  field);
- ``kernel_log``: no Xid or NVRM line that wants a reset, a reboot or a drain since the last clean
  verdict of this boot (without one: within the window); dmesg unreadable is unknown;
- ``memory_repair``: no failed row remap, no remap or page retirement waiting for a reset;
- ``fabric``: where there is an NVLink fabric, every GPU registered ("Completed", "Success");
- ``stuck``: no process sits in the driver (D inside it; a GPU holder, or a GPU program such as
  nvidia-smi, persistenced or Xorg, in D wherever it waits; a SIGKILL pending it cannot take; a
  fresh hung-task report inside the driver);
- ``workloads``: no workload holds memory or a device file (the node's infrastructure and
  monitors are allowed, and so is their memory); the driver's process list must have answered.

Pure: reads the snapshot (already diagnosed: its findings) and, for the kernel log, the uptime
of the last clean verdict.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from console.diagnosis import text as t
from console.diagnosis.context import Situation
from console.diagnosis.liveness import UNKILLABLE, liveness
from console.diagnosis.node import hung_task_reports, unreachable
from console.diagnosis.processes import DRIVER_WCHAN
from console.diagnosis.roles import gpu_program
from console.diagnosis.who import FREED_MIB, holder_candidates, is_protected
from console.diagnosis.xid import parse_xid_line
from console.model import NodeSnapshot, bus_key
from console.probe import RECOVERY_MIN_DRIVER

OK, BAD, UNKNOWN, NA = "ok", "bad", "unknown", "n/a"
SIGNALS = ("answered", "gpus_present", "recovery_action", "kernel_log", "memory_repair", "fabric", "stuck",
           "workloads")
#: without a clean verdict on record for this boot, kernel lines younger than this count
KERNEL_WINDOW_S = 3600.0
#: what the kernel log says that makes a GPU unfit, besides Xid lines of the reset/reboot/drain kind
BTIME_SLACK_S = 1.0
UNFIT_LINES = ("fallen off the bus", "NV_ERR_RESET_REQUIRED", "GPU is lost")
DMESG_DENIED_WORDS = "dmesg not permitted"


@dataclass(frozen=True)
class Signal:
    name: str
    status: str           # OK, BAD, UNKNOWN, NA
    said: str             # one line: what it read

    def to_json(self) -> dict[str, Any]:
        return {"status": self.status, "said": self.said}


def clean(signals: Sequence[Signal]) -> bool:
    return all(s.status in (OK, NA) for s in signals)


def why_not(signals: Sequence[Signal]) -> str | None:
    """None when clean, else one line: each signal that is bad or unknown, with what it said."""
    parts = [f"{s.said}" if s.status == BAD else f"{s.name} unknown: {s.said}"
             for s in signals if s.status in (BAD, UNKNOWN)]
    return "; ".join(parts) or None


def signals(snap: NodeSnapshot, *, clean_uptime_s: float | None = None,
            window_s: float = KERNEL_WINDOW_S) -> list[Signal]:
    """Every signal for one node (see the module's doc). ``clean_uptime_s``: the node's uptime at
    its last clean verdict in this boot (kernel lines after it count), None: none on record."""
    if snap.error is not None:
        out = [Signal("answered", BAD, f"not read: {t.clip(snap.error, 160)}")]
        return out + [Signal(n, UNKNOWN, "the node did not answer") for n in SIGNALS[1:]]
    sit = Situation.build(snap, (), (), None, 1 << 30)
    return [Signal("answered", OK, "the node and its driver answered"), _present(snap), _recovery(snap),
            _kernel(snap, clean_uptime_s, window_s), _repair(snap), _fabric(snap), _stuck(sit),
            _workloads(sit)]


def _present(snap: NodeSnapshot) -> Signal:
    name = "gpus_present"
    gone = [*snap.lost_gpus, *(bus for bus, _why in unreachable(snap))]
    if gone:
        return Signal(name, BAD, f"{t.plural(len(gone), 'GPU')} lost or unreachable ({', '.join(gone[:4])})")
    if not snap.gpus:
        return Signal(name, BAD, "the driver lists no GPU")
    if snap.pci_gpus is None:
        return Signal(name, UNKNOWN, "the GPUs the kernel module knows (/proc/driver/nvidia/gpus) could not be "
                                     f"read; the driver lists {t.plural(len(snap.gpus), 'GPU')}")
    gone = [p.bus_id for p in snap.pci_gpus if p.present is False]
    if gone:
        return Signal(name, BAD, f"{t.plural(len(gone), 'GPU')} {', '.join(gone[:4])} "
                                 "read all ones on the PCI bus (rev ff): fallen off the bus")
    listed = {bus_key(g.bus_id) for g in snap.gpus}
    missing = [p.bus_id for p in snap.pci_gpus if bus_key(p.bus_id) not in listed]
    if missing:
        return Signal(name, BAD, f"{t.plural(len(missing), 'GPU')} {', '.join(missing[:4])} on the bus but "
                                 f"missing from the driver's list ({len(snap.gpus)} of {len(snap.pci_gpus)} listed)")
    unread = [p.bus_id for p in snap.pci_gpus if p.present is None]
    if unread:
        return Signal(name, UNKNOWN, f"the PCI config space of {', '.join(unread[:4])} could not be read")
    return Signal(name, OK, f"all {len(snap.gpus)} GPUs the kernel module knows are listed and on the bus")


def _old_driver(snap: NodeSnapshot) -> bool:
    try:
        return int((snap.driver_version or "").split(".")[0]) < RECOVERY_MIN_DRIVER
    except ValueError:
        return False


def _recovery(snap: NodeSnapshot) -> Signal:
    name = "recovery_action"
    wanting = [(g.index, g.recovery_action) for g in snap.gpus if g.recovery_action not in (None, "none")]
    if wanting:
        return Signal(name, BAD, "; ".join(f"GPU {i}: recovery action {a}" for i, a in wanting))
    unknown = [g.index for g in snap.gpus if g.recovery_action is None]
    if not unknown:
        return Signal(name, OK, "None on every GPU")
    if _old_driver(snap):
        return Signal(name, NA, f"driver {snap.driver_version} predates the recovery action")
    return Signal(name, UNKNOWN, f"{t.gpus(unknown)}: the driver did not say")


def unfit_lines(snap: NodeSnapshot) -> list[tuple[float | None, str]]:
    """(uptime stamp, line) of every kernel line that makes a GPU unfit: Xid lines of the reset,
    reboot or drain kind, and the driver's own words for a GPU gone or wanting a reset."""
    out = []
    for line in snap.kernel_log:
        ev = parse_xid_line(line)
        if ev is not None:
            if ev.action in ("reset", "reboot", "drain"):
                out.append((ev.uptime_s, line.strip()))
        elif any(w in line for w in UNFIT_LINES):
            out.append((_stamp(line), line.strip()))
    return out


def _stamp(line: str) -> float | None:
    """The seconds-since-boot stamp of a dmesg line ("[ 1234.567890] ..."), or None."""
    text = line.strip()
    if not text.startswith("["):
        return None
    head = text[1:].split("]", 1)[0].strip()
    try:
        return float(head)
    except ValueError:
        return None


def _kernel(snap: NodeSnapshot, clean_uptime_s: float | None, window_s: float) -> Signal:
    name = "kernel_log"
    denied = any(DMESG_DENIED_WORDS in w for w in snap.warnings)
    uptime = snap.taken_at - snap.boot_time if snap.boot_time else None
    since = clean_uptime_s if clean_uptime_s is not None else (uptime - window_s if uptime is not None else None)
    # the boot time (/proc/stat btime) has whole seconds: a line within one of the mark counts (fail closed)
    fresh = [line for at, line in unfit_lines(snap) if at is None or since is None or at > since - BTIME_SLACK_S]
    if fresh:
        where = ("since the last clean verdict" if clean_uptime_s is not None
                 else f"in the last {t.seconds(window_s)}" if since is not None else "in the kernel log")
        return Signal(name, BAD, f"{t.plural(len(fresh), 'kernel line')} {where} want a reset, a reboot or a "
                                 f"drain: {t.clip(fresh[-1], 160)}")
    if denied:
        return Signal(name, UNKNOWN, "dmesg not permitted: the Xid lines could not be read")
    return Signal(name, OK, "no Xid or NVRM line wants a reset, a reboot or a drain"
                  + (" since the last clean verdict" if clean_uptime_s is not None else ""))


def _repair(snap: NodeSnapshot) -> Signal:
    name = "memory_repair"
    failed = [g.index for g in snap.gpus if g.memory_repair is not None and g.memory_repair.remap_failure]
    due = [g.index for g in snap.gpus if g.memory_repair is not None and g.index not in failed
           and (g.memory_repair.remap_pending or g.memory_repair.pages_pending)]
    parts = []
    if failed:
        parts.append(f"{t.gpus(failed)}: a row remap failed (drain, inspect or replace)")
    if due:
        parts.append(f"{t.gpus(due)}: memory repair waits for a reset")
    if parts:
        return Signal(name, BAD, "; ".join(parts))
    if any("row remapping unknown" in w for w in snap.warnings):
        return Signal(name, UNKNOWN, "nvidia-smi -q -d ROW_REMAPPER did not answer")
    if all(g.memory_repair is None for g in snap.gpus):
        return Signal(name, NA, "no GPU reports row remapping or page retirement")
    return Signal(name, OK, "no remap or retirement pending or failed")


def _fabric(snap: NodeSnapshot) -> Signal:
    name = "fabric"
    if not snap.nvswitches:
        return Signal(name, NA, "no NVSwitch fabric")
    bad = [g.index for g in snap.gpus if g.fabric_state is not None and (
        g.fabric_state.lower() != "completed" or (g.fabric_status or "").lower() not in ("success", ""))]
    if bad:
        return Signal(name, BAD, f"{t.gpus(bad)}: NVLink fabric not registered")
    unknown = [g.index for g in snap.gpus if g.fabric_state is None]
    if unknown:
        return Signal(name, UNKNOWN, f"{t.gpus(unknown)}: fabric state not reported")
    return Signal(name, OK, "every GPU registered with the fabric")


def _stuck(sit: Situation) -> Signal:
    name = "stuck"
    if not sit.snap.processes:
        return Signal(name, UNKNOWN, "the process table could not be read")
    stuck = []
    for p in sit.snap.processes:
        in_driver = any((th.wchan or "").startswith(DRIVER_WCHAN) for th in p.d_threads)
        # a GPU holder in D, wherever it waits: its hold on the GPU does not end while it sits there
        in_d = bool(p.d_threads) or p.state == "D"
        holder_in_d = in_d and (p.holds_devices or p.pid in sit.driver_pids() or gpu_program(p) is not None)
        if in_driver or holder_in_d or (p.sigkill_pending and liveness(sit, p).verdict == UNKILLABLE):
            stuck.append(p)
    if stuck:
        return Signal(name, BAD, f"{t.plural(len(stuck), 'process', 'processes')} ({sit.names(stuck)}, "
                                 f"{t.pids([p.pid for p in stuck])}) stuck in the driver")
    hung = [f for f in hung_task_reports(sit) if f.severity == "critical"]
    if hung:
        return Signal(name, BAD, hung[0].summary)
    return Signal(name, OK, "no process stuck in the driver")


def infrastructure_mib(sit: Situation) -> dict[int, int]:
    """{GPU: MiB the node's own programs hold there} (a display server's framebuffer, a monitor's
    nothing): memory that never makes a GPU unfit."""
    out: dict[int, int] = {}
    for p in sit.gpu_holders():
        on = sit.gpus_of(p)
        if not sit.workload(p) and len(on) == 1:
            (g,) = on
            out[g] = out.get(g, 0) + sit.mib_of(p)
    return out


def workload_mib(snap: NodeSnapshot) -> dict[int, int | None]:
    """{GPU: memory used beyond what the node's own programs hold} (None where not reported)."""
    infra = infrastructure_mib(Situation.build(snap, (), (), None, 1 << 30))
    return {g.index: None if g.memory_used_mib is None else g.memory_used_mib - infra.get(g.index, 0)
            for g in snap.gpus}


def _workloads(sit: Situation) -> Signal:
    name = "workloads"
    snap = sit.snap
    if snap.driver_list_ok is False:
        return Signal(name, UNKNOWN, "the driver's process list did not answer: who holds the memory is unknown")
    if not snap.processes:
        return Signal(name, UNKNOWN, "the process table could not be read")
    infra_mib = infrastructure_mib(sit)
    unknown_mem = [g.index for g in snap.gpus if g.memory_used_mib is None]
    held = [g for g in snap.gpus if g.memory_used_mib is not None
            and g.memory_used_mib - infra_mib.get(g.index, 0) > FREED_MIB]
    parts = []
    if held:
        parts.append(f"{t.gpus([g.index for g in held])} {t.verb(len(held), 'holds', 'hold')} "
                     f"{t.mib(sum(g.memory_used_mib or 0 for g in held))}")
    here = {p.pid: p for p in snap.processes}
    listed = sorted({d.pid for d in snap.driver_processes
                     if d.pid not in here or d.local is False or sit.workload(here[d.pid])})
    if listed:
        parts.append(f"the driver lists {_pids(listed)}")
    holders = [p for p in holder_candidates(snap) if p.pid not in listed and p.state != "Z"
               and not is_protected(snap, p.pid, p)]
    unconfirmed = [p for p in holders if sit.role(p).kind == "unconfirmed"]
    jobs = [p for p in holders if sit.workload(p) and p not in unconfirmed]
    if jobs:
        parts.append(f"device files held by {_pids([p.pid for p in jobs])}")
    if parts:
        return Signal(name, BAD, "; ".join(parts))
    if unknown_mem:
        return Signal(name, UNKNOWN, f"{t.gpus(unknown_mem)}: memory not reported")
    if unconfirmed:
        return Signal(name, UNKNOWN, "; ".join(f"PID {p.pid}: {sit.role(p).words()}" for p in unconfirmed[:3]))
    infra = [p for p in holders if not sit.workload(p)]
    return Signal(name, OK, "no workload holds a GPU" + (
        f" (the node's own: {sit.names(infra)})" if infra else ""))


def _pids(pids: Sequence[int]) -> str:
    shown = ", ".join(map(str, pids[:6]))
    return f"PID{'s' if len(pids) > 1 else ''} {shown}" + (f" and {len(pids) - 6} more" if len(pids) > 6 else "")

