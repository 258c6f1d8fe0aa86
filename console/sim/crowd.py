"""A real-size process table for a simulated node (`simulate --procs N --threads T`).

A scenario builds the processes its incident is about (a few dozen); a real GPU node runs
1,000-3,000 processes and 10,000-30,000 threads around them. ``fill`` adds the rest, none of
them GPU-related: per-CPU kernel threads (about two in five of a big node's PIDs), and
userland: container shims and pause processes, agents, shells, a few services with hundreds
of threads. They are deterministic (the node's name and the counts decide), start with the
node, and change nothing of the scenario (their PIDs are above its own).
"""
from __future__ import annotations

from console.sim.host import SimHost

#: filler PIDs start here (a scenario's own are lower)
FIRST_PID = 400_000
SERVICE_THREADS = 400
_KTHREADS = ("kworker/{n}:1-events", "ksoftirqd/{n}", "migration/{n}", "cpuhp/{n}", "kworker/{n}:0H-kblockd",
             "idle_inject/{n}", "rcuop/{n}")
_USERLAND = (
    ("containerd-shim", "/usr/bin/containerd-shim-runc-v2 -namespace k8s.io -id {h} -address /run/containerd/containerd.sock", "root", 0),
    ("pause", "/pause", "65535", 65535),
    ("bash", "-bash", "mlops", 1001),
    ("node_exporter", "/usr/bin/node_exporter --collector.systemd", "prometheus", 998),
    ("python3", "python3 /opt/jobs/preprocess.py --shard {n}", "mlops", 1001),
    ("sleep", "sleep infinity", "mlops", 1001),
    ("sshd", "sshd: mlops@pts/{n}", "mlops", 1001),
    ("nginx", "nginx: worker process", "www-data", 33),
)
_SERVICES = (("java", "java -Xmx8g -jar /opt/feature-store/server.jar", "svc", 1500),
             ("dockerd", "/usr/bin/dockerd -H fd:// --containerd=/run/containerd/containerd.sock", "root", 0))


def fill(node: SimHost, procs: int, threads: int) -> int:
    """Add processes until the node has ``procs`` and ``threads`` threads in all; how many were
    added."""
    have = len(node.procs)
    have_threads = sum(p.nthreads for p in node.procs.values())
    todo = max(0, procs - have)
    spare_threads = max(0, threads - have_threads - todo)
    services = min(todo // 4, spare_threads // SERVICE_THREADS)
    kthreads = (todo - services) * 2 // 5
    pid = FIRST_PID
    start = node.created_at - node.scenario.uptime_s + 30
    for i in range(todo):
        if i < services:
            comm, args, user, uid = _SERVICES[i % len(_SERVICES)]
            n = SERVICE_THREADS
        elif i < services + kthreads:
            k = i - services
            comm = _KTHREADS[k % len(_KTHREADS)].format(n=k // len(_KTHREADS))[:15]
            node.add_proc(pid=pid, ppid=2, comm=comm, args="", kthread=True, pgrp=0, sid=0, start=start,
                          state="I" if comm.startswith("kworker") else "S", wchan="worker_thread")
            pid += 1
            continue
        else:
            k = i - services - kthreads
            comm, args, user, uid = _USERLAND[k % len(_USERLAND)]
            args = args.format(n=k % 97, h=f"{(k * 2654435761) % (1 << 64):016x}")
            n = 1 + (1 if k < spare_threads - services * SERVICE_THREADS else 0)
        node.add_proc(pid=pid, ppid=1, comm=comm[:15], args=args, user=user, uid=uid, nthreads=n, start=start,
                      wchan="do_epoll_wait" if n > 1 else "hrtimer_nanosleep", rss_kb=20_000, vsz_kb=200_000)
        pid += n
    return todo
