"""The simulated nodes' GPUs in dcgm-exporter's text format, served on ``/metrics``.

What NVIDIA's dcgm-exporter prints (its default counters' HELP text, its labels in its order:
``gpu``, ``UUID``, ``pci_bus_id``, ``device``, ``modelName``, ``Hostname``,
``DCGM_FI_DRIVER_VERSION``, and ``container``/``namespace``/``pod`` where it maps pods), for the
four fields the fleet view reads: DCGM_FI_DEV_FB_USED, DCGM_FI_DEV_FB_FREE (MiB),
DCGM_FI_DEV_GPU_UTIL (%), DCGM_FI_DEV_XID_ERRORS (the last Xid). One endpoint carries every
node (a ``Hostname`` each), as a federating or central exporter would.

Values come from each node's state (console/sim/host.py), rendered when a scrape asks and the
last rendering is a tick old: memory held by a hung
process stays, at 0 %; a graceful kill over SSH frees it by the next tick. Busy GPUs' utilisation
moves a little from tick to tick. Rendering is cheap at 4096 nodes x 8 GPUs: the label part of
every line is built once (a ``%s`` template per node and metric) and each tick fills in values
computed once per distinct simulated machine (``--exporter-only`` nodes of one scenario share
one machine), so a tick is 16,384 string formats and one join.

The HTTP side is the standard library's ThreadingHTTPServer in a thread; it asks the asyncio
loop that owns the nodes for the rendering (nothing else touches them), or without a loop
(tests) serves the last one.
"""
from __future__ import annotations

import asyncio
import http.server
import re
import threading
import time
from dataclasses import dataclass
from typing import Sequence

from console.sim.node import SimNode
from console.sim.nvsmi import MEMORY_RESERVED_MIB

USED, FREE, UTIL, XID = ("DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_FREE", "DCGM_FI_DEV_GPU_UTIL",
                         "DCGM_FI_DEV_XID_ERRORS")
METRICS = (
    (UTIL, "GPU utilization (in %)."),
    (XID, "Value of the last XID error encountered."),
    (FREE, "Framebuffer memory free (in MiB)."),
    (USED, "Framebuffer memory used (in MiB)."),
)
TICK_S = 1.0
#: busy GPUs' utilisation wanders this many points below its level, tick by tick
JITTER = 7
_XID_LINE = re.compile(r"NVRM: Xid \(PCI:([0-9A-Fa-f:]+)\): (\d+),")
_UTIL_TEXT = [str(i) for i in range(101)]


def escape_label(value: str) -> str:
    """A label value as the exposition format writes it: backslash, quote and newline escaped."""
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


@dataclass
class ExportedNode:
    """One Hostname on the endpoint and the simulated machine whose state it shows."""
    hostname: str
    machine: SimNode
    pod: tuple[str, str, str] | None = None     # (namespace, pod, container)
    salt: int = 0                               # moves its utilisation out of step with others'
    shared: bool = False                        # the machine shows several nodes: own UUIDs from salt


def last_xids(node: SimNode) -> dict[int, int]:
    """GPU index -> the last Xid its kernel log names (by PCI address)."""
    by_bus = {g.pci_short.lower(): g.index for g in node.gpus}
    out: dict[int, int] = {}
    for _when, line in node.kernel_log:
        m = _XID_LINE.search(line)
        if m and m.group(1).lower() in by_bus:
            out[by_bus[m.group(1).lower()]] = int(m.group(2))
    return out


def _templates(n: ExportedNode) -> list[str]:
    """Per metric, the node's lines with a %s for each GPU's value."""
    m = n.machine
    in_use = {c.gpu for c in m.contexts}
    out = []
    for name, _help in METRICS:
        lines = []
        for g in m.gpus:
            if g.lost:
                continue
            labels = [("gpu", str(g.index)), ("UUID", _uuid(n, g.uuid)),
                      ("pci_bus_id", g.bus_id), ("device", f"nvidia{g.index}"), ("modelName", g.name),
                      ("Hostname", n.hostname), ("DCGM_FI_DRIVER_VERSION", m.driver_version)]
            if n.pod is not None:          # dcgm-exporter maps pods: a GPU no pod uses has them empty
                ns, pod, container = n.pod if g.index in in_use else ("", "", "")
                labels += [("container", container), ("namespace", ns), ("pod", pod)]
            text = ",".join(f'{k}="{escape_label(v)}"' for k, v in labels).replace("%", "%%")
            lines.append(f"{name}{{{text}}} %s\n")
        out.append("".join(lines))
    return out


def _uuid(n: ExportedNode, uuid: str) -> str:
    """A shared machine's GPU UUIDs made the node's own (the last 12 hex digits from the salt)."""
    if not n.shared:
        return uuid
    return f"{uuid[:-12]}{n.salt & 0xFFFFFFFFFFFF:012x}"


class Exporter:
    """Renders every node's metrics; ``body`` is the last rendering (bytes)."""

    def __init__(self, nodes: Sequence[ExportedNode]) -> None:
        self.nodes = list(nodes)
        self._templates = [_templates(n) for n in self.nodes]
        self._gpu_count = [sum(1 for g in n.machine.gpus if not g.lost) for n in self.nodes]
        self._xid_cache: dict[int, tuple[int, dict[int, int]]] = {}
        self.body = b""
        self.rendered_at = 0.0
        self.render_ms = 0.0

    def _values(self, machine: SimNode, tick: int) -> tuple[tuple, ...]:
        """(util variants x JITTER, xid, free, used) for one machine at this tick."""
        gpus = [g for g in machine.gpus if not g.lost]
        used = [machine.gpu_used(g) for g in gpus]
        util = [machine.gpu_util(g) for g in gpus]
        seen = self._xid_cache.get(id(machine))
        if seen is None or seen[0] != len(machine.kernel_log):
            seen = self._xid_cache[id(machine)] = (len(machine.kernel_log), last_xids(machine))
        xids = seen[1]
        variants = tuple(tuple(_UTIL_TEXT[max(0, min(100, u - (v + 3 * k) % JITTER))] if u >= 50
                               else _UTIL_TEXT[max(0, min(100, u))] for k, u in enumerate(util))
                         for v in range(JITTER))
        xid = tuple(str(xids.get(g.index, 0)) for g in gpus)
        free = tuple(str(max(0, g.total_mib - u - MEMORY_RESERVED_MIB)) for g, u in zip(gpus, used))
        return variants, xid, free, tuple(str(u) for u in used)

    def render(self, now: float | None = None) -> bytes:
        started = time.perf_counter()
        now = time.time() if now is None else now
        tick = int(now // TICK_S)
        cache: dict[int, tuple] = {}
        values = []
        for n in self.nodes:
            v = cache.get(id(n.machine))
            if v is None:
                v = cache[id(n.machine)] = self._values(n.machine, tick)
            values.append(v)
        parts: list[str] = []
        for k, (name, help_text) in enumerate(METRICS):
            parts.append(f"# HELP {name} {help_text}\n# TYPE {name} gauge\n")
            for i, n in enumerate(self.nodes):
                if not self._gpu_count[i]:
                    continue
                v = values[i]
                vals = v[0][(tick + n.salt) % JITTER] if k == 0 else v[k]
                if len(vals) != self._gpu_count[i]:        # a GPU fell off since: labels again
                    self._templates[i] = _templates(n)
                    self._gpu_count[i] = len(vals)
                parts.append(self._templates[i][k] % vals)
        self.body = "".join(parts).encode()
        self.rendered_at = now
        self.render_ms = (time.perf_counter() - started) * 1000
        return self.body

    async def fresh(self) -> bytes:
        """The body, rendered again first when it is a tick old (in the loop that owns the nodes)."""
        if time.time() - self.rendered_at >= TICK_S:
            self.render()
        return self.body


class _Handler(http.server.BaseHTTPRequestHandler):
    server_version = "gpu-incident-sim-exporter"
    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:  # noqa: N802 - the stdlib's name
        if self.path.split("?", 1)[0] != "/metrics":
            self.send_error(404, "only /metrics here")
            return
        server = self.server
        body = server.exporter.body
        if server.loop is not None:     # rendered on demand by the loop that owns the nodes
            try:
                body = asyncio.run_coroutine_threadsafe(server.exporter.fresh(), server.loop).result(30)
            except Exception:  # noqa: BLE001 - the loop is gone or busy: the last rendering
                pass
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args) -> None:   # scrapes are not news
        pass


class ExporterServer:
    """``/metrics`` on ``host:port`` (port 0: a free one; ``port`` says which)."""

    def __init__(self, exporter: Exporter, host: str, port: int,
                 loop: asyncio.AbstractEventLoop | None = None) -> None:
        self.exporter = exporter
        self.httpd = http.server.ThreadingHTTPServer((host, port), _Handler)
        self.httpd.daemon_threads = True
        self.httpd.exporter = exporter           # type: ignore[attr-defined]
        self.httpd.loop = loop                   # type: ignore[attr-defined]
        self.port = self.httpd.server_address[1]
        self._thread = threading.Thread(target=self.httpd.serve_forever, args=(0.1,), name="sim-exporter",
                                        daemon=True)

    def start(self) -> None:
        self._thread.start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def pod_of(hostname: str, index: int, scenario: str) -> tuple[str, str, str] | None:
    """Kubernetes labels for every other node (dcgm-exporter with pod mapping), None for the
    others (a Slurm node: no pod labels at all)."""
    if index % 2:
        return None
    workload = {"slow-teardown": ("ml-train", "pretrain-8b", "trainer"),
                "graceful": ("serving", "qwen3-32b", "sglang"),
                "renamed-workers": ("serving", "vllm-chat", "vllm"),
                "seed": ("serving", "kimi-k2", "sglang")}.get(scenario, ("ml-train", "job", "main"))
    ns, name, container = workload
    return ns, f"{name}-{hostname}", container


def own_nodes(machines: Sequence[SimNode], scenarios: Sequence[str]) -> list[ExportedNode]:
    """One Hostname per simulated machine (``simulate --exporter-port``: the SSH nodes)."""
    return [ExportedNode(m.name, m, pod_of(m.name, i, s), salt=i) for i, (m, s) in enumerate(zip(machines, scenarios))]


def shared_nodes(names: Sequence[str], scenarios: Sequence[str], clock=None) -> list[ExportedNode]:
    """``simulate --exporter-only``: one simulated machine per distinct scenario, shown under
    every name that runs it (each with its own GPU UUIDs): 4096 nodes cost a handful of machines."""
    machines: dict[str, SimNode] = {}
    out = []
    for i, (name, scenario) in enumerate(zip(names, scenarios)):
        m = machines.get(scenario)
        if m is None:
            m = machines[scenario] = SimNode(scenario, clock=clock, name=name)
        out.append(ExportedNode(name, m, pod_of(name, i, scenario), salt=i + 1, shared=True))
    return out
