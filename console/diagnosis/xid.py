"""NVRM Xid lines: parsing, and what the common codes mean for someone holding stuck memory.

The descriptions are our own short summaries of the driver's published Xid catalog,
written for the question this console answers: will a kill, a GPU reset or only a
reboot bring the memory back?  ``action`` is one of:

``none``    informational; nothing to do on the GPU itself
``app``     the application faulted; its process must go (the GPU is fine)
``reset``   the GPU needs ``nvidia-smi -r`` (no client may hold it)
``reboot``  a reset will not do: reboot (or power-cycle) the node
"""
from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class XidInfo:
    title: str          # a few words
    severity: str       # model.SEVERITIES
    action: str         # none | app | reset | reboot
    meaning: str        # one sentence, our words


XIDS: dict[int, XidInfo] = {
    8: XidInfo("GPU stopped processing", "low", "app",
        "A channel stopped making progress; usually the application, sometimes the driver."),
    13: XidInfo("graphics engine exception", "low", "app",
        "A kernel faulted (bad address, illegal instruction); almost always the application's bug."),
    31: XidInfo("GPU memory page fault", "low", "app",
        "The application touched GPU memory it does not own (MMU fault); an application or framework bug."),
    32: XidInfo("corrupted push buffer", "low", "app",
        "The command stream sent to the GPU was invalid; driver, application or PCIe trouble."),
    38: XidInfo("driver firmware error", "high", "reset",
        "The driver's firmware reported an error."),
    43: XidInfo("GPU stopped processing", "low", "app",
        "A channel was stopped after the application faulted; the GPU itself is normally fine."),
    45: XidInfo("preemptive cleanup", "info", "none",
        "The driver is tearing down a process's channels because it exited or was killed; expected after "
        "a kill."),
    48: XidInfo("double-bit ECC error", "critical", "reset",
        "An uncorrectable memory error; the GPU must be reset before it can be trusted again."),
    61: XidInfo("internal micro-controller breakpoint", "high", "reset",
        "A GPU micro-controller hit a breakpoint or warning; a reset clears it."),
    62: XidInfo("internal micro-controller halt", "critical", "reset",
        "A GPU micro-controller halted; the GPU needs a reset."),
    63: XidInfo("ECC page retirement / row remap recorded", "low", "none",
        "A bad memory row was retired or remapped; it takes effect at the next reset."),
    64: XidInfo("ECC page retirement / row remap failed", "high", "reset",
        "Retiring or remapping a bad memory row failed; reset, and replace the GPU if it recurs."),
    69: XidInfo("graphics engine class error", "high", "reset",
        "The graphics engine rejected a method; a reset is usually needed."),
    74: XidInfo("NVLink error", "high", "reset",
        "An NVLink link failed; reset the GPU (older GPUs: together with its NVLink peers)."),
    79: XidInfo("GPU has fallen off the bus", "critical", "reboot",
        "The GPU no longer answers on PCIe; only a reboot or power cycle brings it back."),
    92: XidInfo("high single-bit ECC error rate", "low", "none",
        "Correctable memory errors are frequent; watch the trend."),
    94: XidInfo("contained ECC error", "high", "reset",
        "An uncorrectable memory error hit one application, which must exit; reset when the GPU is free."),
    95: XidInfo("uncontained ECC error", "critical", "reset",
        "An uncorrectable memory error could not be contained; every process on the GPU is affected and "
        "the GPU must be reset."),
    109: XidInfo("context switch timeout", "high", "reset",
        "The GPU did not switch contexts in time; the application or the GPU may be hung."),
    119: XidInfo("GSP RPC timeout", "critical", "reset",
        "The GPU System Processor firmware stopped answering the driver; the GPU is wedged until reset."),
    120: XidInfo("GSP error", "critical", "reset",
        "The GPU System Processor firmware reported an error; reset the GPU."),
    121: XidInfo("C2C link error", "high", "reset",
        "The chip-to-chip link reported an error; reset the GPU."),
    122: XidInfo("SPI PMU RPC read failure", "high", "reset",
        "Reading from the power-management unit failed."),
    123: XidInfo("SPI PMU RPC write failure", "high", "reset",
        "Writing to the power-management unit failed."),
    124: XidInfo("SPI PMU RPC erase failure", "high", "reset",
        "Erasing through the power-management unit failed."),
    136: XidInfo("link training failure", "high", "reset",
        "A link failed to train; reset the GPU."),
    137: XidInfo("NVLink / fabric error", "high", "reset",
        "The NVLink fabric reported a fatal error for this GPU."),
    140: XidInfo("unrecovered ECC error", "critical", "reset",
        "The driver could not recover from a memory error; reset the GPU."),
    143: XidInfo("GPU initialisation failure", "critical", "reset",
        "The GPU failed to come up (firmware or driver start-up); reset, reboot if it repeats."),
    144: XidInfo("NVLink SAW error", "high", "reset",
        "An NVLink unit reported an error."),
    145: XidInfo("NVLink RLW error", "high", "reset",
        "An NVLink unit reported an error."),
    146: XidInfo("NVLink TLW error", "high", "reset",
        "An NVLink unit reported an error."),
    147: XidInfo("NVLink TREX error", "high", "reset",
        "An NVLink unit reported an error."),
    148: XidInfo("NVLink NVLPW control error", "high", "reset",
        "An NVLink unit reported an error."),
    149: XidInfo("NVLink NETIR error", "high", "reset",
        "The NVLink network interface reported an error."),
    150: XidInfo("NVLink MSE error", "high", "reset",
        "An NVLink unit reported an error."),
    154: XidInfo("GPU recovery action changed", "high", "reset",
        "The driver states what it takes to recover this GPU."),
}
UNKNOWN = XidInfo("unlisted Xid", "low", "none",
                  "An Xid this console has no description for; look it up in the driver's Xid catalog.")

#: Xid 154's recovery action text -> (our action, severity)
RECOVERY_ACTIONS: dict[str, tuple[str, str]] = {
    "none": ("none", "info"),
    "gpu reset required": ("reset", "critical"),
    "node reboot required": ("reboot", "critical"),
    "drain p2p": ("none", "high"),
    "drain and reset": ("reset", "critical"),
    "recover imex domain": ("none", "high"),
    "bus reset": ("reboot", "critical"),
    "system reboot": ("reboot", "critical"),
}

_XID_RE = re.compile(r"NVRM: Xid \((?:PCI:)?([0-9A-Fa-f]{1,8}:[0-9A-Fa-f]{1,2}:[0-9A-Fa-f]{1,2})"
                     r"(?:\.[0-9A-Fa-f])?[^)]*\): (\d{1,4})(?:,\s*(.*))?$")
_UPTIME_RE = re.compile(r"^\s*\[\s*(\d+(?:\.\d+)?)\]")
_PID_RE = re.compile(r"\bpid='?([^,']*)'?")
_NAME_RE = re.compile(r"\bname=([^,]*)")
_RECOVERY_RE = re.compile(r"recovery action changed from 0x[0-9A-Fa-f]+ \(([^)]*)\) "
                          r"to 0x[0-9A-Fa-f]+ \(([^)]*)\)")


@dataclass(frozen=True)
class XidEvent:
    code: int
    bus: str            # as printed, e.g. "0000:3b:00"
    text: str           # the message after the code
    line: str           # the whole log line
    uptime_s: float | None = None
    pid: int | None = None
    process: str | None = None
    recovery: str | None = None   # Xid 154: the new recovery action's words

    @property
    def info(self) -> XidInfo:
        return XIDS.get(self.code, UNKNOWN)

    @property
    def action(self) -> str:
        if self.code == 154:
            return RECOVERY_ACTIONS.get((self.recovery or "").strip().lower(), ("reset", "high"))[0]
        return self.info.action

    @property
    def severity(self) -> str:
        if self.code == 154:
            return RECOVERY_ACTIONS.get((self.recovery or "").strip().lower(), ("reset", "high"))[1]
        return self.info.severity

    @property
    def describe(self) -> str:
        """'Xid 79 (GPU has fallen off the bus)' / 'Xid 154 (recovery action: Node Reboot Required)'."""
        if self.code == 154 and self.recovery:
            return f"Xid 154 (recovery action: {self.recovery})"
        return f"Xid {self.code} ({self.info.title})"


def parse_xid_line(line: str) -> XidEvent | None:
    """One kernel-log line (dmesg, dmesg -T, journalctl -k) -> XidEvent, or None. Never raises."""
    if not isinstance(line, str) or "NVRM: Xid" not in line:
        return None
    m = _XID_RE.search(line)
    if not m:
        return None
    text = (m.group(3) or "").strip()
    up = _UPTIME_RE.match(line)
    pid_m = _PID_RE.search(text)
    pid = int(pid_m.group(1)) if pid_m and pid_m.group(1).isdigit() else None
    name_m = _NAME_RE.search(text)
    name = name_m.group(1).strip() if name_m else None
    if name in ("", "<unknown>", "N/A"):
        name = None
    rec = _RECOVERY_RE.search(text)
    return XidEvent(code=int(m.group(2)), bus=m.group(1), text=text, line=line.strip(),
                    uptime_s=float(up.group(1)) if up else None, pid=pid, process=name,
                    recovery=rec.group(2).strip() if rec else None)


def bus_key(bus_id: str | None) -> str | None:
    """Comparable (domain, bus, device) of a PCI address: '00000000:3B:00.0' and '0000:3b:00' agree."""
    if not bus_id:
        return None
    text = bus_id.strip().removeprefix("PCI:").split(".")[0]
    parts = text.split(":")
    if len(parts) == 2:
        parts = ["0"] + parts
    if len(parts) != 3:
        return None
    try:
        dom, bus, dev = (int(p, 16) for p in parts)
    except ValueError:
        return None
    return f"{dom:x}:{bus:02x}:{dev:02x}"
