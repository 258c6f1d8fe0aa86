"""The live state beside an incident, for a second person: `<id>.state.json`.

The driving console writes it (``StateFeed``) after its polls — what every node looked like
at its last poll (GPUs, the GPU-related processes, findings), each node's memory over the
incident and the actions sent — replaced atomically (a temporary file renamed over it, 0600,
never written through a symlink: console/incident/safefiles.py), at most once per
``min_interval``. `gpu-incident follow ID --live` reads it (``read_state``) and shows the
same panels read-only: the follower never probes a node (a `demo` node lives inside the
driving console, and one node is not probed twice). The follower runs as the same Unix user;
a state file that is a symlink, not a regular file, or someone else's is refused.

Only while someone follows: a follower touches `<id>.state.want` (``ask_for_state``, an empty
0600 file, never through a symlink) every time it reads, and the driving console writes the
state only while that file was touched within FOLLOWER_FRESH_S (``followed``). Nobody
following, the state costs nothing (turning 256 nodes into JSON every 2 s took ~10% of a
core); it is still written once when the console stops.

The document (fields may be added, never renamed)::

    {"version": 1, "incident": ID, "by": "user@host", "written_at": epoch, "running": true,
     "console": {"pid": PID, "host": HOST, "start_ticks": N},
     "interval": 1.0, "viewing": NODE, "activity": ["demo: wait-and-reread: 15 of 86 s, …"],
     "nodes": [NodeSnapshot as JSON, …],
     "memory": {NODE: {"points": [[t, {"0": MiB}]], "totals": {"0": MiB}}},
     "actions": [{"node", "rung", "ts", "gpus", "pids"}],
     "confirm": {…} or null, "confirm_closed": {…} or null}

``confirm`` is the driving console's open Confirm (its commands and targets), ``confirm_closed``
how the last one ended, run or cancelled (console/incident/pending.py): the follower shows both.

``console`` names the process that writes it: a state still "running" whose process on this
host is gone was left by a console that died without a word (``LiveState.gone``; the follower
says "console gone since HH:MM", console/incident/consoles.py).

A node's processes are bounded (``PROCESS_LIMIT``): GPU holders, zombies, processes in D,
those the findings name, and their ancestors come first; ``hidden_processes`` counts the rest.
"""
from __future__ import annotations

import dataclasses
import json
import math
from glob import escape as glob_escape
import os
import socket
import stat
import time
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from console.incident import consoles, pending, safefiles
from console.incident.timeline import SUFFIX
from console.model import (ActionRecord, Cgroup, DriverProc, Finding, Gpu, MigInstance, NodeSnapshot, PciGpu, Proc,
                           ThreadInfo)

STATE_SUFFIX = ".state.json"
WANT_SUFFIX = ".state.want"
#: the driving console writes the state while a follower touched the want file this recently
FOLLOWER_FRESH_S = 10.0
VERSION = 1
PROCESS_LIMIT = 2000
READ_LIMIT = 64 << 20
STALE_AFTER_S = 10.0      # no update for this long (past the poll interval): the driver may be gone


def _beside(incident_file: str | os.PathLike[str], suffix: str) -> Path:
    path = Path(incident_file)
    return path.with_name(path.name.removesuffix(SUFFIX) + suffix)


def state_path(incident_file: str | os.PathLike[str], driver: str | None = None) -> Path:
    """`<dir>/<id>.state.json` beside `<dir>/<id>.jsonl`; a driving console writes its own
    `<dir>/<id>.state.<driver>.json` (two consoles on one incident no longer overwrite each
    other's: ``read_states`` merges them)."""
    if driver is None:
        return _beside(incident_file, STATE_SUFFIX)
    safe = "".join(c for c in str(driver) if c.isalnum() or c in "-_")[:40] or "console"
    return _beside(incident_file, f".state.{safe}.json")


def want_path(incident_file: str | os.PathLike[str]) -> Path:
    """`<dir>/<id>.state.want` beside `<dir>/<id>.jsonl`: touched by a follower."""
    return _beside(incident_file, WANT_SUFFIX)


def ask_for_state(want: Path) -> None:
    """The follower's side: touch the want file (created empty, 0600; a symlink there is
    neither followed nor touched). OSError when it cannot."""
    try:
        os.utime(want, follow_symlinks=False)
        if not stat.S_ISREG(os.lstat(want).st_mode):
            raise OSError(f"{want} is not a regular file")
    except FileNotFoundError:
        os.close(os.open(want, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600))


def followed(want: Path, now: float | None = None) -> bool:
    """The driving console's side: did a follower touch the want file within FOLLOWER_FRESH_S?"""
    try:
        st = os.lstat(want)
    except OSError:
        return False
    now = time.time() if now is None else now
    return stat.S_ISREG(st.st_mode) and now - st.st_mtime <= FOLLOWER_FRESH_S


# ---------------------------------------------------------------- snapshots as JSON and back

def _interesting(snap: NodeSnapshot) -> list[Proc]:
    """The processes a mirror shows: GPU-related ones and their ancestors, within the limit."""
    by_pid = {p.pid: p for p in snap.processes}
    named = {pid for f in snap.findings for pid in f.pids}
    keep: dict[int, Proc] = {}
    for p in snap.processes:
        if p.is_gpu_holder or p.state in ("Z", "D") or p.d_threads or p.pid in named or p.pid in snap.own_pids:
            q: Proc | None = p
            while q is not None and q.pid not in keep and len(keep) < PROCESS_LIMIT:
                keep[q.pid] = q
                q = by_pid.get(q.ppid) if q.ppid != q.pid else None
        if len(keep) >= PROCESS_LIMIT:
            break
    return [p for p in snap.processes if p.pid in keep]


#: what changes at every poll of an unchanged node
_VOLATILE = ("taken_at", "probe_ms")
_COMPARED = tuple(f.name for f in dataclasses.fields(NodeSnapshot) if f.name not in (*_VOLATILE, "processes"))


def unchanged_but_time(old: NodeSnapshot, new: NodeSnapshot) -> bool:
    """Does ``new`` say what ``old`` said, but for when it was taken and how long the probe took?
    Processes by identity (the parser hands over the same object for a process whose records
    did not change), the rest by value: cheap enough to run for every node at every write."""
    if len(old.processes) != len(new.processes) or any(a is not b for a, b in zip(old.processes, new.processes)):
        return False
    return all(getattr(old, name) == getattr(new, name) for name in _COMPARED)


def snapshot_to_data(snap: NodeSnapshot, procs_seen: dict[int, tuple[Proc, dict]] | None = None
                     ) -> dict[str, Any]:
    """The snapshot as JSON-ready data, its processes bounded (_interesting). ``procs_seen``:
    {pid: (process, its data)} of the node's last call, replaced by this call's: a process that
    is the same object as last time is not turned into data again."""
    procs = _interesting(snap)
    data = dataclasses.asdict(dataclasses.replace(snap, processes=()))
    seen = procs_seen if procs_seen is not None else {}
    now: dict[int, tuple[Proc, dict]] = {}
    for p in procs:
        hit = seen.get(p.pid)
        now[p.pid] = hit if hit is not None and hit[0] is p else (p, dataclasses.asdict(p))
    if procs_seen is not None:
        procs_seen.clear()
        procs_seen.update(now)
    data["processes"] = [item for _p, item in now.values()]
    data["hidden_processes"] = len(snap.processes) - len(procs)
    return data


def _tuple(items: Any, build) -> tuple:
    return tuple(build(x) for x in items or () if isinstance(x, Mapping))


_SCALARS = {"int": int, "float": float, "str": str, "bool": bool}


def _only(cls, data: Mapping[str, Any]) -> dict[str, Any]:
    """The fields of ``cls`` in ``data``, each of its declared scalar type: a value of another
    type is None where the field may be None, else ValueError — valid JSON of the wrong types
    (``"memory_used_mib": "abc"``, ``"ts": "nan"``) never reaches the screen's arithmetic."""
    out: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        if f.name not in data:
            continue
        value = data[f.name]
        kinds = [k.strip() for k in str(f.type).split("|")]
        scalar = [_SCALARS[k] for k in kinds if k in _SCALARS]
        if scalar and value is not None and not _fits(value, scalar):
            if "None" not in kinds:
                raise ValueError(f"{cls.__name__}.{f.name} is {type(value).__name__}, not {'/'.join(kinds)}")
            value = None
        elif scalar and value is None and "None" not in kinds:
            raise ValueError(f"{cls.__name__}.{f.name} is missing")
        out[f.name] = value
    return out


def _fits(value: Any, kinds: list[type]) -> bool:
    if isinstance(value, bool):
        return bool in kinds
    if isinstance(value, int):
        return int in kinds or float in kinds
    if isinstance(value, float):
        return float in kinds and math.isfinite(value)
    return any(isinstance(value, k) for k in kinds)


def snapshot_from_data(data: Mapping[str, Any]) -> NodeSnapshot:
    """A snapshot written by ``snapshot_to_data``; ValueError/TypeError for a malformed one."""
    if not isinstance(data, Mapping) or not isinstance(data.get("name"), str):
        raise ValueError("not a node snapshot")

    def gpu(d: Mapping) -> Gpu:
        d = dict(_only(Gpu, d))
        d["mig_instances"] = _tuple(d.get("mig_instances"), lambda m: MigInstance(**_only(MigInstance, m)))
        return Gpu(**d)

    def proc(d: Mapping) -> Proc:
        d = dict(_only(Proc, d))
        d["d_threads"] = _tuple(d.get("d_threads"), lambda t: ThreadInfo(**_only(ThreadInfo, t)))
        d["device_files"] = tuple(str(f) for f in d.get("device_files") or ())
        d["gpu_memory_mib"] = dict(d.get("gpu_memory_mib") or {})
        cg = d.get("cgroup")
        d["cgroup"] = Cgroup(**_only(Cgroup, cg)) if isinstance(cg, Mapping) else None
        return Proc(**d)

    def finding(d: Mapping) -> Finding:
        d = dict(_only(Finding, d))
        d["pids"] = tuple(d.get("pids") or ())
        d["gpus"] = tuple(d.get("gpus") or ())
        d["evidence"] = dict(d.get("evidence") or {})
        return Finding(**d)

    def pci(items: Any) -> tuple[PciGpu, ...] | None:
        """The kernel module's GPUs, or None (not read) for anything but a list of them."""
        if not isinstance(items, (list, tuple)):
            return None
        out = []
        for x in items:
            if not isinstance(x, Mapping) or not isinstance(x.get("bus_id"), str):
                return None
            out.append(PciGpu(**_only(PciGpu, x)))
        return tuple(out)

    d = dict(_only(NodeSnapshot, data))
    d["gpus"] = _tuple(d.get("gpus"), gpu)
    d["pci_gpus"] = pci(d.get("pci_gpus"))
    d["processes"] = _tuple(d.get("processes"), proc)
    d["driver_processes"] = _tuple(d.get("driver_processes"), lambda x: DriverProc(**_only(DriverProc, x)))
    d["findings"] = _tuple(d.get("findings"), finding)
    for key in ("warnings", "lost_gpus", "kernel_log", "own_pids"):
        d[key] = tuple(d.get(key) or ())
    return NodeSnapshot(**d)


# ---------------------------------------------------------------- the driving console's side

class StateFeed:
    """Collects what the driving console sees and writes it beside the incident.

    ``update`` is cheap (called on every poll, on the event loop); ``document`` builds what is
    written; ``write`` writes it (call it from a thread: it serialises and renames a file).
    """

    def __init__(self, path: str | os.PathLike[str], *, incident_id: str, by: str, interval: float,
                 min_interval: float = 1.0, console: Mapping[str, Any] | None = None) -> None:
        self.path = Path(path)
        self.incident_id = incident_id
        self.by = by
        self.console = dict(console) if console is not None else consoles.identity()
        self.interval = interval
        self.min_interval = min_interval
        self.nodes: dict[str, NodeSnapshot] = {}
        self.order: list[str] = []
        self.viewing: str | None = None
        self.dirty = False
        self.last_write = 0.0
        self.error: str | None = None
        self._data: dict[str, tuple[NodeSnapshot, dict[str, Any]]] = {}   # each snapshot turned into JSON once
        self._procs: dict[str, dict[int, tuple[Proc, dict]]] = {}          # and each process
        #: the open Confirm and how the last one ended (console/incident/pending.py): replaced
        #: whole (the writer's thread reads them), never changed in place
        self.confirm: dict[str, Any] | None = None
        self.confirm_closed: dict[str, Any] | None = None

    def confirm_opened(self, data: Mapping[str, Any]) -> None:
        """A Confirm opened (pending.opened): written at the next turn, whoever polls."""
        self.confirm = dict(data)
        self.dirty = True

    def confirm_answered(self, answer: str, now: float | None = None) -> None:
        """The open Confirm was answered ("run" or "cancelled")."""
        if self.confirm is not None:
            self.confirm_closed = pending.closed(self.confirm, answer, time.time() if now is None else now)
        self.confirm = None
        self.dirty = True

    def update(self, snap: NodeSnapshot, viewing: str | None = None) -> None:
        if snap.name not in self.order:
            self.order.append(snap.name)
        self.nodes[snap.name] = snap
        if viewing is not None:
            self.viewing = viewing
        self.dirty = True

    def due(self, now: float | None = None) -> bool:
        now = time.monotonic() if now is None else now
        return self.dirty and now - self.last_write >= self.min_interval

    def document(self, memory: Mapping[str, Mapping[str, Any]], actions: Iterable[ActionRecord],
                 running: bool = True, order: Sequence[str] = (), activity: Sequence[str] = ()) -> dict[str, Any]:
        names = list(order) or list(self.order)
        nodes = dict(self.nodes)
        for name, snap in nodes.items():
            hit = self._data.get(name)
            if hit is not None and hit[0] is snap:
                continue
            if hit is not None and unchanged_but_time(hit[0], snap):
                data = dict(hit[1])           # the same JSON but for the time (turning 256 nodes into
                data.update((k, getattr(snap, k)) for k in _VOLATILE)     # JSON took ~25% of a core)
            else:
                data = snapshot_to_data(snap, self._procs.setdefault(name, {}))
            self._data[name] = (snap, data)
        return {"version": VERSION, "incident": self.incident_id, "by": self.by, "written_at": time.time(),
                "running": running, "console": dict(self.console), "interval": self.interval,
                "viewing": self.viewing,
                "activity": list(activity),
                "nodes": [self._data[n][1] for n in names if n in nodes],
                "order": names,
                "memory": {k: dict(v) for k, v in memory.items()},
                "actions": [{"node": a.node, "rung": a.rung, "ts": a.ts, "gpus": list(a.gpus), "pids": list(a.pids)}
                            for a in actions],
                "confirm": self.confirm if running else None, "confirm_closed": self.confirm_closed}

    def write(self, document: Mapping[str, Any]) -> None:
        """Replace the state file (0600, atomically, never through a link). OSError is kept in
        ``error`` (one line) and raised again: the console says so once and keeps running."""
        self.dirty = False
        self.last_write = time.monotonic()
        data = encode_state(document)
        try:
            safefiles.write_atomic(self.path, data, durable=False)
            self.error = None
        except OSError as exc:
            self.error = f"live state not written ({exc.strerror or exc})"
            raise


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)


def encode_state(document: Mapping[str, Any]) -> bytes:
    """The state document as JSON, each node encoded on its own: the encoder holds the GIL for
    the whole of one call (256 nodes in one call: ~80 ms in which no key was handled), and the
    event loop gets it back between nodes."""
    head = {k: v for k, v in document.items() if k != "nodes"}
    nodes = ",".join(_dumps(n) for n in document.get("nodes", ()))
    text = _dumps(head)
    return (text[:-1] + ("," if head else "") + '"nodes":[' + nodes + "]}").encode("utf-8")


# ---------------------------------------------------------------- the follower's side

@dataclasses.dataclass(frozen=True)
class LiveState:
    """What the follower's mirror shows."""
    incident: str
    by: str
    written_at: float
    running: bool
    interval: float
    viewing: str | None
    nodes: tuple[NodeSnapshot, ...]
    hidden: Mapping[str, int]
    memory: Mapping[str, Mapping[str, Any]]
    actions: tuple[ActionRecord, ...]
    activity: tuple[str, ...] = ()          # what the driving console is busy with (checks running)
    console: Mapping[str, Any] | None = None   # the process that writes it: {"pid", "host", "start_ticks"}
    confirm: pending.Pending | None = None     # its open Confirm (console/incident/pending.py)
    confirm_closed: pending.Closed | None = None   # how its last Confirm ended

    def node(self, name: str | None) -> NodeSnapshot | None:
        return next((n for n in self.nodes if n.name == name), None)

    def age(self, now: float | None = None) -> float:
        return (time.time() if now is None else now) - self.written_at

    def stale(self, now: float | None = None) -> bool:
        return not self.running or self.age(now) > max(STALE_AFTER_S, 5 * self.interval)

    def checkable(self, host: str | None = None) -> bool:
        """Its console's process can be looked for from here (it names one on this host)."""
        c = self.console
        here = socket.gethostname() if host is None else host
        return (isinstance(c, Mapping) and isinstance(c.get("pid"), int) and not isinstance(c.get("pid"), bool)
                and c.get("host") == here)

    def gone(self, *, host: str | None = None, alive=consoles.process_alive) -> bool:
        """Still "running", but its console's process on this host is gone: it died without a
        word (SIGKILL, the OOM killer)."""
        if not self.running or not self.checkable(host):
            return False
        c = self.console or {}
        ticks = c.get("start_ticks")
        return not alive(c["pid"], ticks if isinstance(ticks, int) and not isinstance(ticks, bool) else None)


def parse_state(raw: bytes) -> LiveState:
    """ValueError (one line) for anything that is not a state document."""
    try:
        doc = json.loads(raw.decode("utf-8"))
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:
        raise ValueError(f"the live state is not JSON ({type(exc).__name__})") from None
    if not isinstance(doc, dict) or doc.get("version") != VERSION:
        raise ValueError("the live state is not a version-1 state document")
    nodes, hidden = [], {}
    try:
        for item in doc.get("nodes") or ():
            snap = snapshot_from_data(item)
            nodes.append(snap)
            hidden[snap.name] = int(item.get("hidden_processes") or 0)
        actions = tuple(ActionRecord(rung=str(a.get("rung")), ts=_finite(a.get("ts")), node=a.get("node"),
                                     pids=tuple(int(p) for p in a.get("pids") or ()),
                                     gpus=tuple(int(g) for g in a.get("gpus") or ()))
                        for a in doc.get("actions") or () if isinstance(a, dict))
        return LiveState(incident=str(doc.get("incident") or ""), by=str(doc.get("by") or "?"),
                         written_at=_finite(doc.get("written_at") or 0.0), running=bool(doc.get("running", True)),
                         interval=_finite(doc.get("interval") or 1.0),
                         viewing=doc.get("viewing") if isinstance(doc.get("viewing"), str) else None,
                         nodes=tuple(nodes), hidden=hidden,
                         memory={k: v for k, v in (doc.get("memory") or {}).items() if isinstance(v, dict)},
                         actions=actions,
                         activity=tuple(str(a) for a in doc.get("activity") or () if isinstance(a, str)),
                         console=dict(doc["console"]) if isinstance(doc.get("console"), dict) else None,
                         confirm=pending.parse_pending(doc.get("confirm")),
                         confirm_closed=pending.parse_closed(doc.get("confirm_closed")))
    except (TypeError, ValueError, AttributeError, KeyError, OverflowError) as exc:
        raise ValueError(f"the live state is malformed ({type(exc).__name__}: {exc})"[:200]) from None


def _finite(value: Any) -> float:
    number = float(value)
    if not math.isfinite(number):
        raise ValueError(f"not a finite time: {value!r}")
    return number


def read_states(state_file: str | os.PathLike[str]) -> LiveState:
    """Every driving console's state beside the incident (``state_file`` names the incident's
    ``<id>.state.json``; each console writes ``<id>.state.<driver>.json``), merged: the live
    ones (or the newest, when none is), each node as its newest writer saw it, every action,
    every driver named in ``by``. FileNotFoundError when none was written yet; a file that is
    unsafe or malformed is skipped while another can be read."""
    base = Path(state_file)
    stem = base.name.removesuffix(STATE_SUFFIX)
    paths = [base] + sorted(base.parent.glob(f"{glob_escape(stem)}.state.*.json"))
    states, problems = [], []
    for p in paths:
        try:
            states.append(read_state(p))
        except FileNotFoundError:
            continue
        except (ValueError, OSError) as exc:
            problems.append(exc)
    if not states:
        if problems:
            raise problems[0]
        raise FileNotFoundError(f"no live state beside {stem}")
    # live: fresh, and not left by a console whose process is gone (else the newest, as it is)
    live = ([s for s in states if not s.stale() and not s.gone()]
            or [max(states, key=lambda s: s.written_at)])
    if len(live) == 1:
        return live[0]
    live.sort(key=lambda s: s.written_at)           # the newest last: its view of a node wins
    nodes: dict[str, NodeSnapshot] = {}
    hidden: dict[str, int] = {}
    memory: dict[str, Mapping[str, Any]] = {}
    for s in live:
        for n in s.nodes:
            nodes[n.name] = n
            hidden[n.name] = s.hidden.get(n.name, 0)
        memory.update(s.memory)
    actions = sorted({(a.node, a.rung, a.ts, a.pids, a.gpus): a for s in live for a in s.actions}.values(),
                     key=lambda a: a.ts)
    newest = live[-1]
    return LiveState(incident=newest.incident, by=", ".join(dict.fromkeys(s.by for s in live)),
                     written_at=newest.written_at, running=any(s.running for s in live),
                     interval=min(s.interval for s in live), viewing=newest.viewing, nodes=tuple(nodes.values()),
                     hidden=hidden, memory=memory, actions=tuple(actions),
                     activity=tuple(a for s in live for a in s.activity), console=newest.console,
                     confirm=next((s.confirm for s in reversed(live) if s.confirm is not None), None),
                     confirm_closed=max((s.confirm_closed for s in live if s.confirm_closed is not None),
                                        key=lambda c: c.at, default=None))


def read_state(path: str | os.PathLike[str]) -> LiveState:
    """The state file, read without following a link (safefiles.UnsafeFile), parsed
    (ValueError); FileNotFoundError when no console has written one yet."""
    return parse_state(safefiles.read_own_file(path, READ_LIMIT))
