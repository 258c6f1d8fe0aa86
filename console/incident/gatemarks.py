"""The last clean verdict the gate gave each node, kept beside the incidents (``gate-marks.log``
in the incident directory): the node's boot time and its uptime then. A kernel line is fresh
when it was logged after the last clean verdict of the same boot (dmesg stamps lines with
seconds since boot), so an Xid the gate already passed a node over does not fail it forever,
and one logged during the next job does.

One JSON line per clean verdict, appended without following a link (console/incident/safefiles.py);
read back bounded, the newest line of a node winning. Never raises for the disk.
"""
from __future__ import annotations

import json
import math
import os
import time
from pathlib import Path
from typing import Any

from console.incident import safefiles
from console.incident.timeline import ensure_dir
from console.model import NodeSnapshot

FILE = "gate-marks.log"
READ_LIMIT = 1 << 20
#: boot times read from two polls of one boot differ by rounding; more than this is another boot
SAME_BOOT_S = 5.0


def path_in(directory: str | os.PathLike[str]) -> Path:
    return Path(directory) / FILE


def load(directory: str | os.PathLike[str] | None) -> dict[str, dict[str, float]]:
    """{node: {"boot_time", "uptime"}} of the newest clean verdict of each node."""
    if directory is None:
        return {}
    try:
        raw = safefiles.read_own_file(path_in(directory), READ_LIMIT)
    except (OSError, ValueError, safefiles.UnsafeFile):
        return {}
    out: dict[str, dict[str, float]] = {}
    for line in raw.decode("utf-8", "replace").splitlines():
        try:
            item = json.loads(line)
        except ValueError:
            continue
        if not isinstance(item, dict) or not isinstance(item.get("node"), str):
            continue
        boot, up = item.get("boot_time"), item.get("uptime")
        if all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in (boot, up)):
            out[item["node"]] = {"boot_time": float(boot), "uptime": float(up)}
    return out


def clean_uptime(marks: dict[str, Any], snap: NodeSnapshot) -> float | None:
    """The node's uptime at its last clean verdict in the boot ``snap`` was read in, or None."""
    mark = marks.get(snap.name)
    if not mark or snap.boot_time is None or abs(mark["boot_time"] - snap.boot_time) > SAME_BOOT_S:
        return None
    return mark["uptime"]


def record(directory: str | os.PathLike[str] | None, snap: NodeSnapshot) -> None:
    """Keep a clean verdict on ``snap`` (nothing without a directory or the node's boot time)."""
    if directory is None or snap.boot_time is None:
        return
    line = json.dumps({"node": snap.name[:200], "boot_time": round(snap.boot_time, 1),
                       "uptime": round(snap.taken_at - snap.boot_time, 1), "at": round(time.time(), 1)}) + "\n"
    try:
        ensure_dir(Path(directory))                # a clean gate opens no incident: the dir may be new
        fd = safefiles.open_incident_file(path_in(directory))
    except (OSError, safefiles.UnsafeFile, safefiles.UnsafeDirectory):
        return
    try:
        os.write(fd, line.encode())
    except OSError:
        pass
    finally:
        os.close(fd)
