"""What the probe's loop sections (dstate, fds, pidns) and driver sections (gpu, apps, list; see
probe.py) print on a simulated node. The shell answers those lines directly instead of
interpreting ``for``/``find``/``if``, in the bytes the real tools print (NUL terminators
included)."""
from __future__ import annotations

import fnmatch
import re
import shlex
import time
from typing import Callable

from console import probe, probe_loop, probe_scope
from console.sim import nvsmi, vfs
from console.sim.host import SimHost
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


def _threads_of(node: SimHost, v: dict[str, str]) -> list:
    pick = v.get(probe_scope.THREADS, "all")
    procs = node.visible_procs()
    if pick == "all":
        return procs
    want = {int(w) for w in pick.split() if w.isdecimal()}
    return [p for p in procs if p.pid in want]


def dstate(node: SimHost, _glob: str, v: dict[str, str] | None = None) -> str:
    """What the DSTATE loop prints: threads in D, in the glob's (string) order of their paths,
    each record NUL-terminated (printf '%s %s %s\\0'); over Scope.threads' processes. The PID of
    each (once per thread) stays in the shell's DSTATE_PIDS for the pend section."""
    records, pids = [], []
    for p in sorted(_threads_of(node, v or {}), key=lambda q: str(q.pid)):
        for tid, _name, state, wchan in sorted(node.threads(p), key=lambda t: str(t[0])):
            if state == "D":
                records.append(f"/proc/{p.pid}/task/{tid} {wchan or '-'} {stat_line(node, p, tid)}\0")
                pids.append(f" {p.pid}")
    if v is not None:
        v[probe_scope.DSTATE_PIDS] = "".join(pids)
    return "".join(records)


def _new(v: dict[str, str]) -> list[int]:
    return [int(w) for w in v.get(probe_scope.NEW, "").split() if w.isdecimal()]


def _listed(v: dict[str, str], *names: str) -> list[int]:
    """The PIDs in the shell variables ``names`` (the scope's lists, the new PIDs), in order."""
    out: list[int] = []
    for name in names:
        out += [int(w) for w in v.get(name, "").split() if w.isdecimal()]
    return out + _new(v)


def _walked(node: SimHost, v: dict[str, str]) -> list:
    """The processes whose fds this probe walks: all (whole), or the GPU's own and the new."""
    if v.get(probe_scope.MODE) == "whole":
        return [p for p in node.visible_procs()]
    seen, out = set(), []
    for pid in _listed(v, probe_scope.FDS):
        p = node.proc(pid)
        if p is not None and pid not in seen:
            seen.add(pid)
            out.append(p)
    return out


def pids(node: SimHost, _glob: str, v: dict[str, str]) -> str:
    """The pids section after its scope line: the last PID, "wrapped", the listing (the glob's
    string order), and the new PIDs kept in the shell's variables."""
    last = node._next_pid - 1
    out = []
    before = v.get(probe_scope.LAST_PID, "")
    if before.isdecimal() and last < int(before):
        v[probe_scope.LISTING] = ""
        out.append("wrapped\n")
    v[probe_scope.LAST_PID] = str(last)
    listing = " ".join(sorted((str(p.pid) for p in node.visible_procs()), key=str))
    out.append(f"last {last}\n")
    old = v.get(probe_scope.LISTING, "")
    unchanged = listing == old
    if unchanged:
        v[probe_scope.NEW] = ""
    else:
        had = set(old.split())
        v[probe_scope.NEW] = "".join(f"{w} " for w in listing.split() if w not in had)
    gen = v.get(probe_scope.GEN, "")
    if unchanged and gen and v.get(probe_scope.ACK, "") == gen:
        out.append("same\n")
    else:
        gen = v[probe_scope.GEN] = str(int(gen or 0) + 1)
        out.append(f"gen {gen}\n{listing}\n")
    v[probe_scope.LISTING] = listing
    return "".join(out)


def stat(node: SimHost, _glob: str, v: dict[str, str]) -> str:
    if v.get(probe_scope.MODE) == "whole":
        procs = sorted(node.visible_procs(), key=lambda p: str(p.pid))
    else:
        procs = [p for pid in _listed(v, probe_scope.WATCHED, probe_scope.ARGS) if (p := node.proc(pid)) is not None]
    return "".join(stat_line(node, p) + "\n" for p in procs)


def args(node: SimHost, _glob: str, v: dict[str, str]) -> str:
    out = []
    for pid in _listed(v, probe_scope.ARGS):
        text = vfs.read_file(node, f"/proc/{pid}/cmdline") or ""
        words = [w for w in text.split("\0") if w][:probe_scope.ARGS_PER_PROCESS]
        out += [f"/proc/{pid}/cmdline:{w[:probe_scope.ARG_MAX_BYTES]}\0" for w in words]
    return "".join(out)


def uids(node: SimHost, _glob: str, v: dict[str, str]) -> str:
    out = []
    for pid in _listed(v, probe_scope.ARGS):
        text = vfs.read_file(node, f"/proc/{pid}/status")
        line = next((ln for ln in (text or "").split("\n") if ln.startswith("Uid:")), None)
        if line is not None:
            out.append(f"/proc/{pid}/status:{line}\n")
    return "".join(out)


def users_answer(wanted: list[int]) -> Callable[[SimHost, str, dict], str]:
    def answer(node: SimHost, _glob: str, _v: dict[str, str]) -> str:
        names = {p.uid: p.user for p in node.visible_procs()}
        pick = wanted or sorted(names)
        return "".join(f"{names[u]}:x:{u}:{u}::/home/{names[u]}:/bin/sh\n" for u in pick if u in names)
    return answer


def _fd_lines(node: SimHost, glob: str, v: dict[str, str] | None = None) -> list[tuple[int, str]]:
    out = []
    procs = node.visible_procs() if v is None else _walked(node, v)
    for p in sorted(procs, key=lambda q: str(q.pid)):
        for _n, target in vfs.fd_table(p):
            if fnmatch.fnmatch(target, glob):
                out.append((p.pid, target))
    return out


def fds(node: SimHost, glob: str, v: dict[str, str] | None = None) -> str:
    """find -printf '%h %l\\0': one NUL-terminated record per matching handle, over the fds
    this probe walks; the holders stay in the shell (pidns, cgroup)."""
    lines = _fd_lines(node, glob, v)
    if v is not None:
        v[probe.HOLDER_DIRS] = " ".join(dict.fromkeys(f"/proc/{pid}/fd" for pid, _ in lines))
    return "".join(f"/proc/{pid}/fd {target}\0" for pid, target in lines)


def _holders(v: dict[str, str] | None, node: SimHost, glob: str) -> list[int]:
    if v is None:
        return list(dict.fromkeys(pid for pid, _ in _fd_lines(node, glob)))
    return [int(d.split("/")[2]) for d in v.get(probe.HOLDER_DIRS, "").split()]


def pidns(node: SimHost, glob: str, v: dict[str, str] | None = None) -> str:
    lines = []
    for pid in sorted({str(p) for p in _holders(v, node, glob)}):
        ns = vfs.readlink(node, f"/proc/{pid}/ns/pid") or ""
        lines.append(f"/proc/{pid}/ns {ns}\n")
    return "".join(lines)


def cgroup_answer(extra: list[int] | None) -> Callable[[SimHost, str, dict], str]:
    """What the cgroup section prints: grep -H's "/proc/PID/cgroup:LINE" for each device holder
    (the pidns section's PIDs) and each extra PID, in numeric order; an unreadable file nothing."""
    def answer(node: SimHost, glob: str, v: dict[str, str] | None = None) -> str:
        pids = sorted(set(_holders(v, node, glob)) | set(extra or ()))
        if v is not None:                # the GPU holders, for the exe and pend sections
            v[probe.GPU_PIDS] = " " + "".join(f"{pid} " for pid in pids)
        return "".join(f"/proc/{pid}/cgroup:{line}\n" for pid in pids
                       for line in (vfs.read_file(node, f'/proc/{pid}/cgroup') or '').split("\n") if line)
    return answer


def _pids_in(v: dict[str, str], *names: str) -> list[int]:
    """The PIDs in the shell variables ``names``, each once, in order (the sections' own loop)."""
    return list(dict.fromkeys(int(w) for name in names for w in v.get(name, "").split() if w.isdecimal()))


def exe(node: SimHost, _glob: str, v: dict[str, str]) -> str:
    """find -printf '%h %l\\0' over /proc/PID/exe of the GPU holders: an empty target where the
    link cannot be read (a zombie), nothing for a PID that is gone."""
    return "".join(f"/proc/{pid} {vfs.readlink(node, f'/proc/{pid}/exe') or ''}\0"
                   for pid in _pids_in(v, probe.GPU_PIDS) if node.proc(pid) is not None)


def pend(node: SimHost, _glob: str, v: dict[str, str]) -> str:
    """grep -H -m 2 of SigPnd and ShdPnd in /proc/PID/status of the GPU holders and the processes
    with a thread in D."""
    out = []
    for pid in _pids_in(v, probe.GPU_PIDS, probe_scope.DSTATE_PIDS):
        text = vfs.read_file(node, f"/proc/{pid}/status") or ""
        out += [f"/proc/{pid}/status:{line}\n" for line in text.split("\n")
                if line.startswith(("SigPnd:", "ShdPnd:"))][:2]
    return "".join(out)


def pci(node: SimHost, _glob: str, _v: dict[str, str]) -> str:
    """The pci section: "gpus" and per GPU directory its bus and the first four config bytes as
    ``od -An -tx1 -N4`` prints them (after echo's space), or "none" without the directory."""
    gpus = vfs.pci_gpus(node)
    if gpus is None:
        return probe.PCI_ABSENT + "\n"
    return probe.PCI_PRESENT + "\n" + "".join(f"{name} {''.join(f' {b:02x}' for b in head)}\n"
                                              for name, head in gpus)


#: probe section name -> what it prints (the shell's variables at hand)
ANSWERS: dict[str, Callable[[SimHost, str, dict], str]] = {
    "pids": pids, "stat": stat, "args": args, "uids": uids, "dstate": dstate, "fds": fds, "pidns": pidns,
    "exe": exe, "pend": pend, "pci": pci}


def recognise(name: str, command: str, glob: str) -> Callable[[SimHost, str, dict], str] | None:
    """The answer for a probe section ``name`` whose command line is exactly ``command``, the
    probe's own for it (a scope, user IDs or cgroup PIDs where the section takes them); None
    for a driver section or anything else."""
    if name == "pids":
        got = probe_scope.scope_of(command)
        if got is None or got[1] != probe_scope.LISTING_COMMAND:
            return None
        scope = got[0]
        def answer(node: SimHost, g: str, v: dict[str, str]) -> str:
            v[probe_scope.WATCHED] = " ".join(map(str, scope.watched))
            v[probe_scope.THREADS] = "all" if scope.threads is None else " ".join(map(str, scope.threads))
            v[probe_scope.ARGS] = " ".join(map(str, scope.args))
            v[probe_scope.FDS] = " ".join(map(str, scope.fds))
            v[probe_scope.ACK] = "" if scope.ack is None else str(scope.ack)
            v[probe_scope.MODE] = "whole" if scope.whole else "light"
            return pids(node, g, v)
        return answer
    if name == "users":
        wanted = probe_scope.users_uids(command)
        return users_answer(wanted) if wanted is not None and command == probe_scope.users_command(wanted) else None
    if name == "cgroup":
        extra = probe.cgroup_pids(command)
        return cgroup_answer(extra) if extra is not None else None
    if name in probe.DRIVER_SECTIONS:
        return None
    if name in probe_loop.SECTIONS:
        want = dict(probe.sections(glob, loop=True)).get(name)
        return LOOP_ANSWERS[name] if want == command else None
    want = dict(probe.sections(glob)).get(name)
    return ANSWERS.get(name) if want == command else None


#: the process sections a command line may be on its own (a check, a test), outside a probe
STANDALONE = ("pids", "stat", "args", "uids", "users", "dstate", "fds", "pidns", "cgroup", "exe", "pend", "pci")


def loop_command(cmd: str) -> tuple[Callable[[SimHost, str, dict], str], str] | None:
    """(answer, glob) when ``cmd`` is exactly one of the probe's process-section commands, or
    the whole-table D-state loop (a check runs it), else None. The answer reads the shell's
    variables as the real command would (a scope set before it, the fds walk's holders)."""
    glob = device_glob(cmd)
    if glob is None:
        return None
    if cmd == probe.DSTATE:
        return (lambda node, g, _v: dstate(node, g, {})), glob
    for name in STANDALONE:
        answer = recognise(name, cmd, glob)
        if answer is not None:
            return answer, glob
    return None


# ---------------------------------------------------------------- loop mode (probe_loop.py)
#: the shell variable holding when the loops were last read (the next read prints the samples
#: taken since, at most LOOP_READ_MAX of them)
_LOOP_READ = "gi_Lr"
LOOP_READ_MAX = 3


def _loop_failure(node: SimHost) -> str | None:
    """What nvidia-smi prints when it cannot start (its loop ends at once), else None."""
    out, _err, rc = nvsmi.run(node, ["--query-gpu=index", "--format=csv,noheader"])
    return out if rc != 0 else None


def loop_answer(node: SimHost, _glob: str, v: dict[str, str]) -> str:
    v[probe.NV_RC] = "0"                 # the loop section resets it (probe.loop_command)
    g, a = v.get(probe_loop.LOOP_GPU, ""), v.get(probe_loop.LOOP_APPS, "")
    alive = g.isdecimal() and a.isdecimal() and int(g) in node.smi_loops and int(a) in node.smi_loops
    if alive:
        return f"running {g} {a}\n"
    out = f"died {g} {a}\n" if g else ""
    now = node.clock.now()
    g, a = str(node.alloc_pid()), str(node.alloc_pid())
    v[probe_loop.LOOP_GPU], v[probe_loop.LOOP_APPS], v[_LOOP_READ] = g, a, repr(now)
    failure = _loop_failure(node)
    if failure is None:
        node.smi_loops[int(g)] = node.smi_loops[int(a)] = now
    else:                                # it printed why and ended: the next probe sees it died
        v["gi_Lf"] = failure
    return out + f"started {g} {a}\n"


def _loop_ticks(node: SimHost, v: dict[str, str]) -> list[float]:
    """The sampling moments since the last read (the GPU loop's read decides them; the apps
    loop's read in the same probe prints the same moments)."""
    if "gi_Lt" in v:
        return [float(t) for t in v["gi_Lt"].split()]
    step = probe_loop.LOOP_MS / 1000
    try:
        last = float(v.get(_LOOP_READ, ""))
    except ValueError:
        last = node.clock.now()
    now = node.clock.now()
    ticks = []
    t = last + step
    while t <= now + 1e-9:
        ticks.append(t)
        t += step
    ticks = ticks[-LOOP_READ_MAX:]
    if ticks:
        v[_LOOP_READ] = repr(ticks[-1])
    v["gi_Lt"] = " ".join(repr(t) for t in ticks)
    return ticks


def _stamp(t: float) -> str:
    return time.strftime("%Y/%m/%d %H:%M:%S", time.gmtime(t)) + f".{int(t * 1000) % 1000:03d}"


def _loop_rows(node: SimHost, v: dict[str, str], query: list[str]) -> str:
    g = v.get(probe_loop.LOOP_GPU, "")
    if "gi_Lf" in v:                     # the loop that could not start said why, once
        return v.pop("gi_Lf")
    if not (g.isdecimal() and int(g) in node.smi_loops) or node.nvsmi_hang:
        return ""
    ticks = _loop_ticks(node, v)
    if not ticks:
        return ""
    out, _err, rc = nvsmi.run(node, query)
    if rc != 0:
        return out
    rows = out.splitlines()
    return "".join(f"{_stamp(t)}, {row}\n" for t in ticks for row in rows)


def loopg_answer(node: SimHost, _glob: str, v: dict[str, str]) -> str:
    v.pop("gi_Lt", None)
    fields = probe.GPU_QUERY_FIELDS_RECOVERY if nvsmi.knows_recovery(node) else probe.GPU_QUERY_FIELDS
    return _loop_rows(node, v, [f"--query-gpu={fields}", "--format=csv,noheader,nounits"])


def loopa_answer(node: SimHost, _glob: str, v: dict[str, str]) -> str:
    out = _loop_rows(node, v, [f"--query-compute-apps={probe.APP_FIELDS}", "--format=csv,noheader,nounits"])
    v.pop("gi_Lt", None)
    return out


LOOP_ANSWERS = {"loop": loop_answer, "loopg": loopg_answer, "loopa": loopa_answer}
