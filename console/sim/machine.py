"""The ordinary machine under every scenario: GPUs, init, kernel threads, daemons, logins, boot log."""
from __future__ import annotations

import uuid

from console.sim.host import SimHost
from console.sim.state import SimGpu, SimProc

GPU_NAME = "NVIDIA RTX PRO 6000 Blackwell Server Edition"
GPU_TOTAL_MIB = 97887
IDLE_USED_MIB = 4
BUS_IDS = ("00000000:01:00.0", "00000000:11:00.0", "00000000:21:00.0", "00000000:41:00.0",
           "00000000:81:00.0", "00000000:91:00.0", "00000000:A1:00.0", "00000000:C1:00.0")
CONTAINER_PID_NS = "pid:[4026532713]"
PERSISTENCED_ARGS = ("/usr/bin/nvidia-persistenced --user nvidia-persistenced --persistence-mode --verbose")


def add_gpus(node: SimHost, count: int = 8, persistence: bool = True) -> None:
    for i in range(count):
        u = uuid.UUID(int=node.rng.getrandbits(128), version=4)
        # temperature and power by the GPU's place, not the node's dice: the probe reads them
        # (probe.HEALTH_FIELDS), and nodes of one scenario must answer alike to share answers
        # (sim/fleet.py); the draws stay, so each node's UUIDs and serials are as before
        node.rng.randrange(6)
        node.rng.random()
        node.gpus.append(SimGpu(index=i, uuid=f"GPU-{u}", name=GPU_NAME, bus_id=BUS_IDS[i],
                                total_mib=GPU_TOTAL_MIB, reserved_mib=IDLE_USED_MIB, persistence=persistence,
                                temp_c=31 + (i * 5) % 6, power_w=70.0 + (i * 37) % 15,
                                serial=str(1794025000000 + node.rng.randrange(10 ** 6))))


def gpu_fds(own: int | None, peers: range | list[int] = ()) -> list[str]:
    """What a CUDA process keeps open: the control node, UVM, its GPU (several times) and P2P peers."""
    fds = ["/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm"]
    if own is not None:
        fds += [f"/dev/nvidia{own}"] * 3
    fds += [f"/dev/nvidia{p}" for p in peers if p != own]
    return fds


def add_host_background(node: SimHost, *, persistenced: bool = True, mlops_login: bool = True) -> dict[str, int]:
    """init, kernel threads, system daemons, an operator's login; returns a few PIDs by role."""
    now = node.now
    boot = node.btime
    pids: dict[str, int] = {}
    node.add_proc(pid=1, ppid=0, comm="systemd", args="/sbin/init", start=boot + 0.9, state="S",
                  wchan="do_epoll_wait", nthreads=1, vsz_kb=23316, rss_kb=14120, cpu=0.0004,
                  caught=frozenset({"TERM", "INT", "HUP", "USR1", "USR2", "CHLD", "PWR"}), on_term="hung")
    kthreads = [(2, "kthreadd", "S"), (3, "pool_workqueue_release", "S"), (4, "kworker/R-rcu_g", "I"),
                (5, "kworker/R-sync_", "I"), (13, "ksoftirqd/0", "S"), (14, "rcu_preempt", "I"),
                (15, "migration/0", "S"), (18, "cpuhp/0", "S"), (1102, "nv_queue", "S"),
                (1103, "nv_queue", "S"), (1107, "nv_open_q", "S"), (1215, "nvidia-modeset/kthread_q", "S"),
                (1216, "nvidia-modeset/deferred_close_kthread_q", "S"), (1244, "UVM global queue", "S"),
                (1245, "UVM deferred release queue", "S"), (1246, "UVM Tools Event Queue", "S")]
    for pid, name, st in kthreads:
        node.add_proc(pid=pid, ppid=0 if pid == 2 else 2, comm=name[:15], args="", start=boot + 0.1 + pid / 1000,
                      state=st, wchan="kthread_worker_fn" if "nv" in name or "UVM" in name else "smpboot_thread_fn",
                      kthread=True, pgrp=0 if pid == 2 else 0, sid=0)
    for k, g in enumerate(node.gpus):
        node.add_proc(pid=1180 + k, ppid=2, comm=f"irq/{215 + k}-nvidia", args="", start=boot + 14.6 + k / 10,
                      state="S", wchan="irq_thread", kthread=True, pgrp=0, sid=0)
    daemons = [
        (612, "systemd-journal", "/usr/lib/systemd/systemd-journald", "root", 0, 4.0, "journald"),
        (655, "systemd-udevd", "/usr/lib/systemd/systemd-udevd", "root", 0, 4.4, "udevd"),
        (1011, "dbus-daemon", "@dbus-daemon --system --address=systemd: --nofork --nopidfile "
                              "--systemd-activation --syslog-only", "messagebus", 101, 9.2, "dbus"),
        (1019, "rsyslogd", "/usr/sbin/rsyslogd -n -iNONE", "syslog", 102, 9.3, "rsyslog"),
        (1040, "cron", "/usr/sbin/cron -f -P", "root", 0, 9.6, "cron"),
        (1187, "sshd", "sshd: /usr/sbin/sshd -D [listener] 0 of 10-100 startups", "root", 0, 10.1, "ssh"),
        (1203, "agetty", "/sbin/agetty -o -p -- \\u --noclear - linux", "root", 0, 10.4, "getty"),
    ]
    for pid, comm, args, user, uid, at, role in daemons:
        p = node.add_proc(pid=pid, ppid=1, comm=comm, args=args, user=user, uid=uid, start=boot + at,
                          wchan="do_epoll_wait" if role != "cron" else "hrtimer_nanosleep",
                          nthreads=4 if role == "rsyslog" else 1, vsz_kb=30000 + pid * 7, rss_kb=9000 + pid,
                          cpu=0.0002, caught=frozenset({"TERM", "HUP"}), on_term="graceful", grace_s=0.1,
                          unit=role if role in ("ssh", "cron") else None,
                          tty="tty1" if role == "getty" else "?")
        pids[role] = p.pid
    node.procs[1187].ports = [("0.0.0.0", 22), ("[::]", 22)]
    node.units["ssh"] = lambda: _respawn(node, 1187)
    node.units["cron"] = lambda: _respawn(node, 1040)
    if persistenced:
        pids["persistenced"] = add_persistenced(node, pid=1563, start=boot + 15.2).pid
        node.units["nvidia-persistenced"] = lambda: add_persistenced(node)
    # the operator's own login (where the seed's commands were typed)
    sshd_root = node.add_proc(ppid=1187, comm="sshd", args="sshd: root@pts/0", start=now - 6120,
                              wchan="do_select", pid=70211, cpu=0.001)
    bash = node.add_proc(ppid=sshd_root.pid, comm="bash", args="-bash", start=now - 6119, tty="pts/0",
                         wchan="do_select", pid=70298, caught=frozenset({"INT", "CHLD", "WINCH"}),
                         ignored=frozenset({"QUIT", "TERM", "TSTP", "TTIN", "TTOU"}), cpu=0.0005)
    pids["operator-bash"] = bash.pid
    if mlops_login:
        sshd_m = node.add_proc(pid=64410, ppid=1187, comm="sshd", args="sshd: mlops [priv]",
                               start=now - 30211, wchan="do_select")
        sshd_mu = node.add_proc(pid=64478, ppid=sshd_m.pid, comm="sshd", args="sshd: mlops@pts/1",
                                user="mlops", uid=1001, start=now - 30210, wchan="do_select", sid=64478)
        mbash = node.add_proc(pid=64479, ppid=sshd_mu.pid, comm="bash", args="-bash", user="mlops", uid=1001,
                              start=now - 30209, tty="pts/1", wchan="do_wait",
                              caught=frozenset({"INT", "CHLD", "WINCH"}),
                              ignored=frozenset({"QUIT", "TERM", "TSTP", "TTIN", "TTOU"}))
        node.add_proc(pid=64531, ppid=mbash.pid, comm="htop", args="htop", user="mlops", uid=1001,
                      start=now - 30150, tty="pts/1", wchan="do_select", sid=mbash.pid, pgrp=64531, cpu=0.01)
        pids["mlops-bash"] = mbash.pid
    return pids


def _respawn(node: SimHost, old_pid: int) -> SimProc:
    old = node.procs[old_pid]
    p = node.add_proc(ppid=1, comm=old.comm, args=old.args, user=old.user, uid=old.uid, wchan=old.wchan,
                      caught=old.caught, on_term=old.on_term, grace_s=old.grace_s, unit=old.unit)
    if old.comm == "sshd":
        p.ports = [("0.0.0.0", 22), ("[::]", 22)]
    return p


def add_persistenced(node: SimHost, pid: int | None = None, start: float | None = None) -> SimProc:
    p = node.add_proc(pid=pid, ppid=1, comm="nvidia-persiste", args=PERSISTENCED_ARGS,
                      user="nvidia-persistenced", uid=121, start=node.now if start is None else start,
                      wchan="do_select", nthreads=1, vsz_kb=5452, rss_kb=1880, cpu=0.0001,
                      caught=frozenset({"TERM", "INT", "HUP"}), on_term="graceful", grace_s=0.2,
                      unit="nvidia-persistenced")
    p.fds = ["/dev/nvidiactl"] + [f"/dev/nvidia{g.index}" for g in node.gpus]
    for g in node.gpus:
        g.persistence = True
    return p


def add_console_session(node: SimHost, *, parent_pid: int = 1187, container: bool = False) -> int:
    """The console's own login and the long-lived ``sh`` it feeds the probe to."""
    now = node.now
    node.alloc_pid(at=node._next_pid)
    if container:
        sh = node.add_proc(ppid=0, comm="sh", args="sh", start=now - 1, wchan="pipe_read", sid=0)
    else:
        sess = node.add_proc(ppid=parent_pid, comm="sshd", args="sshd: root@notty", start=now - 2,
                             wchan="do_select")
        sh = node.add_proc(ppid=sess.pid, comm="sh", args="sh", start=now - 1, wchan="pipe_read")
    node.shell_pid = sh.pid
    return sh.pid


def add_boot_log(node: SimHost) -> None:
    b = node.btime
    v = node.driver_version
    node.klog("Linux version 6.8.0-87-generic (buildd@lcy02-amd64-034) (x86_64-linux-gnu-gcc-13 "
              "(Ubuntu 13.3.0-6ubuntu2~24.04) 13.3.0, GNU ld (GNU Binutils for Ubuntu) 2.42) #88-Ubuntu SMP "
              "PREEMPT_DYNAMIC Sat Oct 11 09:28:41 UTC 2025 (Ubuntu 6.8.0-87.88-generic 6.8.12)", b)
    node.klog("nvidia: loading out-of-tree module taints kernel.", b + 14.512871)
    node.klog("nvidia-nvlink: Nvlink Core is being initialized, major device number 510", b + 14.532210)
    node.klog(f"NVRM: loading NVIDIA UNIX Open Kernel Module for x86_64  {v}  Release Build  "
              "(dvs-builder@U22-I3-AF03-09-1)  Thu Sep 18 18:37:29 UTC 2025", b + 14.601122)
    node.klog(f"nvidia-modeset: Loading NVIDIA UNIX Open Kernel Mode Setting Driver for x86_64  {v}  "
              "Release Build  (dvs-builder@U22-I3-AF03-09-1)  Thu Sep 18 18:24:21 UTC 2025", b + 15.020110)
    for g in node.gpus:
        node.klog(f"[drm] [nvidia-drm] [GPU ID 0x{int(g.bus_id[9:11], 16) << 8:08x}] Loading driver",
                  b + 15.10 + g.index / 100)
    node.klog("nvidia-uvm: Loaded the UVM driver, major device number 508.", b + 15.301234)
