"""A real-size process table made of real processes, for the bench and the tests.

A GPU node runs 1,000-3,000 processes and 10,000-30,000 threads. ``Crowd.start`` forks that
many sleeping processes from one Python child (``python -m console.bench.crowd``), in its own
process group: eight GPU workers with WORKER_THREADS threads each and DATALOADERS data-loader
children each, a few services with many threads, and single-threaded rest; ``stop`` ends the
group (and nothing else). The workers' PIDs come back on the child's first output line, so a
stand-in nvidia-smi can list them.

Memory: forked children share the parent's pages; about 0.3 MiB a process and 30 KiB a thread
here (2,000 processes and 10,000 threads: ~1 GiB).
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field

WORKERS = 8
WORKER_THREADS = 100
DATALOADERS = 4
SERVICE_THREADS = 500
START_TIMEOUT_S = 120.0


@dataclass
class Layout:
    procs: int
    threads: int
    workers: int = WORKERS
    worker_threads: int = WORKER_THREADS

    def plan(self) -> list[tuple[str, int, int | None]]:
        """(role, threads, index of the parent in this list or None) for every process."""
        out: list[tuple[str, int, int | None]] = []
        for w in range(self.workers):
            out.append(("worker", self.worker_threads, None))
        for w in range(self.workers):
            for _ in range(DATALOADERS):
                out.append(("dataloader", 2, w))
        used = sum(t for _, t, _ in out)
        left_procs = max(0, self.procs - len(out))
        left_threads = max(left_procs, self.threads - used)
        services = min(left_procs, max(0, (left_threads - left_procs) // SERVICE_THREADS))
        for _ in range(services):
            out.append(("service", SERVICE_THREADS, None))
        rest = left_procs - services
        spare = max(0, left_threads - services * SERVICE_THREADS - rest)
        for i in range(rest):
            out.append(("sleeper", 1 + (1 if i < spare else 0), None))
        return out[:self.procs]


def _idle(threads: int, device: str | None = None) -> None:
    import threading
    held = open(device, "rb") if device else None   # noqa: F841,SIM115 - held until the end, as a GPU worker's
    threading.stack_size(64 * 1024)
    ev = threading.Event()
    for _ in range(threads - 1):
        threading.Thread(target=ev.wait, daemon=True).start()
    signal.pause()


def _serve(layout: Layout, device: str | None) -> None:
    """The child: fork the table, print the workers' PIDs, wait to be ended with the group."""
    plan = layout.plan()
    pids: list[int] = []
    workers: list[int] = []
    for role, threads, parent in plan:
        if role == "dataloader" and parent is not None:
            continue
        pid = os.fork()
        if pid == 0:
            try:
                if role == "worker":
                    for r2, t2, p2 in plan:
                        if r2 == "dataloader" and p2 == len(workers):
                            if os.fork() == 0:
                                try:
                                    _idle(t2)
                                finally:
                                    os._exit(0)
                _idle(threads, device if role == "worker" else None)
            finally:
                os._exit(0)
        pids.append(pid)
        if role == "worker":
            workers.append(pid)
    print(" ".join(map(str, workers)) or "-", flush=True)
    signal.pause()


@dataclass
class Crowd:
    proc: subprocess.Popen
    workers: list[int] = field(default_factory=list)

    @classmethod
    def start(cls, procs: int, threads: int, workers: int = WORKERS, worker_threads: int = WORKER_THREADS,
              device: str | None = None) -> "Crowd":
        """``procs`` processes with ``threads`` threads in all; the first ``workers`` are GPU
        workers (each holding ``device`` open, when given) with their data loaders."""
        proc = subprocess.Popen([sys.executable, "-m", "console.bench.crowd", str(procs), str(threads),
                                 str(workers), str(worker_threads), device or ""], stdout=subprocess.PIPE,
                                text=True, start_new_session=True)
        crowd = cls(proc)
        line = proc.stdout.readline() if proc.stdout is not None else ""
        if not line.strip() and workers:
            crowd.stop()
            raise RuntimeError("the crowd of processes did not start")
        crowd.workers = [int(w) for w in line.split() if w.isdecimal()]
        crowd.wait_threads(threads)
        return crowd

    def members(self) -> list[int]:
        """Every process of the crowd (its process group), but its parent."""
        out = []
        for name in os.listdir("/proc"):
            if name.isdecimal():
                try:
                    if os.getpgid(int(name)) == self.proc.pid and int(name) != self.proc.pid:
                        out.append(int(name))
                except OSError:
                    pass
        return out

    def wait_threads(self, threads: int) -> None:
        """Until the group has (nearly) all its threads: forks return before threads start."""
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            n = 0
            for pid in self.members():
                try:
                    n += len(os.listdir(f"/proc/{pid}/task"))
                except OSError:
                    pass
            if n >= threads * 0.98:
                return
            time.sleep(0.5)

    def stop(self) -> None:
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait(10)


if __name__ == "__main__":
    _serve(Layout(int(sys.argv[1]), int(sys.argv[2]), workers=int(sys.argv[3]), worker_threads=int(sys.argv[4])),
           sys.argv[5] or None)
