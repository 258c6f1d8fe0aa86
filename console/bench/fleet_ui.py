"""Bench: the fleet table with thousands of nodes, as a person runs it (the query round against
a real Prometheus is console/bench/fleet.py's part).

The console in fleet mode runs on a pseudo-terminal of COLS x ROWS (console/bench/term.py),
its own process, fed by a constructed fleet (``SyntheticFleet``: ``nodes`` nodes x 8 GPUs,
every 97th holding memory at 0 %, values moving every round) that it queries every
ROUND_INTERVAL_S — faster than the 15 s default, so rounds land among the keys. Measured:

- ``key_ms``  ``down`` typed on the fleet table until the chunk of screen output that completes
              the newly highlighted node's line below the table ("gpu-00042  8× …") arrived; p99;
- ``rss_mib`` the console's resident memory after the keys (``fleet_ui_rss_mib``).

This measures the screen, not Prometheus. ``python -m console.bench.fleet_ui --nodes N`` runs
that console by itself (what the bench starts on the pty).
"""
from __future__ import annotations

import argparse
import asyncio
import random
import re
import shutil
import tempfile
import time
from pathlib import Path
from typing import Callable

from console.bench.fanout import bench_env, console_argv
from console.bench.stats import Result, percentile
from console.bench.term import Terminal
from console.model import FleetGpu, FleetNode, FleetSnapshot

COLS, ROWS = 80, 24
FLEET_NODES = 4096
GPUS_PER_NODE = 8
ROUND_INTERVAL_S = 2.0
START_TIMEOUT_S = 60.0
KEY_TIMEOUT_S = 5.0
SOURCE = "prometheus://bench.invalid:9090"
MODEL = "NVIDIA H100 80GB HBM3"


def synthetic_fleet(count: int = FLEET_NODES, per_node: int = GPUS_PER_NODE, round_: int = 0,
                    taken_at: float | None = None, every: int = 97) -> FleetSnapshot:
    """``count`` nodes of ``per_node`` GPUs; every ``every``-th holds memory at 0 % (a suspect);
    the others' memory and utilisation move with ``round_``."""
    nodes = []
    for i in range(count):
        stuck = i % every == 0
        gpus = tuple(FleetGpu(index=g, uuid=f"GPU-{i:05d}-{g}", model=MODEL,
                              memory_used_mib=71680.0 if stuck else float(2048 + (i * 7 + g + round_ * 13) % 60000),
                              memory_total_mib=81559.0,
                              utilization_pct=0.0 if stuck else float((i + g + round_) % 100),
                              last_xid=0, idle_held_mib=71680.0 if stuck else None)
                     for g in range(per_node))
        nodes.append(FleetNode(hostname=f"gpu-{i:05d}", gpus=gpus,
                               suspicion=f"GPUs 0-{per_node - 1}: 70.0 GiB held at 0% for 10 min" if stuck else None,
                               suspicion_rank=2 if stuck else 0))
    return FleetSnapshot(source=SOURCE, taken_at=time.time() if taken_at is None else taken_at,
                         nodes=tuple(nodes), query_ms=0.0, window_s=600.0)


class SyntheticFleet:
    """A fleet source answering with ``synthetic_fleet`` (a new round each poll)."""

    def __init__(self, count: int = FLEET_NODES) -> None:
        self.count = count
        self.rounds = 0

    async def poll(self) -> FleetSnapshot:
        self.rounds += 1
        started = time.perf_counter()
        # built in a worker thread, as PrometheusSource builds its nodes from the answers
        snap = await asyncio.to_thread(synthetic_fleet, self.count, round_=self.rounds)
        return FleetSnapshot(source=snap.source, taken_at=snap.taken_at, nodes=snap.nodes,
                             query_ms=(time.perf_counter() - started) * 1000, window_s=snap.window_s)

    async def close(self) -> None:
        pass


def run_console(nodes: int, interval: float) -> int:
    """The console in fleet mode on the synthetic fleet (no SSH: enter says why)."""
    from console.ui.app import IncidentApp
    from console.ui.fleet_view import FleetSetup

    def no_ssh(hostname: str):
        raise ValueError("the bench's fleet has no SSH nodes")
    app = IncidentApp([], interval=1.0, fleet=FleetSetup(SyntheticFleet(nodes), SOURCE, no_ssh, interval=interval))
    app.run()
    return app.return_code or 0


def detail_pattern(hostname: str) -> re.Pattern:
    """The line below the table once ``hostname`` is highlighted (console/ui/fleet_view.py)."""
    return re.compile(re.escape(f"{hostname}  {GPUS_PER_NODE}× ".encode()))


async def measure(nodes: int = FLEET_NODES, keys: int = 60, progress: Callable[[str], None] = lambda _m: None
                  ) -> tuple[list[Result], dict, list[str]]:
    """(results, headline figures, error lines)."""
    errors: list[str] = []
    times: list[float] = []
    rss = None
    root = Path(tempfile.mkdtemp(prefix="gpu-incident-bench-fleet-"))
    term: Terminal | None = None
    order = [f"gpu-{i:05d}" for i in sorted(range(nodes), key=lambda i: (i % 97 != 0, i))]   # suspects first
    try:
        progress(f"fleet: the fleet table on a {COLS}x{ROWS} terminal, {nodes} nodes x {GPUS_PER_NODE} GPUs")
        env = {**bench_env(), "TEXTUAL_FPS": "60"}
        term = Terminal.start([*console_argv()[:1], "-m", "console.bench.fleet_ui", "--nodes", str(nodes),
                               "--interval", f"{ROUND_INTERVAL_S:g}"], cols=COLS, rows=ROWS, env=env, cwd=str(root))
        _, ready = await asyncio.to_thread(term.wait_text, detail_pattern(order[0]), START_TIMEOUT_S)
        if ready is None:
            raise RuntimeError("the fleet table did not show its first node: " + term.text()[-300:].strip())
        term.trim()
        for i in range(1, min(keys, nodes - 1) + 1):
            await asyncio.sleep(random.uniform(0.02, 0.12))     # at any phase of the rounds and redraws
            since = term.position()
            sent = term.send(b"\x1b[B")                          # down
            seen, m = await asyncio.to_thread(term.wait_text, detail_pattern(order[i]), KEY_TIMEOUT_S, since)
            if m is None:
                errors.append(f"fleet: the key's effect did not show within {KEY_TIMEOUT_S:g} s")
                break
            times.append((seen - sent) * 1000)
            term.trim()
        rss = term.process().memory_info().rss / (1 << 20)
    except RuntimeError as exc:
        errors.append(f"fleet: {exc}")
    finally:
        if term is not None:
            await asyncio.to_thread(term.stop)
        shutil.rmtree(root, ignore_errors=True)
    results = []
    if times:
        results.append(Result("fleet_ui.key_to_frame", f"key down on the fleet table until the frame that shows it, "
                              f"{nodes} nodes x {GPUS_PER_NODE} GPUs, a round every {ROUND_INTERVAL_S:g} s",
                              times, extra={"nodes": nodes}))
    head = {"fleet_key_to_frame_ms_p99": round(percentile(times, 99), 3) if times else None,
            "fleet_ui_rss_mib": round(rss, 1) if rss is not None else None}
    return results, head, errors


def main() -> int:
    p = argparse.ArgumentParser(prog="python -m console.bench.fleet_ui",
                                description="The fleet table on a synthetic fleet (what gpu-incident bench measures).")
    p.add_argument("--nodes", type=int, default=FLEET_NODES)
    p.add_argument("--interval", type=float, default=ROUND_INTERVAL_S)
    args = p.parse_args()
    return run_console(args.nodes, args.interval)


if __name__ == "__main__":
    raise SystemExit(main())
