"""The incident timeline: one JSON-lines file per incident, append-only and durable.

Each entry is appended with flush + fsync before anyone is shown it. Files are
0600; the incident directory is created 0700 (an existing one is used as it is,
with a warning when others can read it). A torn last line (a crash mid-write)
is skipped with a warning on load; nothing before it is lost.
"""
from __future__ import annotations

import dataclasses
import datetime as dt
import getpass
import json
import os
import secrets
import socket
import stat
import threading
from pathlib import Path
from typing import Any, Iterable

from console.model import TIMELINE_KINDS, VERDICTS, TimelineEntry

SUFFIX = ".jsonl"
_FIELDS = {f.name for f in dataclasses.fields(TimelineEntry)}


def default_incident_dir() -> Path:
    from platformdirs import user_state_path
    return user_state_path("gpu-incident", appauthor=False) / "incidents"


def operator_id() -> str:
    """`user@host` for the `by` field (SUDO_USER wins: the person, not root)."""
    try:
        user = os.environ.get("SUDO_USER") or getpass.getuser()
    except Exception:  # noqa: BLE001 - no passwd entry in some containers
        user = str(os.getuid())
    return f"{user}@{socket.gethostname()}"


def now_iso() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def new_incident_id() -> str:
    stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%d-%H%M%S")
    return f"{stamp}-{secrets.token_hex(2)}"


def ensure_dir(directory: Path) -> list[str]:
    """Create ``directory`` 0700 when absent; warn when an existing one is readable by others."""
    warnings: list[str] = []
    if not directory.exists():
        directory.mkdir(parents=True, mode=0o700)
        os.chmod(directory, 0o700)  # umask may have narrowed, never widened; be exact
    elif not directory.is_dir():
        raise NotADirectoryError(f"incident dir {directory} is not a directory")
    else:
        mode = stat.S_IMODE(directory.stat().st_mode)
        if mode & 0o077:
            warnings.append(f"incident dir {directory} is readable by others (mode {mode:04o})")
    return warnings


def entry_to_json(entry: TimelineEntry) -> str:
    return json.dumps(dataclasses.asdict(entry), ensure_ascii=False, separators=(",", ":"))


_TYPES: dict[str, tuple[type, ...]] = {
    "ts": (str,), "seq": (int,), "by": (str,), "kind": (str,), "node": (str, type(None)),
    "text": (str,), "hypothesis": (int, type(None)), "action": (int, type(None)),
    "command": (str, type(None)), "rc": (int, type(None)), "output": (str, type(None)),
    "gpu_memory_before": (dict, type(None)), "gpu_memory_after": (dict, type(None)),
    "freed_mib": (int, type(None)), "seconds_to_free": (int, float, type(None)),
    "verdict": (str, type(None)),
}


def entry_from_dict(data: dict[str, Any]) -> TimelineEntry:
    """A line's object as an entry; ValueError when a field has the wrong type."""
    known = {k: v for k, v in data.items() if k in _FIELDS}
    for key in ("ts", "seq", "by", "kind"):
        if key not in known:
            raise ValueError(f"missing {key}")
    for key, value in known.items():
        if not isinstance(value, _TYPES[key]) or (isinstance(value, bool) and bool not in _TYPES[key]):
            raise ValueError(f"{key} has the wrong type")
    for key in ("gpu_memory_before", "gpu_memory_after"):
        if known.get(key) and not all(isinstance(v, int) or v is None for v in known[key].values()):
            raise ValueError(f"{key} has the wrong type")
    return TimelineEntry(**known)


def _fsync_dir(directory: Path) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def load(path: str | os.PathLike[str]) -> tuple[list[TimelineEntry], list[str]]:
    """Entries of one incident file and warnings (torn or unreadable lines are skipped)."""
    entries: list[TimelineEntry] = []
    warnings: list[str] = []
    with open(path, "rb") as fh:
        raw_lines = fh.read().split(b"\n")
    last = len(raw_lines) - 1
    while last >= 0 and not raw_lines[last].strip():
        last -= 1
    for number, raw in enumerate(raw_lines[: last + 1], start=1):
        if not raw.strip():
            continue
        try:
            data = json.loads(raw.decode("utf-8"))
            if not isinstance(data, dict):
                raise ValueError("not an object")
            entries.append(entry_from_dict(data))
        except (ValueError, TypeError, UnicodeDecodeError, RecursionError):
            where = "torn last line" if number == last + 1 else f"unreadable line {number}"
            warnings.append(f"{Path(path).name}: {where} skipped")
    return entries, warnings


class Timeline:
    """An open incident file. Thread-safe; every append is on disk before it returns."""

    def __init__(self, path: Path, *, by: str | None = None) -> None:
        self.path = Path(path)
        self.by = by or operator_id()
        self.warnings: list[str] = []
        self.entries: list[TimelineEntry] = []
        self._lock = threading.Lock()
        if self.path.exists():
            self.entries, self.warnings = load(self.path)
        created = not self.path.exists()
        self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        if created:
            _fsync_dir(self.path.parent)   # the new file's name is durable too
        if self.path.exists() and self.path.stat().st_size and not self._ends_with_newline():
            os.write(self._fd, b"\n")  # seal a torn line so the next entry starts clean
        self._seq = max((e.seq for e in self.entries), default=0)

    @property
    def incident_id(self) -> str:
        return self.path.name.removesuffix(SUFFIX)

    def _ends_with_newline(self) -> bool:
        with open(self.path, "rb") as fh:
            fh.seek(-1, os.SEEK_END)
            return fh.read(1) == b"\n"

    def append(self, kind: str, text: str = "", *, node: str | None = None, **fields: Any) -> TimelineEntry:
        if kind not in TIMELINE_KINDS:
            raise ValueError(f"unknown timeline kind {kind!r}")
        verdict = fields.get("verdict")
        if verdict is not None and verdict not in VERDICTS:
            raise ValueError(f"unknown verdict {verdict!r}")
        unknown = set(fields) - _FIELDS
        if unknown:
            raise ValueError(f"unknown timeline fields {sorted(unknown)}")
        with self._lock:
            entry = TimelineEntry(ts=now_iso(), seq=self._seq + 1, by=self.by, kind=kind, node=node,
                                  text=text, **fields)
            self._write((entry_to_json(entry) + "\n").encode("utf-8"))
            self._seq += 1            # only once the line is on disk
            self.entries.append(entry)
        return entry

    def _write(self, data: bytes) -> None:
        """The whole line, fsynced; on failure (disk full) the file is cut back to where it
        was, so the next entry does not land glued to a torn fragment."""
        size = os.fstat(self._fd).st_size
        try:
            view = memoryview(data)
            while view:
                written = os.write(self._fd, view)
                view = view[written:]
            os.fsync(self._fd)
        except OSError:
            try:
                os.ftruncate(self._fd, size)
            except OSError:
                pass
            raise

    def close(self) -> None:
        with self._lock:
            if self._fd >= 0:
                os.close(self._fd)
                self._fd = -1

    def __enter__(self) -> "Timeline":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def open_incident(directory: Path | None = None, incident_id: str | None = None,
                  *, by: str | None = None) -> Timeline:
    """Open (or continue, with ``incident_id``) an incident in ``directory``."""
    directory = Path(directory) if directory else default_incident_dir()
    warnings = ensure_dir(directory)
    ident = incident_id or new_incident_id()
    if "/" in ident or ident.startswith(".") or not ident:
        raise ValueError(f"bad incident id {ident!r}")
    tl = Timeline(directory / (ident + SUFFIX), by=by)
    tl.warnings[:0] = warnings
    return tl


def list_incidents(directory: Path | None = None) -> list[tuple[str, Path, int, str | None]]:
    """(id, path, entry count, first timestamp) of every incident, newest first."""
    directory = Path(directory) if directory else default_incident_dir()
    if not directory.is_dir():
        return []
    out = []
    for path in directory.glob("*" + SUFFIX):
        entries, _ = load(path)
        out.append((path.name.removesuffix(SUFFIX), path, len(entries), entries[0].ts if entries else None))
    out.sort(key=lambda t: t[1].stat().st_mtime, reverse=True)
    return out


def resolve(ref: str, directory: Path | None = None) -> Path:
    """A timeline reference (a file path or an incident id) -> the file path."""
    path = Path(ref)
    if path.is_file():
        return path
    directory = Path(directory) if directory else default_incident_dir()
    candidate = directory / (ref + SUFFIX)
    if candidate.is_file():
        return candidate
    raise FileNotFoundError(f"no incident {ref!r} (neither a file nor an id in {directory})")


def iter_json(entries: Iterable[TimelineEntry]) -> Iterable[dict[str, Any]]:
    for e in entries:
        yield dataclasses.asdict(e)
