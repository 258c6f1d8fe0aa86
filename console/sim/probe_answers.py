"""What the probe's loop sections (dstate, fds, pidns) and driver sections (gpu, apps, list; see
probe.py) print on a simulated node. The shell answers those lines directly instead of
interpreting ``for``/``find``/``if``, in the bytes the real tools print (NUL terminators
included)."""
from __future__ import annotations

import fnmatch
import re
import shlex
from typing import Callable

from console import probe
from console.sim import vfs
from console.sim.node import SimNode
from console.sim.procfs import stat_line

_LNAME = re.compile(r" -lname ('(?:[^']|'\\'')*'|\S+) ")


def device_glob(cmd: str) -> str | None:
    """The device glob a probe command was built for (its ``-lname`` argument, else the
    default glob); None when that argument's quoting cannot be read."""
    g = _LNAME.search(cmd)
    if not g:
        return probe.DEFAULT_DEVICE_GLOB
    try:
        return shlex.split(g.group(1))[0]
    except ValueError:
        return None


def dstate(node: SimNode, _glob: str) -> str:
    """What the DSTATE loop prints: threads in D, in the glob's (string) order of their paths,
    each record NUL-terminated (printf '%s %s %s\\0')."""
    records = []
    for p in sorted(node.visible_procs(), key=lambda q: str(q.pid)):
        for tid, _name, state, wchan in sorted(node.threads(p), key=lambda t: str(t[0])):
            if state == "D":
                records.append(f"/proc/{p.pid}/task/{tid} {wchan or '-'} {stat_line(node, p, tid)}\0")
    return "".join(records)


def _fd_lines(node: SimNode, glob: str) -> list[tuple[int, str]]:
    out = []
    for path in vfs.glob(node, "/proc/[0-9]*/fd"):
        p = node.proc(int(path.split("/")[2]))
        if p is None:
            continue
        for _n, target in vfs.fd_table(p):
            if fnmatch.fnmatch(target, glob):
                out.append((p.pid, target))
    return out


def fds(node: SimNode, glob: str) -> str:
    """find -printf '%h %l\\0': one NUL-terminated record per matching handle."""
    return "".join(f"/proc/{pid}/fd {target}\0" for pid, target in _fd_lines(node, glob))


def pidns(node: SimNode, glob: str) -> str:
    pids = sorted({str(pid) for pid, _ in _fd_lines(node, glob)})
    lines = []
    for pid in pids:
        ns = vfs.readlink(node, f"/proc/{pid}/ns/pid") or ""
        lines.append(f"{pid} {ns}\n")
    return "".join(lines)


def cgroup_extra(line: str) -> list[int] | None:
    """The extra PIDs named in a probe line's cgroup section (probe.cgroup_command), or None."""
    head = line.find(probe.CGROUP_HEAD)
    tail = line.find(probe.CGROUP_TAIL, head)
    if head < 0 or tail < 0:
        return None
    return probe.cgroup_pids(line[head:tail + len(probe.CGROUP_TAIL)])


def cgroup_answer(extra: list[int] | None) -> Callable[[SimNode, str], str]:
    """What the cgroup loop prints: "PID CONTENT\\0" for each device holder (the pidns section's
    PIDs) and each extra PID, in numeric order; an unreadable file gives an empty content."""
    def answer(node: SimNode, glob: str) -> str:
        pids = sorted({pid for pid, _ in _fd_lines(node, glob)} | set(extra or ()))
        return "".join(f"{pid} {(vfs.read_file(node, f'/proc/{pid}/cgroup') or '').rstrip(chr(10))}\0"
                       for pid in pids)
    return answer


#: probe section name -> what its loop prints
ANSWERS: dict[str, Callable[[SimNode, str], str]] = {"dstate": dstate, "fds": fds, "pidns": pidns}


def loop_command(cmd: str) -> tuple[Callable[[SimNode, str], str], str] | None:
    """(answer, glob) when ``cmd`` is exactly one of the probe's loop commands, else None."""
    glob = device_glob(cmd)
    if glob is None:
        return None
    if cmd == probe.DSTATE:
        return dstate, glob
    if cmd == probe.fds_command(glob):
        return fds, glob
    if cmd == probe.pidns_command(glob):
        return pidns, glob
    return None
