"""Bench, part 1: the probe without a network -- the in-process simulated node's poll, and
what parsing and diagnosing one poll costs on a realistic node and on a big one."""
from __future__ import annotations

import dataclasses
import time
from typing import Callable

from console.bench.stats import Result, Stopwatch
from console.bench.synth import big_probe_text
from console.diagnosis import diagnose
from console.monitor import HISTORY
from console.model import NodeSnapshot
from console import probe
from console.sources.parse import parse_probe
from console.sources.sim import SimSource

BIG_PROCESSES = 2000
BIG_GPUS = 8


async def sim_poll(iterations: int) -> Result:
    """SimSource("seed").poll(): the fake shell answering the probe, plus the parser."""
    src = SimSource(name="bench-seed", scenario="seed")
    await src.poll()                                   # warm: first-use imports and caches
    samples = []
    watch = Stopwatch()
    for _ in range(iterations):
        t0 = time.perf_counter()
        snap = await src.poll()
        samples.append((time.perf_counter() - t0) * 1000)
        if snap.error:
            raise RuntimeError(f"simulated seed node failed: {snap.error}")
    await src.close()
    return Result("probe.sim_poll.seed", "in-process simulated seed node: one poll (fake shell + parse)",
                  samples, cpu_ms=watch.cpu_ms)


async def seed_probe_text() -> tuple[str, str]:
    """(probe output, mark) of the seed scenario, as its simulated shell prints it."""
    src = SimSource(name="bench-seed", scenario="seed")
    mark = probe.new_mark()
    result = await src.node.exec(probe.build_script(mark), 10.0)
    if result.error or not result.stdout:
        raise RuntimeError(f"simulated seed node gave no probe output: {result.error}")
    return result.stdout, mark


def big_probe_texts(count: int) -> tuple[list[str], str]:
    """``count`` successive polls of the big node (values move between them), one mark."""
    mark = probe.new_mark()
    return [big_probe_text(mark, processes=BIG_PROCESSES, gpus=BIG_GPUS, tick=i) for i in range(count)], mark


def parse_and_diagnose(label: str, what: str, texts: list[str], mark: str, iterations: int,
                       name: str) -> tuple[list[Result], list[NodeSnapshot]]:
    """parse_probe then diagnose, as the engine does each poll: the history is full
    (monitor.HISTORY snapshots, one a second), so diagnosis pays its steady-state cost.
    Also returns the last diagnosed snapshot of each text (for the UI part)."""
    t_base = time.time()
    first = parse_probe(name, texts[0], mark, taken_at=t_base - HISTORY - 1)
    if first.error:
        raise RuntimeError(f"{label}: the parser rejected the probe text: {first.error}")
    history = [dataclasses.replace(first, taken_at=t_base - HISTORY + i) for i in range(HISTORY)]
    diagnose(first, history)                               # warm the per-snapshot PID maps
    parse_ms, diag_ms, both_ms = [], [], []
    watch = Stopwatch()
    last: dict[int, NodeSnapshot] = {}
    for i in range(iterations):
        text = texts[i % len(texts)]
        t0 = time.perf_counter()
        snap = parse_probe(name, text, mark, taken_at=t_base + i)
        t1 = time.perf_counter()
        findings = diagnose(snap, history)
        t2 = time.perf_counter()
        history = history[1:] + [snap]
        last[i % len(texts)] = dataclasses.replace(snap, findings=tuple(findings))
        parse_ms.append((t1 - t0) * 1000)
        diag_ms.append((t2 - t1) * 1000)
        both_ms.append((t2 - t0) * 1000)
    cpu = watch.cpu_ms
    extra = {"processes": len(snap.processes), "gpus": len(snap.gpus), "findings": len(findings)}
    return [
        Result(f"probe.parse.{label}", f"parse_probe on {what}", parse_ms, extra=extra),
        Result(f"probe.diagnose.{label}", f"diagnose on {what} (history {HISTORY})", diag_ms, extra=extra),
        Result(f"probe.parse_diagnose.{label}", f"parse + diagnose per poll, {what}", both_ms,
               cpu_ms=cpu, extra=extra),
    ], [last[k] for k in sorted(last)]


async def measure(iterations_sim: int, iterations_seed: int, iterations_big: int,
                  progress: Callable[[str], None] = lambda _m: None) -> tuple[list[Result], dict]:
    """Part 1. Returns the results and diagnosed snapshots {"seed": [...], "big": [...]}
    (the UI part shows them)."""
    progress("probe: in-process simulated node")
    results = [await sim_poll(iterations_sim)]
    text, mark = await seed_probe_text()
    progress("probe: parse + diagnose")
    seed_results, seed_snap = parse_and_diagnose("seed", "the seed node (8 GPUs)", [text], mark,
                                                 iterations_seed, "seed")
    texts, big_mark = big_probe_texts(min(iterations_big, 4))
    big_results, big_snap = parse_and_diagnose(
        "big", f"a {BIG_PROCESSES}-process, {BIG_GPUS}-GPU node", texts, big_mark, iterations_big, "big")
    return results + seed_results + big_results, {"seed": seed_snap, "big": big_snap}
