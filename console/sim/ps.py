"""The simulated procps ``ps``: -e/-o forms, -ef, aux, -p, -L, in procps's column layout."""
from __future__ import annotations

import time

from console.sim import procfs
from console.sim.host import SimHost
from console.sim.state import ALIVE, SimProc

# name -> (header, width, right-aligned)
_COLS = {
    "pid": ("PID", 7, True), "ppid": ("PPID", 7, True), "tid": ("TID", 7, True), "lwp": ("LWP", 7, True),
    "spid": ("SPID", 7, True), "pgid": ("PGID", 7, True), "pgrp": ("PGRP", 7, True), "sid": ("SID", 7, True),
    "user": ("USER", 8, False), "uname": ("USER", 8, False), "euser": ("EUSER", 8, False),
    "uid": ("UID", 5, True), "stat": ("STAT", 4, False), "s": ("S", 1, False), "state": ("S", 1, False),
    "comm": ("COMMAND", 15, False), "ucomm": ("COMMAND", 15, False), "ucmd": ("CMD", 15, False),
    "args": ("COMMAND", 0, False), "cmd": ("CMD", 0, False), "command": ("COMMAND", 0, False),
    "wchan": ("WCHAN", 6, False), "etime": ("ELAPSED", 11, True), "etimes": ("ELAPSED", 7, True),
    "nlwp": ("NLWP", 4, True), "thcount": ("THCNT", 5, True), "pcpu": ("%CPU", 4, True),
    "%cpu": ("%CPU", 4, True), "pmem": ("%MEM", 4, True), "%mem": ("%MEM", 4, True),
    "rss": ("RSS", 5, True), "rssize": ("RSS", 5, True), "vsz": ("VSZ", 6, True),
    "time": ("TIME", 8, True), "cputime": ("TIME", 8, True), "tty": ("TT", 8, False),
    "tt": ("TT", 8, False), "psr": ("PSR", 3, True), "lstart": ("STARTED", 24, False),
    "start": ("STARTED", 8, True), "stime": ("STIME", 5, False),
}
MEM_TOTAL_KB = 2_113_929_216


def _etime(seconds: float) -> str:
    s = int(max(0, seconds))
    d, s = divmod(s, 86400)
    h, s = divmod(s, 3600)
    m, s = divmod(s, 60)
    if d:
        return f"{d}-{h:02d}:{m:02d}:{s:02d}"
    if h:
        return f"{h:02d}:{m:02d}:{s:02d}"
    return f"{m:02d}:{s:02d}"


def _cputime(ticks: int) -> str:
    s = ticks // 100
    d, s = divmod(s, 86400)
    h, s = divmod(s, 3600)
    m, s = divmod(s, 60)
    return (f"{d}-" if d else "") + f"{h:02d}:{m:02d}:{s:02d}"


def escaped(text: str) -> str:
    """What procps prints for a name or command line: a newline as a space, any other control
    character as "?" -- so one process is always one line."""
    if text.isprintable():
        return text
    return "".join(" " if ch == "\n" else "?" if ch < " " or ch == "\x7f" else ch for ch in text)


def stat_flags(node: SimHost, p: SimProc, state: str) -> str:
    out = state
    if p.pid == p.sid and not p.kthread:
        out += "s"
    if node.num_threads(p) > 1:
        out += "l"
    if p.tty != "?" and p.pgrp == p.pid and p.phase == ALIVE:
        out += "+"
    return out


def value(node: SimHost, p: SimProc, col: str, thread=None) -> str:
    if thread is None:
        ths = node.threads(p)
        thread = ths[0] if ths else (p.pid, p.comm, "X", "0")
    tid, tname, tstate, twchan = thread
    age = node.now - p.start
    ticks = procfs.cpu_ticks(node, p)
    if col in ("pid",):
        return str(p.pid)
    if col in ("tid", "lwp", "spid"):
        return str(tid)
    if col == "ppid":
        return str(p.ppid)
    if col in ("pgid", "pgrp"):
        return str(p.pgrp)
    if col == "sid":
        return str(p.sid)
    if col in ("user", "uname", "euser"):
        return p.user
    if col == "uid":
        return str(p.uid)
    if col == "stat":
        return stat_flags(node, p, tstate)
    if col in ("s", "state"):
        return tstate
    if col in ("comm", "ucomm", "ucmd"):
        return escaped(f"{tname} <defunct>" if tstate == "Z" else tname)
    if col in ("args", "cmd", "command"):
        if tstate != "Z" and p.phase != ALIVE:
            return escaped(f"[{tname}]")
        return escaped(procfs.ps_args(p))
    if col == "wchan":
        return "-" if tstate in ("R", "Z") or twchan in ("", "0") else twchan
    if col == "etime":
        return _etime(age)
    if col == "etimes":
        return str(int(age))
    if col in ("nlwp", "thcount"):
        return str(node.num_threads(p))
    if col in ("pcpu", "%cpu"):
        return f"{(ticks / 100) / max(1.0, age) * 100:.1f}"
    if col in ("pmem", "%mem"):
        return f"{(p.rss_kb if p.phase == ALIVE else 0) / MEM_TOTAL_KB * 100:.1f}"
    if col in ("rss", "rssize"):
        return str(p.rss_kb if p.phase == ALIVE else 0)
    if col == "vsz":
        return str(p.vsz_kb if p.phase == ALIVE else 0)
    if col in ("time", "cputime"):
        return _cputime(ticks)
    if col in ("tty", "tt"):
        return p.tty
    if col == "psr":
        return str(p.pid % node.ncpu)
    if col == "lstart":
        return time.strftime("%a %b %e %H:%M:%S %Y", time.gmtime(p.start))
    if col in ("start", "stime"):
        if node.now - p.start < 86400:
            return time.strftime("%H:%M", time.gmtime(p.start))
        return time.strftime("%b%d", time.gmtime(p.start))
    return "-"


def _fmt_row(cells: list[tuple[str, int, bool]]) -> str:
    parts = []
    for i, (text, width, right) in enumerate(cells):
        last = i == len(cells) - 1
        if last and not right:
            parts.append(text)
        elif right:
            parts.append(text.rjust(width))
        else:
            parts.append(text.ljust(width))
    return " ".join(parts).rstrip()


def parse_format(spec: str) -> list[tuple[str, str, int, bool]]:
    """'pid=,user:32=,args=' -> [(col, header, width, right)]."""
    out = []
    items = [s for s in spec.replace(" ", ",").split(",") if s]
    for i, item in enumerate(items):
        name, eq, header = item.partition("=")
        if eq and i != len(items) - 1 and not header:
            pass
        name, _, width = name.partition(":")
        key = name.lower()
        if key not in _COLS:
            raise ValueError(name)
        h, w, right = _COLS[key]
        if width.isdecimal():
            w = int(width)
        out.append((key, header if eq else h, w, right))
    return out


def run(node: SimHost, argv: list[str], transient: list[SimProc]) -> tuple[str, str, int]:
    everyone, threads, full, bsd_u = False, False, False, False
    cols: list[tuple[str, str, int, bool]] = []
    pids: set[int] | None = None
    ppids: set[int] | None = None
    users: set[str] | None = None
    comms: set[str] | None = None
    headers = True
    it = iter(argv)
    try:
        for a in it:
            if a in ("-e", "-A"):
                everyone = True
            elif a == "-f":
                full = True
            elif a in ("-L", "-T"):
                threads = True
            elif a in ("-o", "-O", "--format"):
                cols += parse_format(next(it))
            elif a.startswith("-o") and len(a) > 2:
                cols += parse_format(a[2:])
            elif a.startswith("--format="):
                cols += parse_format(a.split("=", 1)[1])
            elif a in ("-p", "--pid", "-q"):
                pids = (pids or set()) | {int(x) for x in next(it).split(",") if x}
            elif a.startswith("--pid="):
                pids = (pids or set()) | {int(x) for x in a.split("=", 1)[1].split(",") if x}
            elif a == "--ppid":
                ppids = {int(x) for x in next(it).split(",") if x}
            elif a in ("-u", "-U", "--user"):
                users = set(next(it).split(","))
            elif a == "-C":
                comms = set(next(it).split(","))
            elif a in ("--no-headers", "--no-heading", "h"):
                headers = False
            elif a in ("-ww", "-w", "ww", "w", "--forest", "-H", "--cols", "--width"):
                if a in ("--cols", "--width"):
                    next(it)
            elif a.startswith("--sort"):
                if "=" not in a:
                    next(it)
            elif a.startswith("-") and len(a) > 2 and a[-1] == "o" and all(ch in "eAfLTwH" for ch in a[1:-1]):
                everyone |= "e" in a or "A" in a
                threads |= "L" in a or "T" in a
                cols += parse_format(next(it))
            elif a.startswith("-") and all(ch in "eAfLTwH" for ch in a[1:]):
                everyone |= "e" in a or "A" in a
                full |= "f" in a
                threads |= "L" in a or "T" in a
            elif a.isdecimal():
                pids = (pids or set()) | {int(a)}
            elif not a.startswith("-") and all(ch in "auxwfHLe" for ch in a):
                everyone = everyone or "a" in a or "x" in a
                bsd_u |= "u" in a
                threads |= "L" in a
            else:
                return "", ("error: unsupported option (BSD syntax)\n\nUsage:\n ps [options]\n\n"
                            " Try 'ps --help <simple|list|output|threads|misc|all>'\n"
                            "  or 'ps --help <s|l|o|t|m|a>'\n for additional help text.\n\n"
                            "For more details see ps(1).\n"), 1
    except ValueError as exc:
        return "", f"error: unknown user-defined format specifier \"{exc}\"\n\nUsage:\n ps [options]\n", 1
    except StopIteration:
        return "", "error: list of process IDs must follow -p\n", 1
    procs = node.visible_procs()
    selected = []
    for p in procs + transient:
        if pids is not None and p.pid not in pids:
            continue
        if ppids is not None and p.ppid not in ppids:
            continue
        if users is not None and p.user not in users and str(p.uid) not in users:
            continue
        if comms is not None and p.comm not in comms:
            continue
        if pids is None and ppids is None and users is None and comms is None and not everyone:
            if p.tty == "?" and p not in transient:
                continue
        selected.append(p)
    selected.sort(key=lambda p: p.pid)
    if not cols:
        if bsd_u:
            cols = [("user", "USER", 8, False), ("pid", "PID", 7, True), ("%cpu", "%CPU", 4, True),
                    ("%mem", "%MEM", 4, True), ("vsz", "VSZ", 6, True), ("rss", "RSS", 5, True),
                    ("tty", "TTY", 8, False), ("stat", "STAT", 4, False), ("start", "START", 5, False),
                    ("time", "TIME", 6, True), ("args", "COMMAND", 0, False)]
        elif full:
            cols = [("user", "UID", 8, False), ("pid", "PID", 7, True), ("ppid", "PPID", 7, True)]
            if threads:
                cols += [("lwp", "LWP", 7, True), ("nlwp", "NLWP", 4, True)]
            cols += [("psr", "C", 1, True), ("stime", "STIME", 5, False), ("tty", "TTY", 8, False),
                     ("time", "TIME", 8, True), ("args", "CMD", 0, False)]
        else:
            cols = [("pid", "PID", 7, True)] + ([("lwp", "LWP", 7, True)] if threads else []) + \
                   [("tty", "TTY", 8, False), ("time", "TIME", 8, True), ("comm", "CMD", 0, False)]
    lines = []
    if headers and any(h for _, h, _, _ in cols):
        lines.append(_fmt_row([(h, w, r) for _, h, w, r in cols]))
    for p in selected:
        rows = node.threads(p) if threads else [None]
        for th in rows:
            cells = []
            for col, _h, w, r in cols:
                text = value(node, p, col, th)
                if col in ("user", "uname", "euser") and w and len(text) > w:
                    text = text[: w - 1] + "+"
                cells.append((text, w, r))
            lines.append(_fmt_row(cells))
    return "".join(line + "\n" for line in lines), "", 0 if selected else 1
