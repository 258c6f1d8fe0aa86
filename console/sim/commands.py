"""The commands the simulated node's shell knows, each answering in the real tool's format.

Every handler is ``async (shell, argv, stdin) -> (stdout, stderr, rc)``.
"""
from __future__ import annotations

import re
import time

from . import nvsmi, procfs, vfs
from . import ps as ps_mod
from .node import SIGNALS, signal_name
from .shell import Deadline, Rebooting, ShellExit, transient_procs

_FLOAT = re.compile(r"^(\d+(?:\.\d*)?|\.\d+)([smhd]?)$")


def _sherr(sh, cmd: str, msg: str) -> str:
    return f"sh: {sh.lineno}: {cmd}: {msg}\n"


# ---------------------------------------------------------------- builtins and basics

async def c_true(sh, argv, stdin):
    return "", "", 0


async def c_false(sh, argv, stdin):
    return "", "", 1


async def c_exit(sh, argv, stdin):
    code = int(argv[1]) if len(argv) > 1 and argv[1].isdecimal() else sh.status
    raise ShellExit(code)


async def c_echo(sh, argv, stdin):
    args = argv[1:]
    newline = True
    if args and args[0] == "-n":
        newline, args = False, args[1:]
    text = " ".join(args).replace("\\n", "\n").replace("\\t", "\t")
    return text + ("\n" if newline else ""), "", 0


async def c_printf(sh, argv, stdin):
    if len(argv) < 2:
        return "", "printf: usage: printf format [arguments]\n", 2
    fmt = argv[1].replace("\\n", "\n").replace("\\t", "\t")
    args = list(argv[2:])
    out = []
    while True:
        def sub(m):
            if m.group(0) == "%%":
                return "%"
            v = args.pop(0) if args else ""
            return str(int(v) if m.group(0) == "%d" and v.lstrip("-").isdecimal() else v)
        out.append(re.sub(r"%%|%s|%d", sub, fmt))
        if not args or "%" not in fmt:
            break
    return "".join(out), "", 0


async def c_sleep(sh, argv, stdin):
    total = 0.0
    if len(argv) < 2:
        return "", "sleep: missing operand\nTry 'sleep --help' for more information.\n", 1
    for a in argv[1:]:
        m = _FLOAT.match(a)
        if not m:
            return "", f"sleep: invalid time interval ‘{a}’\nTry 'sleep --help' for more information.\n", 1
        total += float(m.group(1)) * {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}[m.group(2)]
    await sh.sleep(total)
    return "", "", 0


async def c_timeout(sh, argv, stdin):
    args = argv[1:]
    sig = "TERM"
    while args and args[0].startswith("-"):
        a = args.pop(0)
        if a in ("-s", "--signal") and args:
            sig = args.pop(0)
        elif a.startswith("--signal="):
            sig = a.split("=", 1)[1]
        elif a in ("-k", "--kill-after") and args:
            args.pop(0)
        elif a == "--":
            break
    if len(args) < 2:
        return "", "timeout: missing operand\nTry 'timeout --help' for more information.\n", 125
    m = _FLOAT.match(args[0])
    if not m:
        return "", f"timeout: invalid time interval ‘{args[0]}’\n", 125
    limit = float(m.group(1)) * {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}[m.group(2)]
    if args[1] not in COMMANDS:
        return "", f"timeout: failed to run command ‘{args[1]}’: No such file or directory\n", 127
    mine = sh.node.clock.now() + limit
    sh.deadlines.append(mine)
    try:
        return await sh.run_simple(args[1:], stdin)
    except Deadline as exc:
        if exc.deadline == mine and mine <= min(sh.deadlines):
            return "", "", 124 if signal_name(sig) != "KILL" else 137
        raise
    finally:
        sh.deadlines.remove(mine)


async def c_date(sh, argv, stdin):
    now = sh.node.now
    fmt = next((a[1:] for a in argv[1:] if a.startswith("+")), None)
    if fmt is None:
        return time.strftime("%a %b %e %H:%M:%S UTC %Y", time.gmtime(now)) + "\n", "", 0
    frac = f"{int(round((now % 1) * 1e9)):09d}"
    out = time.strftime(fmt.replace("%N", "@@N@@").replace("%s", str(int(now))), time.gmtime(now))
    return out.replace("@@N@@", frac) + "\n", "", 0


async def c_getconf(sh, argv, stdin):
    vals = {"CLK_TCK": "100", "PAGESIZE": "4096", "PAGE_SIZE": "4096", "_NPROCESSORS_ONLN": str(sh.node.ncpu)}
    if len(argv) == 2 and argv[1] in vals:
        return vals[argv[1]] + "\n", "", 0
    return "", f"getconf: Unrecognized variable '{argv[1] if len(argv) > 1 else ''}'\n", 1


def _user(sh):
    p = sh.node.procs.get(sh.node.shell_pid)
    return (p.user, p.uid) if p else ("root", 0)


async def c_id(sh, argv, stdin):
    user, uid = _user(sh)
    if "-u" in argv:
        return f"{uid}\n", "", 0
    if "-un" in argv or ("-u" in argv and "-n" in argv):
        return f"{user}\n", "", 0
    return f"uid={uid}({user}) gid={uid}({user}) groups={uid}({user})\n", "", 0


async def c_whoami(sh, argv, stdin):
    return _user(sh)[0] + "\n", "", 0


async def c_hostname(sh, argv, stdin):
    return sh.node.name + "\n", "", 0


async def c_uname(sh, argv, stdin):
    if "-r" in argv:
        return "6.8.0-87-generic\n", "", 0
    if "-a" in argv:
        return (f"Linux {sh.node.name} 6.8.0-87-generic #88-Ubuntu SMP PREEMPT_DYNAMIC Sat Oct 11 09:28:41 UTC 2025 "
                "x86_64 x86_64 x86_64 GNU/Linux\n"), "", 0
    return "Linux\n", "", 0


async def c_nproc(sh, argv, stdin):
    return f"{sh.node.ncpu}\n", "", 0


async def c_uptime(sh, argv, stdin):
    node = sh.node
    up = int(node.uptime())
    days, rest = divmod(up, 86400)
    h, m = divmod(rest // 60, 60)
    users = sum(1 for p in node.visible_procs() if p.tty.startswith("pts/") and p.comm == "bash")
    return (time.strftime(" %H:%M:%S", time.gmtime(node.now))
            + f" up {days} days, {h:2d}:{m:02d},  {users} user{'s' if users != 1 else ''},  "
              "load average: 9.04, 9.01, 8.97\n"), "", 0


# ---------------------------------------------------------------- files and text

async def c_cat(sh, argv, stdin):
    files = [a for a in argv[1:] if not a.startswith("-") or a == "-"]
    if not files:
        return stdin, "", 0
    out, err, rc = [], [], 0
    for f in files:
        if f == "-":
            out.append(stdin)
            continue
        text = vfs.read_file(sh.node, f)
        if text is None:
            if vfs.listdir(sh.node, f) is not None:
                err.append(f"cat: {f}: Is a directory\n")
            else:
                err.append(f"cat: {f}: No such file or directory\n")
            rc = 1
            continue
        out.append(text)
    return "".join(out), "".join(err), rc


def _lines_arg(argv, default=10):
    n, files = default, []
    it = iter(argv[1:])
    for a in it:
        if a == "-n":
            n = int(next(it, str(default)).lstrip("+-") or default)
        elif a.startswith("-n"):
            n = int(a[2:].lstrip("+-") or default)
        elif a.startswith("-") and a[1:].isdecimal():
            n = int(a[1:])
        elif a in ("-q", "-v"):
            continue
        else:
            files.append(a)
    return n, files


async def _head_tail(sh, argv, stdin, tail: bool):
    name = "tail" if tail else "head"
    try:
        n, files = _lines_arg(argv)
    except ValueError:
        return "", f"{name}: invalid number of lines\n", 1
    if not files:
        texts, err, rc = [stdin], "", 0
    else:
        texts, err, rc = [], "", 0
        for f in files:
            t = vfs.read_file(sh.node, f)
            if t is None:
                err += f"{name}: cannot open '{f}' for reading: No such file or directory\n"
                rc = 1
            else:
                texts.append(t)
    out = []
    for t in texts:
        lines = t.splitlines(keepends=True)
        out += (lines[-n:] if n else []) if tail else lines[:n]
    return "".join(out), err, rc


async def c_head(sh, argv, stdin):
    return await _head_tail(sh, argv, stdin, False)


async def c_tail(sh, argv, stdin):
    return await _head_tail(sh, argv, stdin, True)


def _bre_to_re(pattern: str) -> str:
    """A basic regular expression (grep, sed) as a Python one."""
    out, i = [], 0
    while i < len(pattern):
        c = pattern[i]
        if c == "\\" and i + 1 < len(pattern):
            nxt = pattern[i + 1]
            out.append(nxt if nxt in "(){}|+?" else "\\" + nxt)
            i += 2
            continue
        out.append("\\" + c if c in "(){}|+?" else c)
        i += 1
    return "".join(out)


async def c_grep(sh, argv, stdin):
    ext = fixed = invert = icase = count = listing = quiet = silent = word = False
    patterns, files = [], []
    it = iter(argv[1:])
    for a in it:
        if a == "-e":
            patterns.append(next(it, ""))
        elif a.startswith("-") and len(a) > 1 and not patterns and a != "--":
            for ch in a[1:]:
                ext |= ch == "E"
                fixed |= ch == "F"
                invert |= ch == "v"
                icase |= ch == "i"
                count |= ch == "c"
                listing |= ch == "l"
                quiet |= ch == "q"
                silent |= ch == "s"
                word |= ch == "w"
        elif not patterns:
            patterns.append(a)
        else:
            files.append(a)
    if not patterns:
        return "", "Usage: grep [OPTION]... PATTERNS [FILE]...\nTry 'grep --help' for more information.\n", 2
    rx = []
    for p in patterns:
        src = re.escape(p) if fixed else (p if ext else _bre_to_re(p))
        if word:
            src = rf"\b(?:{src})\b"
        try:
            rx.append(re.compile(src, re.IGNORECASE if icase else 0))
        except re.error:
            return "", "grep: Unmatched ( or \\(\n", 2
    sources = [(None, stdin)] if not files else []
    err, missing = [], False
    for f in files:
        t = vfs.read_file(sh.node, f)
        if t is None:
            missing = True
            if not silent:
                err.append(f"grep: {f}: No such file or directory\n")
            continue
        sources.append((f, t))
    out, found = [], False
    for name, text in sources:
        hits = [ln for ln in text.splitlines() if any(r.search(ln) for r in rx) != invert]
        found |= bool(hits)
        if listing:
            if hits:
                out.append(f"{name or '(standard input)'}\n")
        elif count:
            out.append((f"{name}:" if len(files) > 1 else "") + f"{len(hits)}\n")
        else:
            prefix = f"{name}:" if len(files) > 1 else ""
            out += [prefix + h + "\n" for h in hits]
    if quiet:
        out = []
    rc = 0 if found else (2 if missing else 1)
    return "".join(out), "".join(err), rc


async def c_wc(sh, argv, stdin):
    lines = stdin.count("\n")
    if "-l" in argv:
        return f"{lines}\n", "", 0
    return f"{lines:7d} {len(stdin.split()):7d} {len(stdin.encode()):7d}\n", "", 0


async def c_sort(sh, argv, stdin):
    lines = stdin.splitlines()
    flags = "".join(a[1:] for a in argv[1:] if a.startswith("-"))
    if "n" in flags:
        def key(s):
            m = re.match(r"\s*(-?\d+(?:\.\d+)?)", s)
            return (float(m.group(1)) if m else 0.0, s)
        lines.sort(key=key)
    else:
        lines.sort()
    if "r" in flags:
        lines.reverse()
    if "u" in flags:
        lines = list(dict.fromkeys(lines))
    return "".join(ln + "\n" for ln in lines), "", 0


async def c_uniq(sh, argv, stdin):
    out, prev, n = [], None, 0
    for ln in stdin.splitlines() + [None]:
        if ln == prev:
            n += 1
            continue
        if prev is not None:
            out.append((f"{n:7d} " if "-c" in argv else "") + prev + "\n")
        prev, n = ln, 1
    return "".join(out), "", 0


def _fields_spec(spec: str) -> list[tuple[int, int]]:
    out = []
    for part in spec.split(","):
        a, dash, b = part.partition("-")
        lo = int(a) if a else 1
        hi = (int(b) if b else 10 ** 9) if dash else lo
        out.append((lo, hi))
    return out


async def c_cut(sh, argv, stdin):
    delim, spec, files = "\t", None, []
    it = iter(argv[1:])
    for a in it:
        if a == "-d":
            delim = next(it, "\t")
        elif a.startswith("-d"):
            delim = a[2:]
        elif a == "-f":
            spec = next(it, "")
        elif a.startswith("-f"):
            spec = a[2:]
        else:
            files.append(a)
    if spec is None:
        return "", "cut: you must specify a list of bytes, characters, or fields\n", 1
    ranges = _fields_spec(spec)
    text = stdin if not files else "".join(vfs.read_file(sh.node, f) or "" for f in files)
    out = []
    for ln in text.splitlines():
        if delim not in ln:
            out.append(ln)
            continue
        parts = ln.split(delim)
        keep = [p for i, p in enumerate(parts, 1) if any(lo <= i <= hi for lo, hi in ranges)]
        out.append(delim.join(keep))
    return "".join(ln + "\n" for ln in out), "", 0


async def c_sed(sh, argv, stdin):
    exprs, files = [], []
    it = iter(argv[1:])
    for a in it:
        if a == "-e":
            exprs.append(next(it, ""))
        elif a in ("-E", "-r"):
            continue
        elif not exprs:
            exprs.append(a)
        else:
            files.append(a)
    text = stdin
    err, rc = "", 0
    if files:
        chunks = []
        for f in files:
            t = vfs.read_file(sh.node, f)
            if t is None:
                err += f"sed: can't read {f}: No such file or directory\n"
                rc = 2
            else:
                chunks.append(t)
        text = "".join(chunks)
    for e in exprs:
        m = re.match(r"^s(.)(.*?)\1(.*?)\1(g?)$", e)
        if not m:
            return "", f"sed: -e expression #1, char {len(e)}: unknown command: `{e[:1]}'\n", 1
        rx = re.compile(_bre_to_re(m.group(2)))
        repl = m.group(3).replace("\\", "\\\\").replace("&", r"\g<0>")
        count = 0 if m.group(4) else 1
        text = "".join(rx.sub(repl, ln, count=count) + "\n" for ln in text.splitlines())
    return text, err, rc


async def c_ls(sh, argv, stdin):
    long = any(a.startswith("-") and "l" in a for a in argv[1:])
    paths = [a for a in argv[1:] if not a.startswith("-")] or ["."]
    out, err, rc = [], [], 0
    for path in paths:
        parts = path.strip("/").split("/")
        p = sh.node.proc(int(parts[1])) if len(parts) >= 2 and parts[0] == "proc" and parts[1].isdecimal() else None
        names = vfs.listdir(sh.node, path)
        if names is None:
            if vfs.exists(sh.node, path):
                out.append(path + "\n")
            else:
                err.append(f"ls: cannot access '{path}': No such file or directory\n")
                rc = 2
            continue
        if len(paths) > 1:
            out.append(f"{path}:\n")
        if long and p is not None and parts[2:] == ["task"]:
            out.append(procfs.ls_task(sh.node, p))
        elif long and p is not None and parts[2:] == ["fd"]:
            out.append(procfs.ls_fd(sh.node, p))
        else:
            key = (lambda s: (0, int(s)) if s.isdecimal() else (1, s)) if path.rstrip("/") != "/proc" else \
                (lambda s: (0, int(s)) if s.isdecimal() else (1, s))
            out.append("".join(n + "\n" for n in sorted(names, key=key)))
    return "".join(out), "".join(err), rc


async def c_readlink(sh, argv, stdin):
    paths = [a for a in argv[1:] if not a.startswith("-")]
    out, rc = [], 0
    for path in paths:
        target = vfs.readlink(sh.node, path)
        if target is None:
            rc = 1
        else:
            out.append(target + "\n")
    return "".join(out), "", rc


# ---------------------------------------------------------------- processes

async def c_kill(sh, argv, stdin):
    args = argv[1:]
    sig = "TERM"
    if not args:
        return "", _sherr(sh, "kill", "Usage: kill [-s sigspec | -signum | -sigspec] [pid | job]... or\n"
                                      "kill -l [exitstatus]").rstrip("\n") + "\n", 2
    if args[0] == "-l":
        return " ".join(SIGNALS) + "\n", "", 0
    if args[0] == "-s":
        if len(args) < 2:
            return "", _sherr(sh, "kill", "option requires an argument -- s"), 2
        sig_text, args = args[1], args[2:]
        name = signal_name(sig_text)
        if name is None:
            return "", _sherr(sh, "kill", f"invalid signal number or name: {sig_text}"), 2
        sig = name
    elif args[0].startswith("-") and len(args[0]) > 1 and args[0] != "--":
        sig_text, args = args[0][1:], args[1:]
        name = signal_name(sig_text)
        if name is None:
            return "", _sherr(sh, "kill", f"invalid signal number or name: {sig_text}"), 2
        sig = name
    if args and args[0] == "--":
        args = args[1:]
    err, rc = [], 0
    for a in args:
        if not a.lstrip("-").isdecimal():
            return "", "".join(err) + _sherr(sh, "kill", f"Illegal number: {a}"), 2
        target = int(a)
        if target < 0:
            members = [p.pid for p in sh.node.visible_procs() if p.pgrp == -target]
            if not members:
                err.append(_sherr(sh, "kill", "No such process"))
                rc = 1
            for pid in members:
                sh.node.signal(pid, sig)
            continue
        if sh.node.signal(target, sig) == "ESRCH":
            err.append(_sherr(sh, "kill", "No such process"))
            rc = 1
    return "", "".join(err), rc


def _match_procs(sh, argv, tool: str):
    """Shared option parsing of pgrep/pkill -> (matched procs, options, error)."""
    opts = {"full": False, "exact": False, "sig": "TERM", "list": False, "all": False, "count": False,
            "echo": False, "newest": False, "oldest": False, "icase": False}
    users = parents = None
    pattern = None
    args = argv[1:]
    i = 0
    while i < len(args):
        a = args[i]
        if a in ("-f", "--full"):
            opts["full"] = True
        elif a in ("-x", "--exact"):
            opts["exact"] = True
        elif a in ("-l", "--list-name"):
            opts["list"] = True
        elif a in ("-a", "--list-full"):
            opts["all"] = True
        elif a in ("-c", "--count"):
            opts["count"] = True
        elif a in ("-e", "--echo"):
            opts["echo"] = True
        elif a in ("-n", "--newest"):
            opts["newest"] = True
        elif a in ("-o", "--oldest"):
            opts["oldest"] = True
        elif a in ("-i", "--ignore-case"):
            opts["icase"] = True
        elif a in ("-u", "-U", "--euid", "--uid"):
            i += 1
            users = set(args[i].split(",")) if i < len(args) else set()
        elif a in ("-P", "--parent"):
            i += 1
            parents = {int(x) for x in args[i].split(",")} if i < len(args) else set()
        elif a in ("--signal",):
            i += 1
            opts["sig"] = args[i] if i < len(args) else ""
        elif a.startswith("-") and len(a) > 1 and tool == "pkill" and signal_name(a[1:]):
            opts["sig"] = a[1:]
        elif a.startswith("-") and len(a) > 1 and all(ch in "fxlacenoi" for ch in a[1:]):
            for ch in a[1:]:
                key = {"f": "full", "x": "exact", "l": "list", "a": "all", "c": "count", "e": "echo",
                       "n": "newest", "o": "oldest", "i": "icase"}[ch]
                opts[key] = True
        elif a.startswith("-") and len(a) > 1:
            return None, opts, f"{tool}: invalid option -- '{a[1:2]}'\n"
        else:
            pattern = a
        i += 1
    if pattern is None and users is None and parents is None:
        return None, opts, (f"{tool}: no matching criteria specified\n"
                            f"Try `{tool} --help' for more information.\n")
    rx = None
    if pattern is not None:
        try:
            rx = re.compile(pattern, re.IGNORECASE if opts["icase"] else 0)
        except re.error:
            return None, opts, f"{tool}: cannot compile regular expression '{pattern}'\n"
    hits = []
    for p in sh.node.visible_procs():
        if p.pid == sh.node.shell_pid:
            continue
        subject = (p.args if p.alive and p.args else p.comm) if opts["full"] else p.comm
        if rx is not None:
            ok = rx.fullmatch(subject) if opts["exact"] else rx.search(subject)
            if not ok:
                continue
        if users is not None and p.user not in users and str(p.uid) not in users:
            continue
        if parents is not None and p.ppid not in parents:
            continue
        hits.append(p)
    if opts["newest"] and hits:
        hits = [max(hits, key=lambda p: (p.start, p.pid))]
    if opts["oldest"] and hits:
        hits = [min(hits, key=lambda p: (p.start, p.pid))]
    return hits, opts, None


async def c_pgrep(sh, argv, stdin):
    hits, opts, err = _match_procs(sh, argv, "pgrep")
    if err:
        return "", err, 2
    if opts["count"]:
        return f"{len(hits)}\n", "", 0 if hits else 1
    lines = []
    for p in hits:
        if opts["all"]:
            lines.append(f"{p.pid} {p.args if p.alive and p.args else p.comm}")
        elif opts["list"]:
            lines.append(f"{p.pid} {p.comm}")
        else:
            lines.append(str(p.pid))
    return "".join(ln + "\n" for ln in lines), "", 0 if hits else 1


async def c_pkill(sh, argv, stdin):
    hits, opts, err = _match_procs(sh, argv, "pkill")
    if err:
        return "", err, 2
    sig = signal_name(opts["sig"]) or "TERM"
    out = []
    for p in hits:
        sh.node.signal(p.pid, sig)
        if opts["echo"]:
            out.append(f"{p.comm} killed (pid {p.pid})\n")
    if opts["count"]:
        out.append(f"{len(hits)}\n")
    return "".join(out), "", 0 if hits else 1


async def c_ps(sh, argv, stdin):
    transient = transient_procs(sh, "ps", " ".join(argv))
    return ps_mod.run(sh.node, argv[1:], transient)


async def c_fuser(sh, argv, stdin):
    verbose = kill = silent = False
    sig = "KILL"
    files = []
    for a in argv[1:]:
        if a.startswith("-") and len(a) > 1 and all(ch in "vkmsiau" for ch in a[1:]):
            verbose |= "v" in a
            kill |= "k" in a
            silent |= "s" in a
        elif a.startswith("-") and len(a) > 1 and signal_name(a[1:]):
            sig = signal_name(a[1:]) or sig
        elif a.startswith("-"):
            return "", f"fuser: Invalid option {a}\n", 1
        else:
            files.append(a)
    if not files:
        return "", "No process specification given\n", 1
    err_missing = []
    present = []
    for f in files:
        if vfs.exists(sh.node, f):
            present.append(f)
        else:
            err_missing.append(f"Specified filename {f} does not exist.\n")
    out, err, holders = procfs.fuser_report(sh.node, present, verbose)
    if kill:
        for p in holders:
            sh.node.signal(p.pid, sig)
    if silent:
        out = err = ""
    return out, "".join(err_missing) + err, 0 if holders else 1


# ---------------------------------------------------------------- GPU, system

async def c_nvidia_smi(sh, argv, stdin):
    if sh.node.nvsmi_hang:
        await sh.sleep(10 ** 9)
    return nvsmi.run(sh.node, argv[1:])


async def c_systemctl(sh, argv, stdin):
    args = [a for a in argv[1:] if not a.startswith("-")]
    if not args:
        return "", "Too few arguments.\n", 1
    action, units = args[0], args[1:]
    if action == "reboot":
        return await c_reboot(sh, ["reboot"], stdin)
    if action == "status":
        out, rc = [], 0
        for u in units:
            name = u.removesuffix(".service")
            running = [p for p in sh.node.visible_procs() if p.unit == name and p.alive]
            if name not in sh.node.units and not running:
                return "", f"Unit {name}.service could not be found.\n", 4
            if running:
                p = running[0]
                since = time.strftime("%a %Y-%m-%d %H:%M:%S UTC", time.gmtime(p.start))
                out.append(f"● {name}.service\n     Loaded: loaded (/usr/lib/systemd/system/{name}.service; enabled; "
                           f"preset: enabled)\n     Active: active (running) since {since}\n"
                           f"   Main PID: {p.pid} ({p.comm})\n")
            else:
                out.append(f"○ {name}.service\n     Loaded: loaded (/usr/lib/systemd/system/{name}.service; "
                           "enabled; preset: enabled)\n     Active: inactive (dead)\n")
                rc = 3
        return "".join(out), "", rc
    if not units:
        return "", "Too few arguments.\n", 1
    out, err, rc = [], [], 0
    for u in units:
        o, e, r = sh.node.systemctl(action, u)
        out.append(o)
        err.append(e)
        rc = rc or r
    return "".join(out), "".join(err), rc


async def c_dmesg(sh, argv, stdin):
    if not sh.node.dmesg_allowed:
        return "", "dmesg: read kernel buffer failed: Operation not permitted\n", 1
    human = any(a in ("-T", "--ctime") for a in argv[1:])
    return "".join(ln + "\n" for ln in procfs.dmesg_lines(sh.node, human)), "", 0


async def c_journalctl(sh, argv, stdin):
    if not sh.node.has_systemd:
        return "", "No journal files were found.\n", 1
    lines = procfs.journal_lines(sh.node)
    if "-n" in argv:
        i = argv.index("-n")
        if i + 1 < len(argv) and argv[i + 1].isdecimal():
            lines = lines[-int(argv[i + 1]):]
    if not lines:
        return "-- No entries --\n", "", 0
    return "".join(ln + "\n" for ln in lines), "", 0


async def c_ss(sh, argv, stdin):
    flags = "".join(a[1:] for a in argv[1:] if a.startswith("-") and not a.startswith("--"))
    if "l" not in flags:
        return "Netid State Recv-Q Send-Q Local Address:Port Peer Address:Port Process\n", "", 0
    return procfs.ss_listen(sh.node, "p" in flags), "", 0


async def c_reboot(sh, argv, stdin):
    if argv[0] == "shutdown" and "-r" not in argv:
        return "", "shutdown: only reboots are simulated (use -r)\n", 1
    if not sh.node.has_systemd:
        return "", ("System has not been booted with systemd as init system (PID 1). Can't operate.\n"
                    "Failed to connect to bus: Host is down\n"), 1
    sh.node.reboot()
    raise Rebooting()


COMMANDS = {
    "true": c_true, ":": c_true, "false": c_false, "exit": c_exit, "echo": c_echo, "printf": c_printf,
    "sleep": c_sleep, "timeout": c_timeout, "date": c_date, "getconf": c_getconf, "id": c_id,
    "whoami": c_whoami, "hostname": c_hostname, "uname": c_uname, "nproc": c_nproc, "uptime": c_uptime,
    "cat": c_cat, "head": c_head, "tail": c_tail, "grep": c_grep, "wc": c_wc, "sort": c_sort,
    "uniq": c_uniq, "cut": c_cut, "sed": c_sed, "ls": c_ls, "readlink": c_readlink,
    "kill": c_kill, "pgrep": c_pgrep, "pkill": c_pkill, "ps": c_ps, "fuser": c_fuser,
    "nvidia-smi": c_nvidia_smi, "systemctl": c_systemctl, "dmesg": c_dmesg, "journalctl": c_journalctl,
    "ss": c_ss, "reboot": c_reboot, "shutdown": c_reboot,
}
