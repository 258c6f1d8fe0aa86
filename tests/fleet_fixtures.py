"""FleetSnapshots built from model objects, for the fleet table's tests (a real Prometheus
serving dcgm-exporter series is console/sources/prometheus/'s to test). Suspicion comes from
console/diagnosis/fleet.py's ``assess``, as the console's FleetMonitor applies it."""
from __future__ import annotations

from console.diagnosis.fleet import assess
from console.model import FleetGpu, FleetNode, FleetSnapshot

SOURCE = "prometheus://prom.example:9090"
MODEL = "NVIDIA H100 80GB HBM3"
WINDOW_S = 600.0


def gpus(used_mib: float = 1024, util: float | None = 87, xid: int = 0, n: int = 8, model: str = MODEL,
         pod: str | None = None, held: bool = False) -> tuple[FleetGpu, ...]:
    """``held``: the GPU kept ``used_mib`` at 0 % for the whole window."""
    return tuple(FleetGpu(index=i, uuid=f"GPU-{i:04d}", model=model, memory_used_mib=used_mib,
                          memory_total_mib=81559, utilization_pct=util, last_xid=xid, pod=pod,
                          idle_held_mib=used_mib if held else None)
                 for i in range(n))


def node(hostname: str, **kw) -> FleetNode:
    return FleetNode(hostname=hostname, gpus=gpus(**kw))


def assessed(nodes: tuple[FleetNode, ...], taken_at: float = 1_000.0, query_ms: float | None = 42.0
             ) -> FleetSnapshot:
    """The snapshot as the FleetMonitor hands it on (suspicion set), the nodes left in the
    order given (the table must sort them itself)."""
    judged = {n.hostname: n for n in assess(FleetSnapshot(source=SOURCE, taken_at=taken_at, nodes=nodes,
                                                          window_s=WINDOW_S)).nodes}
    return FleetSnapshot(source=SOURCE, taken_at=taken_at, nodes=tuple(judged[n.hostname] for n in nodes),
                         query_ms=query_ms, window_s=WINDOW_S)


def mixed_fleet(taken_at: float = 1_000.0) -> FleetSnapshot:
    """Six nodes, given in no useful order: two holding memory at 0 %, one with Xid 79, three fine."""
    return assessed((
        node("gpu-0005"),
        node("gpu-0003", used_mib=71680, util=0, held=True),
        node("gpu-0001"),
        node("gpu-0004", xid=79),
        node("gpu-0002", used_mib=71680, util=0, held=True),
        node("gpu-0000"),
    ), taken_at)
