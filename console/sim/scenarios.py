"""The incident scenarios: what is on the machine, how it behaves, and the ground truth.

``demo`` is ``demo:seed``. Every scenario records its root cause and the
shortest correct path down the escalation ladder (rung ids of
console/rungs.py) for tests and for the reveal in exports.
"""
from __future__ import annotations

from console.sim.host import SimHost
from console.sim.machine import (CONTAINER_PID_NS, add_boot_log, add_console_session, add_gpus, add_host_background,
                      gpu_fds)
from console.sim.state import GroundTruth, Scenario, SimMps

FREED_ALL = "memory freed on all GPUs"


# ---------------------------------------------------------------- seed

SEED_LAUNCH = ("python3 -m sglang.launch_server --model-path moonshotai/Kimi-K2.5 --tp 8 "
               "--attention-backend flashinfer --num-continuous-decode-steps 4 --port 8000")
SEED_LAUNCHER_PID = 72169
SEED_USED_MIB = (76109, 76113, 76113, 76113, 76113, 76113, 76113, 76069)
SEED_TEARDOWN_S = 90.0
SGLANG_THREADS = ("sglang::schedul", "cuda00001400006", "cuda-EvtHandlr", "pt_autograd_0", "ZMQbg/Reaper",
                  "ZMQbg/IO/0", "python3", "pt_tp_sync")


def _sglang_server(node: SimHost, *, launcher_pid: int, args: str, used: tuple[int, ...], started: float,
                   hung: bool, teardown_s: float, teardown_wchan: str, ports: list[tuple[str, int]],
                   parent: int, sid: int) -> list[int]:
    """An SGLang launcher, its resource tracker, TP schedulers and detokenizer; returns scheduler PIDs."""
    tp = len(used)
    term = dict(on_term="hung") if hung else dict(on_term="graceful", grace_s=2.0, group="sglang")
    launcher = node.add_proc(pid=launcher_pid, ppid=parent, comm="python3", args=args, start=started,
                             wchan="do_epoll_wait", nthreads=14,
                             thread_names=("python3", "ZMQbg/Reaper", "ZMQbg/IO/0", "python3"),
                             vsz_kb=14_820_112, rss_kb=1_702_332, cpu=0.02, pgrp=sid, sid=sid,
                             ignored=frozenset({"HUP"}) if parent == 1 else frozenset(),
                             caught=frozenset({"TERM", "INT", "QUIT", "CHLD"}), ports=ports, **term)
    node.add_proc(ppid=launcher.pid, comm="python3",
                  args="/usr/bin/python3 -c from multiprocessing.resource_tracker import main;main(26)",
                  start=started + 11.2, wchan="pipe_read", vsz_kb=31_232, rss_kb=12_404, pgrp=sid, sid=sid,
                  pdeathsig="TERM", group=term.get("group"))
    node.alloc_pid(at=launcher_pid + 60)
    scheds = []
    for i in range(tp):
        p = node.add_proc(ppid=launcher.pid, comm="sglang::schedul", args=f"sglang::scheduler_TP{i}",
                          start=started + 11.6 + i * 0.05, state="spin" if hung else "S",
                          wchan="hrtimer_nanosleep" if hung else "do_epoll_wait", nthreads=64,
                          thread_names=SGLANG_THREADS, vsz_kb=1_361_402_880, rss_kb=24_612_940,
                          cpu=0.95 if hung else 0.3, pgrp=sid, sid=sid,
                          caught=frozenset({"TERM", "INT", "QUIT"}), pdeathsig="KILL",
                          teardown_s=teardown_s, teardown_wchan=teardown_wchan, teardown_thread="cuda-EvtHandlr",
                          fds=gpu_fds(i, range(tp)), **term)
        if i == 0:
            p.ports = [("127.0.0.1", 34637)]
        node.add_context(i, used[i] - node.gpus[i].reserved_mib, [p.pid], name=f"sglang::scheduler_TP{i}")
        node.gpus[i].util_busy = 0 if hung else 3
        scheds.append(p.pid)
    node.add_proc(ppid=launcher.pid, comm="sglang::detoken", args="sglang::detokenizer",
                  start=started + 12.4, wchan="do_epoll_wait", nthreads=6,
                  thread_names=("sglang::detoken", "ZMQbg/Reaper", "ZMQbg/IO/0"), vsz_kb=5_612_100,
                  rss_kb=905_220, cpu=0.001, pgrp=sid, sid=sid, pdeathsig="KILL", group=term.get("group"),
                  on_term="graceful" if not hung else "default", grace_s=2.0)
    return scheds


def build_seed(node: SimHost) -> None:
    add_gpus(node)
    add_boot_log(node)
    add_host_background(node)
    now = node.now
    # The server was started with `nohup ... &` from an SSH session that has since ended: its parent
    # is PID 1 and its session/process group is the dead login shell's (72101), HUP ignored.
    _sglang_server(node, launcher_pid=SEED_LAUNCHER_PID, args=SEED_LAUNCH, used=SEED_USED_MIB,
                   started=now - 92 * 60, hung=True, teardown_s=SEED_TEARDOWN_S,
                   teardown_wchan="_nv043417rm", ports=[], parent=1, sid=72101)
    add_console_session(node)


# ---------------------------------------------------------------- slow-teardown

SLOW_TEARDOWN_S = 26.0
TRAIN_ARGS = "/usr/bin/python3 -u train.py --config configs/pretrain-8b.yaml"


def build_slow_teardown(node: SimHost) -> None:
    add_gpus(node)
    add_boot_log(node)
    pids = add_host_background(node)
    now = node.now
    mbash = pids["mlops-bash"]
    runner = node.add_proc(pid=51830, ppid=mbash, comm="torchrun",
                           args="/usr/bin/python3 /usr/local/bin/torchrun --nproc-per-node 4 train.py "
                                "--config configs/pretrain-8b.yaml",
                           user="mlops", uid=1001, start=now - 5 * 3600, wchan="hrtimer_nanosleep", nthreads=3,
                           vsz_kb=2_100_400, rss_kb=402_112, cpu=0.002, tty="pts/1", sid=mbash,
                           pgrp=51830)
    used = (88211, 88207, 88207, 88163)
    node.alloc_pid(at=51841)
    for r in range(4):
        p = node.add_proc(ppid=runner.pid, comm="python3", args=TRAIN_ARGS, user="mlops", uid=1001,
                          start=now - 5 * 3600 + 3 + r * 0.02, state="R" if r % 2 else "S",
                          wchan="futex_wait_queue", nthreads=72,
                          thread_names=("pt_main_thread", "cuda00001400006", "cuda-EvtHandlr", "pt_nccl_watchdg",
                                        "pt_autograd_0", "python3"),
                          vsz_kb=412_377_088, rss_kb=231_004_180, cpu=1.0, tty="pts/1", sid=mbash,
                          pgrp=51830, caught=frozenset({"TERM", "INT"}), on_term="hung",
                          teardown_s=SLOW_TEARDOWN_S, teardown_wchan="os_unlock_user_pages",
                          teardown_thread="pt_main_thread", fds=gpu_fds(r, range(4)))
        node.add_context(r, used[r] - node.gpus[r].reserved_mib, [p.pid], name="/usr/bin/python3")
        node.gpus[r].util_busy = 100
    add_console_session(node)


# ---------------------------------------------------------------- renamed-workers

def build_renamed_workers(node: SimHost) -> None:
    add_gpus(node)
    add_boot_log(node)
    add_host_background(node)
    now = node.now
    b = node.btime
    dead_api = 41210
    up = now - 240 - b
    node.klog("vllm invoked oom-killer: gfp_mask=0x140cca(GFP_HIGHUSER_MOVABLE|__GFP_COMP), order=0, "
              "oom_score_adj=0", b + up)
    node.klog(f"Out of memory: Killed process {dead_api} (vllm) total-vm:2015402240kB, anon-rss:1984021132kB, "
              "file-rss:102400kB, shmem-rss:8192kB, UID:1001 pgtables:3912004kB oom_score_adj:0", b + up + 0.41)
    node.klog(f"oom_reaper: reaped process {dead_api} (vllm), now anon-rss:0kB, file-rss:0kB, shmem-rss:8192kB",
              b + up + 0.62)
    started = now - 3 * 3600
    group = "vllm"
    engine = node.add_proc(pid=41388, ppid=1, comm="VLLM::EngineCor", args="VLLM::EngineCore", user="mlops",
                           uid=1001, start=started + 14, wchan="do_epoll_wait", nthreads=12,
                           thread_names=("VLLM::EngineCor", "ZMQbg/Reaper", "ZMQbg/IO/0", "python3"),
                           vsz_kb=18_220_400, rss_kb=2_880_112, cpu=0.01, pgrp=41210, sid=40990,
                           caught=frozenset({"TERM", "INT"}), on_term="graceful", grace_s=1.5, group=group,
                           teardown_s=1.0, teardown_wchan="uvm_va_space_destroy",
                           fds=gpu_fds(None, range(4)))
    used = (88101, 88097, 88097, 88097)
    node.alloc_pid(at=41402)
    for r in range(4):
        p = node.add_proc(ppid=1, comm="VLLM::Worker_TP", args=f"VLLM::Worker_TP{r}", user="mlops", uid=1001,
                          start=started + 16 + r * 0.1, wchan="futex_wait_queue", nthreads=48,
                          thread_names=("VLLM::Worker_TP", "cuda00001400006", "cuda-EvtHandlr", "python3"),
                          vsz_kb=1_102_224_384, rss_kb=9_402_112, cpu=0.02, pgrp=41210, sid=40990,
                          caught=frozenset({"TERM", "INT"}), on_term="graceful", grace_s=1.5, group=group,
                          teardown_s=1.0, teardown_wchan="uvm_va_space_destroy", teardown_thread="cuda-EvtHandlr",
                          fds=gpu_fds(r, range(4)))
        node.add_context(r, used[r] - node.gpus[r].reserved_mib, [p.pid], name=f"VLLM::Worker_TP{r}")
    del engine
    add_console_session(node)


# ---------------------------------------------------------------- hidden-holders

def build_hidden_holders(node: SimHost) -> None:
    add_gpus(node)
    add_boot_log(node)
    add_host_background(node)
    now = node.now
    stuck = (51234, 51230, 51230, 51190)
    dead_ranks = (38811, 38812, 38813, 38814)
    node.alloc_pid(at=39020)
    for r in range(4):
        holders = []
        for w in range(2):
            p = node.add_proc(ppid=1, comm="pt_data_worker", args="/usr/bin/python3 -u finetune.py "
                                                                  "--config configs/llama-70b-lora.yaml",
                              user="mlops", uid=1001, start=now - 7200 + 20 + r + w * 0.01, wchan="pipe_read",
                              nthreads=3, thread_names=("pt_data_worker", "python3"), vsz_kb=61_204_480,
                              rss_kb=3_110_204, cpu=0.0, pgrp=38790, sid=38790, teardown_s=0.5,
                              teardown_wchan="uvm_va_space_destroy", fds=gpu_fds(r))
            holders.append(p.pid)
        node.add_context(r, stuck[r] - node.gpus[r].reserved_mib, holders, driver_pid=dead_ranks[r],
                         name="/usr/bin/python3", listed=False)
    add_console_session(node)


# ---------------------------------------------------------------- container

CONTAINER_HOST_PIDS = (2841917, 2841923)
CONTAINER_POD_UID = "7c5d1f2e-8a4b-4c3d-9e1f-0a2b3c4d5e6f"
CONTAINER_ID = "4f2a0c1e9b7d" + "5e3a1c2b4d6f8e0a" * 3 + "1b2c"
# what /proc/PID/cgroup reads inside the pod on a cgroup v1 node (kubelet's cgroupfs driver, the host's
# cgroup namespace): every hierarchy names the pod and the container
CONTAINER_CGROUP = "".join(f"{n}:{c}:/kubepods/burstable/pod{CONTAINER_POD_UID}/{CONTAINER_ID}\n" for n, c in (
    (12, "pids"), (11, "memory"), (10, "devices"), (9, "cpu,cpuacct"), (4, "blkio"), (1, "name=systemd"))) + "0::/\n"


def build_container(node: SimHost) -> None:
    add_gpus(node)
    node.pid_ns = CONTAINER_PID_NS
    node.has_systemd = False
    node.dmesg_allowed = False
    now = node.now
    started = now - 26 * 3600
    node.add_proc(pid=1, ppid=0, comm="tini", args="/usr/bin/tini -- /opt/app/entrypoint.sh", start=started,
                  wchan="do_wait", vsz_kb=2_512, rss_kb=880, sid=1, pgrp=1)
    entry = node.add_proc(pid=7, ppid=1, comm="bash", args="/bin/bash /opt/app/entrypoint.sh", start=started + 0.1,
                          wchan="do_wait", vsz_kb=4_612, rss_kb=3_300, sid=7, pgrp=7)
    server = node.add_proc(pid=12, ppid=entry.pid, comm="python3", args="python3 /opt/app/serve.py --port 9000 "
                                                                        "--devices 0,1",
                           start=started + 0.4, wchan="do_epoll_wait", nthreads=9, vsz_kb=8_402_112,
                           rss_kb=1_204_400, cpu=0.01, sid=7, pgrp=7, ports=[("0.0.0.0", 9000)],
                           caught=frozenset({"INT"}))
    used = (40967, 40963)
    for k in range(2):
        p = node.add_proc(pid=23 + k, ppid=server.pid, comm="python3",
                          args=f"python3 /opt/app/worker.py --device cuda:{k}", start=started + 6 + k * 0.1,
                          wchan="futex_wait_queue", nthreads=38,
                          thread_names=("python3", "cuda00001400006", "cuda-EvtHandlr"), vsz_kb=204_812_332,
                          rss_kb=6_120_448, cpu=0.4, sid=7, pgrp=7, teardown_s=0.8,
                          teardown_wchan="uvm_va_space_destroy", fds=gpu_fds(k))
        node.add_context(k, used[k] - node.gpus[k].reserved_mib, [p.pid], driver_pid=CONTAINER_HOST_PIDS[k],
                         name="")
        node.gpus[k].util_busy = 0
    node.alloc_pid(at=90)
    add_console_session(node, container=True)
    for p in node.procs.values():
        p.cgroup = CONTAINER_CGROUP


# ---------------------------------------------------------------- reset-required

RESET_GPU = 3
RESET_STUCK_MIB = 61447


def build_reset_required(node: SimHost) -> None:
    add_gpus(node)
    add_boot_log(node)
    add_host_background(node)
    g = node.gpus[RESET_GPU]
    g.stuck_mib = RESET_STUCK_MIB - g.reserved_mib
    g.reset_required = True
    b, now = node.btime, node.now
    t = now - 41 * 60
    bus = g.pci_short
    node.klog(f"NVRM: Xid (PCI:{bus}): 119, pid=2841771, name=python3, Timeout after 6s of waiting for RPC "
              f"response from GPU{RESET_GPU} GSP! Expected function 76 (GSP_RM_CONTROL) (0x20800a4c 0x4).", t)
    node.klog(f"NVRM: GPU{RESET_GPU} GSP RPC buffer contains function 76 (GSP_RM_CONTROL) and data "
              "0x0000000020800a4c 0x0000000000000004.", t + 0.000012)
    node.klog(f"NVRM: GPU{RESET_GPU} RPC history (CPU -> GSP):", t + 0.000015)
    node.klog("NVRM:     entry function                   data0              data1              ts_start"
              "           ts_end             duration actively_polling", t + 0.000017)
    node.klog("NVRM:      0    76   GSP_RM_CONTROL       0x0000000020800a4c 0x0000000000000004 "
              "0x00063f1e0b1c2d40 0x0000000000000000          y", t + 0.000019)
    node.klog(f"NVRM: Xid (PCI:{bus}): 119, pid=2841771, name=python3, Timeout after 6s of waiting for RPC "
              f"response from GPU{RESET_GPU} GSP! Expected function 10 (FREE) (0xc1d00213 0x0).", t + 6.02)
    node.klog("NVRM: Rate limiting GSP RPC error prints for GPU at PCI:" + bus + " (printing 1 of every 30).  "
              "The GPU likely needs to be reset.", t + 6.03)
    node.klog(f"NVRM: Xid (PCI:{bus}): 154, GPU recovery action changed from 0x0 (None) to 0x1 "
              "(GPU Reset Required)", t + 12.4)
    del b
    add_console_session(node)


# ---------------------------------------------------------------- graceful

def build_graceful(node: SimHost) -> None:
    add_gpus(node)
    add_boot_log(node)
    pids = add_host_background(node)
    now = node.now
    _sglang_server(node, launcher_pid=65102,
                   args="python3 -m sglang.launch_server --model-path Qwen/Qwen3-32B --tp 2 --port 30000",
                   used=(71021, 71017), started=now - 40 * 60, hung=False, teardown_s=0.5,
                   teardown_wchan="uvm_va_space_destroy", ports=[("0.0.0.0", 30000)],
                   parent=pids["mlops-bash"], sid=pids["mlops-bash"])
    for pid in (65102,):
        node.procs[pid].user, node.procs[pid].uid = "mlops", 1001
    for p in node.procs.values():
        if p.sid == pids["mlops-bash"] and p.pid != pids["mlops-bash"]:
            p.user, p.uid, p.tty = "mlops", 1001, "pts/1"
    add_console_session(node)


# ---------------------------------------------------------------- remap-pending

REMAP_GPU = 2
REMAP_ROWS = 4                 # rows remapped for uncorrectable errors (leptonai/gpud#80's paste: 4, pending)
REMAPPED_EARLIER_GPU = 5       # rows remapped at an earlier reset: nothing pending
DEGRADED_LINK_GPU, HOT_GPU = 6, 7
REMAP_TRUTH = GroundTruth(
    root_cause=("an uncorrectable ECC error on GPU 2 ended its job; the driver marked memory rows for remapping "
                "(Xid 63), which take effect only at the next GPU reset or reboot; no process holds the GPU, so "
                "it can be reset now, once nvidia-persistenced and persistence mode (reset blockers) are out of "
                "the way"),
    shortest_path=("clear-blockers", "reset"), end_state="the pending row remap on GPU 2 applied")


def build_remap_pending(node: SimHost) -> None:
    """An uncorrectable ECC error ended a job on GPU 2 an hour ago; the driver marked rows for
    remapping, to take effect at the next reset. The job is gone: no process, no memory beyond
    the idle baseline, nothing in nvidia-smi's process list. GPU 5 had rows remapped at an
    earlier reset: nothing pending there."""
    add_gpus(node)
    add_boot_log(node)
    add_host_background(node)
    g = node.gpus[REMAP_GPU]
    g.rows_uncorrectable, g.remap_pending = REMAP_ROWS, True
    g.ecc_uncorrected = 1               # the error itself, counted since the driver loaded
    node.gpus[REMAPPED_EARLIER_GPU].rows_uncorrectable = 2
    # the same tired node's other faults, shown in the GPU panel only (no finding of their own):
    # a link that trained at x8 in its x16 slot (a riser or seating fault) and a GPU running hot
    node.gpus[DEGRADED_LINK_GPU].pcie_width = 8
    node.gpus[HOT_GPU].temp_c, node.gpus[HOT_GPU].power_w = 88, 412.0
    t = node.now - 63 * 60
    # the words real drivers print (stas00/ml-engineering, compute/accelerator/nvidia/debug.md)
    node.klog(f"NVRM: Xid (PCI:{g.pci_short}): 63, pid=2716604, name=python3, Row Remapper: New row marked for "
              "remapping, reset gpu to activate.", t)
    add_console_session(node)


# ---------------------------------------------------------------- cuda-ipc

IPC_SERVER_PID, IPC_CLIENT_PID = 51200, 51377
IPC_SERVER_MIB, IPC_SHARED_MIB = 2_048, 46_080
IPC_HANDOFF_S = 8.0            # after the console's first look: the client crashes then
IPC_TRUTH = GroundTruth(
    root_cause=("a vLLM worker exported its KV cache to an LMCache server through CUDA IPC and crashed; the "
                "server never called torch.cuda.ipc_collect(), so the driver charges the 45 GiB the dead "
                "client shared to the server, which holds it; signalling the dead PID frees nothing: the "
                "server (the importer) has to let go or exit"),
    shortest_path=("sigterm",), end_state="memory freed on GPU 0")


def build_cuda_ipc(node: SimHost) -> None:
    """An LMCache server and a vLLM worker on GPU 0; IPC_HANDOFF_S after the start the worker
    crashes (SIGSEGV) and the memory it shared stays, charged to the server (LMCache/LMCache#4014)."""
    add_gpus(node)
    add_boot_log(node)
    pids = add_host_background(node)
    now = node.now
    server = node.add_proc(pid=IPC_SERVER_PID, ppid=pids["mlops-bash"], comm="python3",
                           args="python3 -m lmcache.server --port 65432 --device cuda", start=now - 3 * 3600,
                           nthreads=9, caught=frozenset({"TERM", "INT"}), on_term="graceful", grace_s=1.0,
                           ports=[("0.0.0.0", 65432)], fds=gpu_fds(0))
    client = node.add_proc(pid=IPC_CLIENT_PID, ppid=pids["mlops-bash"], comm="python3",
                           args="python3 -m vllm.entrypoints.openai.api_server --model Qwen/Qwen3-8B "
                                "--kv-transfer-config lmcache", start=now - 40 * 60, nthreads=31, fds=gpu_fds(0))
    own = node.add_context(0, IPC_SERVER_MIB, [server.pid], name="/usr/bin/python3")
    shared = node.add_context(0, IPC_SHARED_MIB, [client.pid], name="/usr/bin/python3")

    def crash() -> None:             # the exporter dies; what it shared is the importer's now
        node.contexts.remove(shared)
        own.mib += shared.mib
        node.signal(client.pid, "SEGV")
    node.at(now + IPC_HANDOFF_S, crash)
    for p in (server, client):
        p.user, p.uid = "mlops", 1001
    add_console_session(node)


# ---------------------------------------------------------------- mps

MPS_CONTROL_PID, MPS_SERVER_PID = 4101, 4188
MPS_SERVING_PID, MPS_EXITED_PID = 52410, 52777       # an inference server; the training job Slurm killed
MPS_SERVING_MIB, MPS_EXITED_MIB = 18_432, 41_984
MPS_TRUTH = GroundTruth(
    root_cause=("GPU 0 is shared through MPS: nvidia-smi lists only nvidia-cuda-mps-server, which holds its "
                "clients' memory. Slurm killed the training job at its time limit, but its last kernel never "
                "finished: the process is gone, the MPS server still counts it as a client and keeps its 41 GiB. "
                "Signalling the server would also end the inference server sharing the GPU; the control daemon "
                "ends that one client's work (terminate_client)"),
    shortest_path=("mps-clients", "mps-terminate"), end_state="the exited client's 41 GiB freed on GPU 0; "
                                                               "the inference server still runs")


def build_mps(node: SimHost) -> None:
    """GPU 0 under MPS (root's control daemon and server); two clients: an inference server that
    runs on, and a training job that exited while the server still counts its work (its memory
    stays with the server). The other GPUs are idle."""
    add_gpus(node)
    add_boot_log(node)
    pids = add_host_background(node)
    now = node.now
    control = node.add_proc(pid=MPS_CONTROL_PID, ppid=1, comm="nvidia-cuda-mps", args="nvidia-cuda-mps-control -d",
                            start=now - 6 * 3600, wchan="do_epoll_wait", nthreads=2)
    server = node.add_proc(pid=MPS_SERVER_PID, ppid=control.pid, comm="nvidia-cuda-mps",
                           args="nvidia-cuda-mps-server", start=now - 5 * 3600, wchan="futex_wait_queue",
                           nthreads=12, fds=gpu_fds(0))
    serving = node.add_proc(pid=MPS_SERVING_PID, ppid=pids["mlops-bash"], comm="python3",
                            args="python3 -m vllm.entrypoints.openai.api_server --model Qwen/Qwen3-8B --port 8000",
                            start=now - 5 * 3600, nthreads=41, caught=frozenset({"TERM", "INT"}),
                            on_term="graceful", grace_s=2.0, ports=[("0.0.0.0", 8000)], fds=gpu_fds(0))
    ctx = node.add_context(0, MPS_SERVING_MIB + MPS_EXITED_MIB, [server.pid], name="nvidia-cuda-mps-server")
    node.mps = SimMps(control_pid=control.pid, servers={server.pid: ctx},
                      clients={server.pid: {MPS_SERVING_PID: MPS_SERVING_MIB, MPS_EXITED_PID: MPS_EXITED_MIB}})
    serving.user, serving.uid = "root", 0
    add_console_session(node)


SCENARIOS: dict[str, Scenario] = {s.name: s for s in (
    Scenario("seed", "SGLang hung in CUDA graph capture; SIGKILL leaves <defunct> workers stuck in the driver",
             GroundTruth(
                 root_cause=("SGLang (--attention-backend flashinfer) hung in CUDA graph capture on SM120; after "
                             "SIGKILL each scheduler is <defunct> with one thread in D state inside the NVIDIA "
                             "driver, which needs about 90 s to tear the contexts down; nothing user space "
                             "does (killing holders, reset) is faster than waiting"),
                 shortest_path=("sigkill", "wait"), end_state=FREED_ALL),
             build_seed),
    Scenario("slow-teardown", "Training ranks killed; the driver needs ~26 s to unpin their buffers",
             GroundTruth(
                 root_cause=("the training ranks, wedged in an NCCL collective, never run their SIGTERM "
                             "handlers; after SIGKILL the driver needs ~26 s to unpin their large pinned host "
                             "buffers before the GPU memory comes back; escalating inside that window is the "
                             "mistake"),
                 shortest_path=("sigkill", "wait"), end_state=FREED_ALL),
             build_slow_teardown),
    Scenario("renamed-workers", "vLLM API server died; renamed EngineCore and workers hold the GPUs",
             GroundTruth(
                 root_cause=("the vLLM API server was OOM-killed; its engine core and tensor-parallel workers, "
                             "renamed VLLM::EngineCore and VLLM::Worker_TP0..3, survive as orphans of PID 1 "
                             "holding GPUs 0-3; a pattern like python3 does not match them"),
                 shortest_path=("sigterm",), end_state=FREED_ALL),
             build_renamed_workers),
    Scenario("hidden-holders", "DataLoader workers hold GPU contexts the driver does not list",
             GroundTruth(
                 root_cause=("the training ranks died but their forked DataLoader workers (pt_data_worker) "
                             "inherited the CUDA device handles; the driver lists no process, yet the memory "
                             "stays until every holder of /dev/nvidia* exits"),
                 shortest_path=("kill-holders",), end_state=FREED_ALL),
             build_hidden_holders),
    Scenario("container", "The driver lists host PIDs that this PID namespace does not have",
             GroundTruth(
                 root_cause=("the console runs inside a Kubernetes pod's PID namespace; the driver reports the "
                             "workers' host PIDs, which do not exist here, so signalling them fails; the "
                             "holders are found through their /dev/nvidia* handles, and their cgroup names "
                             "the pod and the container"),
                 shortest_path=("kill-holders",), end_state=FREED_ALL),
             build_container),
    Scenario("reset-required", "GPU 3 needs a reset (Xid 119 then 154); persistence mode blocks it",
             GroundTruth(
                 root_cause=("GPU 3's GSP stopped answering RPCs (Xid 119) and the driver asked for a reset "
                             "(Xid 154); no process holds the memory, so only a GPU reset frees it, and "
                             "nvidia-persistenced (persistence mode on) keeps the device open, which blocks the "
                             "reset until it is stopped"),
                 shortest_path=("clear-blockers", "reset"), end_state="memory freed on GPU 3 after reset"),
             build_reset_required),
    Scenario("remap-pending", "GPU 2 has a row remap pending after an uncorrectable ECC error; nothing holds it",
             REMAP_TRUTH, build_remap_pending),
    Scenario("cuda-ipc", "A vLLM worker crashed; the LMCache server it shared its KV cache with keeps the memory",
             IPC_TRUTH, build_cuda_ipc),
    Scenario("mps", "GPU 0 under MPS: a killed job's work still holds 41 GiB in the MPS server; an inference "
                    "server shares it", MPS_TRUTH, build_mps),
    Scenario("graceful", "A healthy server: SIGTERM frees everything in ~3 s (the control case)",
             GroundTruth(
                 root_cause="none: a healthy SGLang server that shuts down cleanly on SIGTERM",
                 shortest_path=("sigterm",), end_state=FREED_ALL),
             build_graceful),
)}


def scenario_names() -> list[str]:
    return list(SCENARIOS)


def get_scenario(name: str) -> Scenario:
    try:
        return SCENARIOS[name]
    except KeyError:
        raise ValueError(f"unknown scenario {name!r}; choose one of: {', '.join(SCENARIOS)}") from None
