"""Simulated process tools: kill, pgrep, pkill, ps, fuser.

Every handler is ``async (shell, argv, stdin) -> (stdout, stderr, rc)``.
"""
from __future__ import annotations

import re

from console.sim import procfs, vfs
from console.sim import ps as ps_mod
from console.sim.signals import SIGNALS, signal_name
from console.sim.state import SimProc
from console.sim.options import scan_options


def _sherr(sh, cmd: str, msg: str) -> str:
    return f"sh: {sh.lineno}: {cmd}: {msg}\n"


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


#: pgrep/pkill options: flags (bundled as -fx too), and options that take the next argument
_MATCH_FLAGS = {"-f": "full", "--full": "full", "-x": "exact", "--exact": "exact",
                "-l": "list", "--list-name": "list", "-a": "all", "--list-full": "all",
                "-c": "count", "--count": "count", "-e": "echo", "--echo": "echo",
                "-n": "newest", "--newest": "newest", "-o": "oldest", "--oldest": "oldest",
                "-i": "icase", "--ignore-case": "icase"}
_MATCH_VALUED = {"-u": "users", "-U": "users", "--euid": "users", "--uid": "users",
                 "-P": "parents", "--parent": "parents", "--signal": "sig"}


def _match_procs(sh, argv, tool: str):
    """Shared option parsing of pgrep/pkill -> (matched procs, options, error)."""
    opts = {"full": False, "exact": False, "sig": "TERM", "list": False, "all": False, "count": False,
            "echo": False, "newest": False, "oldest": False, "icase": False}
    users = parents = None
    pattern = None
    for name, value in scan_options(argv[1:], _MATCH_FLAGS, _MATCH_VALUED):
        if name == "users":
            users = set(value.split(",")) if value is not None else set()
        elif name == "parents":
            parents = {int(x) for x in value.split(",")} if value is not None else set()
        elif name == "sig":
            opts["sig"] = value if value is not None else ""
        elif name is not None:
            opts[name] = True
        elif value.startswith("-") and len(value) > 1 and tool == "pkill" and signal_name(value[1:]):
            opts["sig"] = value[1:]
        elif value.startswith("-") and len(value) > 1 and all(f"-{ch}" in _MATCH_FLAGS for ch in value[1:]):
            for ch in value[1:]:
                opts[_MATCH_FLAGS[f"-{ch}"]] = True
        elif value.startswith("-") and len(value) > 1:
            return None, opts, f"{tool}: invalid option -- '{value[1:2]}'\n"
        else:
            pattern = value
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


def transient_procs(sh, comm: str, args: str) -> list[SimProc]:
    """The processes a running command line shows in ps: its parents in the line and itself."""
    node = sh.node
    out = []
    parent = node.shell_pid
    for c, a in sh.chain[:-1] + [(comm, args)]:
        pid = node.alloc_pid()
        sp = node.procs.get(node.shell_pid)
        p = SimProc(pid=pid, ppid=parent, comm=c, args=a, user=sp.user if sp else "root",
                    uid=sp.uid if sp else 0, start=node.now, state="R" if c == comm else "S",
                    wchan="do_wait", pid_ns=node.pid_ns, pgrp=sp.pgrp if sp else pid,
                    sid=sp.sid if sp else pid)
        out.append(p)
        parent = pid
    return out
