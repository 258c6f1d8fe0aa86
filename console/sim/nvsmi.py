"""The simulated ``nvidia-smi``: queries, -L, -r, -pm and the default table, failures included.

Returns (stdout, stderr, rc); nvidia-smi prints its errors on stdout, as the real one does.
"""
from __future__ import annotations

import time

from console.probe import RECOVERY_FIELD, RECOVERY_MIN_DRIVER
from console.sim.host import SimHost
from console.sim.options import scan_options
from console.sim.state import HOST_PID_NS, SimGpu

DRIVER_NOT_LOADED = ("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
                     "Make sure that the latest NVIDIA driver is installed and running.\n")
VERSION_MISMATCH = "Failed to initialize NVML: Driver/library version mismatch\nNVML library version: 580.105\n"
NO_DEVICES = "No devices were found\n"
BAD_ARGS = "Invalid combination of input arguments. Please run 'nvidia-smi -h' for help.\n"
MEMORY_RESERVED_MIB = 556

_UNITS = {"memory.used": "MiB", "memory.total": "MiB", "memory.free": "MiB", "memory.reserved": "MiB",
          "utilization.gpu": "%", "utilization.memory": "%", "power.draw": "W", "power.limit": "W",
          "clocks.sm": "MHz", "clocks.mem": "MHz", "used_memory": "MiB", "used_gpu_memory": "MiB"}

#: nvidia-smi options: flags, and options that take a value (-i 0, --id=0, --id 0)
_FLAGS = {"-L": "-L", "--list-gpus": "-L", "-r": "-r", "--gpu-reset": "-r", "-q": "-q", "--query": "-q"}
_VALUED = {"--query-gpu": "--query-gpu", "--query-compute-apps": "--query-compute-apps",
           "--format": "--format", "--id": "--id", "-i": "--id",
           "--persistence-mode": "--persistence-mode", "-pm": "--persistence-mode",
           "-d": "--display", "--display": "--display"}
#: what ``-q -d`` takes (nvidia-smi's man page); the simulator prints the two memory-repair blocks
#: and, for the others, the GPU's header line only
DISPLAYS = ("MEMORY", "UTILIZATION", "ECC", "TEMPERATURE", "POWER", "CLOCK", "COMPUTE", "PIDS", "PERFORMANCE",
            "SUPPORTED_CLOCKS", "PAGE_RETIREMENT", "ACCOUNTING", "ENCODER_STATS", "SUPPORTED_GPU_TARGET_TEMP",
            "VOLTAGE", "FBC_STATS", "ROW_REMAPPER", "RESET_STATUS", "GSP_FIRMWARE_VERSION")
#: the simulator's rule: an nvidia-smi older than this (before row remapping, Ampere's R450)
#: rejects ROW_REMAPPER like any unknown display (exit 2)
ROW_REMAPPER_MIN_DRIVER = 450
#: the spare-row banks the Bank Remap Availability Histogram counts (a 40 GB A100 shows 640)
REMAP_BANKS = 512


def _lost_line(g: SimGpu) -> str:
    return (f"Unable to determine the device handle for GPU {g.bus_id[4:]}: GPU is lost. "
            "Reboot the system to recover this GPU\n")


def _gpu_value(node: SimHost, g: SimGpu, field: str) -> str | None:
    used = node.gpu_used(g)
    values = {
        "index": str(g.index), "uuid": g.uuid, "gpu_uuid": g.uuid, "name": g.name, "gpu_name": g.name,
        "pci.bus_id": g.bus_id, "gpu_bus_id": g.bus_id, "serial": g.serial, "gpu_serial": g.serial,
        "memory.used": str(used), "memory.total": str(g.total_mib),
        "memory.reserved": str(MEMORY_RESERVED_MIB),
        "memory.free": str(max(0, g.total_mib - used - MEMORY_RESERVED_MIB)),
        "utilization.gpu": str(node.gpu_util(g)), "utilization.memory": "0",
        "persistence_mode": "Enabled" if g.persistence else "Disabled",
        "mig.mode.current": "Disabled", "mig.mode.pending": "Disabled",
        "temperature.gpu": str(g.temp_c), "power.draw": f"{g.power_w:.2f}", "power.limit": "600.00",
        "pstate": "P1" if used > g.reserved_mib else "P8", "driver_version": node.driver_version,
        "count": str(len(node.gpus)), "compute_mode": "Default", "clocks.sm": "1455", "clocks.mem": "13365",
        "pcie.link.gen.current": str(g.pcie_gen), "pcie.link.width.current": str(g.pcie_width),
        "ecc.errors.uncorrected.volatile.total": str(g.ecc_uncorrected),
        "pcie.link.gen.max": str(g.pcie_gen_max), "pcie.link.width.max": str(g.pcie_width_max),
        "timestamp": time.strftime("%Y/%m/%d %H:%M:%S.000", time.gmtime(node.now)),
    }
    if field in ("fabric.state", "fabric.status"):
        # an NVSwitch system's GPUs have a fabric ("Completed"/"Success" once the fabric manager
        # set them up); a GPU elsewhere: N/A
        if not node.nvswitches:
            return "N/A"
        return g.fabric_state if field == "fabric.state" else g.fabric_status
    if field == RECOVERY_FIELD and knows_recovery(node):
        # what nvidia-smi prints (NVIDIA/DCGM#263: "None", "Reset")
        return "Reset" if g.reset_required else "None"
    return values.get(field)


def _driver_at_least(node: SimHost, major_min: int) -> bool:
    major = node.driver_version.split(".", 1)[0]
    return major.isdecimal() and int(major) >= major_min


def knows_recovery(node: SimHost) -> bool:
    """An nvidia-smi from probe.RECOVERY_MIN_DRIVER on knows the recovery-action field."""
    return _driver_at_least(node, RECOVERY_MIN_DRIVER)


def _kv(indent: int, key: str, value: object) -> str:
    """One ``-q`` line: the key padded to column 42, as nvidia-smi prints it."""
    return f"{' ' * indent}{key:<{42 - indent}}: {value}\n"


def _yes(flag: bool) -> str:
    return "Yes" if flag else "No"


def _repair_blocks(g: SimGpu, displays: set[str]) -> str:
    """The Retired Pages and Remapped Rows blocks of ``-q`` (tests/fixtures/real/remap-*)."""
    out = ""
    if "PAGE_RETIREMENT" in displays:
        pending = "N/A" if g.pages_pending is None else _yes(g.pages_pending)
        counts = "N/A" if g.pages_pending is None else "0"
        out += ("    Retired Pages\n" + _kv(8, "Single Bit ECC", counts) + _kv(8, "Double Bit ECC", counts)
                + _kv(8, "Pending Page Blacklist", pending))
    if "ROW_REMAPPER" in displays:
        if g.pages_pending is not None:          # a GPU that retires pages remaps no rows
            return out + _kv(4, "Remapped Rows", "N/A")
        used = min(REMAP_BANKS, g.rows_correctable + g.rows_uncorrectable)
        out += ("    Remapped Rows\n" + _kv(8, "Correctable Error", g.rows_correctable)
                + _kv(8, "Uncorrectable Error", g.rows_uncorrectable) + _kv(8, "Pending", _yes(g.remap_pending))
                + _kv(8, "Remapping Failure Occurred", _yes(g.remap_failure))
                + "        Bank Remap Availability Histogram\n"
                + "".join(_kv(12, level, f"{n} bank(s)") for level, n in (
                    ("Max", REMAP_BANKS - used), ("High", used), ("Partial", 0), ("Low", 0), ("None", 0))))
    return out


def query_report(node: SimHost, gpus: list[SimGpu], display: str | None) -> tuple[str, int]:
    """``nvidia-smi -q [-d DISPLAY,...]``: the report's head, then each GPU's line and the blocks
    asked for (without ``-d``: its name and UUID, and both memory-repair blocks); an unknown
    display (ROW_REMAPPER on an older driver included) is refused with exit 2."""
    asked = {d.strip().upper() for d in (display or "PAGE_RETIREMENT,ROW_REMAPPER").split(",") if d.strip()}
    known = set(DISPLAYS) if _driver_at_least(node, ROW_REMAPPER_MIN_DRIVER) else set(DISPLAYS) - {"ROW_REMAPPER"}
    if not asked or asked - known:
        return BAD_ARGS, 2
    head = ("\n==============NVSMI LOG==============\n\n"
            + _kv(0, "Timestamp", time.strftime("%a %b %e %H:%M:%S %Y", time.gmtime(node.now)))
            + _kv(0, "Driver Version", node.driver_version) + _kv(0, "CUDA Version", node.cuda_version) + "\n"
            + _kv(0, "Attached GPUs", len(node.gpus)))
    blocks = []
    for g in gpus:
        about = "" if display else _kv(4, "Product Name", g.name) + _kv(4, "GPU UUID", g.uuid)
        blocks.append(f"GPU {g.bus_id}\n{about}{_repair_blocks(g, asked)}")
    return head + "\n".join(blocks) + "\n", 0


def _parse_format(fmt: str | None) -> tuple[bool, bool] | None:
    if fmt is None:
        return None
    parts = [p.strip() for p in fmt.split(",")]
    if not parts or parts[0] != "csv" or any(p not in ("csv", "noheader", "nounits") for p in parts):
        return None
    return ("noheader" not in parts, "nounits" not in parts)


def _header(fields: list[str], units: bool) -> str:
    names = []
    for f in fields:
        name = {"used_memory": "used_gpu_memory"}.get(f, f)
        unit = _UNITS.get(f)
        names.append(f"{name} [{unit}]" if unit else name)
    return ", ".join(names)


def _with_unit(field: str, value: str, units: bool) -> str:
    unit = _UNITS.get(field)
    if not units or unit is None or value.startswith("["):
        return value
    return f"{value} {unit}" if unit != "%" else f"{value} %"


def _select(node: SimHost, ids: str | None) -> list[SimGpu] | None:
    if ids is None:
        return list(node.gpus)
    out = []
    for token in ids.split(","):
        token = token.strip()
        match = [g for g in node.gpus if token in (str(g.index), g.uuid, g.bus_id, g.bus_id[4:])]
        if not match:
            return None
        out.extend(match)
    return out


#: what pmon prints where it is not supported (keylase/nvidia-patch #89, driver 415.27:
#: tests/fixtures/real/pmon-not-supported-nvidia-patch-89.txt); its exit status is not in the
#: paste: the simulator's 255 is a guess (the console does not read it)
PMON_NOT_SUPPORTED = "Not supported on the device(s)\nFailed to process command line\n"
#: the simulator prints pmon's jpg and ofa columns for drivers from this one on (newer drivers
#: print them; the version that added them is not known here)
PMON_JPG_OFA_MIN_DRIVER = 535
_PMON_FLAGS: dict[str, str] = {}
_PMON_VALUED = {"-c": "-c", "--count": "-c", "-s": "-s", "--select": "-s", "-d": "-d", "--delay": "-d",
                "-i": "--id", "--id": "--id"}


def pmon(node: SimHost, argv: list[str]) -> tuple[str, str, int]:
    """``nvidia-smi pmon [-i IDS] [-s u|m|um] [-c N] [-d S]`` in the documented layout (the man
    page's; no real capture was at hand: docs/field-facts.md): the header and units lines, then
    one row per process and GPU — a device with no process one row of ``-``. ``-c`` samples at
    most 10 here (each the same: the state does not move between them)."""
    opts: dict[str, str | bool | None] = {}
    for name, value in scan_options(argv, _PMON_FLAGS, _PMON_VALUED, long_equals=True):
        if name is None:
            return BAD_ARGS, "", 2
        opts[name] = value
    select = str(opts.get("-s") or "u")
    count = str(opts.get("-c") or "1")
    if not set(select) <= {"u", "m"} or not count.isdecimal() or int(count) < 1:
        return BAD_ARGS, "", 2
    if not node.pmon_supported:
        return PMON_NOT_SUPPORTED, "", 255
    gpus = _select(node, opts.get("--id"))
    if gpus is None:
        return NO_DEVICES, "", 6
    wide = _driver_at_least(node, PMON_JPG_OFA_MIN_DRIVER)
    names = ["gpu", "pid", "type"] + (["sm", "mem", "enc", "dec"] + (["jpg", "ofa"] if wide else [])
                                      if "u" in select else []) + (["fb"] if "m" in select else []) + ["command"]
    units = {"gpu": "Idx", "pid": "#", "type": "C/G", "fb": "MB", "command": "name"}
    widths = {"gpu": 4, "pid": 10, "type": 5}
    head = ["#" + " ".join(f"{n:>{widths.get(n, 5)}}" for n in names[:-1]) + "   " + names[-1],
            "#" + " ".join(f"{units.get(n, '%'):>{widths.get(n, 5)}}" for n in names[:-1]) + "   " + units["command"]]
    rows = []
    for g in gpus:
        if g.lost:
            continue
        listed = [c for c in node.contexts if c.gpu == g.index and c.listed]
        for c in listed:
            values = {"gpu": str(g.index), "pid": str(c.driver_pid), "type": "C", "sm": str(node.context_sm(c)),
                      "mem": "0" if node.context_sm(c) == 0 else str(max(1, node.context_sm(c) // 3)),
                      "enc": "-", "dec": "-", "jpg": "-", "ofa": "-", "fb": str(c.mib)}
            rows.append(" " + " ".join(f"{values[n]:>{widths.get(n, 5)}}" for n in names[:-1])
                        + "   " + (c.name.rsplit("/", 1)[-1] or "-"))
        if not listed:
            rows.append(" " + " ".join(f"{'-' if n != 'gpu' else str(g.index):>{widths.get(n, 5)}}"
                                       for n in names[:-1]) + "   -")
    return "".join(line + "\n" for line in head + rows * min(10, int(count))), "", 0


def run(node: SimHost, argv: list[str]) -> tuple[str, str, int]:
    node.settle()
    if node.driver_state == "not-loaded":
        return DRIVER_NOT_LOADED, "", 9
    if node.driver_state == "mismatch":
        return VERSION_MISMATCH, "", 18
    if node.driver_state == "no-devices" or not node.gpus:
        return NO_DEVICES, "", 6
    if argv[:1] == ["pmon"]:
        return pmon(node, argv[1:])
    opts: dict[str, str | bool | None] = {}
    for name, value in scan_options(argv, _FLAGS, _VALUED, long_equals=True):
        if name is None:
            return BAD_ARGS, "", 2
        opts[name] = value
    gpus = _select(node, opts.get("--id"))
    if gpus is None:
        return NO_DEVICES, "", 6
    if "-r" in opts:
        out, rc = [], 0
        for g in gpus:
            text, code = node.reset_gpu(g.index)
            out.append(text)
            rc = rc or code
        return "".join(out), "", rc
    if "--persistence-mode" in opts:
        mode = opts["--persistence-mode"]
        if mode not in ("0", "1", "ENABLED", "DISABLED"):
            return BAD_ARGS, "", 2
        on = mode in ("1", "ENABLED")
        if "--id" in opts:
            texts = [node.set_persistence(g.index, on)[0].replace("All done.\n", "") for g in gpus]
            return "".join(texts) + "All done.\n", "", 0
        text, rc = node.set_persistence(None, on)
        return text, "", rc
    lost = "".join(_lost_line(g) for g in gpus if g.lost)
    live = [g for g in gpus if not g.lost]
    rc_lost = 15 if lost else 0
    if "-L" in opts:
        body = "".join(f"GPU {g.index}: {g.name} (UUID: {g.uuid})\n" for g in live)
        return lost + body, "", rc_lost
    if "-q" in opts:
        text, rc = query_report(node, live, opts.get("--display"))
        return (text, "", rc) if rc else (lost + text, "", rc_lost)
    if "--display" in opts:
        return BAD_ARGS, "", 2
    if "--query-gpu" in opts or "--query-compute-apps" in opts:
        fmt = _parse_format(opts.get("--format"))
        if fmt is None:
            return ('"--format" option must be specified with a valid value: csv[,noheader][,nounits]\n'
                    if opts.get("--format") is None else BAD_ARGS), "", 2
        header, units = fmt
        if "--query-gpu" in opts:
            fields = [f.strip() for f in (opts["--query-gpu"] or "").split(",") if f.strip()]
            for f in fields:
                if _gpu_value(node, live[0] if live else node.gpus[0], f) is None:
                    return f'Field "{f}" is not a valid field to query.\n\n', "", 2
            lines = [_header(fields, units)] if header else []
            for g in live:
                lines.append(", ".join(_with_unit(f, _gpu_value(node, g, f) or "[N/A]", units) for f in fields))
            return lost + "".join(line + "\n" for line in lines), "", rc_lost
        fields = [f.strip() for f in (opts["--query-compute-apps"] or "").split(",") if f.strip()]
        known = {"pid", "process_name", "name", "gpu_uuid", "gpu_bus_id", "gpu_name", "gpu_serial",
                 "used_memory", "used_gpu_memory", "timestamp"}
        for f in fields:
            if f not in known:
                return f'Field "{f}" is not a valid field to query.\n\n', "", 2
        lines = [_header(fields, units)] if header else []
        for g in live:
            for ctx in node.contexts:
                if ctx.gpu != g.index or not ctx.listed:
                    continue
                row = []
                for f in fields:
                    if f == "pid":
                        row.append(str(ctx.driver_pid))
                    elif f in ("process_name", "name"):
                        row.append(ctx.name or "[Not Found]")
                    elif f in ("used_memory", "used_gpu_memory"):
                        row.append(_with_unit(f, str(ctx.mib), units))
                    else:
                        row.append(_gpu_value(node, g, f) or "[N/A]")
                lines.append(", ".join(row))
        return lost + "".join(line + "\n" for line in lines), "", rc_lost
    return lost + table(node, live), "", rc_lost


def _foreign(node: SimHost, pid: int) -> bool:
    return node.pid_ns != HOST_PID_NS and node.proc(pid) is None


def table(node: SimHost, gpus: list[SimGpu]) -> str:
    """The default ``nvidia-smi`` screen (580 layout, 91 columns)."""
    bar = "+" + "-" * 89 + "+"
    sep = "+" + "-" * 41 + "+" + "-" * 24 + "+" + "-" * 22 + "+"
    head = (f" NVIDIA-SMI {node.driver_version:<22}Driver Version: {node.driver_version:<15}"
            f"CUDA Version: {node.cuda_version}")
    lines = [time.strftime("%a %b %e %H:%M:%S %Y", time.gmtime(node.now)) + "       ", bar,
             f"|{head:<89}|", sep,
             "| GPU  Name                 Persistence-M | Bus-Id          Disp.A | Volatile Uncorr. ECC |",
             "| Fan  Temp   Perf          Pwr:Usage/Cap |           Memory-Usage | GPU-Util  Compute M. |",
             "|                                         |                        |               MIG M. |",
             "|" + "=" * 41 + "+" + "=" * 24 + "+" + "=" * 22 + "|"]
    for g in gpus:
        used = node.gpu_used(g)
        name = g.name if len(g.name) <= 26 else g.name[:23] + "..."
        pm = "On" if g.persistence else "Off"
        pstate = "P1" if used > g.reserved_mib else "P8"
        pwr = f"{int(g.power_w)}W /  600W"
        mem = f"{used}MiB /  {g.total_mib}MiB"
        util = f"{node.gpu_util(g)}%"
        lines.append(f"| {g.index:>3}  {name:<26}{pm:>7}  |   {g.bus_id} Off |{'0':>21} |")
        lines.append(f"| N/A   {g.temp_c:>2}C    {pstate:<2}{pwr:>24} |{mem:>23} |{util:>8}      Default |")
        lines.append("|                                         |                        |             Disabled |")
        lines.append(sep)
    lines += ["", bar, f"|{' Processes:':<89}|",
              "|  GPU   GI   CI              PID   Type   Process name                        GPU Memory |",
              "|        ID   ID                                                               Usage      |",
              "|" + "=" * 89 + "|"]
    rows = [c for g in gpus for c in node.contexts
            if c.gpu == g.index and c.listed and not _foreign(node, c.driver_pid)]
    if not rows:
        lines.append(f"|{'  No running processes found':<89}|")
    for c in rows:
        name = c.name if len(c.name) <= 34 else "..." + c.name[-31:]
        lines.append(f"|  {c.gpu:>3}   N/A  N/A  {c.driver_pid:>14}      C   {name:<34}{f'{c.mib}MiB':>12} |")
    lines.append(bar)
    return "\n".join(lines) + "\n"
