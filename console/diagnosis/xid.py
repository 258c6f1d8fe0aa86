"""NVRM Xid lines: parsing, and what the common codes mean for someone holding stuck memory.

Source of the advice: NVIDIA's Xid catalogue, "Analyzing Xid Errors with the Xid Catalog",
https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html — its "Resolution Bucket
(Immediate Action)" column, kept here as ``XidInfo.catalog`` (RESET_GPU, RESTART_APP,
RESTART_BM, IGNORE, CONTACT_SUPPORT, WORKFLOW_*, XID_154_EVAL). Buckets this console relies
on: 79 -> reboot (RESTART_BM); 154 -> the recovery action the line names; 62, 64, 95, 119,
120, 143 -> GPU reset (RESET_GPU); 13, 31, 94 -> restart the application (RESTART_APP); 43,
63, 92 -> nothing to do (IGNORE); 48 and 74 -> their workflows (WORKFLOW_XID_48: reset, then
check ECC / row remapping, drain if it recurs or 63/64 came with it; WORKFLOW_NVLINK_ERR:
check NVLink, then reset or drain). The remaining rows follow the same column (cross-checked
with NVIDIA NVSentinel's catalogue-derived xiderrorsmapping.csv). Titles and meanings are our
own short words, written for the question this console answers: will a kill, a GPU reset or
only a reboot bring the memory back? ``action`` is one of:

``none``    nothing to do on the GPU itself (informational, or a case for NVIDIA support)
``app``     the application faulted; its process must go (the GPU is fine)
``reset``   the GPU needs ``nvidia-smi -r`` (no client may hold it)
``drain``   stop peer-to-peer (NVLink) traffic to the GPU; no reset needed (Xid 154 "Drain P2P")
``reboot``  a reset will not do: reboot (or power-cycle) the node
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Sequence

from console.model import bus_key, recovery_token  # noqa: F401 (bus_key: its users import it from here)
from console.probe import INIT_FAILED, WPR2_UP

CATALOG_URL = "https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html"


@dataclass(frozen=True)
class XidInfo:
    title: str          # a few words
    severity: str       # model.SEVERITIES
    action: str         # none | app | reset | drain | reboot
    meaning: str        # one sentence, our words
    catalog: str = ""   # the catalogue's immediate-action bucket
    workflow: str = ""  # the catalogue workflow's steps, where the bucket is a workflow


_ECC_WORKFLOW = ("Then check the ECC and row-remapping state (`nvidia-smi -q -d ECC,ROW_REMAPPER`): with a "
                 "pending remap the reset activates it; with a remap failure (Xid 64) or a repeat, drain the "
                 "node and have the GPU replaced.")
_NVLINK_WORKFLOW = ("Check the links first (`nvidia-smi nvlink -s` and `-e`): a link that stays down or keeps "
                    "counting errors means drain the node; without nvidia-fabricmanager the NVLink peers must "
                    "be reset together.")

XIDS: dict[int, XidInfo] = {
    8: XidInfo("GPU stopped processing", "low", "app",
        "A channel stopped making progress; usually the application, sometimes the driver.", "RESTART_APP"),
    13: XidInfo("graphics engine exception", "low", "app",
        "A kernel faulted (bad address, illegal instruction); almost always the application's bug.",
        "RESTART_APP"),
    31: XidInfo("GPU memory page fault", "low", "app",
        "The application touched GPU memory it does not own (MMU fault); an application or framework bug.",
        "RESTART_APP"),
    32: XidInfo("corrupted push buffer", "low", "app",
        "The command stream sent to the GPU was invalid; driver, application or PCIe trouble.", "RESTART_APP"),
    38: XidInfo("driver firmware error", "low", "none",
        "The driver's firmware reported an error; the catalogue says no action is needed.", "IGNORE"),
    43: XidInfo("GPU stopped processing", "low", "none",
        "A channel was stopped after the application faulted; the GPU itself is fine and nothing needs doing.",
        "IGNORE"),
    45: XidInfo("preemptive cleanup", "info", "none",
        "The driver is tearing down a process's channels because it exited or was killed (or after another "
        "Xid); expected after a kill.", "WORKFLOW_XID_45"),
    48: XidInfo("double-bit ECC error", "critical", "reset",
        "An uncorrectable memory error; the GPU must be reset before it can be trusted again.",
        "WORKFLOW_XID_48", _ECC_WORKFLOW),
    61: XidInfo("internal micro-controller breakpoint", "high", "none",
        "A GPU micro-controller hit a breakpoint or warning; the catalogue says report it to NVIDIA support.",
        "CONTACT_SUPPORT"),
    62: XidInfo("internal micro-controller halt", "critical", "reset",
        "A GPU micro-controller halted; the GPU needs a reset.", "RESET_GPU"),
    63: XidInfo("ECC page retirement / row remap recorded", "low", "none",
        "A bad memory row was retired or remapped; it takes effect at the next reset.", "IGNORE"),
    64: XidInfo("ECC page retirement / row remap failed", "high", "reset",
        "Retiring or remapping a bad memory row failed; reset, and replace the GPU if it recurs.", "RESET_GPU"),
    69: XidInfo("graphics engine class error", "low", "app",
        "The graphics engine rejected a method the application sent; restart the application.", "RESTART_APP"),
    74: XidInfo("NVLink error", "high", "reset",
        "An NVLink link failed; the GPU (and maybe its NVLink peer) needs a reset or the node a drain.",
        "WORKFLOW_NVLINK_ERR", _NVLINK_WORKFLOW),
    79: XidInfo("GPU has fallen off the bus", "critical", "reboot",
        "The GPU no longer answers on PCIe; only a reboot or power cycle brings it back.", "RESTART_BM"),
    92: XidInfo("high single-bit ECC error rate", "low", "none",
        "Correctable memory errors are frequent; watch the trend.", "IGNORE"),
    94: XidInfo("contained ECC error", "high", "app",
        "An uncorrectable memory error was contained to one application, which must be restarted; the GPU "
        "keeps running the others.", "RESTART_APP"),
    95: XidInfo("uncontained ECC error", "critical", "reset",
        "An uncorrectable memory error could not be contained; every process on the GPU is affected and "
        "the GPU must be reset.", "RESET_GPU"),
    109: XidInfo("context switch timeout", "high", "reset",
        "The GPU did not switch contexts in time; the application or the GPU may be hung.", "RESET_GPU"),
    119: XidInfo("GSP RPC timeout", "critical", "reset",
        "The GPU System Processor firmware stopped answering the driver; the GPU is wedged until reset.",
        "RESET_GPU"),
    120: XidInfo("GSP error", "critical", "reset",
        "The GPU System Processor firmware reported an error; reset the GPU.", "RESET_GPU"),
    121: XidInfo("C2C link error", "low", "none",
        "The chip-to-chip link reported a corrected error; the catalogue says no action is needed.", "IGNORE"),
    122: XidInfo("SPI PMU RPC read failure", "high", "none",
        "Reading from the power-management unit failed; report it to NVIDIA support.", "CONTACT_SUPPORT"),
    123: XidInfo("SPI PMU RPC write failure", "high", "none",
        "Writing to the power-management unit failed; report it to NVIDIA support.", "CONTACT_SUPPORT"),
    124: XidInfo("SPI PMU RPC erase failure", "high", "none",
        "Erasing through the power-management unit failed; report it to NVIDIA support.", "CONTACT_SUPPORT"),
    136: XidInfo("link training failure", "high", "reset",
        "A link failed to train; reset the GPU.", "RESET_GPU"),
    137: XidInfo("NVLink FLA privilege error", "low", "none",
        "A peer-to-peer access was refused by the remote GPU; an application error, nothing to do on the GPU.",
        "IGNORE"),
    140: XidInfo("unrecovered ECC error", "critical", "reset",
        "The driver could not recover from a memory error; reset the GPU.", "RESET_GPU"),
    143: XidInfo("GPU initialisation failure", "critical", "reset",
        "The GPU failed to come up (firmware or driver start-up); reset, reboot if it repeats.", "RESET_GPU"),
    **{code: XidInfo(f"NVLink {unit} error", "high", "reset",
                     "An NVLink5 unit reported an error; follow the line's Xid 154 if one came with it.",
                     "WORKFLOW_NVLINK5_ERR", _NVLINK_WORKFLOW)
       for code, unit in ((144, "SAW"), (145, "RLW"), (146, "TLW"), (147, "TREX"), (148, "NVLPW control"),
                          (149, "NETIR"), (150, "MSE"))},
    154: XidInfo("GPU recovery action changed", "high", "reset",
        "The driver states what it takes to recover this GPU.", "XID_154_EVAL"),
}
UNKNOWN = XidInfo("unlisted Xid", "low", "none",
                  f"An Xid this console has no description for; look it up in NVIDIA's Xid catalogue ({CATALOG_URL}).")

#: the GPU recovery action (model.GPU_RECOVERY_ACTIONS: NVML's field, nvidia-smi's
#: ``gpu_recovery_action``, Xid 154's words) -> (our action, severity). R550-R580 Xid 154 lines print
#: "GPU Reset Required", "Node Reboot Required", "Drain P2P", "Drain and Reset"; newer drivers "PF FLR"
#: (a function-level reset) and "OS Reboot"; NVML adds IMEX domain recovery (the multi-node NVLink
#: domain, not this GPU: no reset asked for), bus reset and system reboot (nvmlDeviceGpuRecoveryAction_t).
RECOVERY_ACTIONS: dict[str, tuple[str, str]] = {
    "none": ("none", "info"),
    "gpu_reset": ("reset", "critical"),
    "node_reboot": ("reboot", "critical"),
    "drain_p2p": ("drain", "high"),
    "drain_and_reset": ("reset", "critical"),
    "recover_imex_domain": ("none", "high"),
    "bus_reset": ("reboot", "critical"),
    "system_reboot": ("reboot", "critical"),
}


def recovery_action(words: str | None) -> tuple[str, str]:
    """A recovery action (its token or the driver's words) -> (our action, severity); words this
    console does not know by their keywords."""
    token = recovery_token(words)
    if token in RECOVERY_ACTIONS:
        return RECOVERY_ACTIONS[token]
    text = token or ""
    if "reboot" in text:
        return "reboot", "critical"
    if "reset" in text or "flr" in text:
        return "reset", "critical"
    if "drain" in text:
        return "drain", "high"
    return "reset", "high"


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
            return recovery_action(self.recovery)[0]
        return self.info.action

    @property
    def severity(self) -> str:
        if self.code == 154:
            return recovery_action(self.recovery)[1]
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


_GPU_BUS_RE = re.compile(r"NVRM: (?:The NVIDIA )?GPU (?:at PCI:)?"
                         r"([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9A-Fa-f])")


def fallen_off_bus(text: str) -> list[str]:
    """Bus ids the kernel log says fell off the bus, with or without an Xid 79 line. Never raises.

    Drivers print it on one line ("NVRM: GPU 0000:06:00.0: GPU has fallen off the bus.") or, at probe
    time, over three ("NVRM: The NVIDIA GPU 0000:b3:00.0" / "(PCI ID: ...) installed in this system
    has" / "fallen off the bus and is not responding to commands."): the bus is the last one named
    within the two lines before.
    """
    out: list[str] = []
    recent: list[str | None] = [None, None, None]
    for line in str(text).splitlines():
        m = _GPU_BUS_RE.search(line)
        recent = recent[1:] + [m.group(1) if m else None]
        if "fallen off the bus" not in line or "NVRM: Xid" in line:
            continue
        bus = next((b for b in reversed(recent) if b), None)
        if bus and bus not in out:
            out.append(bus)
    return out


_INIT_FAILED_RE = re.compile(r"NVRM: GPU ([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9A-Fa-f]): "
                             r"RmInitAdapter failed! \(([0-9A-Fa-fx:]*)\)")


@dataclass(frozen=True)
class FirmwareFailure:
    """A GPU the driver could not start: its bus (None when only the WPR2 line names it, by the
    driver's own GPU number), whether WPR2 was already up, the adapter's error code, the lines."""
    bus: str | None
    wpr2: bool
    code: str | None
    lines: tuple[str, ...]


def firmware_failures(lines: Sequence[str]) -> list[FirmwareFailure]:
    """The GPUs the kernel log says could not start (firmware), one per bus, in the order first
    seen; a WPR2 line with no adapter line after it names no bus. Never raises."""
    by_bus: dict[str, FirmwareFailure] = {}
    wpr2: list[str] = []
    for line in lines:
        if not isinstance(line, str):
            continue
        if WPR2_UP in line:
            wpr2.append(line.strip())
            continue
        m = _INIT_FAILED_RE.search(line) if INIT_FAILED in line else None
        if m is None:
            continue
        bus = m.group(1)
        seen = by_bus.get(bus)
        got = (*(seen.lines if seen else ()), *wpr2, line.strip())[-6:]
        by_bus[bus] = FirmwareFailure(bus, bool(wpr2) or (seen is not None and seen.wpr2), m.group(2), got)
        wpr2 = []
    out = list(by_bus.values())
    if wpr2 and not out:
        out.append(FirmwareFailure(None, True, None, tuple(wpr2[-3:])))
    return out


# ---------------------------------------------------------------- the kernel's hung-task reports

_HUNG_RE = re.compile(r"INFO: task (.{1,64}):(\d{1,10}) blocked for more than (\d{1,9}) seconds")
_STAMP_RE = re.compile(r"^\s*\[\s*(\d{1,10}\.\d{1,9})\]")
#: a call-trace frame in the NVIDIA kernel modules ("os_acquire_rwlock_read+0x35/0x50 [nvidia]")
_NV_FRAME_RE = re.compile(r"([A-Za-z0-9_.]{1,80})\+0x[0-9a-f]+/0x[0-9a-f]+ \[nvidia(?:_uvm|_modeset|_drm)?\]")


@dataclass(frozen=True)
class HungTask:
    """One hung-task report of the kernel ("INFO: task NAME:PID blocked for more than N seconds",
    then the task line and its call trace): the task, how long, and the first frame it shows in the
    NVIDIA driver (None: none in the lines kept)."""
    name: str
    pid: int
    seconds: int
    uptime_s: float | None
    driver_frame: str | None
    line: str


def hung_tasks(lines: Sequence[str]) -> list[HungTask]:
    """The hung-task reports in kernel-log lines, oldest first, the latest report of a PID winning.
    Never raises."""
    found: dict[int, HungTask] = {}
    cur: HungTask | None = None
    for line in lines:
        if not isinstance(line, str):
            continue
        m = _HUNG_RE.search(line)
        if m:
            stamp = _STAMP_RE.match(line)
            cur = HungTask(m.group(1).strip(), int(m.group(2)), int(m.group(3)),
                           float(stamp.group(1)) if stamp else None, None, line.strip())
            found.pop(cur.pid, None)
            found[cur.pid] = cur
            continue
        if cur is not None and cur.driver_frame is None:
            f = _NV_FRAME_RE.search(line)
            if f:
                cur = HungTask(cur.name, cur.pid, cur.seconds, cur.uptime_s, f.group(1), cur.line)
                found[cur.pid] = cur
    return list(found.values())
