"""Bench, part 4: what applying one NodeUpdated costs the console (timed inside console/ui/bench.py,
where Textual lives)."""
from __future__ import annotations

import dataclasses
import statistics
import time
from typing import Callable, Sequence

from console.bench.stats import Result, percentile
from console.bench.synth import big_probe_text
from console.diagnosis import diagnose
from console.model import NodeSnapshot
from console import probe
from console.sources.parse import parse_probe
from console.ui.bench import apply_times

#: the process count of the node a real kernel cannot hold here (pid_max ~32k) but a big one can
HUGE_PROCESSES = 100_000


def _series(snaps: Sequence[NodeSnapshot], count: int) -> list[NodeSnapshot]:
    """``count`` successive snapshots of one node, one second apart, cycling through ``snaps``."""
    base = snaps[-1].taken_at
    return [dataclasses.replace(snaps[i % len(snaps)], taken_at=base + 1 + i) for i in range(count)]


def huge_snapshot(processes: int = HUGE_PROCESSES) -> NodeSnapshot:
    """A diagnosed snapshot of a generated ``processes``-process, 8-GPU node, through the real
    parser and diagnosis (console/bench/synth.py writes its probe output)."""
    mark = probe.new_mark()
    snap = parse_probe("huge", big_probe_text(mark, processes=processes, hostname="gpu-huge"), mark,
                       taken_at=time.time())
    if snap.error:
        raise RuntimeError(f"the parser rejected the {processes}-process probe text: {snap.error}")
    return dataclasses.replace(snap, findings=tuple(diagnose(snap, [])))


async def measure(snaps: dict, updates: int, progress: Callable[[str], None] = lambda _m: None,
                  reps: int = 1) -> tuple[list[Result], dict]:
    """``snaps``: {"seed": [diagnosed seed snapshots], "big": [diagnosed 2000-process snapshots
    whose values move from one to the next]}. Adds a generated 100,000-process node, all
    processes shown: the table holds a bounded window of them (console/output/rows.py).
    The 2000-process node with every process shown is measured ``reps`` times (a fresh
    console each): ``big_all_update_ms_p99`` is the median of their p99s."""
    results: list[Result] = []
    big = snaps["big"][0]
    progress(f"ui: generating a {HUGE_PROCESSES}-process node")
    huge = huge_snapshot()
    cases = [("seed", "the seed node", snaps["seed"], False),
             ("big", f"the {len(big.processes)}-process node (GPU processes shown)", snaps["big"], False),
             ("big_all", f"the {len(big.processes)}-process node, all processes shown (key a)",
              snaps["big"], True),
             ("huge_all", f"the {len(huge.processes)}-process node, all processes shown (key a)",
              [huge], True)]
    big_all_p99: list[float] = []
    for label, what, series, show_all in cases:
        progress(f"ui: {label}")
        settled, handler, cpu = await apply_times(_series(series, updates + 1), show_all=show_all)
        if label == "big_all":
            big_all_p99.append(percentile(settled[1:], 99))
            for _ in range(reps - 1):
                more = (await apply_times(_series(series, updates + 1), show_all=True))[0][1:]
                big_all_p99.append(percentile(more, 99))
        extra = {"processes": len(series[0].processes)}
        results.append(Result(f"ui.first_update.{label}", f"first NodeUpdated (empty tables filled), {what}",
                              settled[:1], extra={"handler_ms": round(handler[0], 3), **extra}))
        results.append(Result(f"ui.update.{label}", f"one NodeUpdated until the console caught up, {what}",
                              settled[1:], cpu_ms=cpu,
                              extra={"handler_p50": round(percentile(handler[1:], 50), 3), **extra}))
    return results, {"big_all_update_ms_p99": round(statistics.median(big_all_p99), 3) if big_all_p99 else None}
