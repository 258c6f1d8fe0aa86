"""Bench, parts 2 and 3: polling over SSH.

Part 2 starts N simulated nodes (sim.server.start_sim_servers, in a child
process: console.bench.simserver) on free 127.0.0.1 ports with their keys in a
temporary state directory, and polls them the way the console does: one
SshSource per node, every connect through the connect limiter. It measures the
connect storm (time until every node's first snapshot), steady-state polls with
all nodes polled concurrently, and this process's CPU per second while the
engine's monitors poll every node once a second.

Part 3 (``--target DEST``) polls one real SSH destination over the kept
connection, then with a fresh connection per poll (what ``ssh host probe``
costs every time).
"""
from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

from console.bench.stats import Result, Stopwatch
from console.monitor import NodeMonitor
from console.sources.ssh.source import SshSource
from console.sources.ssh.options import SshOptions

CHILD_START_TIMEOUT_S = 60.0
CHILD_STOP_TIMEOUT_S = 5.0
CONNECT_TIMEOUT_S = 15.0


class SimChild:
    """The child process serving the simulated nodes; started and stopped by its PID only."""

    def __init__(self, proc: asyncio.subprocess.Process, ports: list[int], state_dir: Path) -> None:
        self.proc = proc
        self.ports = ports
        self.state_dir = state_dir

    @property
    def targets(self) -> list[str]:
        return [f"root@127.0.0.1:{p}" for p in self.ports]

    def cpu_s(self) -> float | None:
        """The child's CPU time so far (user + system), None when it cannot be read."""
        try:
            import psutil
            t = psutil.Process(self.proc.pid).cpu_times()
            return t.user + t.system
        except Exception:  # noqa: BLE001 - a figure we can do without
            return None

    def options(self) -> SshOptions:
        """Trust exactly the simulator's host keys, log in with its client key, and read no
        ~/.ssh/config of the person running the bench (an empty config file instead)."""
        config = self.state_dir / "ssh_config"
        config.touch(mode=0o600, exist_ok=True)
        return SshOptions(known_hosts=str(self.state_dir / "known_hosts"),
                          identity=(str(self.state_dir / "client_key"),), ssh_config=str(config),
                          connect_timeout=CONNECT_TIMEOUT_S)

    @classmethod
    async def start(cls, state_dir: Path, nodes: int, scenario: str = "seed") -> "SimChild":
        package_parent = str(Path(__file__).resolve().parent.parent)
        env = dict(os.environ)
        env["PYTHONPATH"] = package_parent + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        err_path = state_dir / "simulator.err"
        with open(err_path, "wb") as err:
            proc = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "console.bench.simserver", str(state_dir), str(nodes), scenario,
                stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=err, env=env)
        child = cls(proc, [], state_dir)
        try:
            assert proc.stdout is not None
            line = await asyncio.wait_for(proc.stdout.readline(), CHILD_START_TIMEOUT_S)
        except asyncio.TimeoutError:
            await child.stop()
            raise RuntimeError(f"the simulated nodes did not start within {CHILD_START_TIMEOUT_S:g} s") from None
        words = line.decode(errors="replace").split()
        if not words or words[0] != "ready" or not all(w.isdecimal() for w in words[1:]):
            await child.stop()
            why = err_path.read_text(errors="replace").strip().splitlines()
            raise RuntimeError("the simulated nodes did not start: " + (why[-1] if why else "no output"))
        child.ports = [int(w) for w in words[1:]]
        return child

    async def stop(self) -> None:
        proc = self.proc
        if proc.returncode is not None:
            return
        if proc.stdin is not None:
            with contextlib.suppress(Exception):
                proc.stdin.close()          # EOF: the child closes its servers and exits
        try:
            await asyncio.wait_for(proc.wait(), CHILD_STOP_TIMEOUT_S)
        except asyncio.TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            await proc.wait()


async def _timed_poll(source: SshSource, since: float):
    snap = await source.poll()
    return (time.perf_counter() - since) * 1000, snap


async def measure_sim(nodes: int, rounds: int, cpu_seconds: int,
                      progress: Callable[[str], None] = lambda _m: None) -> tuple[list[Result], list[str]]:
    """Part 2: N simulated nodes over SSH. Returns (results, error lines)."""
    results: list[Result] = []
    errors: list[str] = []
    state_dir = Path(tempfile.mkdtemp(prefix="gpu-incident-bench-"))
    child: SimChild | None = None
    sources: list[SshSource] = []
    monitors: list[NodeMonitor] = []
    try:
        progress(f"ssh: starting {nodes} simulated node(s)")
        watch = Stopwatch()
        child = await SimChild.start(state_dir, nodes)
        start_ms = watch.wall_ms
        options = child.options()
        sources = [SshSource(t, options) for t in child.targets]

        progress(f"ssh: connect storm to {nodes} node(s)")
        watch = Stopwatch()
        t0 = time.perf_counter()
        firsts = await asyncio.gather(*(_timed_poll(s, t0) for s in sources))
        storm_cpu = watch.cpu_ms
        ok = [ms for ms, snap in firsts if snap.error is None]
        for ms, snap in firsts:
            if snap.error is not None:
                errors.append(f"{snap.name}: {snap.error}")
        if not ok:
            return results, errors
        results.append(Result("ssh.first_snapshot", f"connect storm: time from start to each node's first "
                              f"snapshot, {nodes} simulated nodes at once", ok, cpu_ms=storm_cpu,
                              extra={"nodes": nodes, "failed": nodes - len(ok),
                                     "simulator_start_ms": round(start_ms, 1)}))
        live = [s for s, (_ms, snap) in zip(sources, firsts) if snap.error is None]

        progress(f"ssh: {rounds} round(s) of concurrent polls")
        per_node, probe_ms, round_ms = [], [], []
        watch = Stopwatch()
        server_cpu0 = child.cpu_s()
        for _ in range(rounds):
            t0 = time.perf_counter()
            polled = await asyncio.gather(*(_timed_poll(s, t0) for s in live))
            round_ms.append((time.perf_counter() - t0) * 1000)
            for ms, snap in polled:
                if snap.error is not None:
                    errors.append(f"{snap.name}: {snap.error}")
                    continue
                per_node.append(ms)
                if snap.probe_ms is not None:
                    probe_ms.append(snap.probe_ms)
        rounds_cpu = watch.cpu_ms
        server_cpu1 = child.cpu_s()
        round_extra = {}
        if server_cpu0 is not None and server_cpu1 is not None:
            round_extra["simulator_cpu_ms"] = round((server_cpu1 - server_cpu0) * 1000, 1)
        if per_node:
            results.append(Result("ssh.poll", f"steady-state poll (kept connection, probe + parse), "
                                  f"{len(live)} nodes polled concurrently", per_node))
        if probe_ms:
            results.append(Result("ssh.probe", "the probe's round trip alone (probe_ms: write script, "
                                  "read to the end marker)", probe_ms))
        results.append(Result("ssh.round", f"one round: every one of {len(live)} nodes polled (one simulator "
                              "process serves them all: with many nodes its queue is in these figures)",
                              round_ms, cpu_ms=rounds_cpu, extra=round_extra))

        progress(f"ssh: {cpu_seconds} s of polling every node once a second")
        monitors = [NodeMonitor(s, interval=1.0) for s in live]
        server_cpu0 = child.cpu_s()
        per_second: list[float] = []
        start_wall, start_cpu = time.perf_counter(), time.process_time()
        last_wall, last_cpu = start_wall, start_cpu
        for m in monitors:
            m.start()
        for k in range(1, cpu_seconds + 1):
            await asyncio.sleep(max(0.0, start_wall + k - time.perf_counter()))
            wall, cpu = time.perf_counter(), time.process_time()
            per_second.append((cpu - last_cpu) * 1000 / (wall - last_wall))
            last_wall, last_cpu = wall, cpu
        server_cpu1 = child.cpu_s()
        polls = sum(len(m.history) for m in monitors)
        failed = sum(1 for m in monitors for h in m.history if h.error is not None)
        extra: dict = {"nodes": len(live), "interval_s": 1.0, "polls": polls, "failed_polls": failed}
        if server_cpu0 is not None and server_cpu1 is not None:
            extra["simulator_cpu_ms_per_s"] = round((server_cpu1 - server_cpu0) * 1000 / (last_wall - start_wall), 1)
        results.append(Result("ssh.cpu_per_s", f"this process's CPU ms per second while polling "
                              f"{len(live)} nodes every 1 s (engine monitors, with diagnosis)",
                              per_second, unit="ms/s", cpu_ms=(last_cpu - start_cpu) * 1000, extra=extra))
        return results, errors
    finally:
        await asyncio.gather(*(m.stop() for m in monitors), return_exceptions=True)
        await asyncio.gather(*(s.close() for s in sources), return_exceptions=True)
        if child is not None:
            await child.stop()
        shutil.rmtree(state_dir, ignore_errors=True)


async def measure_target(dest: str, options: SshOptions, *, device_glob: str, probe_timeout: float,
                         rounds: int, progress: Callable[[str], None] = lambda _m: None
                         ) -> tuple[list[Result], list[str]]:
    """Part 3: one real destination, kept connection vs a fresh connection per poll."""
    results: list[Result] = []
    errors: list[str] = []

    def make() -> SshSource:
        return SshSource(dest, options, device_glob=device_glob, probe_timeout=probe_timeout)

    progress(f"target {dest}: {rounds} poll(s) over the kept connection")
    kept = make()
    try:
        t0 = time.perf_counter()
        snap = await kept.poll()
        first_ms = (time.perf_counter() - t0) * 1000
        if snap.error is not None:
            return results, [f"target {dest}: {snap.error}"]
        results.append(Result("target.first_poll", f"{dest}: connect + first poll", [first_ms]))
        kept_ms, kept_probe = [], []
        watch = Stopwatch()
        for _ in range(rounds):
            t0 = time.perf_counter()
            snap = await kept.poll()
            if snap.error is not None:
                errors.append(f"target {dest}: {snap.error}")
                break
            kept_ms.append((time.perf_counter() - t0) * 1000)
            if snap.probe_ms is not None:
                kept_probe.append(snap.probe_ms)
        if kept_ms:
            results.append(Result("target.kept", f"{dest}: poll over the kept connection (probe + parse)",
                                  kept_ms, cpu_ms=watch.cpu_ms,
                                  extra={"processes": len(snap.processes), "gpus": len(snap.gpus)}))
        if kept_probe:
            results.append(Result("target.kept.probe", f"{dest}: probe round trip alone, kept connection",
                                  kept_probe))
    finally:
        await kept.close()

    progress(f"target {dest}: {rounds} poll(s) with a fresh connection each")
    fresh_ms = []
    watch = Stopwatch()
    for _ in range(rounds):
        src = make()
        try:
            t0 = time.perf_counter()
            snap = await src.poll()
            elapsed = (time.perf_counter() - t0) * 1000
        finally:
            await src.close()
        if snap.error is not None:
            errors.append(f"target {dest}: {snap.error}")
            break
        fresh_ms.append(elapsed)
    if fresh_ms:
        results.append(Result("target.fresh", f"{dest}: connect + authenticate + probe + parse, "
                              "a fresh connection per poll", fresh_ms, cpu_ms=watch.cpu_ms))
    return results, errors
