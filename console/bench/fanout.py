"""Bench: the whole console polling many nodes, as a person runs it, and a separate simulator.

``gpu-incident simulate --nodes N`` serves the nodes (its own process, its CPU reported
apart); the console (``gpu-incident --nodes-file …``, its own process) runs on a
pseudo-terminal of COLS x ROWS (console/bench/term.py), drawing as it would for a person.
Once every node has answered, in each repetition:

- ``cpu_pct``   the console process's CPU (every thread: UI, engine, SSH, parse and diagnosis
                workers; and any child) over a window, % of one core; the simulator's likewise;
- ``rss_mib``   the console's resident memory at the end of the window;
- ``round_ms``  every poll's time as the console records it (its --debug-log line "poll NODE
                took X ms": connect, probe, parse, queueing included), p99 over the window;
- ``key_ms``    ``a`` (all processes / GPU-related only) typed while the nodes poll, until the
                chunk of screen output whose text completes the new title of the process panel
                ("a: GPU-related only" / "a: all", console/ui/app.py) arrived; p99.

Each figure is the median of the repetitions' figures.
"""
from __future__ import annotations

import asyncio
import os
import random
import re
import shutil
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import psutil

from console.bench.stats import Result, percentile
from console.bench.term import Terminal

COLS, ROWS = 120, 36
SIM_START_TIMEOUT_S = 120.0
KEY_TIMEOUT_S = 5.0
#: after every node answered, before the first repetition (the connect storm's tail)
SETTLE_S = 2.0
#: the bare poller's CPU window at least (it polls once a second: a shorter window may see none)
BARE_MIN_WINDOW_S = 3.0
#: ...and until it used at least this much CPU (a few clock ticks), at most this long
BARE_MIN_CPU_S = 0.03
BARE_MAX_WINDOW_S = 30.0
#: the process panel's title after ``a``: showing all processes / back to GPU-related only
SHOWING_ALL = b"a: GPU-related only"
SHOWING_GPU = b"a: all"
_POLL_LINE = re.compile(r" poll (\S+) took ([0-9.]+) ms error=(.*)$")


def console_argv() -> list[str]:
    """`gpu-incident` as installed (``python -m console`` is the same program)."""
    return [sys.executable, "-m", "console"]


def bench_env() -> dict[str, str]:
    """The environment the console runs in here: the caller's, less Textual's settings, and with
    bytecode caching on as an installed console has it (PYTHONDONTWRITEBYTECODE would make every
    start compile the package from source again)."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("TEXTUAL") and k != "PYTHONDONTWRITEBYTECODE"}
    package_parent = str(Path(__file__).resolve().parent.parent.parent)
    env["PYTHONPATH"] = package_parent + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


def cpu_s(proc: psutil.Process) -> float:
    """CPU seconds of a process, every thread, and of its children (alive and waited for)."""
    t = proc.cpu_times()
    total = t.user + t.system + t.children_user + t.children_system
    for child in proc.children(recursive=True):
        try:
            c = child.cpu_times()
            total += c.user + c.system
        except psutil.NoSuchProcess:
            pass
    return total


class PollLog:
    """The console's --debug-log, read as it grows: one (node, ms, ok) per poll."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._at = 0
        self._rest = b""
        self.answered: set[str] = set()

    def read(self) -> list[tuple[str, float, bool]]:
        try:
            with open(self.path, "rb") as f:
                f.seek(self._at)
                data = f.read()
        except FileNotFoundError:
            return []
        self._at += len(data)
        data = self._rest + data
        lines = data.split(b"\n")
        self._rest = lines.pop()
        polls = []
        for raw in lines:
            m = _POLL_LINE.search(raw.decode("utf-8", "replace"))
            if m:
                ok = m.group(3).strip() == "None"
                polls.append((m.group(1), float(m.group(2)), ok))
                if ok:
                    self.answered.add(m.group(1))
        return polls


@dataclass
class Rep:
    cpu_pct: float
    sim_cpu_pct: float | None
    rss_mib: float
    rounds: list[float]
    failed: int
    keys: list[float] = field(default_factory=list)


async def _start_simulator(state: Path, nodes: int, env: dict[str, str],
                           size: tuple[int, int] | None = None) -> asyncio.subprocess.Process:
    err = open(state / "simulate.err", "wb")
    table = ["--procs", str(size[0]), "--threads", str(size[1])] if size else []
    try:
        proc = await asyncio.create_subprocess_exec(
            *console_argv(), "simulate", "--nodes", str(nodes), "--state-dir", str(state / "sim"), *table,
            stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE, stderr=err, env=env)
    finally:
        err.close()
    assert proc.stdout is not None
    try:
        line = await asyncio.wait_for(proc.stdout.readline(), SIM_START_TIMEOUT_S)
    except asyncio.TimeoutError:
        line = b""
    if not line.startswith(b"serving"):
        await _stop(proc)
        why = (state / "simulate.err").read_text(errors="replace").strip().splitlines()
        raise RuntimeError("gpu-incident simulate did not start: " + (why[-1] if why else "no output"))
    # keep draining its stdout so it never blocks on a full pipe
    asyncio.get_running_loop().create_task(_drain(proc.stdout))
    return proc


async def _drain(stream: asyncio.StreamReader) -> None:
    while await stream.read(1 << 16):
        pass


async def _stop(proc: asyncio.subprocess.Process) -> None:
    if proc.returncode is not None:
        return
    proc.terminate()
    try:
        await asyncio.wait_for(proc.wait(), 10)
    except asyncio.TimeoutError:
        proc.kill()
        await proc.wait()


async def _keys(term: Terminal, count: int, showing_all: bool) -> tuple[list[float], bool, int]:
    """``count`` presses of ``a``, each timed to the frame that shows its effect."""
    times: list[float] = []
    misses = 0
    for _ in range(count):
        await asyncio.sleep(random.uniform(0.05, 0.25))    # at any phase of the polls and redraws
        want = SHOWING_GPU if showing_all else SHOWING_ALL
        since = term.position()
        sent = term.send(b"a")
        seen, m = await asyncio.to_thread(term.wait_text, want, KEY_TIMEOUT_S, since)
        if m is None:
            misses += 1
            break
        times.append((seen - sent) * 1000)
        showing_all = not showing_all
        term.trim()
    return times, showing_all, misses


async def _bare_cpu_pct(state: Path, env: dict[str, str], window_s: float, nodes: int) -> float:
    """The bare poller's CPU (console/bench/bare.py) over the same nodes, % of one core."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "console.bench.bare", str(state / "targets.txt"), str(state / "known_hosts"),
        str(state / "client_key"), stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL, env=env)
    try:
        assert proc.stdout is not None
        line = await asyncio.wait_for(proc.stdout.readline(), 60 + nodes * 0.25)
        if not line.startswith(b"ready"):
            raise RuntimeError("the bare poller did not start")
        await asyncio.sleep(SETTLE_S)
        p = psutil.Process(proc.pid)
        c0, w0 = cpu_s(p), time.perf_counter()
        await asyncio.sleep(window_s)
        # a few nodes cost the bare poller less than the kernel's CPU ticks over a short window
        # (0 s measured: no ratio): measure on until a few ticks came, within BARE_MAX_WINDOW_S
        while cpu_s(p) - c0 < BARE_MIN_CPU_S and time.perf_counter() - w0 < BARE_MAX_WINDOW_S:
            await asyncio.sleep(1.0)
        return (cpu_s(p) - c0) * 100 / (time.perf_counter() - w0)
    finally:
        await _stop(proc)


async def measure(nodes: int, reps: int, window_s: float, keys_per_rep: int, interval: float | None = None,
                  progress: Callable[[str], None] = lambda _m: None, settle_s: float = SETTLE_S,
                  size: tuple[int, int] | None = None, bare: bool = True
                  ) -> tuple[list[Result], dict, list[str]]:
    """(results, headline figures, error lines) for ``nodes`` simulated nodes; ``size``: their
    process tables' (processes, threads) (simulate --procs/--threads); ``bare``: then the bare
    poller over the same nodes."""
    errors: list[str] = []
    root = Path(tempfile.mkdtemp(prefix="gpu-incident-bench-fanout-"))
    env = bench_env()
    sim: asyncio.subprocess.Process | None = None
    term: Terminal | None = None
    runs: list[Rep] = []
    connect_s = None
    chosen_interval = None
    bare_pct: float | None = None
    try:
        progress(f"fan-out: gpu-incident simulate --nodes {nodes}"
                 + (f" --procs {size[0]} --threads {size[1]}" if size else ""))
        sim = await _start_simulator(root, nodes, env, size)
        state = root / "sim"
        (root / "ssh_config").write_text("")
        log = root / "console.log"
        argv = [*console_argv(), "--nodes-file", str(state / "targets.txt"),
                "--known-hosts", str(state / "known_hosts"), "-i", str(state / "client_key"),
                "--ssh-config", str(root / "ssh_config"), "--incident-dir", str(root / "incidents"),
                "--debug-log", str(log)]
        if interval is not None:
            argv += ["--interval", f"{interval:g}"]
        progress(f"fan-out: the console on a {COLS}x{ROWS} terminal, connecting to {nodes} nodes")
        t0 = time.monotonic()
        term = Terminal.start(argv, cols=COLS, rows=ROWS, env=env, cwd=str(root))
        polls = PollLog(log)
        deadline = t0 + 60 + nodes * 0.25
        while len(polls.answered) < nodes:
            polls.read()
            if term.proc.poll() is not None:
                raise RuntimeError(f"the console exited ({term.proc.returncode}) before every node answered: "
                                   + term.text()[-300:].strip())
            if time.monotonic() > deadline:
                raise RuntimeError(f"only {len(polls.answered)} of {nodes} nodes answered within "
                                   f"{deadline - t0:.0f} s")
            await asyncio.sleep(0.2)
        connect_s = time.monotonic() - t0
        chosen_interval = _interval_from_log(log)
        progress(f"fan-out: every node answered after {connect_s:.1f} s; measuring")
        await asyncio.sleep(settle_s)                     # the connect storm's tail
        console_proc = term.process()
        sim_proc = psutil.Process(sim.pid)
        showing_all = False
        for i in range(reps):
            progress(f"fan-out: repetition {i + 1} of {reps} ({window_s:g} s, then {keys_per_rep} keys)")
            polls.read()
            term.trim()
            c0, s0, w0 = cpu_s(console_proc), cpu_s(sim_proc), time.perf_counter()
            await asyncio.sleep(window_s)
            c1, s1, w1 = cpu_s(console_proc), cpu_s(sim_proc), time.perf_counter()
            window = polls.read()
            rep = Rep(cpu_pct=(c1 - c0) * 100 / (w1 - w0), sim_cpu_pct=(s1 - s0) * 100 / (w1 - w0),
                      rss_mib=console_proc.memory_info().rss / (1 << 20),
                      rounds=[ms for _n, ms, ok in window if ok], failed=sum(1 for _n, _ms, ok in window if not ok))
            rep.keys, showing_all, misses = await _keys(term, keys_per_rep, showing_all)
            if misses:
                errors.append(f"fan-out: a key's effect did not show within {KEY_TIMEOUT_S:g} s")
            polls.read()
            runs.append(rep)
        await asyncio.to_thread(term.stop)
        term = None
        if bare:
            progress(f"fan-out: the bare poller over the same {nodes} nodes ({window_s:g} s)")
            bare_pct = await _bare_cpu_pct(state, env, max(window_s, BARE_MIN_WINDOW_S), nodes)
    except RuntimeError as exc:
        errors.append(f"fan-out: {exc}")
    finally:
        if term is not None:
            await asyncio.to_thread(term.stop)
        if sim is not None:
            await _stop(sim)
        shutil.rmtree(root, ignore_errors=True)
    head = _headline(runs, nodes, connect_s, chosen_interval)
    head["fanout_procs_per_node"] = size[0] if size else None
    head["fanout_realsize_cpu_pct"] = head["fanout_cpu_pct"] if size else None
    head["fanout_bare_cpu_pct"] = round(bare_pct, 2) if bare_pct is not None else None
    head["fanout_vs_bare_ratio"] = (round(head["fanout_cpu_pct"] / bare_pct, 2)
                                    if bare_pct and head["fanout_cpu_pct"] is not None else None)
    return _results(runs, nodes), head, errors


def _interval_from_log(log: Path) -> float | None:
    try:
        m = re.search(r"poll interval ([0-9.]+) s", log.read_text(errors="replace"))
    except OSError:
        return None
    return float(m.group(1)) if m else None


def _med(values: list[float]) -> float | None:
    return round(statistics.median(values), 3) if values else None


def _results(runs: list[Rep], nodes: int) -> list[Result]:
    out = []
    rounds = [x for r in runs for x in r.rounds]
    if rounds:
        out.append(Result("fanout.round", f"one poll as the console records it, {nodes} nodes polling",
                          rounds, extra={"nodes": nodes, "failed_polls": sum(r.failed for r in runs)}))
    keys = [x for r in runs for x in r.keys]
    if keys:
        out.append(Result("fanout.key_to_frame", f"key a until the frame that shows it, {nodes} nodes polling",
                          keys, extra={"nodes": nodes}))
    if runs:
        out.append(Result("fanout.cpu", f"the console's CPU, % of one core, {nodes} nodes polling "
                          "(one sample per repetition)", [r.cpu_pct for r in runs], unit="%",
                          extra={"nodes": nodes}))
    return out


def _headline(runs: list[Rep], nodes: int, connect_s: float | None, interval: float | None) -> dict:
    return {
        "fanout_nodes": nodes,
        "fanout_interval_s": interval,
        "fanout_connect_s": round(connect_s, 1) if connect_s is not None else None,
        "fanout_cpu_pct": _med([r.cpu_pct for r in runs]),
        "fanout_rss_mib": _med([r.rss_mib for r in runs]),
        "fanout_round_ms_p99": _med([percentile(r.rounds, 99) for r in runs if r.rounds]),
        "fanout_sim_cpu_pct": _med([r.sim_cpu_pct for r in runs if r.sim_cpu_pct is not None]),
        "key_to_frame_ms_p99": _med([percentile(r.keys, 99) for r in runs if r.keys]),
    }
