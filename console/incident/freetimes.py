"""How long memory takes to come back here: every time-to-free the console measured, kept beside
the incidents (``times-to-free.log`` in the incident directory), so that a wait is sized by
this cluster's own history, not a guess.

One JSON line per measurement: ``{"node", "after", "seconds", "at"}`` (and ``"demo": true`` for one
measured on a simulated node: kept apart, never counted) — ``after`` is what ended
before the memory came back: ``job`` (the gate, after a job), or the rung (``sigterm``,
``sigkill``, ``kill-holders``, …) of a verified action. The file is the user's own, appended
without following a link (console/incident/safefiles.py), and read back bounded (the last
``KEEP`` lines of its last MiB); past ROTATE_BYTES it is rewritten with those, so it never grows
without bound. ``usually(...)`` is the 90th percentile of the last measurements of that kind
(that node's when it has enough of its own, else every node's): "usually within N s here".
"""
from __future__ import annotations

import json
import math
import os
import time
from pathlib import Path
from statistics import quantiles

from console.incident import safefiles

FILE = "times-to-free.log"
#: the measurements read back (the newest)
KEEP = 2000
#: what is read back of the file: its last MiB (KEEP lines take about 150 KiB)
READ_LIMIT = 1 << 20
#: past this the file is rewritten with its newest KEEP lines, so it never grows without bound
ROTATE_BYTES = 2 << 20
#: measurements needed before a figure is said
AT_LEAST = 3


def path_in(directory: str | os.PathLike[str]) -> Path:
    return Path(directory) / FILE


def record(directory: str | os.PathLike[str] | None, node: str, after: str, seconds: float | None, *,
           demo: bool = False) -> None:
    """Append one measurement (nothing without a directory or a time; never raises for the disk).
    ``demo``: measured on a simulated node — kept, marked, and never counted (``load``)."""
    if directory is None or seconds is None or not math.isfinite(seconds) or seconds < 0:
        return
    item = {"node": str(node)[:200], "after": str(after)[:40], "seconds": round(float(seconds), 1),
            "at": round(time.time(), 1)}
    line = json.dumps({**item, "demo": True} if demo else item) + "\n"
    try:
        fd = safefiles.open_incident_file(path_in(directory))
    except (OSError, safefiles.UnsafeFile):
        return
    try:
        os.write(fd, line.encode())
        size = os.fstat(fd).st_size
    except OSError:
        size = 0
    finally:
        os.close(fd)
    if size > ROTATE_BYTES:
        _keep_newest(directory)


def _keep_newest(directory: str | os.PathLike[str]) -> None:
    """The file past ROTATE_BYTES: rewritten with its newest KEEP lines (atomically: a reader sees
    the old file or the new one whole)."""
    try:
        raw = safefiles.read_own_file(path_in(directory), READ_LIMIT, tail=True)
        lines = raw.splitlines(keepends=True)[-KEEP:]
        safefiles.write_atomic(path_in(directory), b"".join(lines))
    except (OSError, ValueError, safefiles.UnsafeFile):
        pass


def is_demo(item: dict) -> bool:
    """A measurement on a simulated node: marked so, or (written before the mark) on a node named
    as the simulated targets are (``demo``, ``demo:NAME``)."""
    node = str(item.get("node") or "")
    return item.get("demo") is True or node == "demo" or node.startswith("demo:")


def load(directory: str | os.PathLike[str] | None, *, demo: bool = False) -> list[dict]:
    """The last KEEP measurements (malformed lines skipped); those of simulated nodes only with
    ``demo`` (a demo's timings never size a real wait, nor the metrics' histogram)."""
    if directory is None:
        return []
    try:
        raw = safefiles.read_own_file(path_in(directory), READ_LIMIT, tail=True)   # the newest lines
    except (OSError, ValueError, safefiles.UnsafeFile):
        return []
    out = []
    for line in raw.decode("utf-8", "replace").splitlines()[-KEEP:]:
        try:
            item = json.loads(line)
        except ValueError:
            continue
        if isinstance(item, dict) and isinstance(item.get("seconds"), (int, float)) and \
                math.isfinite(item["seconds"]) and isinstance(item.get("after"), str) and (demo or not is_demo(item)):
            out.append(item)
    return out


def usually(items: list[dict], after: str, node: str | None = None) -> tuple[float, int] | None:
    """(the 90th percentile in seconds, how many measurements) of ``after`` — on ``node`` when
    it has AT_LEAST of its own, else on every node; None with fewer than AT_LEAST."""
    kind = [i for i in items if i.get("after") == after]
    own = [i for i in kind if node is not None and i.get("node") == node]
    use = own if len(own) >= AT_LEAST else kind
    if len(use) < AT_LEAST:
        return None
    values = sorted(float(i["seconds"]) for i in use)
    p90 = quantiles(values, n=10, method="inclusive")[-1]
    return round(p90, 1), len(values)


def said(items: list[dict], after: str, node: str | None = None) -> str:
    """"memory usually comes back within 26 s here (after SIGKILL, 12 times)", or ""."""
    hit = usually(items, after, node)
    if hit is None:
        return ""
    seconds, n = hit
    what = "a job" if after == "job" else after.upper() if after.startswith("sig") else after
    return f"memory usually comes back within {seconds:g} s here (after {what}, {n} times)"
