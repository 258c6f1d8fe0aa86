"""Pure parsers for the node probe (see probe.py for the layout).

Every function here takes text and returns values; none raises on any input.
Garbage becomes a warning line, a value the driver cannot report becomes None.
"""
from __future__ import annotations

import bisect
import csv
import dataclasses
import operator
import re
import sys
from typing import Callable, Mapping
from dataclasses import dataclass, field

from console.model import DriverProc, Gpu, MigInstance, NodeSnapshot, PciGpu, Proc, proc_with, recovery_token
from console.textsafe import one_line
from console import probe, probe_loop
from console.probe import FABRIC_MARK, RECOVERY_FIELD, kernel_line, split_sections
from console.probe_scope import Scope
from console.sources.parse_loop import LoopState, parse_loop_state
from console.sources.parse_fabric import parse_fabric, split_fabric, with_fabric
from console.sources.parse_repair import parse_memory_repair, with_repair
from console.sources.parse_pmon import credit_sm, parse_pmon
from console.sources.cold_idents import settle, warm_up
from console.sources.proc_read import NO_EXTRA, pack_table, read_table, unpack_table
from console.sources.watch import kept as watched_kept
# the process sections' parsers live in parse_proc (framing no process can forge); callers
# that read probe-format text import them from here too
from console.sources.parse_proc import (StatLine, parse_dstate, parse_fds, parse_pidns,  # noqa: F401
                                        parse_ps, parse_stat, parse_stat_line)

NA_VALUES = {"[n/a]", "n/a", "[not supported]", "[insufficient permissions]", "[unknown error]",
             "[gpu is lost]", "[requested functionality has been deprecated]", ""}
_UNIT_RE = re.compile(r"^\s*(-?\d+(?:\.\d+)?)\s*(?:mib|%|w|mhz|c)?\s*$", re.IGNORECASE)
_LOST_RE = re.compile(r"GPU ([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9A-Fa-f])\S*: GPU is lost")
_NO_HANDLE_RE = re.compile(r"Unable to determine the device handle for GPU\s*"
                           r"([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9A-Fa-f])\S*:\s*([^.\n]*)")
_NVML_LIB_RE = re.compile(r"NVML library version:\s*(\S+)")
_LIST_GPU_RE = re.compile(r"^GPU (\d+): (.*?) \(UUID: ([^)]+)\)\s*$")
_LIST_MIG_RE = re.compile(r"^\s+MIG\s+(\S+)\s+Device\s+(\d+): \(UUID: ([^)]+)\)\s*$")
_DRIVER_RE = re.compile(r"Kernel Module\s+(?:for\s+\S+\s+)?(\d+(?:\.\d+)+)")
_MAX_LINE = 160
#: lines of one nvidia-smi section that are read (a flooding nvidia-smi is cut here; the rest
#: is counted in one warning): far more GPUs and GPU processes than any node has
MAX_GPU_LINES = 1024
MAX_APP_LINES = 65536
MAX_WARNED_LINES = 5
DMESG_DENIED = "dmesg not permitted: Xid lines unavailable"


def clip(text: str, limit: int = _MAX_LINE) -> str:
    """One printable line, at most ``limit`` characters (for warnings and errors)."""
    return one_line(text, limit)


def na_or_int(value: str | None) -> int | None:
    """`76109`, `76109 MiB`, `12 %` -> int; `[N/A]` and friends (or garbage) -> None."""
    if value is None:
        return None
    text = value.strip()
    if text.lower() in NA_VALUES:
        return None
    m = _UNIT_RE.match(text)
    if not m:
        return None
    try:
        return int(float(m.group(1)))
    except (ValueError, OverflowError):
        return None


def na_or_float(value: str | None) -> float | None:
    """A number nvidia-smi prints with decimals ("71.23"); None for its placeholders and junk."""
    text = (value or "").strip()
    if not text or len(text) > 20:
        return None
    try:
        number = float(text)
    except ValueError:
        return None
    return number if number == number and abs(number) < 1e9 else None   # not NaN, not absurd


def na_or_text(value: str | None) -> str | None:
    if value is None:
        return None
    text = value.strip()
    return None if text.lower() in NA_VALUES else text


def on_off(value: str | None) -> bool | None:
    text = (na_or_text(value) or "").lower()
    if text in ("enabled", "on", "1", "yes"):
        return True
    if text in ("disabled", "off", "0", "no"):
        return False
    return None


def text_lines(text: str, limit: int | None = None) -> list[str]:
    """Lines cut at "\n" only (never at the other characters ``str.splitlines`` breaks on:
    \x1c, \x85, \u2028… are part of a line), a trailing "\r" dropped; at most ``limit``."""
    parts = text.split("\n", limit) if limit is not None else text.split("\n")
    if limit is not None and len(parts) > limit:
        parts = parts[:limit]
    if parts and parts[-1] == "":
        parts.pop()
    return [p[:-1] if p.endswith("\r") else p for p in parts]


def lines_over(text: str, limit: int) -> int:
    """How many lines of ``text`` come after the first ``limit``."""
    return max(0, text.count("\n") + (0 if text.endswith("\n") or not text else 1) - limit)


def csv_rows(text: str, limit: int | None = None) -> list[list[str]]:
    """Rows of nvidia-smi CSV, fields stripped; NUL bytes and bad quoting tolerated."""
    lines = [ln.replace("\0", "") for ln in text_lines(text, limit) if ln.strip()]
    try:
        return [[f.strip() for f in row] for row in csv.reader(lines, skipinitialspace=True)]
    except csv.Error:
        return [[f.strip() for f in ln.split(",")] for ln in lines]


# ---------------------------------------------------------------- nvidia-smi

def nvsmi_failure(text: str, rc: int | None) -> str | None:
    """The node-level error an nvidia-smi run shows, in the words of the snapshot contract (docs/snapshot-json.md), or None."""
    low = text.lower()
    if "couldn't communicate with the nvidia driver" in low or "driver not loaded" in low:
        return "NVIDIA driver not loaded: nvidia-smi couldn't communicate with the NVIDIA driver"
    if "version mismatch" in low:
        lib = _NVML_LIB_RE.search(text)
        return clip("driver/library version mismatch: " + _first_line_with(text, "mismatch")
                    + (f" (NVML library {lib.group(1)})" if lib else ""))
    if "no devices were found" in low:
        return "no devices: nvidia-smi found no GPU"
    if rc == 127 or "nvidia-smi: not found" in low or "failed to run command" in low \
            or "nvidia-smi: command not found" in low:
        return "nvidia-smi not found on the node's PATH"
    if rc == 124:
        return "nvidia-smi timed out (the driver may be hung)"
    if "failed to initialize nvml" in low:
        return "driver error: " + clip(_first_line_with(text, "nvml"))
    return None


def _first_line_with(text: str, word: str) -> str:
    for line in text_lines(text, MAX_GPU_LINES):
        if word.lower() in line.lower():
            return line.strip()
    return text.strip()


def _too_many(warnings: list[str], query: str, unparsed: int, unread: int, read: int) -> None:
    """One warning for what a flooding nvidia-smi printed beyond the few lines quoted."""
    if unparsed > MAX_WARNED_LINES:
        warnings.append(f"nvidia-smi {query}: {unparsed} unparsed lines (the first {MAX_WARNED_LINES} quoted)")
    if unread:
        warnings.append(f"nvidia-smi {query}: {unread} lines after the first {read} not read")


def lost_gpu_bus_ids(text: str) -> list[str]:
    """Bus ids of GPUs nvidia-smi called lost ("Unable to determine the device handle …")."""
    return sorted({m.group(1) for m in _LOST_RE.finditer(text)})


def unreachable_gpus(text: str) -> list[tuple[str, str]]:
    """(bus id, nvidia-smi's reason) for each GPU it could get no handle for: "GPU is lost",
    "Unknown Error" (a GPU gone from the bus on some drivers), "Not Found", ... in order, once each."""
    out: dict[str, str] = {}
    for m in _NO_HANDLE_RE.finditer(text):
        out.setdefault(m.group(1), " ".join(m.group(2).split()))
    return list(out.items())


def _unreachable_error(text: str, lost: list[str]) -> str | None:
    """The node error when nvidia-smi named GPUs it cannot reach and listed none it can."""
    if lost:
        return clip(f"{_gpu_words(lost)} {'is' if len(lost) == 1 else 'are'} lost: nvidia-smi cannot reach "
                    f"{'it' if len(lost) == 1 else 'them'} (reboot the node to recover)")
    other = unreachable_gpus(text)
    if other:
        return clip("driver error: nvidia-smi cannot reach "
                    + ", ".join(f"GPU {bus} ({why or 'no reason given'})" for bus, why in other))
    return None


def _gpu_words(buses: list[str]) -> str:
    return ("GPU " if len(buses) == 1 else "GPUs ") + ", ".join(buses)


@dataclass
class GpuParse:
    gpus: list[Gpu] = field(default_factory=list)
    lost: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    error: str | None = None


_FIELD_REJECTED = f'Field "{RECOVERY_FIELD}" is not a valid field to query'


#: the columns probe.HEALTH_FIELDS adds at the end of each GPU row (the first six of them: what
#: earlier probes asked, before the link's maximum generation and width)
HEALTH_COLUMNS = 8
HEALTH_COLUMNS_BEFORE = 6


def parse_gpu_query(text: str, rc: int | None = 0) -> GpuParse:
    """`--query-gpu=GPU_FIELDS[,gpu_recovery_action] --format=csv,noheader,nounits` (see
    probe.gpu_call): a tenth column is the GPU's recovery action; an older nvidia-smi's refusal
    of that field ahead of the rows without it is no warning."""
    out = GpuParse()
    out.lost = lost_gpu_bus_ids(text)
    for bus in out.lost:
        out.warnings.append(f"GPU {bus} is lost (nvidia-smi cannot reach it)")
    for bus, why in unreachable_gpus(text):
        if bus not in out.lost:
            out.warnings.append(clip(f"GPU {bus} cannot be reached: {why or 'no reason given'}"))
    unparsed = 0
    for row in csv_rows(text, MAX_GPU_LINES):
        if len(row) < 6 or not (row[0].isascii() and row[0].isdecimal()):
            joined = ",".join(row)
            if "GPU is lost" in joined or "Unable to determine the device handle" in joined \
                    or joined.startswith("NVML library version") or joined.startswith(_FIELD_REJECTED):
                continue
            if nvsmi_failure(",".join(row), None) is None:
                unparsed += 1
                if unparsed <= MAX_WARNED_LINES:
                    out.warnings.append("unparsed nvidia-smi line: " + clip(",".join(row)))
            continue
        health: list[str] = [""] * HEALTH_COLUMNS
        for columns in (HEALTH_COLUMNS, HEALTH_COLUMNS_BEFORE):     # probe.HEALTH_FIELDS, last
            if len(row) >= 9 + columns:
                row, health = row[:-columns], row[-columns:] + [""] * (HEALTH_COLUMNS - columns)
                break
        row = row + [""] * (10 - len(row))
        try:
            index = int(row[0])
        except ValueError:  # pragma: no cover - isdecimal() guards it
            continue
        mig = on_off(row[8])
        out.gpus.append(Gpu(
            index=index, uuid=row[1], name=row[2], bus_id=row[3],
            memory_used_mib=na_or_int(row[4]), memory_total_mib=na_or_int(row[5]),
            utilization_pct=na_or_int(row[6]), persistence_mode=on_off(row[7]),
            mig_mode=mig, recovery_action=recovery_token(",".join(row[9:])),
            temperature_c=na_or_int(health[0]), power_w=na_or_float(health[1]), clock_sm_mhz=na_or_int(health[2]),
            pcie_gen=na_or_int(health[3]), pcie_width=na_or_int(health[4]), ecc_uncorrected=na_or_int(health[5]),
            pcie_gen_max=na_or_int(health[6]), pcie_width_max=na_or_int(health[7])))
    _too_many(out.warnings, "--query-gpu", unparsed, lines_over(text, MAX_GPU_LINES), MAX_GPU_LINES)
    if not out.gpus:
        out.error = nvsmi_failure(text, rc) or _unreachable_error(text, out.lost) or (
            None if rc == 0 and not text.strip() else
            f"nvidia-smi failed (exit {rc}): " + clip(text_lines(text.strip(), 1)[0] if text.strip() else "no output"))
        if rc == 0 and not text.strip():
            out.error = "no devices: nvidia-smi listed no GPU"
    return out


def parse_compute_apps(text: str, uuid_to_index: dict[str, int]) -> tuple[list[DriverProc], list[str]]:
    """`--query-compute-apps=pid,gpu_uuid,used_memory,process_name`; empty output is valid.

    A process on a MIG device is listed under its GPU's UUID (``uuid_to_index`` may also map MIG
    device UUIDs to their GPU's index, should a driver print those)."""
    procs: list[DriverProc] = []
    warnings: list[str] = []
    unparsed = 0
    for line in text_lines(text, MAX_APP_LINES):
        if not line.strip() or "no running processes found" in line.lower():
            continue
        parts = line.split(",", 3)
        pid_text = parts[0].strip()
        if len(parts) < 3 or not (pid_text.isascii() and pid_text.isdecimal()):
            if nvsmi_failure(line, None) is None and "GPU is lost" not in line:
                unparsed += 1
                if unparsed <= MAX_WARNED_LINES:
                    warnings.append("unparsed compute-apps line: " + clip(line))
            continue
        uuid = parts[1].strip()
        name = parts[3].strip() if len(parts) > 3 else ""
        procs.append(DriverProc(pid=int(pid_text), gpu_index=uuid_to_index.get(uuid), gpu_uuid=uuid,
                                used_memory_mib=na_or_int(parts[2]), name=name))
    _too_many(warnings, "--query-compute-apps", unparsed, lines_over(text, MAX_APP_LINES), MAX_APP_LINES)
    return procs, warnings


def parse_gpu_list(text: str) -> dict[int, tuple[MigInstance, ...]]:
    """`nvidia-smi -L`: MIG devices listed under each GPU index."""
    out: dict[int, list[MigInstance]] = {}
    current: int | None = None
    for line in text_lines(text, MAX_GPU_LINES):
        m = _LIST_GPU_RE.match(line)
        if m:
            current = int(m.group(1))
            out.setdefault(current, [])
            continue
        m = _LIST_MIG_RE.match(line)
        if m and current is not None:
            out[current].append(MigInstance(gpu_index=current, profile=m.group(1),
                                            uuid=m.group(3), device_index=int(m.group(2))))
    return {k: tuple(v) for k, v in out.items()}


# ---------------------------------------------------------------- /proc and ps

def program_name(args: str) -> str:
    """The program a command line runs: argv[0]'s basename ("" for an empty line)."""
    words = str(args).split()
    return words[0].rsplit("/", 1)[-1] if words else ""


@dataclass(frozen=True)
class Meta:
    now: float | None = None
    clk_tck: int = 100
    btime: int | None = None
    hostname: str | None = None
    uid: int | None = None
    pid_ns: str | None = None
    shell_pid: int | None = None

    @property
    def boot_time(self) -> float | None:
        """btime as epoch seconds; None for none or an absurd one (past year 36,000)."""
        return float(self.btime) if self.btime is not None and 0 < self.btime < 1 << 40 else None


def parse_meta(text: str) -> Meta:
    lines = [ln.strip() for ln in text_lines(text, 16)]
    lines += [""] * (7 - len(lines))

    def to_int(s: str) -> int | None:
        return int(s) if s.isdecimal() else None

    try:
        now: float | None = float(lines[0])
    except ValueError:
        now = None
    bt = lines[2].split()
    return Meta(now=now, clk_tck=to_int(lines[1]) or 100,
                btime=to_int(bt[1]) if len(bt) == 2 and bt[0] == "btime" else None,
                hostname=lines[3] or None, uid=to_int(lines[4]), pid_ns=lines[5] or None,
                shell_pid=to_int(lines[6]))


def parse_xid(text: str) -> tuple[list[str], list[str]]:
    """dmesg output -> (NVRM Xid lines and firmware boot failures: diagnosis/xid.py, warnings)."""
    lines, warnings = [], []
    for line in text_lines(text, MAX_GPU_LINES):
        if kernel_line(line):
            lines.append(line.rstrip())
        elif line.startswith("dmesg:"):
            low = line.lower()
            if "not permitted" in low or "permission" in low:
                warnings.append(DMESG_DENIED)
            else:
                warnings.append("dmesg: " + clip(line[6:]))
    return lines, sorted(set(warnings))


def parse_driver_version(text: str) -> str | None:
    m = _DRIVER_RE.search(text)
    return m.group(1) if m else None


@dataclass(frozen=True)
class SysInfo:
    drm_modeset: bool | None = None
    nvswitches: int | None = None


def parse_sys(text: str) -> SysInfo:
    """The sys section: "modeset Y" (nvidia_drm with modeset), "modeset N", "modeset " (not
    loaded); "nvswitch /dev/nvidia-nvswitch0 …" (an unmatched glob prints itself: none)."""
    modeset: bool | None = None
    switches: int | None = None
    for line in text_lines(text, 16):
        word, _, rest = line.strip().partition(" ")
        if word == "modeset":
            value = rest.strip().upper()
            modeset = True if value in ("Y", "1") else False if value in ("N", "0") else None
        elif word == "nvswitch":
            names = [w.rsplit("/", 1)[-1] for w in rest.split()]
            switches = sum(1 for n in names if n.startswith("nvidia-nvswitch") and n[15:].isdecimal())
    return SysInfo(drm_modeset=modeset, nvswitches=switches)


_BUS_RE = re.compile(r"[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9A-Fa-f]")
_HEX_BYTE = re.compile(r"[0-9a-fA-F]{2}")
#: GPUs the pci section lists at most (a node has 8 or 16; a flooding tree is cut here)
MAX_PCI_GPUS = 256


def config_present(octets: list[str] | tuple[str, ...]) -> bool | None:
    """Does a PCI device answer, by the first bytes of its config space (hex, as od prints them)?
    All ones (the vendor ID 0xffff and on: lspci's "rev ff") is a device fallen off the bus
    (False); any other vendor ID answers (True); fewer than two bytes read: unknown (None)."""
    if len(octets) < 2 or not all(_HEX_BYTE.fullmatch(o) for o in octets):
        return None
    return not all(o.lower() == "ff" for o in octets)


def parse_pci(text: str) -> tuple[PciGpu, ...] | None:
    """The pci section (probe.PCI): "none" (no /proc/driver/nvidia/gpus: None, not known), or
    "gpus" and a line "BUS XX XX XX XX" per directory there (its config space's first bytes;
    nothing after the bus: unreadable). Lines that are no bus id are skipped; each bus once."""
    lines = text_lines(text, MAX_PCI_GPUS + 2)
    if not lines or lines[0].strip() != probe.PCI_PRESENT:
        return None
    out: dict[str, PciGpu] = {}
    for line in lines[1:]:
        words = line.split()
        if not words or not _BUS_RE.fullmatch(words[0]) or words[0] in out:
            continue
        out[words[0]] = PciGpu(bus_id=words[0], present=config_present(words[1:5]))
    return tuple(out.values())


# ---------------------------------------------------------------- driver memory -> processes

def _base(name: str) -> str:
    word = name.strip().split(" ", 1)[0] if name.strip() else ""
    return word.rsplit("/", 1)[-1]


#: what nvidia-smi prints for a process name it could not read (and only those: a process may
#: call itself "[kworker/0:1]" or "[b]x[/b]", and is then compared like any other name)
NAME_PLACEHOLDERS = frozenset({"[N/A]", "[Not Found]", "[Insufficient Permissions]", "[Not Supported]",
                               "[Unknown Error]", "[Unknown]", "[GPU is lost]"})


def same_process(proc: Proc, driver_name: str) -> bool:
    """Is the driver's PID this /proc process, or another one that has the same number?

    In a container the driver lists host PIDs; one may collide with a local process. A GPU
    process holds /dev/nvidia* open (when we can see it), or the driver's name for it is its
    program: argv[0] or the kernel's 15-character comm.
    """
    if proc.holds_devices:
        return True
    base = _base(driver_name)
    if not base or driver_name.strip() in NAME_PLACEHOLDERS:
        return False
    comm = proc.name
    argv0 = _base(proc.cmdline)
    return (base == argv0 or base[:15] == comm[:15] or (len(comm) >= 15 and base.startswith(comm))
            or driver_name.strip() == proc.cmdline.strip()[: len(driver_name.strip())])


def credit_driver_memory(procs: list[Proc], driver_procs: list[DriverProc] | tuple[DriverProc, ...],
                         cache: dict | None = None) -> tuple[list[Proc], list[DriverProc]]:
    """Per-process GPU memory from the driver's list, summed per GPU (MIG instances add up).

    A driver PID whose /proc process is evidently another program is not credited: its
    DriverProc is marked ``local=False`` (a foreign PID), so no action ever targets the
    innocent local process that happens to share the number. ``cache`` (one dict per node,
    kept from poll to poll): a process credited the same as at the last poll is the same object.
    The credited processes are found by bisection in the parser's list (cache["procs_list"]:
    in PID order, one entry a PID), the others copied as they are, so a poll costs the driver's
    list, not the table; for any other list an index is built here.
    """
    if cache is not None and cache.get("procs_list") is procs:
        index: Mapping[int, int] = _Positions(procs)
    else:
        index = {p.pid: i for i, p in enumerate(procs)}
    by_pid = {dp.pid: procs[index[dp.pid]] for dp in driver_procs if dp.pid in index}
    marked: list[DriverProc] = []
    mem: dict[int, dict[str, int | None]] = {}
    before = cache.get("credited", {}) if cache is not None else {}
    made: dict = {}
    for dp in driver_procs:
        proc = by_pid.get(dp.pid)
        here = proc is not None and same_process(proc, dp.name)
        hit = before.get((id(dp), here))
        if hit is None or hit[0] is not dp:
            hit = (dp, dataclasses.replace(dp, local=here))
        made[(id(dp), here)] = hit
        marked.append(hit[1])
        if not here:
            continue
        key = str(dp.gpu_index) if dp.gpu_index is not None else dp.gpu_uuid
        per = mem.setdefault(dp.pid, {})
        if dp.used_memory_mib is None:
            per.setdefault(key, None)
        else:
            per[key] = (per.get(key) or 0) + dp.used_memory_mib
    out = list(procs)
    for pid, per in mem.items():
        i = index[pid]
        p = procs[i]
        hit = before.get(pid)
        if hit is None or hit[0] is not p or hit[1] != per:
            hit = (p, per, proc_with(p, gpu_memory_mib=per))
        made[pid] = hit
        out[i] = hit[2]
    if cache is not None:
        cache["credited"] = made
    return out, marked


# ---------------------------------------------------------------- the whole probe

def parse_probe(name: str, text: str, mark: str, *, taken_at: float,
                probe_ms: float | None = None, cache: dict | None = None,
                scope: Scope | None = None, between: Callable[[], None] = lambda: None,
                detail: bool = True) -> NodeSnapshot:
    """Probe output -> NodeSnapshot. Never raises. ``cache``: one dict per node, kept from poll
    to poll: a section whose text is the same as at the last poll is not parsed again, and the
    process table a light probe reads part of is kept there (proc_table.py). ``scope``: what the
    probe read (probe_scope.Scope; None: a shell's first probe, everything). ``between`` is
    called between the parse's long phases (the engine waits there while a key is answered:
    console/turns.py ``pause``); it changes nothing of the result. ``detail`` False: the
    snapshot's processes are only those a verdict rests on (sources/watch.py ``kept``), with
    ``table_size`` the count of all: a node not on screen (its findings are the same)."""
    try:
        return _parse_probe(name, text, mark, taken_at, probe_ms, cache, scope or Scope(), between, detail)
    except Exception as exc:  # noqa: BLE001 - a parser bug must not take the node down
        return NodeSnapshot(name=name, taken_at=taken_at, probe_ms=probe_ms,
                            error=f"could not parse the node's probe output: {clip(repr(exc))}")


def _same(cache: dict | None, section: str, parse, *args):
    """``parse(*args)``, or what it returned at the last poll for the same input (the caller
    only reads what parsers return)."""
    if cache is None:
        return parse(*args)
    hit = cache.get(section)
    if hit is not None and hit[0] == args:
        return hit[1]
    out = parse(*args)
    cache[section] = (args, out)
    return out


def _keep(cache: dict | None, sec: dict, section: str, value):
    """Remember a sticky section's answer (probe.STICKY), when it came whole, for the polls
    that leave it out."""
    if cache is not None and sec.get(section, (None, ""))[0] is not None:
        cache[("kept", section)] = value
    return value


#: sticky sections (probe.STICKY) whose last answer a probe that leaves them out keeps as it was
#: (``list`` reads as empty when left out: no GPU is in MIG mode)
_KEPT = ("meta", "driver", "sys", "xid", "remap", "pmon", "pci")


def _kept(table, driver_procs, meta: Meta, cache: dict | None) -> frozenset[int]:
    """The PIDs a node not on screen keeps in full: the watched set (sources/watch.py ``kept``),
    and the console's own shell with its ancestors (what an action's guard looks for). Worked
    out again only when what the set is made of changed (proc_read.py's "shape")."""
    driver = tuple(sorted({d.pid for d in driver_procs}))
    key = (cache.get("shape"), driver, meta.shell_pid) if cache is not None and "shape" in cache else None
    hit = cache.get("kept") if cache is not None else None
    if key is not None and hit is not None and hit[0] == key:
        return hit[1]
    stats = table.stats
    own: set[int] = set()
    pid = meta.shell_pid
    while pid in stats and pid not in own and len(own) < 64:
        own.add(pid)
        pid = stats[pid].ppid
    extras = table.extras
    devices = {pid: e[1] for pid, e in extras.items() if e[1]}
    keep = watched_kept(stats, driver, devices, table.dthreads) | own
    if key is not None:
        cache["kept"] = (key, keep)
    return keep


def _processes(table, meta: Meta, cache: dict | None, keep: frozenset[int] | None = None) -> list[Proc]:
    """The Procs of the table, in PID order; a process none of whose inputs changed since the
    last poll is the same Proc object (cache), and only the PIDs the table says it touched are
    looked at (the list itself is the last one when none was).

    The cache keeps the last list (``procs_list``, in PID order: a PID is found in it by
    bisection) and the Table its Procs were made from (``procs_table``: its dicts are the
    parser's own, kept anyway); not a {pid: Proc} map beside the list, nor each process's inputs
    beside its Proc: a process's inputs now are compared with that Table's (docs/performance.md,
    "Memory")."""
    clock = (meta.btime, meta.clk_tck)
    same_clock = cache is not None and cache.get("procs_clock") == clock
    last: list[Proc] | None = cache.get("procs_list") if same_clock else None
    # the last list held only the kept processes (or this one does): looked at whole
    partial = keep is not None or (cache is not None and cache.get("procs_partial", False))
    touched = table.touched if last is not None and not partial else None
    prev = cache.get("procs_table") if last is not None else None
    if cache is not None:
        cache["procs_table"] = table
    if touched is not None and not touched:
        return last
    users = table.users
    idents, extras, dthreads_of, exes, pendings = (table.idents.get, table.extras.get, table.dthreads.get,
                                                   table.exes.get, table.pending.get)
    if prev is not None:
        p_stats, p_idents, p_extras, p_dthreads, p_exes, p_pending = (
            prev.stats.get, prev.idents.get, prev.extras.get, prev.dthreads.get, prev.exes.get, prev.pending.get)
        same_users = prev.users is users
        # whole sections the same objects (a section whose text did not change): no per-PID look
        same_idents = prev.idents is table.idents
        same_extras = prev.extras is table.extras or prev.extras == table.extras
        same_rest = (prev.dthreads is table.dthreads and prev.exes is table.exes
                     and prev.pending is table.pending)

    def made(pid: int, st, old: Proc | None) -> Proc:
        ident = idents(pid)
        extra = extras(pid, NO_EXTRA)
        exe, pending = exes(pid), pendings(pid)
        dthreads = dthreads_of(pid)
        if old is not None and prev is not None:
            # the inputs the Proc was made from: prev's (the same objects, mostly)
            pst = p_stats(pid)
            pident = ident if same_idents else p_idents(pid)
            if ((pst is st or pst == st) and (pident is ident or pident == ident)
                    and (same_extras or (pextra := p_extras(pid, NO_EXTRA)) is extra or pextra == extra)
                    and (same_rest or (p_dthreads(pid) == dthreads and p_exes(pid) == exe
                                       and p_pending(pid) == pending))
                    and ((same_users and pident is ident) or _user(prev.users, pident) == _user(users, ident))):
                return old
        return _proc(pid, st, ident, _user(users, ident), extra, dthreads or (), meta, exe, pending)

    stats = table.stats
    if touched is not None:
        at = _Positions(last)
        changed: dict[int, Proc] = {}
        same_pids = True
        for pid in touched:
            i = at.get(pid)
            old = last[i] if i is not None else None
            st = stats.get(pid)
            if st is None or old is None:
                same_pids = same_pids and st is None and old is None
                if st is not None:
                    changed[pid] = made(pid, st, None)
                continue
            p = made(pid, st, old)
            if p is not old:
                changed[pid] = p
        if same_pids and all(map(stats.__contains__, map(_PID, last))):
            if not changed:
                return last               # the same processes, the very objects: the same list
            procs = list(last)            # the same PIDs: only the changed ones replaced
            for pid, p in changed.items():
                procs[at[pid]] = p
            cache["procs_list"] = procs
            return procs
        by_pid = {p.pid: p for p in last if p.pid in stats}
        by_pid.update(changed)
        procs = [by_pid[pid] for pid in sorted(by_pid)]
    else:
        before = {p.pid: p for p in last} if last is not None else {}
        pids = sorted(stats) if keep is None else sorted(pid for pid in keep if pid in stats)
        procs = [made(pid, stats[pid], before.get(pid)) for pid in pids]
        if last is not None and len(procs) == len(last) and all(map(operator.is_, procs, last)):
            procs = last                  # the same objects: the same list (later memos hold)
    if cache is not None:
        cache["procs_list"], cache["procs_clock"] = procs, clock
        cache["procs_partial"] = keep is not None
    return procs


class _Positions(Mapping[int, int]):
    """PID -> position in a list of Procs in PID order, one a PID (the parser's), by bisection:
    no index of 2,000 entries kept beside each node's list (docs/performance.md, "Memory")."""
    __slots__ = ("_procs",)

    def __init__(self, procs) -> None:
        self._procs = procs

    def __getitem__(self, pid: int) -> int:
        procs = self._procs
        i = bisect.bisect_left(procs, pid, key=_PID)
        if i < len(procs) and procs[i].pid == pid:
            return i
        raise KeyError(pid)

    def __contains__(self, pid: object) -> bool:
        try:
            self[pid]           # type: ignore[index]
        except (KeyError, TypeError):
            return False
        return True

    def __iter__(self):
        return (p.pid for p in self._procs)

    def __len__(self) -> int:
        return len(self._procs)


def _user(users: dict[int, str], ident) -> str | None:
    """A process's user name (its uid where the node did not name it), None where unread."""
    return None if ident is None or ident.uid is None else users.get(ident.uid, str(ident.uid))


_PID = operator.attrgetter("pid")
#: the GPU memory of a process the driver does not charge: one empty dict for all of them (never
#: changed: credit_driver_memory gives a charged process a dict of its own), not one each
_NO_GPU_MEMORY: dict = {}


def _proc(pid: int, st, ident, user, extra, dthreads, meta: Meta, exe: str | None = None,
          pending: bool | None = None) -> Proc:
    create_time = None
    if st.start_ticks is not None and meta.btime is not None:
        try:
            create_time = round(meta.btime + st.start_ticks / meta.clk_tck, 2)
        except OverflowError:       # absurd numbers: no start time rather than no node
            create_time = None
    if st.state == "Z":
        args = sys.intern(f"[{st.comm}] <defunct>")
    elif ident is None:
        args = ""
    else:
        args = ident.cmdline or sys.intern(f"[{st.comm}]")
    return Proc(pid=pid, ppid=st.ppid, state=st.state, user=user, name=st.comm, cmdline=args,
                gpu_memory_mib=_NO_GPU_MEMORY,
                create_time=create_time, start_ticks=st.start_ticks, device_files=extra[1],
                d_threads=tuple(dthreads), num_threads=st.num_threads, pid_ns=extra[2], cgroup=extra[3],
                pgid=st.pgrp, sid=st.session, cpu_ticks=st.cpu_ticks, exe=exe, sigkill_pending=pending)


def _repair_and_fabric(text: str) -> tuple[dict, dict]:
    """The remap section: the memory repair, then (NVSwitch systems) the fabric after its mark."""
    repair_text, fabric_text = split_fabric(text, FABRIC_MARK)
    return parse_memory_repair(repair_text), parse_fabric(fabric_text)


def _gpus_with(parsed: list[Gpu], mig: dict, repair: dict, fabric: dict, cache: dict | None) -> tuple[Gpu, ...]:
    """The GPUs of the query with their MIG devices, memory repair and fabric state; the last
    poll's very tuple when each of the four is the very object it was made from (a section
    whose text did not change hands back what it parsed then: ``_same``, ``_keep``), not eight
    copies of thirty fields a poll."""
    key = (parsed, mig, repair, fabric)
    hit = cache.get("gpus_with") if cache is not None else None
    if hit is not None and all(map(operator.is_, hit[0], key)):
        return hit[1]
    gpus = []
    for g in parsed:
        inst = mig.get(g.index, ())
        if inst or g.mig_mode:
            g = dataclasses.replace(g, mig_instances=inst, mig_mode=True if inst else g.mig_mode)
        gpus.append(g)
    out = with_fabric(with_repair(gpus, repair), fabric)
    if cache is not None:
        cache["gpus_with"] = (key, out)
    return out


def _read_loop(sec: dict, cache: dict, taken_at: float) -> list[str]:
    """The loop-mode sections (console/probe_loop.py): their newest whole sample stands in for
    the per-poll GPU and compute-apps queries when the probe left those out. Kept in ``cache``:
    the loops' state (``smi_loop``), what the loop section said (``smi_loop_what``), the loops'
    PIDs (``smi_loop_pids``) and when the newest sample came (``smi_loop_at``, probe time)."""
    what, pids = parse_loop_state(sec["loop"][1])
    state = cache.get("smi_loop")
    if state is None or what in ("started", "died+started"):
        # new loops, new files; framed by the interval the loops were started with
        state = cache["smi_loop"] = LoopState(interval_s=probe_loop.LOOP_MS / 1000)
    cache["smi_loop_what"], cache["smi_loop_pids"] = what, pids
    if state.feed(sec.get("loopg", (None, ""))[1], sec.get("loopa", (None, ""))[1]):
        cache["smi_loop_at"] = taken_at
    warnings = [f"nvidia-smi loop: {clip(line, 160)}" for line in (state.gpu.noise + state.apps.noise)[:2]]
    texts = state.texts()
    if texts is not None and "gpu" not in sec:
        # the apps loop's sample stands for the compute-apps query: it answered (rc 0) unless
        # the loop printed something else than samples since the last probe (nvidia-smi's error)
        sec["gpu"], sec["apps"] = (0, texts[0]), (1 if state.apps.noise else 0, texts[1])
    elif "gpu" not in sec:
        warnings.append("nvidia-smi loop: no sample yet")
    return warnings


def _parse_probe(name: str, text: str, mark: str, taken_at: float,
                 probe_ms: float | None, cache: dict | None = None, scope: Scope | None = None,
                 between: Callable[[], None] = lambda: None, detail: bool = True) -> NodeSnapshot:
    scope = scope or Scope()
    sec = split_sections(text, mark)
    warnings: list[str] = []
    # a section the probe left out (probe.STICKY) keeps its last answer, from ``cache``
    kept = {name: cache[("kept", name)] for name in _KEPT
            if cache is not None and name not in sec and ("kept", name) in cache}
    for wanted in ("meta", "gpu", "apps", "pids", "stat"):
        if wanted in kept or (wanted in ("gpu", "apps") and "loop" in sec):
            continue
        if wanted not in sec:
            warnings.append(f"probe section '{wanted}' missing")
        elif sec[wanted][0] is None:
            warnings.append(f"probe section '{wanted}' cut short")

    def body(key: str) -> tuple[int | None, str]:
        return sec.get(key, (None, ""))

    meta = kept["meta"] if "meta" in kept else _keep(cache, sec, "meta", parse_meta(body("meta")[1]))
    if "loop" in sec and cache is not None:
        warnings += _read_loop(sec, cache, taken_at)
    gpu_rc, gpu_text = body("gpu")
    gp = _same(cache, "gpu", parse_gpu_query, gpu_text, gpu_rc) if "gpu" in sec else GpuParse(error=None)
    warnings += gp.warnings
    error = gp.error
    mig = _same(cache, "list", parse_gpu_list, body("list")[1])
    repair, fabric = kept["remap"] if "remap" in kept else _keep(
        cache, sec, "remap", _same(cache, "remap", _repair_and_fabric, body("remap")[1]))
    gpus = _gpus_with(gp.gpus, mig, repair, fabric, cache)
    if gpus and body("remap")[0] == 124:
        warnings.append("nvidia-smi -q -d ROW_REMAPPER timed out: row remapping unknown")
    uuid_to_index = {g.uuid: g.index for g in gpus}
    uuid_to_index.update({m.uuid: g.index for g in gpus for m in g.mig_instances if m.uuid})
    driver_procs: list[DriverProc] = []
    if error is None and body("apps")[0] == 124:
        # the GPUs answered, their processes did not: memory nobody is listed for means nothing
        error = nvsmi_failure("", 124)
    elif error is None:
        driver_procs, w = _same(cache, "apps", parse_compute_apps, body("apps")[1], uuid_to_index)
        warnings += w
    if gpus and body("list")[0] == 124:
        warnings.append("nvidia-smi -L timed out: MIG instances unknown")

    between()
    if detail and cache is not None:
        unpack_table(cache)            # on screen again: its table a dict (packed_stats.py)
        warm_up(cache)                 # on screen again: every command line back (cold_idents.py)
    table = read_table(sec, cache if cache is not None else {}, scope)
    between()
    sysinfo = kept["sys"] if "sys" in kept else _keep(cache, sec, "sys", parse_sys(body("sys")[1]))
    xid_lines, w = kept["xid"] if "xid" in kept else _keep(cache, sec, "xid",
                                                            _same(cache, "xid", parse_xid, body("xid")[1]))
    warnings += w

    keep = None if detail else _kept(table, driver_procs, meta, cache)
    if keep is not None and cache is not None:
        pack_table(cache, table, keep)     # its table as columns (packed_stats.py)
        settle(cache, table, keep)
    procs = _processes(table, meta, cache, keep)
    between()
    # the same processes and the same driver list (objects the caches handed back): the same answer
    memo = cache.get("credit_memo") if cache is not None else None
    if memo is not None and memo[0] is procs and memo[1] is driver_procs:
        processes, credited_driver = memo[2], memo[3]
    else:
        credited, credited_driver = credit_driver_memory(procs, driver_procs, cache)
        processes, credited_driver = tuple(credited), tuple(credited_driver)
        if cache is not None:
            cache["credit_memo"] = (procs, driver_procs, processes, credited_driver)
    driver_procs = credited_driver
    # each listed process's SM share (the pmon section, asked every few polls: its last answer
    # holds in between, for the processes the driver still lists)
    pmon = kept["pmon"] if "pmon" in kept else _keep(cache, sec, "pmon",
                                                      _same(cache, "pmon", parse_pmon, body("pmon")[1]))
    if cache is not None and "pmon" in sec:
        cache["pmon_unsupported"] = pmon.unsupported
    if body("pmon")[0] == 124:
        warnings.append("nvidia-smi pmon timed out: the processes' SM utilisation unknown")
    # (the parser's Procs: in PID order, one a PID, no SM figure on any yet)
    processes = credit_sm(processes, driver_procs, pmon.sm, cache, fresh=True)
    own = (meta.shell_pid,) if meta.shell_pid else ()
    # the GPUs the kernel module knows (asked every PCI_EVERY polls: the last answer holds between);
    # a section cut short says nothing of the GPUs it did not reach: unknown
    pci = kept["pci"] if "pci" in kept else _keep(
        cache, sec, "pci", _same(cache, "pci", parse_pci, body("pci")[1]) if body("pci")[0] is not None else None)
    return NodeSnapshot(
        name=name, taken_at=taken_at, error=error, warnings=tuple(dict.fromkeys(warnings)),
        probe_ms=probe_ms, gpus=tuple(gpus), processes=processes,
        driver_processes=driver_procs, lost_gpus=tuple(gp.lost), kernel_log=tuple(xid_lines),
        hostname=meta.hostname, own_pids=own,
        driver_version=kept["driver"] if "driver" in kept else _keep(cache, sec, "driver",
                                                                   parse_driver_version(body("driver")[1])),
        drm_modeset=sysinfo.drm_modeset, nvswitches=sysinfo.nvswitches, pci_gpus=pci,
        driver_list_ok=body("apps")[0] == 0, boot_time=meta.boot_time,
        table_size=None if keep is None else len(table.stats))
