"""The ladder: exact commands per rung, and applying them (real signals to real children)."""
from __future__ import annotations

import asyncio
import subprocess
from dataclasses import replace

import pytest

from console.ladder import (RUNGS, WAIT_S, apply_rung, commands_for, holder_pids, step_args, targets_for,
                            top_step)
from console.model import CommandResult, Finding, Proc
from test_diagnose_builders import (CONSOLE_SHELL, WORKERS, RealShell, seed_orphans, snap, start_ticks,
                                    worker)

PERSISTENCED = Proc(pid=1400, ppid=1, state="S", user="nvidia-persistenced", name="nvidia-persiste",
                    cmdline="/usr/bin/nvidia-persistenced --user nvidia-persistenced",
                    device_files=("/dev/nvidia3", "/dev/nvidiactl"))
HOSTENGINE = Proc(pid=1500, ppid=1, state="S", user="root", name="nv-hostengine",
                  cmdline="/usr/bin/nv-hostengine -n --service-account nvidia-dcgm", device_files=("/dev/nvidiactl",))


class FakeSource:
    name = "demo"

    def __init__(self):
        self.calls: list[tuple] = []

    async def run(self, command, timeout=30.0):
        self.calls.append(("run", command))
        return CommandResult(command=command, rc=0)

    async def signal(self, pid, signame, *, start_ticks=None, create_time=None):
        self.calls.append(("signal", pid, signame, start_ticks, create_time))
        return CommandResult(command=f"kill -s {signame} {pid}", rc=0)


def test_rungs_in_order():
    assert RUNGS == ("wait", "sigterm", "sigkill", "kill-holders", "clear-blockers", "reset", "reboot")


def test_signal_rungs_render_explicit_pids():
    s = seed_orphans()
    assert commands_for("sigterm", s, pids=(72170, 72171)) == ["kill -s TERM 72170 72171"]
    assert commands_for("sigkill", s, pids=WORKERS) == ["kill -s KILL " + " ".join(map(str, WORKERS))]
    # no PIDs given: every signallable GPU holder
    assert commands_for("sigterm", s) == ["kill -s TERM " + " ".join(map(str, WORKERS))]


def test_kill_holders_lists_the_device_holders_of_the_gpu_never_fuser():
    hidden = Proc(pid=81234, ppid=1, state="S", user="alice", name="python3", cmdline="python3 eval.py",
                  device_files=("/dev/nvidia3", "/dev/nvidia-uvm"))
    s = snap([worker(i, ppid=1) for i in range(8)] + [hidden, PERSISTENCED])
    lines = commands_for("kill-holders", s, gpus=(3,))
    assert lines == ["kill -s KILL 72173 81234"]           # persistenced is clear-blockers' job
    assert holder_pids(s) == list(WORKERS) + [81234]
    for rung in RUNGS:
        for line in commands_for(rung, s):
            assert "fuser" not in line and "pkill" not in line and "killall" not in line


def test_protected_pids_are_dropped_from_every_signal_line():
    s = seed_orphans()
    for rung in ("sigterm", "sigkill", "kill-holders"):
        assert commands_for(rung, s, pids=(1, 2, CONSOLE_SHELL, 72170)) == [
            f"kill -s {'TERM' if rung == 'sigterm' else 'KILL'} 72170"]
        assert commands_for(rung, s, pids=(1, CONSOLE_SHELL)) == []
    assert targets_for("sigkill", s, pids=(1, 72171)) == (72171,)


def test_clear_blockers_reset_reboot_wait():
    s = snap([PERSISTENCED, HOSTENGINE], persistence=True)
    assert commands_for("clear-blockers", s, gpus=(3,)) == [
        "systemctl stop nvidia-dcgm", "systemctl stop nvidia-persistenced", "nvidia-smi -pm 0 -i 3"]
    assert commands_for("clear-blockers", s)[-1] == "nvidia-smi -pm 0 -i 7"
    assert len(commands_for("clear-blockers", s)) == 2 + 8
    assert commands_for("reset", s, gpus=(3,)) == ["nvidia-smi -r -i 3"]
    assert commands_for("reset", s, gpus=(5, 3, 3)) == ["nvidia-smi -r -i 3", "nvidia-smi -r -i 5"]
    assert commands_for("reboot", s) == ["systemctl reboot"]
    assert commands_for("wait", s) == []
    with pytest.raises(ValueError):
        commands_for("nuke", s)


def test_step_args_and_top_step():
    f = Finding(kind="foreign-pid", severity="high", summary="s", next_step="n", pids=(41,), gpus=(0,),
                evidence={"targets": [88001]}, rung="kill-holders")
    assert step_args(f) == ((88001,), (0,))
    g = replace(f, rung="reset")
    assert step_args(g) == ((), (0,))
    none = replace(f, rung=None, severity="critical")
    assert top_step([none, f]) is f and top_step([none]) is None


class MemoryNode(FakeSource):
    """Answers memory re-reads from a script: one reading per call."""

    def __init__(self, readings):
        super().__init__()
        self.readings = list(readings)

    async def run(self, command, timeout=30.0):
        self.calls.append(("run", command))
        used = self.readings.pop(0) if len(self.readings) > 1 else self.readings[0]
        return CommandResult(command=command, rc=0, stdout="".join(f"{i}, {u} MiB\n" for i, u in enumerate(used)))


async def test_wait_rereads_memory_and_ends_when_it_is_back():
    slept = []

    async def sleep(s):
        slept.append(s)
    node = MemoryNode([(76109, 76113), (76109, 76113), (4, 4)])
    res = await apply_rung(node, "wait", seed_orphans(), sleep=sleep, wait_s=120)
    assert slept == [5.0, 5.0, 5.0]                 # ended at the third re-read, not after 120 s
    assert [r.command for r in res] == ["nvidia-smi --query-gpu=index,memory.used --format=csv,noheader"] * 3


async def test_wait_without_progress_sleeps_its_budget_and_only_watches_the_given_gpus():
    slept = []

    async def sleep(s):
        slept.append(s)
    await apply_rung(MemoryNode([(76109, 76113)]), "wait", seed_orphans(), sleep=sleep)
    assert sum(slept) == WAIT_S
    slept.clear()
    await apply_rung(MemoryNode([(4, 76113)]), "wait", seed_orphans(), gpus=(0,), sleep=sleep, wait_s=60)
    assert slept == [5.0]


async def test_sigterm_settles_until_the_targets_are_gone():
    class Exiting(FakeSource):
        def __init__(self):
            super().__init__()
            self.ps = ["  72170 Sl\n  72171 Sl\n", "  72170 Zl\n  72171 Sl\n", ""]

        async def run(self, command, timeout=30.0):
            self.calls.append(("run", command))
            return CommandResult(command=command, rc=0 if self.ps[0] else 1, stdout=self.ps.pop(0))
    slept = []

    async def sleep(s):
        slept.append(s)
    node = Exiting()
    res = await apply_rung(node, "sigterm", seed_orphans(), pids=(72170, 72171), sleep=sleep)
    assert slept == [1.0, 1.0, 1.0]
    assert res[-1].command == "ps -o pid=,stat= -p 72170,72171"
    slept.clear()
    await apply_rung(FakeSource(), "sigkill", seed_orphans(), pids=(72170,), sleep=sleep)
    assert slept == []                               # SIGKILL does not wait; diagnosis decides


async def test_apply_signals_through_the_source_with_the_start_time_guard():
    src = FakeSource()
    s = seed_orphans()
    res = await apply_rung(src, "sigterm", s, pids=(72170, 1, CONSOLE_SHELL, 99999), settle_s=0)
    sent = [c for c in src.calls if c[0] == "signal"]
    assert sent == [("signal", 72170, "TERM", 1_000_000, s.proc(72170).create_time)]
    refused = [r for r in res if r.error]
    assert {r.command for r in refused} == {"kill -s TERM 1", f"kill -s TERM {CONSOLE_SHELL}", "kill -s TERM 99999"}
    assert all(r.error.startswith("refused") for r in refused)


async def test_apply_runs_other_rungs_through_source_run():
    src = FakeSource()
    s = snap([PERSISTENCED], persistence=True)
    await apply_rung(src, "clear-blockers", s, gpus=(3,))
    await apply_rung(src, "reset", s, gpus=(3,))
    assert [c[1] for c in src.calls] == ["systemctl stop nvidia-persistenced", "nvidia-smi -pm 0 -i 3",
                                        "nvidia-smi -r -i 3"]


async def test_real_sigterm_to_a_real_child_and_the_pid_reuse_guard():
    child = subprocess.Popen(["sleep", "60"])
    other = subprocess.Popen(["sleep", "60"])
    try:
        p = Proc(pid=child.pid, ppid=1, state="S", user="root", name="sleep", cmdline="sleep 60",
                 start_ticks=start_ticks(child.pid), device_files=("/dev/nvidia0",))
        # a stale snapshot: same PID, different start time -> refused, process untouched
        q = Proc(pid=other.pid, ppid=1, state="S", user="root", name="sleep", cmdline="sleep 60",
                 start_ticks=start_ticks(other.pid) + 1, device_files=("/dev/nvidia0",))
        s = snap([p, q])
        res = await apply_rung(RealShell(), "sigterm", s, pids=(child.pid, other.pid), settle_s=0)
        assert res[0].ok
        assert child.wait(timeout=5) == -15
        assert res[1].rc == 3 and "no longer the same process" in res[1].stderr
        await asyncio.sleep(0.1)
        assert other.poll() is None
    finally:
        for c in (child, other):
            if c.poll() is None:
                c.kill()
                c.wait()
