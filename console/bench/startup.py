"""Bench: how soon the console shows data, and what a local snapshot costs.

- ``startup_ms``  ``gpu-incident demo`` started on a pseudo-terminal (console/bench/term.py)
                  until the first chunk of screen output that shows the simulated node's data
                  (its GPU workers' names in the process panel) arrived: interpreter start,
                  imports, the first poll, diagnosis and the first frame. Once untimed first:
                  an installed console starts with its bytecode compiled and its files cached.
- ``local_probe`` LocalSource.poll(): a full snapshot of this machine (its whole process
                  table; NVML when a driver is here).
"""
from __future__ import annotations

import asyncio
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Callable

from console.bench.fanout import COLS, ROWS, bench_env, console_argv
from console.bench.stats import Result, percentile
from console.bench.term import Terminal

#: what only a frame with the demo node's data shows: its GPU workers in the process panel
DATA_MARK = b"sglang::scheduler_TP"
START_TIMEOUT_S = 30.0


def _startup_once(root: Path) -> float:
    env = bench_env()
    t0 = time.perf_counter()
    term = Terminal.start([*console_argv(), "demo", "--incident-dir", str(root / "incidents")],
                          cols=COLS, rows=ROWS, env=env, cwd=str(root))
    try:
        seen, m = term.wait_text(DATA_MARK, START_TIMEOUT_S)
        if m is None:
            raise RuntimeError(f"no frame with data within {START_TIMEOUT_S:g} s: " + term.text()[-200:].strip())
        return (seen - t0) * 1000
    finally:
        term.stop()


async def measure_startup(reps: int, progress: Callable[[str], None] = lambda _m: None
                          ) -> tuple[list[Result], dict, list[str]]:
    root = Path(tempfile.mkdtemp(prefix="gpu-incident-bench-startup-"))
    samples: list[float] = []
    errors: list[str] = []
    try:
        progress("startup: gpu-incident demo, once untimed (bytecode written, files cached)")
        try:
            await asyncio.to_thread(_startup_once, root)
        except RuntimeError as exc:
            errors.append(f"startup: {exc}")
        for i in range(reps):
            progress(f"startup: gpu-incident demo, {i + 1} of {reps}")
            try:
                samples.append(await asyncio.to_thread(_startup_once, root))
            except RuntimeError as exc:
                errors.append(f"startup: {exc}")
                break
    finally:
        shutil.rmtree(root, ignore_errors=True)
    results = [Result("startup.demo", "gpu-incident demo: process start until the first frame with data "
                      f"({COLS}x{ROWS})", samples)] if samples else []
    return results, {"startup_ms": round(statistics.median(samples), 1) if samples else None}, errors


async def measure_local(reps: int, polls: int, progress: Callable[[str], None] = lambda _m: None
                        ) -> tuple[list[Result], dict, list[str]]:
    from console.sources.local.source import LocalSource
    progress("local: LocalSource.poll(), this machine")
    src = LocalSource()
    errors: list[str] = []
    p50s: list[float] = []
    samples: list[float] = []
    processes = 0
    try:
        await src.poll()                                    # warm: NVML init, first scan
        for _ in range(reps):
            xs = []
            for _ in range(polls):
                t0 = time.perf_counter()
                snap = await src.poll()
                xs.append((time.perf_counter() - t0) * 1000)
            processes = len(snap.processes)
            p50s.append(percentile(xs, 50))
            samples += xs
    finally:
        await src.close()
    results = [Result("local.snapshot", "LocalSource.poll(): this machine's whole process table (and NVML "
                      "when a driver is here)", samples, extra={"processes": processes})]
    return results, {"local_probe_ms_p50": round(statistics.median(p50s), 3)}, errors
