"""Prometheus HTTP API answers -> the fleet model. Pure: bytes in, data out, never raises
anything but ApiError (one printable line), whatever the answer holds.

The answer format is Prometheus's (https://prometheus.io/docs/prometheus/latest/querying/api/):
``{"status": "success", "data": {"resultType": "vector", "result": [{"metric": {...},
"value": [ts, "1.5"]}]}, "warnings": [...]}`` or ``{"status": "error", "errorType": ...,
"error": ...}``. Sample values are strings; ``NaN``, ``+Inf`` and ``-Inf`` (and anything that is
no finite number) become None, never 0.

A GPU is named by its ``Hostname`` and ``gpu`` labels (its ``UUID`` comes with its model); nothing
depends on ``job`` or ``instance``. The same GPU answered twice (two jobs scraping one exporter)
counts once (the higher value); a MIG instance (``GPU_I_ID``) adds its memory to its GPU's. A
series without a ``Hostname`` is left out and counted in a warning. Label values are read only
where needed, and cut at LABEL_MAX characters.
"""
from __future__ import annotations

import json
import math
from typing import Any, Iterable

from console.model import FleetGpu, FleetNode
from console.sources.prometheus.queries import IDLE_FLOOR_MIB
from console.textsafe import one_line

#: label values longer than this are cut (a hostile exporter cannot grow the console's memory
#: through them; real ones are far shorter)
LABEL_MAX = 256
#: Prometheus's own error text is cut to this many characters
ERROR_MAX = 300

Labels = dict[str, Any]
Sample = tuple[Labels, float | None]
GpuKey = tuple[str, str]             # (Hostname, gpu)


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


def _text(labels: Any, key: str) -> str:
    """A label's value: "" when absent or not text, cut at LABEL_MAX."""
    v = labels.get(key, "")
    if type(v) is not str:
        return ""
    return v if len(v) <= LABEL_MAX else v[:LABEL_MAX]


#: the most series one answer may hold (4096 nodes x 8 GPUs is 32,768; MIG adds some): past it the
#: answer is refused before it is parsed (1,000,000 series took 4.9 GB to parse)
MAX_SERIES = 65536


def parse_vector(body: bytes | str, max_series: int = MAX_SERIES) -> tuple[list[Sample], list[str]]:
    """An instant query's answer -> its samples and Prometheus's warnings (printable lines).

    ApiError for an answer that is no JSON, an error answer (Prometheus's ``errorType: error``,
    made one printable line), a result that is not a vector, or more than ``max_series``
    series (counted in the text, before anything is built)."""
    raw = body.encode() if isinstance(body, str) else body
    series = raw.count(b'"metric"')
    if series > max_series:
        raise ApiError(f"answer has {series:,} series, more than the {max_series:,} one query may bring: "
                       "refused (narrow the query: a label matcher, or fewer nodes per source)")
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
    append = out.append
    for item in result:               # the hot loop of a 4096-node round: no call per sample
        if type(item) is not dict:
            continue
        metric = item.get("metric")
        value = item.get("value")
        v = None
        if type(value) is list and len(value) == 2:
            raw = value[1]
            if type(raw) is str and len(raw) <= 64:
                try:
                    v = float(raw)
                except ValueError:
                    v = None
                else:
                    if v - v != 0.0:            # NaN or an infinity
                        v = None
            elif type(raw) in (int, float):
                v = _number(raw)
        append((metric if type(metric) is dict else {}, v))
    return out, warnings


def gpu_key(labels: Labels) -> GpuKey | None:
    host = _text(labels, "Hostname")
    if not host:
        return None
    return (host, _text(labels, "gpu"))


def _merge(old: float | None, new: float | None) -> float | None:
    """The same series answered twice (two jobs): the higher value."""
    if old is None:
        return new
    return old if new is None or new <= old else new


def _per_instance(samples: Iterable[Sample], counts: list[int]) -> dict[GpuKey, Any]:
    """GPU -> its value, or {MIG instance id: value} for a GPU answered per instance; samples
    without a Hostname are counted in ``counts[0]``. (The hot loop of a 4096-node round: label
    checks inline, no call per sample on the common path.)"""
    out: dict[GpuKey, Any] = {}
    get = out.get
    for labels, v in samples:
        host = labels.get("Hostname")
        if type(host) is not str or not host:
            counts[0] += 1
            continue
        index = labels.get("gpu", "")
        if type(index) is not str:
            index = ""
        if len(host) > LABEL_MAX or len(index) > LABEL_MAX:
            host, index = host[:LABEL_MAX], index[:LABEL_MAX]
        key = (host, index)
        inst = labels.get("GPU_I_ID")
        old = get(key, _ABSENT)
        if inst is None:
            if old is _ABSENT or old is None:
                out[key] = v
            elif type(old) is dict:
                old[""] = _merge(old.get(""), v)
            elif v is not None and v > old:
                out[key] = v
            continue
        inst = _text(labels, "GPU_I_ID")
        if type(old) is not dict:
            old = out[key] = {} if old is _ABSENT else {"": old}
        old[inst] = _merge(old.get(inst), v)
    return out


_ABSENT = object()


def _sum(value: Any) -> float | None:
    """A GPU's value (a number, None, or per MIG instance: the sum of those known)."""
    if type(value) is not dict:
        return value
    seen = [v for v in value.values() if v is not None]
    return sum(seen) if seen else None


def _max(value: Any) -> float | None:
    if type(value) is not dict:
        return value
    seen = [v for v in value.values() if v is not None]
    return max(seen) if seen else None


def _index(label: str) -> int | None:
    return int(label) if label.isdecimal() and len(label) <= 4 else None


def _xid(value: float | None) -> int | None:
    if value is None or not 0 <= value < 2 ** 31:
        return None
    return int(value)


def build_nodes(used: list[Sample], free: list[Sample] = (), util: list[Sample] = (),
                info: list[Sample] = (), idle: list[Sample] = (),
                xid: list[Sample] | None = (), total: list[Sample] = ()
                ) -> tuple[tuple[FleetNode, ...], list[str]]:
    """The round's answers (console/sources/prometheus/queries.py) -> nodes sorted by hostname,
    each with its GPUs sorted by index, and warnings (printable lines).

    A GPU is any (Hostname, gpu) that USED, FREE or UTIL names. Memory used is the sum over its
    MIG instances, total FB_USED + FB_FREE (``total``'s answer, else FREE's plus USED; None when
    neither says); utilisation the
    highest of its instances; ``idle_held_mib`` the least memory held over the window by a GPU
    idle for all of it (None when it was not); ``last_xid`` the highest Xid of the window, 0
    when there was none (None when ``xid`` is None: that query failed)."""
    counts = [0]
    u, f, t = _per_instance(used, counts), _per_instance(free, counts), _per_instance(util, counts)
    size = _per_instance(total, [0])
    held = _per_instance(idle, [0])
    xids: dict[GpuKey, float | None] = {}
    for labels, v in xid or ():
        key = gpu_key(labels)
        if key is not None:
            xids[key] = _merge(xids.get(key), v)
    about: dict[GpuKey, tuple[str | None, str | None, str | None]] = {}
    for labels, _v in info:
        key = gpu_key(labels)
        if key is None:
            continue
        uuid, model = _text(labels, "UUID") or None, _text(labels, "modelName") or None
        ns, pod = _text(labels, "namespace"), _text(labels, "pod")
        pod_name = (f"{ns}/{pod}" if ns else pod) if pod else None
        old = about.get(key)
        if old is None or (pod_name and not old[2]):
            about[key] = (uuid or (old[0] if old else None), model or (old[1] if old else None), pod_name)

    by_host: dict[str, list[FleetGpu]] = {}
    partial = 0
    indexes: dict[str, int | None] = {}
    no_info = (None, None, None)
    quiet_xid = 0 if xid is not None else None
    for key in {**u, **f, **t}:
        host, label = key
        mem_used, mem_free, mem_size = _sum(u.get(key)), _sum(f.get(key)), _sum(size.get(key))
        if mem_size is not None:
            total = mem_size
        elif mem_used is None or mem_free is None:
            partial += 1
            total = None
        else:
            total = mem_used + mem_free
        uuid, model, pod = about.get(key, no_info)
        index = indexes.get(label, _ABSENT)
        if index is _ABSENT:
            index = indexes[label] = _index(label)
        x = xids.get(key)
        gpus = by_host.get(host)
        if gpus is None:
            gpus = by_host[host] = []
        util_now, idle_held = _max(t.get(key)), _sum(held.get(key))
        if idle_held is not None and mem_used is not None:
            # the window ends now: memory back under the floor, or any use now, ends "idle" at
            # once (what an idle answer kept from an earlier round must not outlive)
            idle_held = None if mem_used <= IDLE_FLOOR_MIB or (util_now or 0) > 0 else min(idle_held, mem_used)
        gpus.append(FleetGpu(index=index, uuid=uuid, model=model, memory_used_mib=mem_used,
                             memory_total_mib=total, utilization_pct=util_now,
                             last_xid=quiet_xid if x is None else _xid(x), pod=pod,
                             idle_held_mib=idle_held))
    warnings = []
    if counts[0]:
        warnings.append(f"{counts[0]} series without a Hostname label left out")
    if partial:
        warnings.append(f"{partial} GPU(s) lack FB_USED or FB_FREE: their memory total is unknown")
    nodes = tuple(FleetNode(hostname=h, gpus=tuple(sorted(gs, key=_gpu_order)))
                  for h, gs in sorted(by_host.items()))
    return nodes, warnings


def _gpu_order(g: FleetGpu) -> tuple:
    return (g.index is None, g.index if g.index is not None else 0, g.uuid or "")
