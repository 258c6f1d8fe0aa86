"""The simulated node's files: /proc (what the probe and an operator read) and /dev/nvidia*."""
from __future__ import annotations

import fnmatch

from console.sim import procfs
from console.sim.host import SimHost
from console.sim.state import ALIVE, SimProc

_PID_FILES = ["cgroup", "cmdline", "comm", "exe", "fd", "ns", "stack", "stat", "status", "task", "wchan"]
_TASK_FILES = ["comm", "stack", "stat", "status", "wchan"]


def _proc_and_tid(node: SimHost, parts: list[str]) -> tuple[SimProc | None, int | None, list[str]]:
    """parts after 'proc': PID[/task/TID]/rest -> (proc, tid or None, rest)."""
    if not parts:
        return None, None, []
    head = parts[0]
    pid = node.shell_pid if head in ("self", "thread-self") else (int(head) if head.isdecimal() else None)
    if pid is None:
        return None, None, []
    p = node.proc(pid)
    if p is None:
        return None, None, []
    rest = parts[1:]
    if len(rest) >= 2 and rest[0] == "task" and rest[1].isdecimal():
        tid = int(rest[1])
        if tid not in [t[0] for t in node.threads(p)]:
            return None, None, []
        return p, tid, rest[2:]
    return p, None, rest


def listdir(node: SimHost, path: str) -> list[str] | None:
    path = path.rstrip("/") or "/"
    if path == "/":
        return ["dev", "proc", "sys"]
    if path == "/dev":
        return [d.split("/")[-1] for d in node.device_paths()] + ["null", "zero"]
    if path == "/proc":
        return [str(p.pid) for p in node.visible_procs()] + ["driver", "loadavg", "self", "stat", "sys", "uptime"]
    if path.startswith("/proc/driver"):
        return _driver_dir(node, path)
    parts = path.strip("/").split("/")
    if parts[0] != "proc":
        return None
    p, tid, rest = _proc_and_tid(node, parts[1:])
    if p is None:
        return None
    if tid is not None:
        return list(_TASK_FILES) if not rest else None
    if not rest:
        return list(_PID_FILES)
    if rest == ["task"]:
        return [str(t[0]) for t in node.threads(p)]
    if rest == ["fd"]:
        return [str(n) for n, _ in fd_table(p)]
    if rest == ["ns"]:
        return ["pid"]
    return None


def _driver_dir(node: SimHost, path: str) -> list[str] | None:
    """/proc/driver/nvidia (while the kernel module is loaded) and its gpus directory: one
    directory per GPU the module knows, named by its bus id."""
    if node.driver_state == "not-loaded":
        return [] if path == "/proc/driver" else None
    if path == "/proc/driver":
        return ["nvidia"]
    if path == "/proc/driver/nvidia":
        return ["gpus", "params", "registry", "version"]
    if path == "/proc/driver/nvidia/gpus":
        return sorted(g.pci_dir for g in node.gpus if g.in_kernel_tree)
    return None


def pci_gpus(node: SimHost) -> list[tuple[str, bytes]] | None:
    """(directory, the first four bytes of its PCI config space) per GPU the kernel module lists
    in /proc/driver/nvidia/gpus, in the shell's glob order; None when that directory is absent."""
    names = listdir(node, "/proc/driver/nvidia/gpus")
    if names is None:
        return None
    heads = {g.pci_dir: g.config_head() for g in node.gpus}
    return [(name, heads[name]) for name in sorted(names)]


def fd_table(p: SimProc) -> list[tuple[int, str]]:
    if p.phase != ALIVE or p.kthread:
        return []
    entries = [(0, "/dev/null"), (1, "/dev/null"), (2, "/dev/null")]
    entries += [(3 + i, f) for i, f in enumerate(p.fds)]
    return entries


def readlink(node: SimHost, path: str) -> str | None:
    parts = path.strip("/").split("/")
    if len(parts) < 3 or parts[0] != "proc":
        return None
    p, tid, rest = _proc_and_tid(node, parts[1:])
    if p is None:
        return None
    if rest == ["ns", "pid"]:
        return p.pid_ns
    if len(rest) == 2 and rest[0] == "fd" and rest[1].isdecimal():
        return dict(fd_table(p)).get(int(rest[1]))
    if rest == ["exe"]:
        return procfs.exe_path(p)
    return None


def read_file(node: SimHost, path: str) -> str | None:
    """File contents, or None when the file does not exist."""
    node.settle()
    if path == "/proc/stat":
        return ("cpu  84172993 1204 9033311 2212045872 301823 0 121948 0 0 0\n"
                "intr 4488118001 0 9 0 0 0\nctxt 10918443220\n"
                f"btime {node.btime}\nprocesses {node._next_pid + 1_000_000}\n"
                f"procs_running {1 + sum(1 for p in node.visible_procs() if node.leader_state(p) == 'R')}\n"
                f"procs_blocked {sum(1 for p in node.visible_procs() for t in node.threads(p) if t[2] == 'D')}\n")
    if path in ("/proc/sys/kernel/hostname", "/etc/hostname"):
        return node.name + "\n"
    if path == "/proc/uptime":
        up = node.uptime()
        return f"{up:.2f} {up * node.ncpu * 0.93:.2f}\n"
    if path == "/proc/loadavg":
        return f"9.04 9.01 8.97 3/{len(node.visible_procs())} {node._next_pid}\n"
    if path == "/sys/module/nvidia_drm/parameters/modeset":
        return None if node.drm_modeset is None else ("Y\n" if node.drm_modeset else "N\n")
    if path == "/proc/driver/nvidia/version":
        if node.driver_state == "not-loaded":
            return None
        return (f"NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  {node.driver_version}  Release Build  "
                "(dvs-builder@U22-I3-AF03-09-1)  Thu Sep 18 18:37:29 UTC 2025\n"
                "GCC version:  gcc version 13.3.0 (Ubuntu 13.3.0-6ubuntu2~24.04) \n")
    parts = path.strip("/").split("/")
    if len(parts) < 3 or parts[0] != "proc":
        return None
    p, tid, rest = _proc_and_tid(node, parts[1:])
    if p is None or len(rest) != 1:
        return None
    name = rest[0]
    thread = next((t for t in node.threads(p) if t[0] == (tid or p.pid)), None)
    if thread is None:
        return None
    if name == "stat":
        return procfs.stat_line(node, p, tid) + "\n"
    if name == "status":
        return procfs.status_text(node, p)
    if name == "comm":
        return thread[1] + "\n"
    if name == "wchan":
        return thread[3] if thread[2] != "R" else "0"
    if name == "stack":
        return procfs.stack_text(thread[3], thread[2])
    if name == "cmdline" and tid is None:
        return "" if p.phase != ALIVE else p.args.replace(" ", "\0") + ("\0" if p.args else "")
    if name == "cgroup" and tid is None:
        return cgroup_text(p)
    return None


def cgroup_text(p: SimProc) -> str:
    """/proc/PID/cgroup (cgroup v2 unless the process says otherwise)."""
    if p.cgroup is not None:
        return p.cgroup
    if p.kthread:
        return "0::/\n"
    if p.pid == 1:
        return "0::/init.scope\n"
    if p.unit:
        return f"0::/system.slice/{p.unit}.service\n"
    return f"0::/user.slice/user-{p.uid}.slice/session-1.scope\n"


def exists(node: SimHost, path: str) -> bool:
    parent, _, name = path.rstrip("/").rpartition("/")
    names = listdir(node, parent or "/")
    if names is not None:
        return name in names
    if read_file(node, path) is not None:
        return True
    if listdir(node, path) is not None:
        return True
    return path in node.device_paths() or path in ("/dev/null", "/dev/zero")


def glob(node: SimHost, pattern: str) -> list[str]:
    """Shell pathname expansion over the virtual tree (sorted, like the shell)."""
    if not pattern.startswith("/"):
        return []
    parts = pattern.strip("/").split("/")
    found = ["/"]
    for i, part in enumerate(parts):
        nxt = []
        for base in found:
            if not any(ch in part for ch in "*?["):
                cand = base.rstrip("/") + "/" + part
                if i == len(parts) - 1:
                    if exists(node, cand):
                        nxt.append(cand)
                elif listdir(node, cand) is not None:
                    nxt.append(cand)
                continue
            names = listdir(node, base) or []
            for name in names:
                if name.startswith(".") or not fnmatch.fnmatchcase(name, part):
                    continue
                cand = base.rstrip("/") + "/" + name
                if i == len(parts) - 1 or listdir(node, cand) is not None:
                    nxt.append(cand)
        found = nxt
    return sorted(found)
