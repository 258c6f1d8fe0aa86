"""The incident timeline: one JSON-lines file per incident, append-only and durable.

Each entry is appended with flush + fsync before anyone is shown it. Files are 0600, opened
without following symlinks; the incident directory is created 0700, and an existing one must
be the user's own and not writable by others (console/incident/safefiles.py). Several
consoles may append to one incident: every append holds an exclusive ``flock`` on the file
and takes its ``seq`` from the file's last entry, read under that lock, so seqs stay unique
and increase in file order. A torn last line (a crash mid-write) is skipped with a warning on
load and sealed before the next append; nothing before it is lost.
"""
from __future__ import annotations

import dataclasses
import datetime as dt
import errno
import fcntl
import getpass
import json
import os
import secrets
import socket
import threading
import time
from pathlib import Path
from typing import Any, Iterable

from console.incident import safefiles
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


def iso_at(t: float) -> str:
    """An entry's ``ts`` for the epoch time ``t``: UTC, milliseconds, ``Z``."""
    return dt.datetime.fromtimestamp(t, dt.timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def now_iso() -> str:
    return iso_at(time.time())


def new_incident_id() -> str:
    stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%d-%H%M%S")
    return f"{stamp}-{secrets.token_hex(2)}"


def ensure_dir(directory: Path) -> list[str]:
    """Create ``directory`` 0700 when absent. An existing one must be the user's own and not
    writable by group or others (else safefiles.UnsafeDirectory, one line); a warning when
    others can read it."""
    directory = Path(directory)
    if not directory.exists() and not directory.is_symlink():
        directory.mkdir(parents=True, mode=0o700)
        os.chmod(directory, 0o700)  # umask may have narrowed, never widened; be exact
    elif not directory.is_dir():
        raise NotADirectoryError(f"incident dir {directory} is not a directory")
    return safefiles.check_dir(directory)


def entry_to_json(entry: TimelineEntry) -> str:
    return json.dumps(dataclasses.asdict(entry), ensure_ascii=False, separators=(",", ":"))


_TYPES: dict[str, tuple[type, ...]] = {
    "ts": (str,), "seq": (int,), "by": (str,), "kind": (str,), "node": (str, type(None)),
    "text": (str,), "hypothesis": (int, type(None)), "action": (int, type(None)),
    "command": (str, type(None)), "rc": (int, type(None)), "output": (str, type(None)),
    "gpu_memory_before": (dict, type(None)), "gpu_memory_after": (dict, type(None)),
    "freed_mib": (int, type(None)), "seconds_to_free": (int, float, type(None)),
    "verdict": (str, type(None)), "targets": (list, type(None)), "outcome": (bool, type(None)),
    "digest": (list, type(None)), "rung": (str, type(None)), "gpus": (list, type(None)),
    "console": (dict, type(None)), "findings": (list, type(None)), "facts": (dict, type(None)),
    "workload": (list, type(None)),
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
    if known.get("targets") and not all(isinstance(t, dict) for t in known["targets"]):
        raise ValueError("targets has the wrong type")
    for key in ("findings", "workload"):
        if known.get(key) and not all(isinstance(t, dict) for t in known[key]):
            raise ValueError(f"{key} has the wrong type")
    if known.get("digest") and not all(isinstance(t, str) for t in known["digest"]):
        raise ValueError("digest has the wrong type")
    return TimelineEntry(**known)


def parse_lines(data: bytes, name: str) -> tuple[list[TimelineEntry], list[str]]:
    """Entries of a file's bytes and warnings (torn or unreadable lines are skipped)."""
    entries: list[TimelineEntry] = []
    warnings: list[str] = []
    raw_lines = data.split(b"\n")
    last = len(raw_lines) - 1
    while last >= 0 and not raw_lines[last].strip():
        last -= 1
    for number, raw in enumerate(raw_lines[: last + 1], start=1):
        if not raw.strip():
            continue
        entry = _parse(raw)
        if entry is not None:
            entries.append(entry)
        else:
            where = "torn last line" if number == last + 1 else f"unreadable line {number}"
            warnings.append(f"{name}: {where} skipped")
    return entries, warnings


def _parse(raw: bytes) -> TimelineEntry | None:
    try:
        data = json.loads(raw.decode("utf-8"))
        if not isinstance(data, dict):
            return None
        return entry_from_dict(data)
    except (ValueError, TypeError, UnicodeDecodeError, RecursionError):
        return None


def load(path: str | os.PathLike[str]) -> tuple[list[TimelineEntry], list[str]]:
    """Entries of one incident file and warnings (torn or unreadable lines are skipped)."""
    with open(path, "rb") as fh:
        return parse_lines(fh.read(), Path(path).name)


def outcomes(entries: Iterable[TimelineEntry]) -> dict[int, TimelineEntry]:
    """{action seq: its outcome observation} (the first one naming it, as written)."""
    out: dict[int, TimelineEntry] = {}
    for e in entries:
        if e.kind == "observation" and e.outcome is True and isinstance(e.action, int):
            out.setdefault(e.action, e)
    return out


def hypothesis_numbers(entries: Iterable[TimelineEntry]) -> dict[int, int]:
    """{hypothesis seq: its number in this incident} — 1, 2, 3 in the order they were stated
    (what people say and read: "H2", never the timeline seq)."""
    out: dict[int, int] = {}
    for e in entries:
        if e.kind == "hypothesis" and isinstance(e.seq, int) and not isinstance(e.seq, bool):
            out.setdefault(e.seq, len(out) + 1)
    return out


def hypothesis_label(numbers: dict[int, int], seq: object) -> str:
    """"H2" for a hypothesis seq of this incident; "#seq" for one it does not hold."""
    number = numbers.get(seq) if isinstance(seq, int) and not isinstance(seq, bool) else None
    return f"H{number}" if number is not None else f"#{seq}"


LOCK_WAIT_S = 5.0           # an append waits this long for another console's lock, then fails
TAIL_CHUNK = 4096           # bytes read from the file's end to find the last seq


class Timeline:
    """An open incident file. Thread-safe; every append is on disk before it returns.

    Several Timelines (in one process or several) may append to one file: each append takes
    an exclusive flock, reads what others appended since (``entries`` stays the file's, in
    file order), seals a torn last line, and gives the new entry the seq after the file's
    last entry.
    """

    def __init__(self, path: Path, *, by: str | None = None) -> None:
        self.path = Path(path)
        self.by = by or operator_id()
        self.warnings: list[str] = []
        self.entries: list[TimelineEntry] = []
        self._lock = threading.Lock()
        self._end = 0               # bytes of the file read into `entries` (or written by us)
        self._pending = b""         # an incomplete last line seen by the last read
        self._lines = 0             # complete lines read (for warnings)
        self._max_seq = 0           # the highest seq read from the file
        #: the seqs this Timeline appended (every other entry is another writer's: a follower's
        #: note, a second console's; console/incident/pairing.py tells the driver of them)
        self.own: set[int] = set()
        existed = self.path.exists()
        self._fd = safefiles.open_incident_file(self.path)
        try:
            if not existed:
                safefiles.fsync_dir(self.path.parent)   # the new file's name is durable too
            with self._flocked():
                self._catch_up(os.fstat(self._fd).st_size)
        except BaseException:
            os.close(self._fd)
            raise

    @property
    def incident_id(self) -> str:
        return self.path.name.removesuffix(SUFFIX)

    # ------------------------------------------------------------------ locking and reading
    def _flocked(self) -> "_Flock":
        return _Flock(self._fd, self.path.name)

    def _catch_up(self, size: int) -> int:
        """Read what was appended since our last look (another console's entries); a file
        that shrank is read again from the start. We hold the lock, so no writer is mid-line:
        a last line without its newline is torn (a crash) and is sealed with one. Returns the
        file's size."""
        if size < self._end:
            self.entries, self._end, self._pending, self._lines, self._max_seq = [], 0, b"", 0, 0
            self.warnings.append(f"{self.path.name} shrank: read again from the start")
        if size > self._end:
            data = self._pending + _pread_all(self._fd, self._end, size - self._end)
            self._end = size
            complete, newline, self._pending = data.rpartition(b"\n")
            for raw in complete.split(b"\n") if newline else ():
                self._lines += 1
                self._take(raw, f"unreadable line {self._lines}")
        if self._pending:
            self._write_all(b"\n")             # first: on failure nothing is marked sealed
            self._lines += 1
            self._take(self._pending, "torn last line")   # taken when complete but for its newline
            self._pending = b""
            size = self._end = size + 1
        return size

    def _take(self, raw: bytes, where: str) -> None:
        if not raw.strip():
            return
        entry = _parse(raw)
        if entry is None:
            self.warnings.append(f"{self.path.name}: {where} skipped")
        else:
            self.entries.append(entry)
            self._max_seq = max(self._max_seq, entry.seq)

    def _last_seq(self, size: int) -> int:
        """The seq of the last readable entry in the file (0 for none), read from its end."""
        chunk = TAIL_CHUNK
        while True:
            start = max(0, size - chunk)
            data = _pread_all(self._fd, start, size - start)
            lines = data.split(b"\n")
            if start > 0:
                lines = lines[1:]           # the first piece may be the end of a longer line
            for raw in reversed(lines):
                if raw.strip():
                    entry = _parse(raw)
                    if entry is not None:
                        return entry.seq
            if start == 0:
                return 0
            chunk *= 4

    def refresh(self) -> list[TimelineEntry]:
        """``entries`` with what other writers appended since (read under the lock)."""
        with self._lock:
            if self._fd >= 0:
                with self._flocked():
                    self._catch_up(os.fstat(self._fd).st_size)
        return self.entries

    # ------------------------------------------------------------------ writing
    def _check_in_place(self) -> None:
        """The open file is still the file at the path: an entry written to a deleted or
        replaced file is not durable (and an action is then refused: console/actions/run.py
        records before it sends)."""
        st = os.fstat(self._fd)
        try:
            now = os.stat(self.path, follow_symlinks=False)
        except FileNotFoundError:
            raise OSError(errno.ENOENT, f"{self.path.name} was deleted") from None
        if (now.st_dev, now.st_ino) != (st.st_dev, st.st_ino):
            raise OSError(errno.ESTALE, f"{self.path.name} was replaced by another file")
        if st.st_nlink == 0:
            raise OSError(errno.ENOENT, f"{self.path.name} was deleted")

    def append(self, kind: str, text: str = "", *, node: str | None = None, **fields: Any) -> TimelineEntry:
        if kind not in TIMELINE_KINDS:
            raise ValueError(f"unknown timeline kind {kind!r}")
        verdict = fields.get("verdict")
        if verdict is not None and verdict not in VERDICTS:
            raise ValueError(f"unknown verdict {verdict!r}")
        unknown = set(fields) - _FIELDS
        if unknown:
            raise ValueError(f"unknown timeline fields {sorted(unknown)}")
        if fields.get("targets") is not None:
            fields["targets"] = [dict(t) for t in fields["targets"]]
        if fields.get("digest") is not None:
            fields["digest"] = [str(line) for line in fields["digest"]]
        if fields.get("console") is not None:
            fields["console"] = dict(fields["console"])
        with self._lock:
            if self._fd < 0:
                raise OSError(errno.EBADF, f"{self.path.name} is closed")
            self._check_in_place()
            with self._flocked():
                size = self._catch_up(os.fstat(self._fd).st_size)
                # the file's last entry decides; the highest seq read from the file is only a floor
                # (a garbage tail must not make seqs start again)
                seq = max(self._last_seq(size), self._max_seq) + 1
                entry = TimelineEntry(ts=now_iso(), seq=seq, by=self.by, kind=kind, node=node,
                                      text=text, **fields)
                data = (entry_to_json(entry) + "\n").encode("utf-8")
                self._write(data, size)
                self._end = size + len(data)
                self.own.add(seq)           # first: a reader of ``entries`` never takes it for another's
                self.entries.append(entry)
                self._max_seq = max(self._max_seq, seq)
        return entry

    def _write_all(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            view = view[os.write(self._fd, view):]
        os.fsync(self._fd)

    def _write(self, data: bytes, size: int) -> None:
        """The whole line, fsynced; on failure (disk full) the file is cut back to ``size``,
        so the next entry does not land glued to a torn fragment."""
        try:
            self._write_all(data)
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


class _Flock:
    """An exclusive flock on the incident file, waited for at most LOCK_WAIT_S."""

    def __init__(self, fd: int, name: str) -> None:
        self.fd = fd
        self.name = name

    def __enter__(self) -> None:
        deadline = time.monotonic() + LOCK_WAIT_S
        pause = 0.001
        while True:
            try:
                fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise OSError(errno.EWOULDBLOCK, f"{self.name} is locked by another writer "
                                  f"for more than {LOCK_WAIT_S:g} s") from None
                time.sleep(pause)
                pause = min(pause * 2, 0.01)

    def __exit__(self, *exc: object) -> None:
        fcntl.flock(self.fd, fcntl.LOCK_UN)


def _pread_all(fd: int, offset: int, length: int) -> bytes:
    parts: list[bytes] = []
    while length > 0:
        chunk = os.pread(fd, min(length, 1 << 24), offset)
        if not chunk:
            break
        parts.append(chunk)
        offset += len(chunk)
        length -= len(chunk)
    return b"".join(parts)


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
        if path.is_symlink() or not path.is_file():
            continue                    # never read through a link planted in the directory
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
    if candidate.is_symlink():
        raise safefiles.UnsafeFile(f"{candidate} is a symbolic link: refusing to read through it")
    if candidate.is_file():
        return candidate
    raise FileNotFoundError(f"no incident {ref!r} (neither a file nor an id in {directory})")


def iter_json(entries: Iterable[TimelineEntry]) -> Iterable[dict[str, Any]]:
    for e in entries:
        yield dataclasses.asdict(e)
