"""Pure parsers for the outputs of the checks (console/checks.py).

Every function takes text and returns plain values (dicts, lists, ints, strings: ready
for JSON); none raises on any input.  Probe-format pieces (CSV values, /proc/PID/stat,
fd lines, compute-apps) reuse console/sources/parse.py.
"""
from __future__ import annotations

import re

from console.diagnosis.xid import bus_key, fallen_off_bus, parse_xid_line
from console.sources.proc_table import command_line, parse_args, parse_listing, parse_uids, parse_users
from console.sources.parse import (clip, csv_rows, na_or_int, nvsmi_failure, on_off, parse_compute_apps,
                            parse_fds, parse_gpu_query, parse_pidns, parse_ps, parse_stat_line,
                            program_name)
from console.probe import split_sections
from console.sources.cgroup import parse_cgroup_records

SECTION_RE = re.compile(r"^::([a-z-]+)::$")
_USERS_RE = re.compile(r'\("((?:[^"\\]|\\.)*)",pid=(\d+),fd=(\d+)\)')
_FRAME_RE = re.compile(r"^\[<[0-9a-fA-Fx]+>\]\s+([^\s+]+)(?:\+0x[0-9a-fA-F]+/0x[0-9a-fA-F]+)?(?:\s+\[(\S+)\])?")
_PERMISSION_WORDS = ("operation not permitted", "permission denied", "insufficient permissions",
                     "not seeing messages from other users")


def sections(text: str) -> dict[str, str]:
    """Cut output at marker lines ``::name::`` (what comes before the first is ``""``)."""
    out: dict[str, list[str]] = {"": []}
    current = ""
    for line in str(text).splitlines():
        m = SECTION_RE.match(line.strip())
        if m:
            current = m.group(1)
            out[current] = []
            continue
        out.setdefault(current, []).append(line)
    return {k: "\n".join(v) for k, v in out.items()}


def permission_problem(text: str) -> str | None:
    """The first line that says the command was not allowed to read something, or None."""
    for line in str(text).splitlines():
        if any(w in line.lower() for w in _PERMISSION_WORDS):
            return clip(line)
    return None


# ---------------------------------------------------------------- nvidia-smi memory

def parse_memory_read(text: str) -> dict[str, int | None]:
    """`--query-gpu=index,memory.used --format=csv,noheader` -> {"0": 76109, ...}."""
    out: dict[str, int | None] = {}
    for row in csv_rows(str(text)):
        if len(row) >= 2 and row[0].isdecimal():
            out[str(int(row[0]))] = na_or_int(row[1])
    return out


_READ_AT_RE = re.compile(r"^::t=(\d+(?:\.\d+)?)::$")
BUSY_MIB = 1024         # a GPU above this holds memory; at or below it, it is back


def parse_reads(text: str, keep_empty: bool = False) -> list[tuple[float, dict[str, int | None]]]:
    """``::t=S::`` lines each followed by one memory read -> [(S, {gpu: MiB})] in order: the
    reads that parsed (and, with ``keep_empty``, those that did not, as ``{}``)."""
    reads: list[tuple[float, dict[str, int | None]]] = []
    at: float | None = None
    lines: list[str] = []

    def close() -> None:
        if at is not None:
            read = parse_memory_read("\n".join(lines))
            if read or keep_empty:
                reads.append((at, read))
    for line in str(text).splitlines():
        m = _READ_AT_RE.match(line.strip())
        if m:
            close()
            at, lines = float(m.group(1)), []
        else:
            lines.append(line)
    close()
    return reads


def memory_back(reads: list[tuple[float, dict[str, int | None]]]) -> float | None:
    """The time of the first read at which every GPU that held memory at the first read has
    given it back (at most BUSY_MIB, or a tenth of what it held); None when not (yet), or when
    no GPU held memory to begin with."""
    if not reads:
        return None
    start = reads[0][1]
    busy = {k: v for k, v in start.items() if v is not None and v > BUSY_MIB}
    if not busy:
        return None
    for at, read in reads[1:]:
        if all(read.get(k) is not None and (read[k] <= BUSY_MIB or read[k] <= v // 10) for k, v in busy.items()):
            return at
    return None


def parse_reread(text: str) -> dict:
    """A wait's memory reads -> before, after, freed per GPU, and when memory came back.

    Two formats: reads after ``::t=S::`` lines (one every few seconds: ``back_s`` is the first
    read at which every busy GPU was back, ``last_held_s`` the read before it,
    ``first_back_s`` the first read at which anything came back, ``waited_s`` the last read's
    time), or the older two reads around ``::after::`` (no moment known)."""
    every = parse_reads(text, keep_empty=True)
    timed = [(at, read) for at, read in every if read]
    out: dict = {}
    if every:
        before = every[0][1]                    # {} when the first read failed
        after = timed[-1][1] if timed else {}
        back = memory_back(timed)
        first_back = None
        for at, read in timed[1:]:
            if sum(max(0, (v or 0) - (read.get(k) or 0)) for k, v in before.items() if v is not None) >= 256:
                first_back = at
                break
        previous = [at for at, _ in timed if back is not None and at < back]
        out = {"reads": [[at, read] for at, read in timed], "back_s": back, "first_back_s": first_back,
               "last_held_s": previous[-1] if previous else None,
               "waited_s": timed[-1][0] if timed else None}
        complete = bool(timed)
    else:
        sec = sections(text)
        before = parse_memory_read(sec.get("", ""))
        after = parse_memory_read(sec.get("after", ""))
        complete = "after" in sec
    freed: dict[str, int | None] = {}
    for k in sorted(set(before) | set(after), key=lambda s: int(s)):
        b, a = before.get(k), after.get(k)
        freed[k] = (b - a) if b is not None and a is not None else None
    failure = nvsmi_failure(str(text), None)
    return {"before": before, "after": after, "freed_mib": freed,
            "freed_total_mib": sum(v for v in freed.values() if v), "error": failure,
            "complete": complete, **out}


# ---------------------------------------------------------------- holders

HOLDERS_MARK = "::gi-check::"
HOLDERS_SECTIONS = ("pids", "args", "uids", "users", "gpu", "apps", "fds", "pidns", "cgroup")


def parse_holders(text: str, mark: str = HOLDERS_MARK) -> dict:
    """Probe-format sections (HOLDERS_SECTIONS: the listing, command lines and users, the driver,
    fds, pidns, cgroup) -> who holds what (and in which container or unit); who is hidden or
    foreign.

    ``hidden``: PIDs with a device file open that the driver does not list;
    ``foreign``: PIDs the driver lists that /proc does not have (another PID namespace).
    """
    sec = split_sections(str(text), mark)

    def body(name: str) -> str:
        return sec.get(name, (None, ""))[1]

    gp = parse_gpu_query(body("gpu"), sec.get("gpu", (0, ""))[0])
    apps, warnings = parse_compute_apps(body("apps"), {g.uuid: g.index for g in gp.gpus})
    listing = parse_listing(body("pids"), sec.get("pids", (None, ""))[0] is not None).pids or frozenset()
    args, uids, names = parse_args(body("args")), parse_uids(body("uids")), parse_users(body("users"))
    ps = {pid: (names.get(uids[pid], str(uids[pid])) if pid in uids else None, command_line(args.get(pid, [])))
          for pid in listing}
    fds = parse_fds(body("fds"))
    ns = parse_pidns(body("pidns"))
    cgroups = parse_cgroup_records(body("cgroup"))
    listed = {a.pid for a in apps}
    driver = [{"pid": a.pid, "gpu": a.gpu_index, "gpu_uuid": a.gpu_uuid, "mib": a.used_memory_mib,
               "name": a.name} for a in apps]
    holders = {str(pid): {"files": list(files), "user": ps.get(pid, (None, ""))[0],
                          "args": clip(ps.get(pid, (None, ""))[1]), "pid_ns": ns.get(pid),
                          "container": cgroups[pid].describe() if pid in cgroups else None}
               for pid, files in sorted(fds.items())}
    return {"holders": holders, "driver": driver,
            "hidden": sorted(pid for pid in fds if pid not in listed),
            "foreign": sorted(pid for pid in listed if listing and pid not in listing),
            "pid_namespaces": sorted(set(ns.values())),
            "error": gp.error if not gp.gpus else None,
            "warnings": warnings + gp.warnings}


# ---------------------------------------------------------------- thread states

def parse_tasks(text: str) -> dict:
    """`grep -s . /proc/PID/task/*/stat /proc/PID/task/*/wchan` -> per PID its threads' states and wchans.

    A PID with no line (its globs did not expand: no such process) is left out: callers say ``gone``.
    """
    procs: dict[str, dict] = {}
    threads: dict[tuple[str, str], dict] = {}
    for line in str(text).splitlines():
        path, sep, value = line.partition(":")
        parts = path.split("/")
        if not sep or len(parts) != 6 or parts[1] != "proc" or parts[3] != "task":
            continue
        pid, tid, name = parts[2], parts[4], parts[5]
        if not (pid.isdecimal() and tid.isdecimal()):
            continue
        th = threads.setdefault((pid, tid), {"tid": int(tid), "name": None, "state": None, "wchan": None})
        if name == "wchan":
            th["wchan"] = None if value.strip() in ("", "0", "-") else value.strip()
        elif name == "stat":
            st = parse_stat_line(value)
            if st is None:
                continue
            th.update(name=st.comm, state=st.state)
            entry = procs.setdefault(pid, {"pid": int(pid), "threads": []})
            if tid == pid:
                entry.update(name=st.comm, state=st.state, ppid=st.ppid)
    for (pid, _tid), th in sorted(threads.items(), key=lambda kv: (int(kv[0][0]), int(kv[0][1]))):
        if th["state"] is not None and pid in procs:
            procs[pid]["threads"].append(th)
    for entry in procs.values():
        states: dict[str, int] = {}
        for th in entry["threads"]:
            states[th["state"]] = states.get(th["state"], 0) + 1
        entry["states"] = states
        entry["d_threads"] = [th for th in entry["threads"] if th["state"] == "D"]
    return {"processes": procs}


# ---------------------------------------------------------------- kernel log

def parse_kernel_log(text: str, gpu_bus: dict[str, int] | None = None) -> dict:
    """dmesg / journalctl -k output -> Xid events (with meanings), GPUs that fell off the bus (with or
    without an Xid 79), other NVRM lines, permission trouble."""
    events = []
    other = []
    by_bus = {bus_key(b): i for b, i in (gpu_bus or {}).items()}
    for line in str(text).splitlines():
        ev = parse_xid_line(line)
        if ev is not None:
            events.append({"xid": ev.code, "bus": ev.bus, "gpu": by_bus.get(bus_key(ev.bus)),
                           "title": ev.info.title, "meaning": ev.info.meaning, "action": ev.action,
                           "severity": ev.severity, "recovery": ev.recovery, "pid": ev.pid,
                           "process": ev.process, "uptime_s": ev.uptime_s, "line": ev.line})
        elif "NVRM" in line:
            other.append(line.strip())
    denied = permission_problem(text)
    missing = None
    for line in str(text).splitlines():
        low = line.lower()
        if ("not found" in low and ("dmesg" in low or "journalctl" in low)) or low.startswith("no journal files"):
            missing = clip(line)
            break
    return {"xids": events, "fallen_off_bus": fallen_off_bus(str(text)), "nvrm": other,
            "permission_denied": denied is not None,
            "error": denied or missing}


# ---------------------------------------------------------------- reset blockers

def parse_blockers(text: str, programs: tuple[str, ...], units: tuple[str, ...]) -> dict:
    """Sections: (first) persistence CSV, ``::ps::`` ps -eo pid=,args=, ``::units::`` systemctl is-active.
    A program written ``name*`` matches every program whose name starts with ``name``."""
    sec = sections(text)
    persistence: dict[str, bool | None] = {}
    for row in csv_rows(sec.get("", "")):
        if len(row) >= 2 and row[0].isdecimal():
            persistence[str(int(row[0]))] = on_off(row[1])
    daemons = []
    for pid, (_, args) in parse_ps(sec.get("ps", ""), user=False).items():
        prog = program_name(args)
        if prog in programs or any(x.endswith("*") and prog.startswith(x[:-1]) for x in programs):
            daemons.append({"pid": pid, "program": prog, "args": clip(args)})
    unit_lines = [ln.strip() for ln in sec.get("units", "").splitlines() if ln.strip()]
    states: dict[str, str] = {}
    no_systemd = any("not been booted with systemd" in ln or "Failed to connect to bus" in ln
                     for ln in unit_lines)
    if not no_systemd:
        words = [ln for ln in unit_lines if re.fullmatch(r"[a-z-]+", ln)]
        for unit, state in zip(units, words):
            states[unit] = state
    return {"persistence": persistence, "persistence_on": sorted(int(k) for k, v in persistence.items() if v),
            "daemons": daemons, "units": states, "systemd": not no_systemd,
            "error": nvsmi_failure(sec.get("", ""), None)}


# ---------------------------------------------------------------- listening ports

def parse_ss(text: str, port: int | None = None) -> dict:
    """`ss -ltnp` -> listening sockets (optionally only ``port``) and who owns them."""
    listeners = []
    for line in str(text).splitlines():
        parts = line.split()
        if len(parts) < 4 or parts[0] != "LISTEN":
            continue
        local = parts[3]
        addr, _, port_text = local.rpartition(":")
        if not port_text.isdecimal():
            continue
        p = int(port_text)
        if port is not None and p != port:
            continue
        users = [{"name": m.group(1), "pid": int(m.group(2)), "fd": int(m.group(3))}
                 for m in _USERS_RE.finditer(line)]
        listeners.append({"address": addr, "port": p, "processes": users})
    return {"listeners": listeners, "error": None if listeners or "State" in str(text) or not str(text).strip()
            else clip(str(text).strip().splitlines()[0])}


# ---------------------------------------------------------------- stacks

def parse_stack(text: str) -> dict:
    """Sections: (first) wchan, ``::stack::`` /proc/PID/stack, ``::py-spy::`` its dump."""
    sec = sections(text)
    head = [ln.strip() for ln in sec.get("", "").splitlines() if ln.strip()]
    gone = any("No such file" in ln for ln in head)
    wchan = head[0] if head and not gone else None
    if wchan in ("0", "-") or (wchan and " " in wchan):
        wchan = None
    frames = []
    for line in sec.get("stack", "").splitlines():
        m = _FRAME_RE.match(line.strip())
        if m:
            frames.append({"function": m.group(1), "module": m.group(2)})
    stack_text = sec.get("stack", "").strip()
    py = sec.get("py-spy", "").strip()
    first = py.splitlines()[0].lower() if py else ""
    py_missing = not py or any(w in first for w in ("not found", "no such file", "failed to run", "not installed"))
    threads = [ln.strip() for ln in py.splitlines() if ln.startswith("Thread ")] if not py_missing else []
    return {"wchan": wchan, "frames": frames,
            "stack_error": None if frames or not stack_text else (permission_problem(stack_text)
                                                                 or clip(stack_text.splitlines()[0])),
            "py_spy": None if py_missing else py, "py_threads": threads, "gone": gone}
