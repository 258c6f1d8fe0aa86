"""Hand-built NodeSnapshots with the seed incident's real numbers, shared by the diagnosis,
ladder and check tests (and a few tests that the builders themselves say what they claim).

The seed: 8 GPUs of 97887 MiB, 76109/76113/76069 MiB used after `kill -9 72169` (the SGLang
launcher); its workers renamed themselves sglang::scheduler_TP0..7.
"""
from __future__ import annotations

from dataclasses import replace

from console.model import DriverProc, Gpu, NodeSnapshot, Proc, ThreadInfo

T0 = 1764410000.0
TOTAL = 97887
SEED_USED = (76109, 76113, 76113, 76113, 76113, 76113, 76113, 76069)
LAUNCHER = 72169
WORKERS = tuple(range(72170, 72178))
RESERVED = 4
CONSOLE_SHELL = 9100


def uuid(i: int) -> str:
    return f"GPU-5a1c7e0b-3f0d-4c2e-9b1a-0000000000{i:02d}"


def bus(i: int) -> str:
    return f"00000000:{0x18 + 0x10 * i:02X}:00.0"


def gpus(used=SEED_USED, persistence: bool = False) -> tuple[Gpu, ...]:
    return tuple(Gpu(index=i, uuid=uuid(i), name="NVIDIA RTX PRO 6000 Blackwell Server Edition",
                     bus_id=bus(i), memory_used_mib=u, memory_total_mib=TOTAL, utilization_pct=0,
                     persistence_mode=persistence)
                 for i, u in enumerate(used))


def worker(i: int, *, state: str = "S", ppid: int = LAUNCHER, d: bool = False, mib: int | None = None,
           fds: bool = True) -> Proc:
    pid = WORKERS[i]
    used = (SEED_USED[i] - RESERVED) if mib is None else mib
    threads = (ThreadInfo(tid=pid + 40, state="D", wchan="uvm_va_space_destroy", name="cuda-EvtHandlr"),) if d else ()
    return Proc(pid=pid, ppid=ppid, state=state, user="root", name="sglang::schedul",
                cmdline="" if state == "Z" else f"sglang::scheduler_TP{i}",
                create_time=T0 - 5400, start_ticks=1_000_000 + i,
                gpu_memory_mib={str(i): used} if used else {},
                device_files=(f"/dev/nvidia{i}", "/dev/nvidia-uvm", "/dev/nvidiactl") if fds and state != "Z" else (),
                d_threads=threads, num_threads=2 if d else 60)


def launcher(ppid: int = 1) -> Proc:
    return Proc(pid=LAUNCHER, ppid=ppid, state="S", user="root", name="python3",
                cmdline="python3 -m sglang.launch_server --model-path /models/Kimi-K2.5 --tp 8 "
                        "--attention-backend flashinfer --port 8000",
                create_time=T0 - 5410, start_ticks=999_000, num_threads=12)


def system_procs() -> tuple[Proc, ...]:
    return (
        Proc(pid=1, ppid=0, state="S", user="root", name="systemd", cmdline="/sbin/init", start_ticks=1),
        Proc(pid=2, ppid=0, state="S", user="root", name="kthreadd", cmdline="", start_ticks=1),
        Proc(pid=812, ppid=1, state="S", user="root", name="sshd", cmdline="sshd: /usr/sbin/sshd -D",
             start_ticks=900),
        Proc(pid=CONSOLE_SHELL, ppid=812, state="S", user="root", name="sh", cmdline="sh", start_ticks=5_000_000),
    )


def driver_list(procs, used=SEED_USED) -> tuple[DriverProc, ...]:
    out = []
    for p in procs:
        for k, mib in p.gpu_memory_mib.items():
            i = int(k)
            out.append(DriverProc(pid=p.pid, gpu_index=i, gpu_uuid=uuid(i), used_memory_mib=mib,
                                  name="sglang::scheduler_TP%d" % i))
    return tuple(out)


def snap(procs=(), *, used=SEED_USED, driver=None, t: float = T0, persistence: bool = False,
         kernel_log=(), **kw) -> NodeSnapshot:
    procs = tuple(procs)
    return NodeSnapshot(name="demo", taken_at=t, gpus=gpus(used, persistence), processes=system_procs() + procs,
                        driver_processes=driver_list(procs) if driver is None else tuple(driver),
                        kernel_log=tuple(kernel_log), own_pids=(CONSOLE_SHELL,), hostname="gpu-node-17", **kw)


def seed_stuck(t: float = T0) -> NodeSnapshot:
    """After kill -9: the launcher is gone, the 8 workers are <defunct> with a thread in the driver."""
    return snap([worker(i, state="Z", ppid=1, d=True) for i in range(8)], t=t)


def seed_running(t: float = T0) -> NodeSnapshot:
    """Before the kill: launcher at PID 1 (nohup'd), 8 workers under it."""
    return snap([launcher()] + [worker(i) for i in range(8)], t=t)


def seed_orphans(t: float = T0) -> NodeSnapshot:
    """The launcher died; its renamed workers live on, adopted by PID 1."""
    return snap([worker(i, ppid=1) for i in range(8)], t=t)


def freed(t: float = T0) -> NodeSnapshot:
    return snap([], used=(RESERVED,) * 8, driver=(), t=t)


def at(s: NodeSnapshot, t: float) -> NodeSnapshot:
    return replace(s, taken_at=t)


# ---------------------------------------------------------------- the builders themselves

def test_seed_numbers_are_the_incidents():
    s = seed_stuck()
    assert [g.memory_used_mib for g in s.gpus] == [76109, 76113, 76113, 76113, 76113, 76113, 76113, 76069]
    assert all(g.memory_total_mib == 97887 for g in s.gpus)
    assert [p.pid for p in s.processes if p.state == "Z"] == list(WORKERS)
    assert sum(dp.used_memory_mib for dp in s.driver_processes) == sum(SEED_USED) - 8 * RESERVED


def test_renamed_worker_label_shows_the_full_name():
    from console.diagnosis.who import label
    assert label(worker(3)) == "sglang::scheduler_TP3"


# ---------------------------------------------------------------- a real shell as a Source

class RealShell:
    """A Source-like node that runs commands with the real /bin/sh here (checks, ladder tests).

    signal() is base.Source's: the guarded `kill` line, start time compared first.
    """
    kind = "test"

    def __init__(self, name: str = "here") -> None:
        self.name = name
        self.ran: list[str] = []

    async def run(self, command: str, timeout: float = 30.0):
        import asyncio

        from console.model import CommandResult
        self.ran.append(command)
        proc = await asyncio.create_subprocess_shell(command, stdout=asyncio.subprocess.PIPE,
                                                     stderr=asyncio.subprocess.PIPE)
        try:
            out, err = await asyncio.wait_for(proc.communicate(), timeout)
        except asyncio.TimeoutError:
            proc.kill()
            await proc.wait()
            return CommandResult(command=command, rc=None, error=f"timed out after {timeout:g} s")
        return CommandResult(command=command, rc=proc.returncode, stdout=out.decode(errors="replace"),
                             stderr=err.decode(errors="replace"))

    async def signal(self, pid: int, signame: str, *, start_ticks=None, create_time=None):
        from console.sources.base import Source
        return await Source.signal(self, pid, signame, start_ticks=start_ticks, create_time=create_time)


def start_ticks(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as fh:
        return int(fh.read().rsplit(")", 1)[1].split()[19])
