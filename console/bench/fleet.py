"""Bench, fleet part: 4096 nodes x 8 GPUs read through a real Prometheus.

``gpu-incident simulate --exporter-only --nodes N --scenario fleet`` (a child process, one
endpoint carrying N Hostnames) is scraped by a real ``prometheus`` (a child, every SCRAPE);
once Prometheus holds every GPU's series and the suspicion window has passed, a third child
(``python -m console.bench.fleet POLL-ARGS``: the console's side alone, so its memory is what
a console reading the fleet needs) runs ROUNDS rounds of PrometheusSource.poll() plus
diagnosis.fleet.assess, one after another, and reports each round's wall time and its peak RSS.

Headline keys: ``fleet_nodes``, ``fleet_query_ms_p50``, ``fleet_query_ms_p99`` (one whole round:
four queries, parse, suspicion), ``fleet_rss_mib`` (the polling process's peak RSS), and
``fleet_suspects`` (how many nodes the round found suspect: the mix's stuck and Xid nodes), and
Prometheus's own account of the same rounds (its /metrics, read before and after them):
``fleet_prometheus_ms_per_round`` (its query handlers, evaluation and the JSON they send),
``fleet_prometheus_eval_ms_per_round`` (the evaluation alone, its
``prometheus_engine_query_duration_seconds``), ``fleet_console_cpu_ms_per_round`` (the polling
process's CPU a round: requests, JSON read, suspicion) and ``fleet_console_share_pct`` (that CPU
as a % of Prometheus's evaluation).
Without prometheus installed the part says so in ``errors`` and leaves them null.
"""
from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

from console.bench.stats import Result, percentile

FLEET_NODES = 4096


def _peak_rss_mib() -> float:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    import resource
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


async def _poll_rounds(url: str, rounds: int, window_s: float) -> dict:
    """ROUNDS rounds as the console makes them: one after another, the console's garbage
    collection pacing between them (console/ui/gc_pacing.py)."""
    from console.diagnosis.fleet import assess
    from console.sources.prometheus import PrometheusSource
    from console.ui.gc_pacing import Paced
    source = PrometheusSource(url, window_s=window_s, timeout_s=60)
    times, cpu, nodes, suspects, errors = [], [], 0, 0, []
    try:
        with Paced() as paced:
            for _ in range(rounds):
                t0, c0 = time.perf_counter(), time.process_time()
                snap = assess(await source.poll())
                times.append((time.perf_counter() - t0) * 1000)
                cpu.append((time.process_time() - c0) * 1000)
                paced.tick()
                keep = snap                      # noqa: F841 - the console keeps the last round
                if snap.error:
                    errors.append(snap.error)
                nodes = len(snap.nodes)
                suspects = sum(1 for n in snap.nodes if n.suspicion_rank)
                gpus = sum(len(n.gpus) for n in snap.nodes)
    finally:
        await source.close()
    return {"times_ms": times, "cpu_ms": cpu, "nodes": nodes, "gpus": gpus, "suspects": suspects, "errors": errors[:3],
            "rss_mib": round(_peak_rss_mib(), 1)}


async def measure(nodes: int, rounds: int, progress: Callable[[str], None], *, scrape_s: float = 5.0,
                  window_s: float = 10.0) -> tuple[list[Result], dict, list[str]]:
    """(results, headline, errors) of the fleet part."""
    from console.bench import prometheus as prom
    head = {"fleet_nodes": None, "fleet_query_ms_p50": None, "fleet_query_ms_p99": None,
            "fleet_rss_mib": None, "fleet_suspects": None, "fleet_prometheus_ms_per_round": None,
            "fleet_prometheus_eval_ms_per_round": None, "fleet_console_cpu_ms_per_round": None,
            "fleet_console_share_pct": None}
    if prom.prometheus_binary() is None:
        return [], head, ["fleet: prometheus is not installed (apt-get install prometheus): fleet part skipped"]
    return await asyncio.to_thread(_measure, nodes, rounds, progress, head, scrape_s, window_s)


def _measure(nodes: int, rounds: int, progress, head: dict, scrape_s: float,
             window_s: float) -> tuple[list[Result], dict, list[str]]:
    from console.bench import prometheus as prom
    with tempfile.TemporaryDirectory(prefix="gpu-incident-bench-fleet-") as tmp:
        work = Path(tmp)
        progress(f"fleet: {nodes} nodes x 8 GPUs, exporter + prometheus (scrape every {scrape_s:g} s)")
        try:
            sim = prom.start_simulator(["--exporter-only", "--nodes", str(nodes), "--scenario", "fleet"], work)
        except RuntimeError as exc:
            return [], head, [f"fleet: {exc}"]
        try:
            server = prom.start_prometheus([f"127.0.0.1:{sim.port}"], work, scrape_interval=f"{scrape_s:g}s")
        except RuntimeError as exc:
            sim.stop()
            return [], head, [f"fleet: {exc}"]
        try:
            t0 = time.perf_counter()
            prom.wait_for_series(server.port, nodes * 8, bound_s=180)
            ingest_s = time.perf_counter() - t0
            progress(f"fleet: {nodes * 8} GPU series in Prometheus after {ingest_s:.1f} s; "
                     f"waiting out the {window_s:g} s window")
            time.sleep(window_s + 2 * scrape_s)     # the window's start must hold samples
            before = prom.own_seconds(server.port)
            r = subprocess.run([sys.executable, "-m", "console.bench.fleet",
                                f"prometheus://127.0.0.1:{server.port}", str(rounds), str(window_s)],
                               capture_output=True, text=True, timeout=600)
            after = prom.own_seconds(server.port)
            if r.returncode != 0:
                last = (r.stderr.strip().splitlines() or ["no output"])[-1]
                return [], head, [f"fleet: the polling process failed: {last[:300]}"]
            got = json.loads(r.stdout)
        except (RuntimeError, subprocess.TimeoutExpired, ValueError, OSError) as exc:
            return [], head, [f"fleet: {exc}"]
        finally:
            server.stop()
            sim.stop()
    times = got["times_ms"]
    head.update(fleet_nodes=got["nodes"], fleet_query_ms_p50=round(percentile(times, 50), 1),
                fleet_query_ms_p99=round(percentile(times, 99), 1), fleet_rss_mib=got["rss_mib"],
                fleet_suspects=got["suspects"], **account(got["cpu_ms"], before, after))
    result = Result("fleet.round", f"one round of PrometheusSource.poll() + assess over {got['nodes']} nodes / "
                    f"{got['gpus']} GPUs (its queries, parse, suspicion), real Prometheus on loopback",
                    times, extra={"nodes": got["nodes"], "gpus": got["gpus"], "rss_mib": got["rss_mib"],
                                  "ingest_s": round(ingest_s, 1)})
    return [result], head, [f"fleet: {e}" for e in got["errors"]]


def account(cpu_ms: list[float], before: dict[str, float], after: dict[str, float]) -> dict:
    """What Prometheus itself spent on the rounds (its own /metrics, read before and after them:
    its query handlers, and their evaluation alone, summed over a round's queries, which run at
    once), per round, and the console's share of that evaluation: the CPU its own process spent
    on a round (the requests, the JSON read, the suspicion rule), as a % of Prometheus's."""
    rounds = len(cpu_ms)
    if not rounds:
        return {}
    http_ms = (after["http"] - before["http"]) * 1000 / rounds
    engine_ms = (after["engine"] - before["engine"]) * 1000 / rounds
    mine = sum(cpu_ms) / rounds
    return {"fleet_prometheus_ms_per_round": round(http_ms, 1),
            "fleet_prometheus_eval_ms_per_round": round(engine_ms, 1),
            "fleet_console_cpu_ms_per_round": round(mine, 1),
            "fleet_console_share_pct": round(100 * mine / engine_ms, 1) if engine_ms > 0 else None}


def main(argv: list[str]) -> int:
    url, rounds, window = argv[0], int(argv[1]), float(argv[2])
    json.dump(asyncio.run(_poll_rounds(url, rounds, window)), sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
