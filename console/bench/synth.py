"""Probe output of a big, busy 8-GPU node, generated as text for `gpu-incident bench`.

The bench feeds this text to the real parser (parse.parse_probe) and the real
diagnosis, so both are measured on a process table the size of a loaded
training node: ~2000 processes (kernel threads, daemons, login sessions, an
8-rank training job with data-loader workers, an inference server that died
badly) in exactly the layout probe.py documents. What goes wrong on it is what
goes wrong in the field: a zombie engine core with a thread stuck in the
driver, orphaned workers still holding memory, a holder the driver does not
list, a PID from another namespace, memory nobody accounts for, an Xid.

Deterministic: the same arguments give the same text. ``tick`` moves
utilisation, memory and a few process states, as successive polls would.
"""
from __future__ import annotations

import random
from dataclasses import dataclass, field

from console import probe

HOST_NS = "pid:[4026531836]"
SECTION_ORDER = [name for name, _ in probe.sections()]
CLK_TCK = 100
UPTIME_S = 9 * 86400
NOW = 1_796_000_000.0
GPU_NAME = "NVIDIA H100 80GB HBM3"
TOTAL_MIB = 81559
BUS_IDS = ("00000000:18:00.0", "00000000:2A:00.0", "00000000:3A:00.0", "00000000:5D:00.0",
           "00000000:9A:00.0", "00000000:AB:00.0", "00000000:BA:00.0", "00000000:DB:00.0")


@dataclass
class _P:
    pid: int
    ppid: int
    comm: str
    args: str
    user: str = "root"
    state: str = "S"
    threads: int = 1
    start_ticks: int = 0
    devices: list[str] = field(default_factory=list)
    d_threads: list[tuple[int, str]] = field(default_factory=list)   # (tid, wchan)
    ns: str = HOST_NS
    pgrp: int | None = None         # its process group and session (None: it leads its own)
    sid: int | None = None


@dataclass
class _App:
    pid: int
    gpu: int
    mib: int
    name: str


class _Node:
    def __init__(self, gpus: int, tick: int) -> None:
        self.rng = random.Random(f"bench-synth/{gpus}")
        self.tick = tick
        self.gpus = gpus
        self.procs: dict[int, _P] = {}
        self.apps: list[_App] = []
        self.next_pid = 2
        self.uuids = [f"GPU-{self.rng.getrandbits(32):08x}-{self.rng.getrandbits(16):04x}-"
                      f"{self.rng.getrandbits(16):04x}-{self.rng.getrandbits(16):04x}-"
                      f"{self.rng.getrandbits(48):012x}" for _ in range(gpus)]

    def add(self, ppid: int, comm: str, args: str, *, pid: int | None = None, age_s: float | None = None,
            **kw) -> _P:
        if pid is None:
            pid = self.next_pid
            self.next_pid += self.rng.randint(1, 9)
        else:
            self.next_pid = max(self.next_pid, pid + 1)
        if age_s is None:
            age_s = self.rng.uniform(60, UPTIME_S - 60)
        start = int((UPTIME_S - age_s) * CLK_TCK)
        p = _P(pid=pid, ppid=ppid, comm=comm[:15], args=args, start_ticks=max(start, 1), **kw)
        self.procs[pid] = p
        return p

    def gpu_holder(self, p: _P, gpu: int, *, others: bool = True) -> None:
        p.devices += ["/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm", f"/dev/nvidia{gpu}",
                      f"/dev/nvidia{gpu}"]
        if others:
            p.devices += [f"/dev/nvidia{g}" for g in range(self.gpus) if g != gpu]


#: the vLLM launcher whose workers were orphaned: no such process any more
DEAD_LAUNCHER = 3_999_001


def _build(gpus: int, processes: int, tick: int) -> _Node:
    n = _Node(gpus, tick)
    rng = n.rng
    n.add(0, "systemd", "/sbin/init", pid=1, age_s=UPTIME_S)
    n.add(0, "kthreadd", "[kthreadd]", pid=2, age_s=UPTIME_S)
    cpus = 96
    kinds = ("ksoftirqd/{c}", "migration/{c}", "cpuhp/{c}", "kworker/{c}:0H-events_highpri", "idle_inject/{c}")
    for c in range(cpus):
        for k in kinds:
            name = k.format(c=c)
            n.add(2, name, f"[{name}]", age_s=UPTIME_S - 1, state="I" if "kworker" in name else "S")
    for g in range(gpus):
        for name in ("nv_queue", "nv_queue", "nvidia-modeset/"):
            n.add(2, name, f"[{name}]", age_s=UPTIME_S - 30)
        n.add(2, f"irq/{300 + g}-nvidia", f"[irq/{300 + g}-nvidia]", age_s=UPTIME_S - 30)
    daemons = [
        ("systemd-journal", "/usr/lib/systemd/systemd-journald"), ("systemd-udevd", "/usr/lib/systemd/systemd-udevd"),
        ("dbus-daemon", "@dbus-daemon --system --address=systemd: --nofork --nopidfile --systemd-activation"),
        ("rsyslogd", "/usr/sbin/rsyslogd -n -iNONE"), ("cron", "/usr/sbin/cron -f -P"),
        ("chronyd", "/usr/sbin/chronyd -F 1"), ("containerd", "/usr/bin/containerd"),
        ("dockerd", "/usr/bin/dockerd -H fd:// --containerd=/run/containerd/containerd.sock"),
        ("kubelet", "/usr/bin/kubelet --config=/var/lib/kubelet/config.yaml"),
        ("node_exporter", "/usr/local/bin/node_exporter --collector.systemd"),
        ("slurmd", "/usr/sbin/slurmd -D -s"), ("munged", "/usr/sbin/munged"),
    ]
    for comm, args in daemons:
        n.add(1, comm, args, age_s=UPTIME_S - 20)
    persistenced = n.add(1, "nvidia-persiste", "/usr/bin/nvidia-persistenced --user nvidia-persistenced",
                         user="nvidia-persistenced", age_s=UPTIME_S - 25)
    persistenced.devices += ["/dev/nvidiactl"] + [f"/dev/nvidia{g}" for g in range(gpus)]
    dcgm = n.add(1, "nv-hostengine", "/usr/bin/nv-hostengine -n --service-account nvidia-dcgm",
                 user="nvidia-dcgm", threads=12, age_s=UPTIME_S - 26)
    dcgm.devices += ["/dev/nvidiactl"] + [f"/dev/nvidia{g}" for g in range(gpus)]
    sshd = n.add(1, "sshd", "sshd: /usr/sbin/sshd -D [listener] 0 of 10-100 startups", age_s=UPTIME_S - 20)

    # login sessions: sshd session pair, a shell, tmux and whatever people left running
    users = [f"user{i:02d}" for i in range(24)]
    for u in users:
        priv = n.add(sshd.pid, "sshd", f"sshd: {u} [priv]")
        sess = n.add(priv.pid, "sshd", f"sshd: {u}@pts/{rng.randint(0, 40)}", user=u)
        sh = n.add(sess.pid, "bash", "-bash", user=u)
        if rng.random() < 0.6:
            n.add(sh.pid, "tmux: client", "tmux attach", user=u)
            server = n.add(1, "tmux: server", "tmux", user=u)
            for _ in range(rng.randint(1, 4)):
                b = n.add(server.pid, "bash", "-bash", user=u)
                n.add(b.pid, rng.choice(("htop", "vim", "less", "watch", "python3")),
                      rng.choice(("htop", "vim train.py", "less log.txt", "watch -n1 nvidia-smi",
                                  "python3 -i")), user=u)

    # the training job: torchrun, 8 ranks (one per GPU), data-loader workers forked after CUDA init
    job_user = "mlteam"
    torchrun = n.add(1, "torchrun", "/opt/venv/bin/python3 /opt/venv/bin/torchrun --nproc-per-node 8 train.py "
                     "--config configs/llama-70b.yaml", user=job_user, age_s=86400)
    train_gpus = range(0, max(1, gpus // 2))
    for g in train_gpus:
        rank = n.add(torchrun.pid, "python3", f"/opt/venv/bin/python3 -u train.py --config configs/llama-70b.yaml "
                     f"--local-rank={g}", user=job_user, threads=96, age_s=86000)
        n.gpu_holder(rank, g)
        n.apps.append(_App(rank.pid, g, 71200 + 13 * g + (tick * 7) % 64, "/opt/venv/bin/python3"))
        for w in range(12):
            wk = n.add(rank.pid, "pt_data_worker", f"/opt/venv/bin/python3 -u train.py --config configs/llama-70b.yaml "
                       f"--local-rank={g}", user=job_user, threads=4, age_s=85000)
            wk.devices += ["/dev/nvidiactl", "/dev/nvidia-uvm", f"/dev/nvidia{g}"]
            if (w + tick) % 11 == 0:
                wk.state = "R"

    # the inference server that died badly on the remaining GPUs: its API process never reaped
    # the engine core (a zombie whose thread is stuck in the driver), some workers were orphaned
    srv_user = "inference"
    api = n.add(1, "python3", "python3 -m vllm.entrypoints.openai.api_server --model /models/qwen3-32b "
                "--tensor-parallel-size 2", user=srv_user, threads=40, age_s=7200)
    rest = [g for g in range(gpus) if g not in train_gpus]
    if rest:
        core = n.add(api.pid, "VLLM::EngineCor", "", user=srv_user, state="Z", threads=3, age_s=7100)
        core.d_threads.append((core.pid + 3, "uvm_va_space_destroy"))
        core.devices += ["/dev/nvidiactl", f"/dev/nvidia{rest[0]}"]
        n.apps.append(_App(core.pid, rest[0], 64210, "VLLM::EngineCore"))
        for i, g in enumerate(rest[1:3]):
            # in the process group and session of their launcher, which is gone
            orphan = n.add(1, "VLLM::Worker_TP", "", user=srv_user, threads=30, age_s=7100,
                           pgrp=DEAD_LAUNCHER, sid=DEAD_LAUNCHER)
            orphan.comm = f"VLLM::Worker_TP{i}"[:15]
            orphan.args = f"VLLM::Worker_TP{i}"
            n.gpu_holder(orphan, g, others=False)
            n.apps.append(_App(orphan.pid, g, 61000 + 17 * i, "VLLM::Worker_TP"))
        if len(rest) > 3:
            # holds the device, but the driver does not list it
            hidden = n.add(1, "python3", "python3 /home/user07/probe_cuda.py", user="user07", age_s=3000)
            n.gpu_holder(hidden, rest[3], others=False)
            # a container's process: the driver lists a host PID this namespace cannot see
            n.apps.append(_App(4_100_000 + 17, rest[3], 22000, "python"))

    # fill up to the requested size with the ordinary churn of a shared node
    fill = ("python3", "bash", "sleep", "jupyter-lab", "ipykernel", "node", "rsync", "sshfs", "conda",
            "pip", "git", "make", "gcc", "tail", "awk")
    parents = [p.pid for p in n.procs.values() if p.comm in ("bash", "tmux: server")] or [1]
    while len(n.procs) < processes - 1:      # the probe shell comes last
        comm = rng.choice(fill)
        u = rng.choice(users)
        p = n.add(rng.choice(parents), comm, f"/usr/bin/{comm} " + " ".join(
            rng.choice(("--verbose", "-n", "4", "run", "data/", "x.py", "--port=8888", "-q"))
            for _ in range(rng.randint(0, 5))), user=u)
        if rng.random() < 0.004:
            p.state = "Z"
            p.args = ""
        if comm in ("bash", "python3", "jupyter-lab"):
            parents.append(p.pid)
    return n


def _stat_line(p: _P) -> str:
    # pid (comm) state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt utime stime
    # cutime cstime priority nice num_threads itrealvalue starttime vsize rss ...
    rest = [p.state, p.ppid, p.pgrp or p.pid, p.sid or p.pid, 0, -1, 4194560, 1201, 0, 1, 0, 4194, 349, 0, 0, 20, 0,
            p.threads, 0, p.start_ticks, 23875584, 3530, 18446744073709551615] + [0] * 28
    return f"{p.pid} ({p.comm}) " + " ".join(str(x) for x in rest)


def _task_stat(p: _P, tid: int) -> str:
    return _stat_line(_P(pid=tid, ppid=p.ppid, comm=p.comm, args="", state="D", threads=p.threads,
                         start_ticks=p.start_ticks))


def big_probe_text(mark: str, *, processes: int = 2000, gpus: int = 8, tick: int = 0,
                   hostname: str = "gpu-big") -> str:
    """Probe output (probe.py layout, ``mark`` as the section marker) of a loaded ``gpus``-GPU
    node with ``processes`` processes (at least ~600: the kernel threads and the jobs)."""
    n = _build(gpus, processes, tick)
    btime = int(NOW - UPTIME_S)
    shell = n.add(1, "sh", "sh", age_s=1)
    used = [0] * gpus
    for a in n.apps:
        used[a.gpu] += a.mib
    bodies: dict[str, str] = {}

    def section(name: str, body: list[str]) -> None:
        bodies[name] = "".join(line + "\n" for line in body)

    def nul_section(name: str, records: list[str]) -> None:   # printf/find '…\0': no newline
        bodies[name] = "".join(r + "\0" for r in records)

    section("meta", [f"{NOW + tick:.9f}", str(CLK_TCK), f"btime {btime}", hostname, "0", HOST_NS,
                     str(shell.pid)])
    gpu_lines = []
    for g in range(gpus):
        ghost = 19_500 if g == gpus - 1 else 0          # memory no listed process accounts for
        mib = min(TOTAL_MIB, used[g] + 520 + ghost)
        util = 0 if used[g] == 0 else (97 + g + tick) % 100
        gpu_lines.append(f"{g}, {n.uuids[g]}, {GPU_NAME}, {BUS_IDS[g % len(BUS_IDS)]}, {mib}, {TOTAL_MIB}, "
                         f"{util}, Enabled, Disabled")
    section("gpu", gpu_lines)
    section("apps", [f"{a.pid}, {n.uuids[a.gpu]}, {a.mib}, {a.name}" for a in n.apps])
    section("list", [f"GPU {g}: {GPU_NAME} (UUID: {n.uuids[g]})" for g in range(gpus)])
    procs = sorted(n.procs.values(), key=lambda p: p.pid)
    section("stat", [_stat_line(p) for p in procs])
    section("ps", [f"{p.pid:>7} {p.user:<32} {p.args or ''}".rstrip() if p.state != "Z"
                   else f"{p.pid:>7} {p.user:<32} [{p.comm}] <defunct>" for p in procs])
    nul_section("dstate", [f"/proc/{p.pid}/task/{tid} {wchan} {_task_stat(p, tid)}"
                           for p in procs for tid, wchan in p.d_threads])
    nul_section("fds", [f"/proc/{p.pid}/fd {dev}" for p in procs for dev in p.devices])
    section("pidns", [f"{p.pid} {p.ns}" for p in procs if p.devices])
    xid_gpu = max(1, gpus // 2) % gpus
    section("xid", [f"[{UPTIME_S - 7000:>12.6f}] NVRM: Xid (PCI:{BUS_IDS[xid_gpu % len(BUS_IDS)][4:]}): 43, "
                    "pid=4100017, name=python, Ch 00000010"])
    section("driver", ["NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  570.172.08  Release Build  "
                       "(dvs-builder@U16-I2-C03-12-2)  Tue Jul  8 18:13:30 UTC 2025"])
    # in the probe's own order (the process sections first), as a node prints them
    return "".join(f"{mark} begin {name}\n{bodies.get(name, '')}{mark} end {name} 0\n" for name in SECTION_ORDER)
