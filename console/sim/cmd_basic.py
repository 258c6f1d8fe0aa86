"""Simulated shell builtins and basic tools: true, exit, echo, printf, sleep, timeout, date,
getconf, id, whoami, hostname, uname, nproc, uptime.

Every handler is ``async (shell, argv, stdin) -> (stdout, stderr, rc)``.
"""
from __future__ import annotations

import re
import time

from console.sim.errors import Deadline, ShellExit
from console.sim.signals import signal_name

_FLOAT = re.compile(r"^(\d+(?:\.\d*)?|\.\d+)([smhd]?)$")


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
    fmt = argv[1].replace("\\n", "\n").replace("\\t", "\t").replace("\\0", "\0")
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
    if not sh.knows(args[1]):
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
