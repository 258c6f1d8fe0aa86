"""Checks: named, reusable probes that test one hypothesis on a node.

Each check renders one shell command line (shown to the operator, recorded in the
timeline exactly as run), runs it through ``source.run`` — so it works the same on the
local machine, over SSH and on a simulated node — and parses the output with the pure
parsers in console/checkparse.py into a one-line summary and structured data.

``CHECKS`` lists them with their parameters for the check picker and the command palette::

    result = await run_check(source, "wait-and-reread", snap, seconds=5)
    result.summary   # "no memory came back within 5 s: GPUs 0-7 still hold 594.6 GiB ..."

wait-and-reread measures the moment: it reads per-GPU memory at once (its "before": same
node, same moment as the wait starts; a snapshot may be seconds old), then again every few
seconds (``reread_every``) on the node's own clock, and ends early once every GPU that held
memory has given it back ("memory came back ~55 s in"). Each read is the same one-line
read-only query; ``progress`` (if given) hears of every read, so the console can show the
wait as it runs. Only when the first read fails does it fall back to the snapshot passed in,
and says so in ``data["before_from"]``. ``digest`` turns a check's raw output into a few lines
of summary (holders per process, thread states per process) for the screen and the postmortem.

Read-only by construction: every check's command is a fixed template that only reads
(nvidia-smi queries, /proc, ss, dmesg/journalctl, systemctl is-active, py-spy dump), and the
only values put into a template are validated parameters (``_args``): whole numbers within
bounds ("int"), lists of positive PIDs ("pids"), one of a fixed set of words ("choice"),
and a device-file pattern ("glob": an absolute path of letters, digits, ``_.-+@:,=/`` and the
glob characters ``*?``, matched by ``find -lname`` and handed to the shell only inside
shlex.quote by console/probe.py). There is no free-text
parameter: no text an operator or a node typed reaches a shell through a check. A command
of the operator's own is not a check but an action (console/actions/plan.py ``plan_custom``:
Confirm, refused under --read-only, recorded-not-run under --dry-run).
tests/test_checks.py holds every builder to this with hostile parameters.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from console.checks import parse as check_parse
from console.checks import parse_mps
from console.diagnosis import text as t
from console.diagnosis.who import BLOCKER_DAEMONS, MPS_CONTROL, MPS_TIMEOUT_S, mps_line
from console.clock import REAL_CLOCK
from console.model import CommandResult, NodeSnapshot
from console.probe import DEFAULT_DEVICE_GLOB, QUERY_MEMORY, build_script

FREED_NOTICE_MIB = 256          # less than this between reads is noise, not memory coming back
#: systemd units of the reset blockers -> the program each runs
UNIT_PROGRAMS = {d.unit: d.program for d in BLOCKER_DAEMONS if d.unit}
BLOCKER_UNITS = tuple(UNIT_PROGRAMS)
QUERY_PERSISTENCE = "nvidia-smi --query-gpu=index,persistence_mode --format=csv,noheader"


@dataclass(frozen=True)
class CheckResult:
    name: str
    node: str
    command: str                 # exact shell text that ran
    rc: int | None
    summary: str                 # one line
    data: Mapping[str, Any] = field(default_factory=dict)
    raw: str = ""                # stdout and stderr as the node gave them


PARAM_KINDS = ("int", "pids", "choice", "glob")     # no free text: see the module's docstring
MAX_PID = 4_194_304                                  # PID_MAX_LIMIT on 64-bit Linux
#: a device-file pattern: an absolute path of letters, digits and glob characters only
GLOB_RE = re.compile(r"/[A-Za-z0-9_.*?/+@:,=-]+")


@dataclass(frozen=True)
class CheckParam:
    name: str
    kind: str                    # one of PARAM_KINDS
    default: Any = None
    help: str = ""
    choices: tuple[str, ...] = ()
    required: bool = False
    low: int = 0                 # "int": the range allowed
    high: int = MAX_PID


@dataclass(frozen=True)
class Check:
    name: str
    description: str
    params: tuple[CheckParam, ...]
    build: Callable[[dict], str]
    parse: Callable[[str, dict, NodeSnapshot | None], tuple[str, dict]]
    timeout: Callable[[dict], float] = lambda args: 30.0
    #: a check that runs its commands itself (wait-and-reread: one read every few seconds):
    #: async (source, args, progress) -> CommandResult of everything it read
    runner: Callable[..., Any] | None = None


@dataclass(frozen=True)
class CheckProgress:
    """A long check while it runs (the console's status line shows ``text``)."""
    name: str
    node: str
    elapsed_s: float
    total_s: float
    text: str


# ---------------------------------------------------------------- commands

def reread_every(seconds: int) -> int:
    """Seconds between two reads of a wait: the moment memory came back is known to this."""
    return 1 if seconds <= 10 else 2 if seconds <= 30 else 5


def _reread_cmd(a: dict) -> str:
    # the one read it repeats, exactly; the comment says how often (a shell ignores it)
    return f"{QUERY_MEMORY}  # every {reread_every(a['seconds'])} s for up to {a['seconds']} s, until memory is back"


READ_TIMEOUT_S = 20.0


async def _reread_run(source: Any, a: dict, progress: Callable[[CheckProgress], None] | None) -> CommandResult:
    """Read now, then every ``reread_every`` seconds until every GPU that held memory gave it
    back or ``seconds`` have passed. The output holds each read after a ``::t=S::`` line (its
    seconds since the first read)."""
    clock = getattr(source, "clock", None) or REAL_CLOCK
    total, every = a["seconds"], reread_every(a["seconds"])
    start = clock.monotonic()
    parts: list[str] = []
    errors: list[str] = []
    reads: list[tuple[float, dict[str, int | None]]] = []
    rc: int | None = None
    while True:
        elapsed = round(clock.monotonic() - start, 1)
        res = await source.run(QUERY_MEMORY, READ_TIMEOUT_S)
        text = "\n".join(x.rstrip("\n") for x in (res.stdout, res.stderr) if x)
        parts.append(f"::t={elapsed:g}::" + ("\n" + text if text else ""))
        if res.error is not None and res.rc is None:
            errors.append(res.error)
        else:
            rc = res.rc if rc in (None, 0) else rc
            read = check_parse.parse_memory_read(text)
            if read:
                reads.append((elapsed, read))
        back = check_parse.memory_back(reads)
        if progress is not None:
            progress(CheckProgress("wait-and-reread", source.name, elapsed, float(total),
                                   _reread_progress(reads, elapsed, total)))
        if back is not None or elapsed >= total:
            break
        await clock.sleep(min(every, max(0.0, total - (clock.monotonic() - start))))
    if not reads and errors and rc is None:
        return CommandResult(command=QUERY_MEMORY, rc=None, stdout="\n".join(parts), error=errors[-1])
    return CommandResult(command=QUERY_MEMORY, rc=rc if rc is not None else 0, stdout="\n".join(parts) + "\n")


def _reread_progress(reads: list[tuple[float, dict[str, int | None]]], elapsed: float, total: int) -> str:
    head = f"wait-and-reread: {elapsed:.0f} of {total} s"
    if not reads:
        return head + ", no reading yet"
    first, last = reads[0][1], reads[-1][1]
    freed = sum(max(0, (v or 0) - (last.get(k) or 0)) for k, v in first.items() if v is not None)
    held = sum(v or 0 for v in last.values())
    if freed >= FREED_NOTICE_MIB:
        return head + f", {t.mib(freed)} back so far, {t.mib(held)} still used"
    return head + f", nothing back yet ({t.mib(held)} used)"


def _holders_cmd(a: dict) -> str:
    # the probe's own section lines (probe.py): one format for real shells and the simulator
    lines = build_script(check_parse.HOLDERS_MARK, a["device_glob"]).splitlines()
    return "\n".join(ln for ln in lines if any(f"begin {name}'" in ln for name in check_parse.HOLDERS_SECTIONS))


def _states_cmd(a: dict) -> str:
    files = " ".join(f"/proc/{pid}/task/*/stat /proc/{pid}/task/*/wchan" for pid in a["pids"])
    return f"grep -s . {files}"


def _klog_cmd(a: dict) -> str:
    reader = "dmesg" if a["reader"] == "dmesg" else "journalctl -k --no-pager"
    return (f"{reader} 2>&1 | grep -E 'NVRM|^dmesg:|^No journal|ermission|not permitted|not found|not seeing' "
            f"| tail -n {a['lines']}")


def _blockers_cmd(a: dict) -> str:
    return (f"{QUERY_PERSISTENCE} 2>&1; echo ::ps::; ps -eo pid=,args=; echo ::units::; "
            f"systemctl is-active {' '.join(BLOCKER_UNITS)} 2>&1")


#: the most of `nvidia-smi -q` kept (an 8-GPU report is ~60 KB)
SMI_REPORT_BYTES = 256 * 1024


def _smi_report_cmd(a: dict) -> str:
    return f"timeout 20 nvidia-smi -q 2>&1 | head -c {SMI_REPORT_BYTES}"


def _stack_cmd(a: dict) -> str:
    pid = a["pid"]
    task = f"/proc/{pid}/task/{a['tid'] or pid}"     # a thread's own files (the leader's by default)
    return (f"cat {task}/wchan 2>&1; echo; echo ::stack::; cat {task}/stack 2>&1; "
            f"echo ::py-spy::; timeout 10 py-spy dump --pid {pid} 2>&1")


def mps_ask(words: str) -> str:
    """One command to the MPS control daemon, as a shell reads it (under who.MPS_TIMEOUT_S)."""
    return mps_line(words)


def _mps_cmd(a: dict) -> str:
    ask = [(parse_mps.SERVERS_MARK, "get_server_list"), (parse_mps.CLIENTS_MARK, f"get_client_list {a['server']}")]
    return "; ".join(f"echo {mark}; {mps_ask(words)} 2>&1; echo {parse_mps.RC_MARK} $?" for mark, words in ask)


# ---------------------------------------------------------------- summaries

def _reread(raw: str, a: dict, snap: NodeSnapshot | None) -> tuple[str, dict]:
    d = check_parse.parse_reread(raw)
    d["seconds"] = a["seconds"]
    d["before_from"] = "command"
    if not d["before"] and snap is not None and d["after"]:
        d["before"] = {str(g.index): g.memory_used_mib for g in snap.gpus}
        d["before_from"] = "snapshot"
        d["freed_mib"] = {k: (d["before"][k] - v) if d["before"].get(k) is not None and v is not None else None
                          for k, v in d["after"].items()}
        d["freed_total_mib"] = sum(v for v in d["freed_mib"].values() if v)
    if d["error"] and not d["after"]:
        return f"nvidia-smi failed: {d['error']}", d
    if not d["after"]:
        return "no memory reading came back", d
    after = {k: v for k, v in d["after"].items() if v is not None}
    d["still_used_mib"] = sum(after.values())
    freed = {k: v for k, v in d["freed_mib"].items() if v and v >= FREED_NOTICE_MIB}
    busy = sorted(int(k) for k, v in after.items() if v > 1024)
    waited = d.get("waited_s")
    within = f"within {a['seconds']} s" if waited is None else f"within {waited:.0f} s"
    if freed:
        back, first = d.get("back_s"), d.get("first_back_s")
        if back is not None:
            when = f"~{back:.0f} s in" + (f" (not yet at {d['last_held_s']:.0f} s)"
                                          if d.get("last_held_s") is not None else "")
        elif first is not None:
            when = f"from ~{first:.0f} s in, still coming {within}"
        else:
            when = within
        return (f"memory came back {when}: {t.mib(sum(freed.values()))} freed on "
                f"{t.gpus(int(k) for k in freed)}; {t.mib(d['still_used_mib'])} still used"), d
    if busy:
        first_gpu = busy[0]
        return (f"no memory came back {within}: {t.gpus(busy)} still hold "
                f"{t.mib(sum(after[str(i)] for i in busy))} (GPU {first_gpu}: {after[str(first_gpu)]} MiB)"), d
    return f"no memory held: every GPU is below 1 GiB used after {waited if waited is not None else a['seconds']:.0f} s", d


def _holders(raw: str, a: dict, snap: NodeSnapshot | None) -> tuple[str, dict]:
    d = check_parse.parse_holders(raw)
    if d["error"] and not d["holders"]:
        return f"nvidia-smi failed: {d['error']}", d
    parts = [f"{t.plural(len(d['holders']), 'process', 'processes')} hold {a['device_glob']}",
             f"the driver lists {t.plural(len({x['pid'] for x in d['driver']}), 'PID')}"]
    if d["hidden"]:
        parts.append(f"not listed by the driver: {t.pids(d['hidden'])}")
    if d["foreign"]:
        parts.append(f"listed but absent from /proc (another PID namespace): {t.pids(d['foreign'])}")
    if not d["hidden"] and not d["foreign"]:
        parts.append("every holder accounted for")
    return "; ".join(parts), d


def _states(raw: str, a: dict, snap: NodeSnapshot | None) -> tuple[str, dict]:
    d = check_parse.parse_tasks(raw)
    procs = d["processes"]
    words = []
    for pid in a["pids"]:
        e = procs.get(str(pid))
        if e is None or not e["threads"]:
            words.append(f"{pid} gone")
            continue
        s = f"{pid} {e.get('state', '?')}"
        if e["d_threads"]:
            w = sorted({th["wchan"] or "?" for th in e["d_threads"]})
            s += f" ({len(e['d_threads'])} in D at {', '.join(w[:2])})"
        words.append(s)
    return "; ".join(words) or "no such PIDs", d


def _klog(raw: str, a: dict, snap: NodeSnapshot | None) -> tuple[str, dict]:
    buses = {g.bus_id: g.index for g in snap.gpus} if snap is not None else {}
    d = check_parse.parse_kernel_log(raw, buses)
    if d["permission_denied"]:
        return (f"{a['reader']} not permitted: run as root (or in group adm/systemd-journal) to read the kernel "
                f"log ({d['error']})"), d
    fell = d["fallen_off_bus"]
    fell_words = f"{'GPU' if len(fell) == 1 else 'GPUs'} {', '.join(fell)} fell off the bus" if fell else ""
    if not d["xids"]:
        if d["error"]:
            return f"kernel log unreadable: {d['error']}", d
        if fell:
            return f"{fell_words} (no Xid line)", d
        return f"no Xid in the last {a['lines']} NVRM lines" if d["nvrm"] else "no NVRM line in the kernel log", d
    codes: dict[int, int] = {}
    for x in d["xids"]:
        codes[x["xid"]] = codes.get(x["xid"], 0) + 1
    last = d["xids"][-1]
    where = f"GPU {last['gpu']}" if last["gpu"] is not None else last["bus"]
    what = f"recovery action: {last['recovery']}" if last["xid"] == 154 and last["recovery"] else last["title"]
    listing = ", ".join(f"{c}×{n}" if n > 1 else str(c) for c, n in codes.items())
    return f"Xid {listing}; latest: Xid {last['xid']} on {where} ({what}){'; ' + fell_words if fell else ''}", d


def _blockers(raw: str, a: dict, snap: NodeSnapshot | None) -> tuple[str, dict]:
    # display servers block only while they hold /dev/nvidia*, which ps cannot tell: left to the probe
    programs = tuple(b.program + ("*" if b.prefix else "") for b in BLOCKER_DAEMONS if not b.needs_device)
    d = check_parse.parse_blockers(raw, programs, BLOCKER_UNITS)
    parts = []
    if d["persistence_on"]:
        parts.append(f"persistence mode on {t.gpus(d['persistence_on'])}")
    for dm in d["daemons"]:
        parts.append(f"{dm['program']} (PID {dm['pid']})")
    running = {dm["program"] for dm in d["daemons"]}
    for unit, state in d["units"].items():
        if state == "active" and not any(r.startswith(UNIT_PROGRAMS[unit]) for r in running):
            parts.append(f"{unit} active")
    if not parts:
        if d["error"]:
            return f"nvidia-smi failed: {d['error']}", d
        return ("no reset blocker: persistence mode off, no persistenced, MPS, DCGM, NVSM, IMEX or fabric "
                "manager", d)
    return "reset blockers: " + ", ".join(parts), d


def _smi_report(raw: str, a: dict, snap: NodeSnapshot | None) -> tuple[str, dict]:
    lines = raw.splitlines()
    gpus = sum(1 for line in lines if line.startswith("GPU 0000") or line.startswith("GPU 0"))
    cut = len(raw.encode()) >= SMI_REPORT_BYTES
    head = next((line.strip() for line in lines if line.strip()), "")
    if gpus:
        return (f"nvidia-smi -q: the full report of {t.plural(gpus, 'GPU')}, {len(lines)} lines"
                + (f" (cut at {SMI_REPORT_BYTES >> 10} KiB)" if cut else ""), {"gpus": gpus, "lines": len(lines)})
    return f"nvidia-smi -q: {check_parse.clip(head, 160) or 'no output'}", {"gpus": 0, "lines": len(lines)}


def _port(raw: str, a: dict, snap: NodeSnapshot | None) -> tuple[str, dict]:
    d = check_parse.parse_ss(raw, a["port"])
    if d["error"] and not d["listeners"]:
        return f"ss failed: {d['error']}", d
    if not d["listeners"]:
        return f"nothing listens on TCP port {a['port']}", d
    who = []
    for ln in d["listeners"]:
        owners = ", ".join(f"{p['name']} (PID {p['pid']})" for p in ln["processes"]) or "owner not shown (not root?)"
        who.append(f"{owners} on {ln['address']}")
    return f"TCP port {a['port']} is listening: " + "; ".join(who), d


def _stack(raw: str, a: dict, snap: NodeSnapshot | None) -> tuple[str, dict]:
    d = check_parse.parse_stack(raw)
    who = f"PID {a['pid']}" + (f" thread {a['tid']}" if a["tid"] and a["tid"] != a["pid"] else "")
    if d["gone"]:
        return f"{who} is gone", d
    parts = [f"{who} " + (f"waits in {d['wchan']}" if d["wchan"] else "has no wchan (running, or exited)")]
    if d["frames"]:
        top = d["frames"][0]
        parts.append(f"kernel stack: {len(d['frames'])} frames, top {top['function']}"
                     + (f" [{top['module']}]" if top["module"] else ""))
    elif d["stack_error"]:
        parts.append(f"kernel stack unreadable ({d['stack_error']})")
    parts.append(f"py-spy: {len(d['py_threads'])} Python threads" if d["py_spy"] else "py-spy not installed")
    return "; ".join(parts), d


def _mps(raw: str, a: dict, snap: NodeSnapshot | None) -> tuple[str, dict]:
    d = parse_mps.parse_mps_check(raw)
    server = a["server"]
    d["server"] = server
    if d["daemon"] is False:
        return (f"no MPS control daemon answered ({parse_mps.NO_DAEMON}): it is not running, or it runs with "
                "another CUDA_MPS_PIPE_DIRECTORY than the default /tmp/nvidia-mps"), d
    if d["timed_out"] and not d["servers"]:
        return f"{MPS_CONTROL} did not answer within {MPS_TIMEOUT_S} s (a wedged MPS server can do that)", d
    if d["error"] and not d["servers"] and not d["clients"]:
        return f"{MPS_CONTROL}: {check_parse.clip(d['error'], 160)}", d
    listed = f"get_server_list: {t.pids(d['servers'])}" if d["servers"] else "no MPS server listed"
    if server not in d["servers"]:
        return f"{listed}; PID {server} is not one of them (it may have exited)", d
    clients = d["clients"] or []
    if not clients:
        return f"{listed}; server {server} has no client connected (get_client_list is empty)", d
    return f"{listed}; server {server} serves {t.plural(len(clients), 'client')} ({t.pid_list(clients)})", d


# ---------------------------------------------------------------- digests (summaries before the dump)

DIGEST_LINES = 24          # at most this many lines of digest per check


def digest(name: str, raw: str) -> list[str]:
    """A few plain lines that sum up a check's raw output (shown before the output itself, on
    screen and in the postmortem): per read of a wait, per holder, per process's threads.
    Checks whose output is already short have none. Never raises."""
    try:
        lines = _DIGESTS[name](raw) if name in _DIGESTS else []
    except Exception:  # noqa: BLE001 - a digest is a courtesy; the raw output stays
        return []
    if len(lines) > DIGEST_LINES:
        lines = lines[:DIGEST_LINES - 1] + [f"… and {len(lines) - DIGEST_LINES + 1} more"]
    return lines


def _device_names(files: list[str]) -> str:
    """/dev/nvidia0 … /dev/nvidia7, /dev/nvidiactl -> "nvidia0-7, nvidiactl" (each once)."""
    minors, other = set(), []
    for f in files:
        base = f.rsplit("/", 1)[-1]
        m = re.fullmatch(r"nvidia(\d+)", base)
        if m:
            minors.add(int(m.group(1)))
        elif base not in other:
            other.append(base)
    parts = [f"nvidia{t.ranges(minors)}" if len(minors) > 1 else f"nvidia{next(iter(minors))}"] if minors else []
    return ", ".join(parts + other)


def _digest_reads(raw: str) -> list[str]:
    reads = check_parse.parse_reads(raw)
    out: list[str] = []
    run: list[tuple[float, int]] = []

    def close() -> None:
        if run:
            when = f"{run[0][0]:.0f} s" if len(run) == 1 else f"{run[0][0]:.0f}-{run[-1][0]:.0f} s"
            out.append(f"{when:>10}  {t.mib(run[0][1])} used" + (f" ({len(run)} reads)" if len(run) > 1 else ""))
    for at, read in reads:
        used = sum(v for v in read.values() if v is not None)
        if run and abs(used - run[-1][1]) >= FREED_NOTICE_MIB:
            close()
            run = []
        run.append((at, used))
    close()
    return out


def _digest_holders(raw: str) -> list[str]:
    d = check_parse.parse_holders(raw)
    driver: dict[int, list[dict]] = {}
    for x in d["driver"]:
        driver.setdefault(x["pid"], []).append(x)
    out = []
    for pid, h in d["holders"].items():
        listed = driver.get(int(pid))
        where = (", listed by the driver on " + ", ".join(
            f"GPU {x['gpu'] if x['gpu'] is not None else '?'}" + (f" ({t.mib(x['mib'])})" if x["mib"] else "")
            for x in listed)) if listed else ", not listed by the driver"
        who = f"{h['user']}: " if h.get("user") else ""
        out.append(f"PID {pid} {who}{check_parse.clip(h['args'] or '?', 60)} holds {_device_names(h['files'])}{where}")
    for pid in d["foreign"]:
        out.append(f"PID {pid} listed by the driver, not in /proc here (another PID namespace)")
    return out


def _digest_states(raw: str) -> list[str]:
    out = []
    for pid, e in sorted(check_parse.parse_tasks(raw)["processes"].items(), key=lambda kv: int(kv[0])):
        counts = ", ".join(f"{n} {s}" for s, n in sorted(e["states"].items(), key=lambda kv: -kv[1]))
        line = (f"PID {pid} {e.get('name') or '?'}: {e.get('state', '?')}, "
                f"{t.plural(len(e['threads']), 'thread')} ({counts})")
        if e["d_threads"]:
            stuck = "; ".join(f"{th['tid']} {th['name'] or '?'} at {th['wchan'] or '?'}" for th in e["d_threads"][:4])
            more = f" and {len(e['d_threads']) - 4} more" if len(e["d_threads"]) > 4 else ""
            line += f"; in D: {stuck}{more}"
        out.append(line)
    return out


_DIGESTS: dict[str, Callable[[str], list[str]]] = {
    "wait-and-reread": _digest_reads, "holders": _digest_holders, "states": _digest_states}


# ---------------------------------------------------------------- the registry

_PIDS = CheckParam("pids", "pids", (), "PIDs to look at", required=True, low=1)
CHECKS: dict[str, Check] = {c.name: c for c in (
    Check("wait-and-reread", "Wait up to N seconds, reading per-GPU memory every few seconds: is it coming back "
          "on its own, and when?",
          (CheckParam("seconds", "int", 5, "seconds to wait", high=3600),), _reread_cmd, _reread,
          lambda a: READ_TIMEOUT_S, _reread_run),
    Check("holders", "Who holds the GPU device files, against the driver's process list (hidden and foreign PIDs)",
          (CheckParam("device_glob", "glob", DEFAULT_DEVICE_GLOB, "device files to look for"),), _holders_cmd,
          _holders),
    Check("states", "Process and thread states with wchan: are threads stuck in D inside the driver?",
          (_PIDS,), _states_cmd, _states),
    Check("kernel-log", "NVRM Xid lines from the kernel log, with what each Xid means",
          (CheckParam("reader", "choice", "dmesg", "where to read it", ("dmesg", "journalctl")),
           CheckParam("lines", "int", 50, "lines to keep", low=1, high=100_000)), _klog_cmd, _klog),
    Check("blockers", "What keeps a GPU reset from running: persistence mode, persistenced, MPS, DCGM, fabric manager",
          (), _blockers_cmd, _blockers),
    Check("mps-clients", "MPS: the servers the control daemon runs and one server's clients (get_server_list, "
          "get_client_list through nvidia-cuda-mps-control)",
          (CheckParam("server", "int", None, "the MPS server's PID", required=True, low=1),), _mps_cmd, _mps,
          lambda a: 2.0 * MPS_TIMEOUT_S + 5.0),
    Check("smi-report", "nvidia-smi -q: the driver's whole report of every GPU (kept as evidence, capped)",
          (), _smi_report_cmd, _smi_report, lambda a: 25.0),
    Check("port", "Is a TCP port listening, and by which process (did the server ever come up?)",
          (CheckParam("port", "int", 8000, "TCP port", low=1, high=65535),), lambda a: "ss -ltnp 2>&1", _port),
    Check("stack", "Where a process waits: wchan, kernel stack (root), Python stack (py-spy if installed)",
          (CheckParam("pid", "int", None, "PID", required=True, low=1),
           CheckParam("tid", "int", 0, "thread id (default: the main thread)")), _stack_cmd, _stack),
)}
assert all(p.kind in PARAM_KINDS for c in CHECKS.values() for p in c.params)


def _args(check: Check, params: Mapping[str, Any]) -> dict:
    """Validated parameters with defaults; ValueError (one clear line) for bad ones."""
    unknown = set(params) - {p.name for p in check.params}
    if unknown:
        raise ValueError(f"{check.name}: unknown parameter {', '.join(sorted(unknown))}")
    out: dict[str, Any] = {}
    for p in check.params:
        value = params.get(p.name, p.default)
        if p.required and (value is None or value == "" or value == ()):
            raise ValueError(f"{check.name}: {p.name} is required ({p.help})")
        if p.kind == "int":
            value = _whole(value)
            if value is None:
                raise ValueError(f"{check.name}: {p.name} must be a whole number")
            if not p.low <= value <= p.high:
                raise ValueError(f"{check.name}: {p.name} {value} is out of range ({p.low}-{p.high})")
        elif p.kind == "pids":
            if isinstance(value, (str, int)):
                value = str(value).replace(",", " ").split()
            try:
                pids = [_whole(v) for v in value]
            except TypeError:
                pids = [None]
            if not pids or any(v is None or not 1 <= v <= MAX_PID for v in pids):
                raise ValueError(f"{check.name}: {p.name} must be PIDs (positive whole numbers)")
            value = tuple(dict.fromkeys(pids))
        elif p.kind == "choice":
            if value not in p.choices:
                raise ValueError(f"{check.name}: {p.name} must be one of {', '.join(p.choices)}")
        elif p.kind == "glob":
            value = str(value).strip()
            value = value if value.startswith("/") else "/" + value
            if not GLOB_RE.fullmatch(value):
                raise ValueError(f"{check.name}: {p.name} must be a device-file pattern such as "
                                 f"{DEFAULT_DEVICE_GLOB} (a path of letters, digits, * and ?)")
        else:     # never: every kind above is a value no shell can read as a command
            raise ValueError(f"{check.name}: {p.name} has an unknown kind {p.kind!r}")
        out[p.name] = value
    return out


def _whole(value: Any) -> int | None:
    """A whole number from an int or a string of ASCII digits (a sign allowed), else None:
    never True/False, 5.7, "0x10", "٣" or " 5; reboot"."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and re.fullmatch(r"[+-]?[0-9]{1,12}", value.strip()):
        return int(value.strip())
    return None


def render(name: str, **params: Any) -> str:
    """The exact command line a check runs with these parameters."""
    check = _get(name)
    return check.build(_args(check, params))


def _get(name: str) -> Check:
    try:
        return CHECKS[name]
    except KeyError:
        raise ValueError(f"unknown check {name!r}; one of {', '.join(CHECKS)}") from None


async def run_check(source, name: str, snap: NodeSnapshot | None = None, *,
                    progress: Callable[[CheckProgress], None] | None = None, **params: Any) -> CheckResult:
    """Run a check on ``source``; never raises for node trouble (ValueError for bad parameters).
    ``progress`` hears how a long check (wait-and-reread) is getting on, once per read."""
    check = _get(name)
    args = _args(check, params)
    command = check.build(args)
    if check.runner is not None:
        result: CommandResult = await check.runner(source, args, progress)
    else:
        result = await source.run(command, check.timeout(args))
    raw = "\n".join(part.rstrip("\n") for part in (result.stdout, result.stderr) if part)
    if result.error is not None and result.rc is None:
        return CheckResult(name=name, node=source.name, command=command, rc=None,
                           summary=f"{name} did not finish: {result.error}", data={"error": result.error}, raw=raw)
    try:
        summary, data = check.parse(raw, args, snap)
    except Exception as exc:  # noqa: BLE001 - a parser bug must not lose the raw output
        summary, data = f"{name}: output not understood ({type(exc).__name__})", {"error": repr(exc)}
    return CheckResult(name=name, node=source.name, command=command, rc=result.rc,
                       summary=check_parse.clip(summary, 240), data=data, raw=raw)

