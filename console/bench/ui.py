"""Bench, part 4: what applying one NodeUpdated costs the console (timed inside console/ui/bench.py,
where Textual lives)."""
from __future__ import annotations

import dataclasses
from typing import Callable, Sequence

from console.bench.stats import Result, percentile
from console.model import NodeSnapshot
from console.ui.bench import apply_times


def _series(snaps: Sequence[NodeSnapshot], count: int) -> list[NodeSnapshot]:
    """``count`` successive snapshots of one node, one second apart, cycling through ``snaps``."""
    base = snaps[-1].taken_at
    return [dataclasses.replace(snaps[i % len(snaps)], taken_at=base + 1 + i) for i in range(count)]


async def measure(snaps: dict, updates: int,
                  progress: Callable[[str], None] = lambda _m: None) -> list[Result]:
    """``snaps``: {"seed": [diagnosed seed snapshots], "big": [diagnosed 2000-process snapshots
    whose values move from one to the next]}."""
    results: list[Result] = []
    big = snaps["big"][0]
    cases = [("seed", "the seed node", snaps["seed"], False),
             ("big", f"the {len(big.processes)}-process node (GPU processes shown)", snaps["big"], False),
             ("big_all", f"the {len(big.processes)}-process node, all processes shown (key a)",
              snaps["big"], True)]
    for label, what, series, show_all in cases:
        progress(f"ui: {label}")
        settled, handler, cpu = await apply_times(_series(series, updates + 1), show_all=show_all)
        results.append(Result(f"ui.first_update.{label}", f"first NodeUpdated (empty tables filled), {what}",
                              settled[:1], extra={"handler_ms": round(handler[0], 3)}))
        results.append(Result(f"ui.update.{label}", f"one NodeUpdated until the console caught up, {what}",
                              settled[1:], cpu_ms=cpu,
                              extra={"handler_p50": round(percentile(handler[1:], 50), 3)}))
    return results
