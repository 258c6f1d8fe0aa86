"""The PromQL the fleet source asks: one round = six instant queries, sent at once.

No ``job`` or ``instance`` label is assumed: every query aggregates ``by`` the labels that name a
GPU in dcgm-exporter's series (``Hostname`` and ``gpu``, and ``GPU_I_ID`` for a MIG instance), so
the same GPU scraped by two jobs comes back once, and the answers carry only the labels the
console reads (at 4096 nodes x 8 GPUs a metric's answer is ~2.5 MB, not the 12 MB of the raw
series). The GPU's ``UUID`` comes once per GPU, with its model and pod, in INFO.

- USED, UTIL: the current FB_USED and GPU_UTIL per GPU (one query each: Prometheus evaluates
  them side by side; one regex query over several names was slower, measured).
- INFO and TOTAL: the UUID, the model and the pod (``namespace``/``pod``, when dcgm-exporter
  maps pods), and FB_USED + FB_FREE (the framebuffer's size): what does not change, asked with
  the INFO cadence (console/sources/prometheus/source.py), not every round.
- IDLE: per GPU whose utilisation stayed 0 for the whole window and that held more than
  IDLE_FLOOR_MIB all along, the least memory it held (``min_over_time`` of FB_USED); "the whole
  window" also needs a sample from the window's start (``offset``), so a GPU whose series is
  younger than the window is not idle yet.
- XID: per GPU, the highest non-zero Xid seen in the window (the current value is in it).
"""
from __future__ import annotations

import math
import re

USED, FREE, UTIL, XID = ("DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_FREE", "DCGM_FI_DEV_GPU_UTIL",
                         "DCGM_FI_DEV_XID_ERRORS")
METRICS = (USED, FREE, UTIL, XID)
#: the labels that name one GPU (or MIG instance) of one node
GPU_KEY = "Hostname, gpu, GPU_I_ID"
_GPU = "Hostname, gpu"
#: memory at or below this (MiB) is what an idle GPU keeps anyway (driver, persistence mode, a
#: CUDA context or two): the idle query leaves such GPUs out (console/diagnosis/fleet.py's floor)
IDLE_FLOOR_MIB = 1024

#: the shortest and longest suspicion windows (seconds): tests use a few seconds, on-call 10 min
WINDOW_S = (1.0, 7 * 86400.0)


_WINDOW_RE = re.compile(r"^([0-9]+(?:\.[0-9]+)?)(ms|s|m|min|h|d)?$")
_UNIT_S = {"ms": 0.001, "s": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0, "d": 86400.0}


def parse_window(text: str) -> float:
    """``10m``, ``5s``, ``1.5h``, ``600`` (seconds) -> seconds; ValueError of one line."""
    m = _WINDOW_RE.match(text.strip().lower())
    if not m:
        raise ValueError(f"bad window {text!r}: a number with s, m, h or d (10m, 5s, 1h)")
    seconds = float(m.group(1)) * _UNIT_S[m.group(2) or "s"]
    if not WINDOW_S[0] <= seconds <= WINDOW_S[1]:
        raise ValueError(f"window {text!r} is out of range (1s to 7d)")
    return seconds


def duration(seconds: float) -> str:
    """A PromQL duration: whole milliseconds (``600000ms``), so any window in range is exact."""
    if not math.isfinite(seconds) or not WINDOW_S[0] <= seconds <= WINDOW_S[1]:
        raise ValueError(f"window {seconds!r} s is out of range ({WINDOW_S[0]:g} s to {WINDOW_S[1]:g} s)")
    return f"{round(seconds * 1000)}ms"


def value_query(metric: str) -> str:
    return f"max by ({GPU_KEY}) ({metric})"


def info_query() -> str:
    return f"count by ({_GPU}, UUID, modelName, namespace, pod) ({USED})"


def total_query() -> str:
    return f"max by ({GPU_KEY}) ({USED} + {FREE})"


def idle_query(window_s: float) -> str:
    w = duration(window_s)
    return (f"max by ({GPU_KEY}) (min_over_time({USED}[{w}])) > {IDLE_FLOOR_MIB}"
            f" and on ({_GPU}) (max by ({_GPU}) (max_over_time({UTIL}[{w}])) == 0)"
            f" and on ({_GPU}) ({UTIL} offset {w})")


def xid_query(window_s: float) -> str:
    return f"max by ({_GPU}) (max_over_time({XID}[{duration(window_s)}])) > 0"


def round_queries(window_s: float) -> dict[str, str]:
    """The queries of one round, by name (build_nodes's argument names)."""
    return {"used": value_query(USED), "util": value_query(UTIL),
            "info": info_query(), "total": total_query(), "idle": idle_query(window_s), "xid": xid_query(window_s)}
