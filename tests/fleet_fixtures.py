"""FleetSnapshots built from model objects, for the fleet table's tests and the bench (a real
Prometheus serving dcgm-exporter series is console/sources/prometheus/'s to test)."""
from __future__ import annotations

from console.model import FleetGpu, FleetNode, FleetSnapshot

SOURCE = "prometheus://prom.example:9090"
MODEL = "NVIDIA H100 80GB HBM3"


def gpus(used_mib: float = 1024, util: float | None = 87, xid: int = 0, n: int = 8, model: str = MODEL,
         pod: str | None = None) -> tuple[FleetGpu, ...]:
    return tuple(FleetGpu(index=i, uuid=f"GPU-{i:04d}", model=model, memory_used_mib=used_mib,
                          memory_total_mib=81559, utilization_pct=util, last_xid=xid, pod=pod)
                 for i in range(n))


def node(hostname: str, suspicion: str | None = None, rank: int = 0, **kw) -> FleetNode:
    return FleetNode(hostname=hostname, gpus=gpus(**kw), suspicion=suspicion, suspicion_rank=rank)


def mixed_fleet(taken_at: float = 1_000.0) -> FleetSnapshot:
    """Six nodes, given in no useful order: two held at 0% (rank 1), one Xid (rank 2), three fine."""
    nodes = (
        node("gpu-0005"),
        node("gpu-0003", "memory held at 0% utilisation for 10 min (8 GPUs, 560 GiB)", 1, used_mib=71680, util=0),
        node("gpu-0001"),
        node("gpu-0004", "Xid 79 on GPU 2 (fell off the bus)", 2, xid=79),
        node("gpu-0002", "memory held at 0% utilisation for 10 min (8 GPUs, 560 GiB)", 1, used_mib=71680, util=0),
        node("gpu-0000"),
    )
    return FleetSnapshot(source=SOURCE, taken_at=taken_at, nodes=nodes, query_ms=42.0)


def big_fleet(count: int = 4096, per_node: int = 8, taken_at: float = 1_000.0, every: int = 97) -> FleetSnapshot:
    """``count`` nodes of ``per_node`` GPUs; every ``every``-th holds memory at 0% (a suspect)."""
    nodes = []
    for i in range(count):
        stuck = i % every == 0
        nodes.append(FleetNode(
            hostname=f"gpu-{i:05d}",
            gpus=gpus(used_mib=71680 if stuck else 2048 + i % 512, util=0 if stuck else 50 + i % 50, n=per_node),
            suspicion=f"memory held at 0% utilisation for 10 min ({per_node} GPUs)" if stuck else None,
            suspicion_rank=1 if stuck else 0))
    return FleetSnapshot(source=SOURCE, taken_at=taken_at, nodes=tuple(nodes), query_ms=310.0)
