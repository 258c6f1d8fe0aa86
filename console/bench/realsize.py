"""Bench: one node at 1 Hz over a real sshd, on a small process table and on a real-size one.

The node is this machine: a loopback OpenSSH sshd (console/bench/sshd.py) with a ``sh``
stand-in for nvidia-smi that charges eight GPU workers. Measured side by side in one run:

- ``small``: the machine's own table (~100 processes here), the stand-in listing no GPU process
  (the issue's setup: what the table's size costs);
- ``realsize``: the same with 2,000 more processes and 10,000 more threads of real processes
  (console/bench/crowd.py) that have nothing to do with the GPUs;
- ``job``: the real-size table and a GPU job: eight workers of WORKER_THREADS threads, each
  holding a device file (a file the probe's device glob names) and listed by the stand-in as a
  GPU's process, with four data loaders each (what the watched set costs: ``realsize_job_*``).

For each, an SshSource polls once a second, and each poll is diagnosed as the console does; the
window measured runs from just after a whole probe to just after the WHOLE_PERIODS-th whole probe
after it, so it holds the probe's two speeds in the proportion of the console's steady run. The
node's CPU is the sshd session's, its shell's and every command's that shell ran; the console's
is this process's over the polls; the bytes are what each steady (light) poll sent back.
"""
from __future__ import annotations

import asyncio
import resource
import shutil
import tempfile
import time
from pathlib import Path
from typing import Callable

from console.bench import sshd as loopback
from console.bench.crowd import DATALOADERS, WORKER_THREADS, WORKERS, Crowd
from console.bench.stats import Result, percentile
from console.bench.transport import STANDIN, _node_env
from console.monitor import NodeMonitor
from console.ui.gc_pacing import Paced
from console.sources.capture import ProbeOutput
from console.sources.ssh.options import SshOptions
from console.sources.ssh.source import SshSource

PROCS = 2000
THREADS = 10000
POLL_S = 1.0
#: whole probes in the measured window of each table (the window ends right after the last)
WHOLE_PERIODS = 2
#: the stand-in lists what $GI_BENCH_APPS holds (one compute-apps CSV line per GPU process)
APPS_STANDIN = STANDIN.replace(
    "  *--query-compute-apps=*) ;;",
    '  *--query-compute-apps=*) while IFS= read -r l; do echo "$P$l"; done < "${GI_BENCH_APPS:-/dev/null}" ;;')
assert APPS_STANDIN != STANDIN


class _Counting(SshSource):
    """An SshSource that keeps the size of each probe's output, and whether it was light."""

    def __init__(self, *a, **kw) -> None:
        super().__init__(*a, **kw)
        self.sizes: list[tuple[bool, int]] = []

    async def _exec_probe(self, script: str, mark: str, timeout: float) -> ProbeOutput:
        out = await super()._exec_probe(script, mark, timeout)
        light = self._scope is not None and not self._scope.whole
        self.sizes.append((light, len(out.data or b"")))
        return out


def _node_cpu_s(server: loopback.LoopbackSshd) -> float | None:
    """CPU seconds of the sshd session processes and the shell, and what the shell reaped."""
    total = 0.0
    found = False
    for p in server.sessions():
        try:
            t = p.cpu_times()
            name = p.name()
        except Exception:  # noqa: BLE001 - a probe command that ended: counted by its shell
            continue
        if name == "sshd" or name == "sh":
            found = True
            total += t.user + t.system
            if name == "sh":
                total += t.children_user + t.children_system
                # what the shell runs for longer than a poll (the nvidia-smi loops: probe_loop.py)
                # counts while it runs, not only once reaped
                try:
                    kids = p.children(recursive=True)
                except Exception:  # noqa: BLE001 - the shell ended
                    kids = []
                for kid in kids:
                    try:
                        k = kid.cpu_times()
                    except Exception:  # noqa: BLE001 - a command that ended: its shell counts it
                        continue
                    total += k.user + k.system + k.children_user + k.children_system
    return total if found else None


def _self_cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


async def _measure_one(dest: str, options: SshOptions, server: loopback.LoopbackSshd, polls: int,
                       device_glob: str) -> dict:
    """The node's and the console's CPU over whole periods of the probe's two speeds: from just
    after a whole probe to just after the last of WHOLE_PERIODS more (a window of ``polls`` polls
    at 1 Hz held 2 or 3 whole probes by chance: ±20% on the ratio between two tables). ``polls``
    bounds the polls of the measured window."""
    src = _Counting(dest, options, device_glob=device_glob)
    monitor = NodeMonitor(src)
    monitor.watched = False                  # one node of many: unchanged input is not re-diagnosed
    try:
        first = await src.poll()                 # connect, the shell's first (whole) probe
        if first.error is not None:
            raise RuntimeError(f"realsize: the node did not answer: {first.error}")
        src.request_whole()                      # the window opens after the next poll, a whole one
        n = wholes = 0
        started = False
        node0: float | None = None
        me0 = t0 = 0.0
        snap = first
        with Paced() as paced:                   # the console's collector pacing (ui/gc_pacing.py)
            due = time.perf_counter()
            while wholes < WHOLE_PERIODS:
                due += POLL_S
                await asyncio.sleep(max(0.0, due - time.perf_counter()))
                paced.tick()
                snap = await monitor.poll_once()
                if snap.error is not None:
                    raise RuntimeError(f"realsize: a poll failed: {snap.error}")
                whole = bool(src.sizes) and not src.sizes[-1][0]
                if started:
                    n += 1
                    wholes += whole
                    if n >= polls:
                        break
                elif whole:                       # the window opens right after a whole probe
                    started = True
                    node0, me0, t0 = _node_cpu_s(server), _self_cpu_s(), time.perf_counter()
                    src.sizes.clear()
        wall = time.perf_counter() - t0
        # the console's clock first: reading the node's CPU walks this machine's whole process
        # table through psutil (~0.1 s at 2,000 processes), the bench's work, not the console's
        me1 = _self_cpu_s()
        node1 = _node_cpu_s(server)
        light = [b for is_light, b in src.sizes if is_light]
        return {"node_cpu_pct": None if node0 is None or node1 is None else (node1 - node0) / wall * 100,
                "console_cpu_pct": (me1 - me0) / wall * 100, "polls": n, "whole_probes": wholes,
                "processes": len(snap.processes), "bytes_p50": percentile(light, 50) if light else None,
                "whole_period_s": src.whole_period_s()}
    finally:
        await src.close()


async def measure(polls: int = 20, procs: int = PROCS, threads: int = THREADS,
                  progress: Callable[[str], None] = lambda _m: None) -> tuple[list[Result], dict, list[str]]:
    why = loopback.missing()
    if why is not None:
        return [], {}, [f"realsize: not measured: {why}"]
    root = Path(tempfile.mkdtemp(prefix="gpu-incident-bench-realsize-"))
    (root / "bin").mkdir()
    (root / "home").mkdir()
    standin = root / "bin" / "nvidia-smi"
    standin.write_text(APPS_STANDIN)
    standin.chmod(0o755)
    apps = root / "apps.csv"
    apps.write_text("")
    env = {**_node_env(root), "GI_BENCH_APPS": str(apps)}
    server: loopback.LoopbackSshd | None = None
    crowd: Crowd | None = None
    job: Crowd | None = None
    device = root / "dev" / "nvidia0"
    device.parent.mkdir()
    device.write_text("")
    out: dict = {}
    errors: list[str] = []
    try:
        host = loopback.make_host_key(root / "host_ed25519")
        key = root / "client_ed25519"
        loopback.write_key(key)
        port = loopback.free_ports(1)[0]
        server = loopback.LoopbackSshd(root / "sshd", host, Path(str(key) + ".pub").read_text(), [port], {port: env})
        await asyncio.to_thread(server.start)
        known = server.write_known_hosts(root / "known_hosts")
        (root / "ssh_config").write_text("")
        options = SshOptions(known_hosts=str(known), identity=(str(key),), ssh_config=str(root / "ssh_config"),
                             connect_timeout=10.0)
        dest = f"{loopback.login_user()}@127.0.0.1:{port}"
        progress(f"realsize: the small table, {polls} polls at 1 Hz")
        out["small"] = await _measure_one(dest, options, server, polls, str(device.parent / "nvidia*"))
        progress(f"realsize: starting {procs} processes with {threads} threads")
        crowd = await asyncio.to_thread(Crowd.start, procs, threads, 0)
        progress(f"realsize: the real-size table, {polls} polls at 1 Hz")
        out["realsize"] = await _measure_one(dest, options, server, polls, str(device.parent / "nvidia*"))
        progress(f"realsize: and a GPU job ({WORKERS} workers of {WORKER_THREADS} threads), {polls} polls")
        job = await asyncio.to_thread(Crowd.start, WORKERS * (1 + DATALOADERS),
                                      WORKERS * (WORKER_THREADS + 2 * DATALOADERS), device=str(device))
        apps.write_text("".join(f"{pid}, GPU-0bench00-0000-0000-0000-00000000000{i % 8}, 60000, "
                                f"{Path(f'/proc/{pid}/comm').read_text().strip()}\n"
                                for i, pid in enumerate(job.workers)))
        out["job"] = await _measure_one(dest, options, server, polls, str(device.parent / "nvidia*"))
    except RuntimeError as exc:
        errors.append(str(exc))
    finally:
        for group in (crowd, job):
            if group is not None:
                await asyncio.to_thread(group.stop)
        if server is not None:
            await asyncio.to_thread(server.stop)
        shutil.rmtree(root, ignore_errors=True)
    return [], _headline(out), errors


def _ratio(a: float | None, b: float | None) -> float | None:
    return None if a is None or not b else round(a / b, 2)


def _headline(out: dict) -> dict:
    small, real = out.get("small", {}), out.get("realsize", {})
    head = {
        "realsize_node_cpu_pct": _r(real.get("node_cpu_pct")),
        "realsize_node_cpu_ratio": _ratio(real.get("node_cpu_pct"), small.get("node_cpu_pct")),
        "realsize_console_cpu_ratio": _ratio(real.get("console_cpu_pct"), small.get("console_cpu_pct")),
        "realsize_poll_bytes_p50": real.get("bytes_p50"),
        "small_node_cpu_pct": _r(small.get("node_cpu_pct")),
        "small_console_cpu_pct": _r(small.get("console_cpu_pct")),
        "realsize_console_cpu_pct": _r(real.get("console_cpu_pct")),
        "small_poll_bytes_p50": small.get("bytes_p50"),
        "realsize_processes": real.get("processes"),
        "realsize_whole_period_s": _r(real.get("whole_period_s")),
        "realsize_job_node_cpu_pct": _r(out.get("job", {}).get("node_cpu_pct")),
        "realsize_job_console_cpu_pct": _r(out.get("job", {}).get("console_cpu_pct")),
        "realsize_job_poll_bytes_p50": out.get("job", {}).get("bytes_p50"),
    }
    return head


def _r(x: float | None) -> float | None:
    return None if x is None else round(x, 2)
