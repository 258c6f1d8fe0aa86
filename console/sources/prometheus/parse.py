"""Prometheus HTTP API answers -> the fleet model. Pure: bytes in, data out, never raises
anything but ApiError (one printable line), whatever the answer holds.

The answer format is Prometheus's (https://prometheus.io/docs/prometheus/latest/querying/api/):
``{"status": "success", "data": {"resultType": "vector", "result": [{"metric": {...},
"value": [ts, "1.5"]}]}, "warnings": [...]}`` or ``{"status": "error", "errorType": ...,
"error": ...}``. Sample values are strings; ``NaN``, ``+Inf`` and ``-Inf`` (and anything that is
no finite number) become None, never 0.

A GPU is named by its ``Hostname`` and its ``gpu`` index / ``UUID`` labels; nothing depends on
``job`` or ``instance``. The same GPU answered twice (two jobs scraping one exporter) counts once
(the highest value); a MIG instance (``GPU_I_ID``) adds its memory to its GPU's. A series without
a ``Hostname`` is left out and counted in a warning.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any, Iterable

from console.model import FleetGpu, FleetNode
from console.sources.prometheus.queries import FREE, USED, UTIL, XID
from console.textsafe import one_line

#: label values longer than this are cut (a hostile exporter cannot grow the console's memory
#: through them; real ones are far shorter)
LABEL_MAX = 256
#: Prometheus's own error text is cut to this many characters
ERROR_MAX = 300

Labels = dict[str, str]
Sample = tuple[Labels, float | None]
GpuKey = tuple[str, str, str]        # (Hostname, gpu, UUID)


class ApiError(Exception):
    """The answer is no usable query result: one printable line."""


def _number(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        v = float(value)
    elif isinstance(value, str) and len(value) <= 64:
        try:
            v = float(value)
        except ValueError:
            return None
    else:
        return None
    return v if math.isfinite(v) else None


def _labels(metric: Any) -> Labels:
    if not isinstance(metric, dict):
        return {}
    return {k[:LABEL_MAX]: v[:LABEL_MAX] for k, v in metric.items()
            if isinstance(k, str) and isinstance(v, str)}


def parse_vector(body: bytes | str) -> tuple[list[Sample], list[str]]:
    """An instant query's answer -> its samples and Prometheus's warnings (printable lines).

    ApiError for an answer that is no JSON, an error answer (Prometheus's ``errorType: error``,
    made one printable line) or a result that is not a vector."""
    try:
        doc = json.loads(body)
    except (ValueError, UnicodeDecodeError, RecursionError):
        raise ApiError("answer is not JSON (is this Prometheus?)") from None
    if not isinstance(doc, dict):
        raise ApiError("answer is not a Prometheus API object")
    warnings = [one_line(w, ERROR_MAX) for w in doc.get("warnings") or () if isinstance(w, str)][:10] \
        if isinstance(doc.get("warnings"), list) else []
    if doc.get("status") != "success":
        kind = doc.get("errorType")
        text = doc.get("error")
        words = one_line(f"{kind}: {text}" if isinstance(kind, str) and kind else text or "no error text", ERROR_MAX)
        raise ApiError(f"Prometheus error: {words}")
    data = doc.get("data")
    if not isinstance(data, dict) or data.get("resultType") not in ("vector", "scalar"):
        rtype = data.get("resultType") if isinstance(data, dict) else None
        raise ApiError(f"unexpected answer: result type {one_line(rtype, 40)!s} (want vector)")
    result = data.get("result")
    if data.get("resultType") == "scalar" or not isinstance(result, list):
        return [], warnings
    out: list[Sample] = []
    for item in result:
        if not isinstance(item, dict):
            continue
        value = item.get("value")
        v = _number(value[1]) if isinstance(value, list) and len(value) == 2 else None
        out.append((_labels(item.get("metric")), v))
    return out, warnings


def gpu_key(labels: Labels) -> GpuKey | None:
    host = labels.get("Hostname", "")
    if not host:
        return None
    return (host, labels.get("gpu", ""), labels.get("UUID", ""))


@dataclass
class _Gpu:
    # per MIG instance id ("" for the whole GPU): the highest value answered for each metric
    parts: dict[str, dict[str, float | None]] = field(default_factory=dict)
    idle: dict[str, float | None] = field(default_factory=dict)
    window_xid: float | None = None
    model: str | None = None
    pod: str | None = None

    def put(self, metric: str, instance: str, value: float | None) -> None:
        part = self.parts.setdefault(instance, {})
        old = part.get(metric)
        part[metric] = value if old is None else (old if value is None else max(old, value))


def _sum(values: Iterable[float | None]) -> float | None:
    seen = [v for v in values if v is not None]
    return sum(seen) if seen else None


def _max(values: Iterable[float | None]) -> float | None:
    seen = [v for v in values if v is not None]
    return max(seen) if seen else None


def _index(label: str) -> int | None:
    return int(label) if label.isdecimal() and len(label) <= 4 else None


def _xid(value: float | None) -> int | None:
    if value is None or not 0 <= value < 2 ** 31:
        return None
    return int(value)


def build_nodes(values: list[Sample], info: list[Sample] = (), idle: list[Sample] = (),
                xid: list[Sample] = ()) -> tuple[tuple[FleetNode, ...], list[str]]:
    """The four queries' samples (console/sources/prometheus/queries.py) -> nodes sorted by
    hostname, each with its GPUs sorted by index, and warnings (printable lines).

    Memory total is FB_USED + FB_FREE (None when either is missing); utilisation the highest of
    the GPU's instances; ``idle_held_mib`` the least memory held over the window by a GPU idle
    for all of it (None when it was not); ``last_xid`` the highest Xid of the window, else the
    current XID_ERRORS value."""
    gpus: dict[GpuKey, _Gpu] = {}
    nameless = 0
    for labels, v in values:
        key = gpu_key(labels)
        if key is None:
            nameless += 1
            continue
        metric = labels.get("__name__", "")
        if metric in (USED, FREE, UTIL, XID):
            gpus.setdefault(key, _Gpu()).put(metric, labels.get("GPU_I_ID", ""), v)
    for labels, v in info:
        key = gpu_key(labels)
        g = gpus.get(key) if key else None
        if g is None:
            continue
        g.model = g.model or labels.get("modelName") or None
        ns, pod = labels.get("namespace", ""), labels.get("pod", "")
        if pod and g.pod is None:
            g.pod = f"{ns}/{pod}" if ns else pod
    for labels, v in idle:
        key = gpu_key(labels)
        g = gpus.get(key) if key else None
        if g is not None:
            inst = labels.get("GPU_I_ID", "")
            old = g.idle.get(inst)
            g.idle[inst] = v if old is None else (old if v is None else max(old, v))
    for labels, v in xid:
        key = gpu_key(labels)
        g = gpus.get(key) if key else None
        if g is not None and v is not None:
            g.window_xid = v if g.window_xid is None else max(g.window_xid, v)

    by_host: dict[str, list[FleetGpu]] = {}
    partial = 0
    for (host, label, uuid), g in gpus.items():
        parts = list(g.parts.values())
        used = _sum(p.get(USED) for p in parts)
        free = _sum(p.get(FREE) for p in parts)
        if used is None or free is None:
            partial += 1
        total = used + free if used is not None and free is not None else None
        current_xid = _max(p.get(XID) for p in parts)
        last = g.window_xid if g.window_xid else current_xid
        by_host.setdefault(host, []).append(FleetGpu(
            index=_index(label), uuid=uuid or None, model=g.model, memory_used_mib=used,
            memory_total_mib=total, utilization_pct=_max(p.get(UTIL) for p in parts),
            last_xid=_xid(last), pod=g.pod,
            idle_held_mib=_sum(g.idle.values()) if g.idle else None))
    warnings = []
    if nameless:
        warnings.append(f"{nameless} series without a Hostname label left out")
    if partial:
        warnings.append(f"{partial} GPU(s) lack FB_USED or FB_FREE: their memory total is unknown")
    nodes = tuple(FleetNode(hostname=h, gpus=tuple(sorted(gs, key=_gpu_order)))
                  for h, gs in sorted(by_host.items()))
    return nodes, warnings


def _gpu_order(g: FleetGpu) -> tuple:
    return (g.index is None, g.index if g.index is not None else 0, g.uuid or "")
