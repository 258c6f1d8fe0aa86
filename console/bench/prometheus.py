"""A real Prometheus scraping `gpu-incident simulate`'s exporter: for the bench's fleet part and
the tests (tests/test_fleet_prometheus.py). Both run as child processes, stopped by their PID.

``start_simulator(args, workdir)`` runs ``gpu-incident simulate ARGS --exporter-port 0`` and
reads the port it chose from its first lines; ``start_prometheus(targets, workdir)`` writes a
config (one job per target, the given scrape interval), starts ``prometheus`` on a free
127.0.0.1 port with its data in ``workdir`` and waits for ``/-/ready``;
``wait_for_series(url, count)`` waits until Prometheus has ``count`` FB_USED series.
Each raises RuntimeError with one line (what is missing, or the child's last words).
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path

BINARY = "prometheus"
READY_S = 60.0


def prometheus_binary() -> str | None:
    """The prometheus executable (Debian's package puts it at /usr/bin/prometheus), or None."""
    return shutil.which(BINARY) or (("/usr/bin/prometheus") if os.access("/usr/bin/prometheus", os.X_OK) else None)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Child:
    proc: subprocess.Popen
    port: int
    workdir: Path

    @property
    def pid(self) -> int:
        return self.proc.pid

    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM, then SIGKILL after ``timeout``; by this child's PID only."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout)
        for stream in (self.proc.stdout, self.proc.stderr):
            if stream is not None:
                stream.close()


def _gpu_incident() -> list[str]:
    exe = Path(sys.executable).with_name("gpu-incident")
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "console"]


def start_simulator(args: list[str], workdir: Path, bound_s: float = READY_S) -> Child:
    """`gpu-incident simulate ARGS --exporter-port 0` until it names its exporter's port."""
    log = open(workdir / "simulate.err", "wb")
    proc = subprocess.Popen([*_gpu_incident(), "simulate", *args, "--exporter-port", "0"],
                            stdout=subprocess.PIPE, stderr=log, text=True, start_new_session=True)
    log.close()
    deadline = time.monotonic() + bound_s
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        if line.startswith("exporter: http://"):
            port = int(line.split()[1].rsplit(":", 1)[1].split("/", 1)[0])
            return Child(proc, port, workdir)
    err = (workdir / "simulate.err").read_text(errors="replace").strip().splitlines()
    Child(proc, 0, workdir).stop()
    raise RuntimeError(f"gpu-incident simulate did not start its exporter: {err[-1] if err else 'no output'}")


def config_text(targets: list[str], scrape_interval: str, jobs: int = 1) -> str:
    """A Prometheus config scraping each target (``jobs`` > 1: the same targets again under
    another job name, as two Prometheus jobs scraping one exporter would)."""
    lines = ["global:", f"  scrape_interval: {scrape_interval}", f"  scrape_timeout: {scrape_interval}",
             "scrape_configs:"]
    for j in range(jobs):
        lines += [f"  - job_name: dcgm{'' if j == 0 else f'-{j + 1}'}", "    static_configs:",
                  "      - targets: [" + ", ".join(f"'{t}'" for t in targets) + "]"]
    return "\n".join(lines) + "\n"


def start_prometheus(targets: list[str], workdir: Path, *, scrape_interval: str = "1s", jobs: int = 1,
                     web_config: Path | None = None, bound_s: float = READY_S) -> Child:
    """A Prometheus scraping ``targets`` (host:port), ready to answer queries."""
    binary = prometheus_binary()
    if binary is None:
        raise RuntimeError("prometheus is not installed (Debian/Ubuntu: apt-get install prometheus)")
    config = workdir / "prometheus.yml"
    config.write_text(config_text(targets, scrape_interval, jobs))
    for attempt in range(5):
        port = free_port()
        argv = [binary, f"--config.file={config}", f"--storage.tsdb.path={workdir / 'data'}",
                f"--web.listen-address=127.0.0.1:{port}", "--storage.tsdb.retention.time=1h",
                "--log.level=warn"]
        if web_config is not None:
            argv.append(f"--web.config.file={web_config}")
        log = open(workdir / "prometheus.err", "wb")
        proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=log, start_new_session=True)
        log.close()
        child = Child(proc, port, workdir)
        scheme = "https" if web_config is not None else "http"
        deadline = time.monotonic() + bound_s
        while time.monotonic() < deadline and proc.poll() is None:
            if _ready(f"{scheme}://127.0.0.1:{port}/-/ready"):
                return child
            time.sleep(0.1)
        err = (workdir / "prometheus.err").read_text(errors="replace")
        child.stop()
        if "address already in use" not in err:
            lines = err.strip().splitlines()
            raise RuntimeError(f"prometheus did not become ready: {lines[-1][:300] if lines else 'no output'}")
    raise RuntimeError("prometheus found no free port")


def _ready(url: str) -> bool:
    import ssl
    ctx = None
    if url.startswith("https"):          # readiness only: the test's own self-signed certificate
        ctx = ssl.create_default_context()
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    try:
        with urllib.request.urlopen(url, timeout=2, context=ctx) as r:
            return r.status == 200
    except OSError:
        return False


def query(port: int, promql: str, timeout: float = 10.0) -> list:
    url = f"http://127.0.0.1:{port}/api/v1/query?" + urllib.parse.urlencode({"query": promql})
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return json.loads(r.read())["data"]["result"]


def wait_for_series(port: int, count: int, bound_s: float = READY_S) -> None:
    """Until Prometheus holds ``count`` GPUs' FB_USED series (a scrape or two after start)."""
    deadline = time.monotonic() + bound_s
    seen = 0
    while time.monotonic() < deadline:
        try:
            result = query(port, 'count(max by (Hostname, gpu, UUID) (DCGM_FI_DEV_FB_USED))')
            seen = int(float(result[0]["value"][1])) if result else 0
        except (OSError, ValueError, KeyError, IndexError):
            seen = 0
        if seen >= count:
            return
        time.sleep(0.2)
    raise RuntimeError(f"Prometheus has {seen} of {count} GPU series after {bound_s:g} s")


#: Prometheus's own account of its query work (its /metrics): the query API's handlers, and the
#: engine's evaluation (its slices: queue, prepare, inner eval, sort)
_HANDLER_SUM = "prometheus_http_request_duration_seconds_sum{"
_ENGINE_SUM = "prometheus_engine_query_duration_seconds_sum{"


def own_seconds(port: int) -> dict[str, float]:
    """Seconds Prometheus has spent so far on queries, in its own words: ``http`` (the
    /api/v1/query and query_range handlers, whole: evaluation and the JSON they send) and
    ``engine`` (the evaluation alone). Read before and after the console's rounds, the difference
    is what Prometheus spent on them. Only these two sums are read, by their line's start (the
    text format: ``name{labels} value``), so no exposition parser is needed here."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        text = r.read().decode("utf-8", "replace")
    out = {"http": 0.0, "engine": 0.0}
    for line in text.splitlines():
        if line.startswith(_HANDLER_SUM) and 'handler="/api/v1/query' in line:
            out["http"] += float(line.rsplit(" ", 1)[1])
        elif line.startswith(_ENGINE_SUM):
            out["engine"] += float(line.rsplit(" ", 1)[1])
    return out
