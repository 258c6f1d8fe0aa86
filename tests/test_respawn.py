"""A parent that starts again what was killed (issue: causes from the field, 1): the console sees
the new child of the same parent, says so, and moves the advice to the parent — on synthetic
snapshots, and with a real shell retry loop over the real sshd."""
from __future__ import annotations

import asyncio
import os
import signal
import subprocess
from pathlib import Path

import pytest

from console.actions.ladder import commands_for, step_args
from console.diagnosis import diagnose
from console.diagnosis.who import label
from console.model import ActionRecord, DriverProc, Gpu, NodeSnapshot, Proc
from tests.polling import until

T0 = 1_800_000_000.0
UUID0 = "GPU-0"


def gpu(used: int) -> Gpu:
    return Gpu(index=0, uuid=UUID0, name="NVIDIA H100", bus_id="00000000:18:00.0", memory_used_mib=used,
               memory_total_mib=81559, utilization_pct=0)


def proc(pid, ppid, cmd, *, started, mib=0) -> Proc:
    return Proc(pid=pid, ppid=ppid, state="S", user="alice", name=cmd.split()[0][:15], cmdline=cmd,
                create_time=started, start_ticks=int(started * 100),
                gpu_memory_mib={"0": mib} if mib else {}, device_files=("/dev/nvidia0",) if mib else ())


def node(procs, t) -> NodeSnapshot:
    held = [p for p in procs if p.gpu_memory_mib]
    return NodeSnapshot(name="gpu07", taken_at=t, gpus=(gpu(sum(p.gpu_memory_total_mib for p in procs) + 4),),
                        processes=(Proc(pid=1, ppid=0, state="S", user="root", name="systemd", cmdline="/sbin/init",
                                        start_ticks=1),) + tuple(procs),
                        driver_processes=tuple(DriverProc(pid=p.pid, gpu_index=0, gpu_uuid=UUID0,
                                                          used_memory_mib=p.gpu_memory_total_mib, name=p.name)
                                               for p in held))


LOOP = "bash -c while true; do python3 train.py; done"


def test_a_worker_started_again_by_its_parent_moves_the_advice_to_the_parent():
    loop = proc(5000, 1, LOOP, started=T0 - 3600)
    old = proc(5100, 5000, "python3 train.py", started=T0 - 600, mib=70000)
    kill = ActionRecord(rung="sigkill", ts=T0, node="gpu07", pids=(5100,), family=((5100, 5000, label(old)),))
    new = proc(5200, 5000, "python3 train.py", started=T0 + 3, mib=69000)
    f = next(f for f in diagnose(node([loop, new], T0 + 8), (), [kill]) if f.kind == "respawn")
    assert f.severity == "high" and f.pids == (5000, 5200)
    assert f.summary.startswith("PID 5000 (bash) started python3 again after the SIGKILL 8 s ago: 1 new process")
    assert "67.4 GiB on GPU 0" in f.summary
    assert f.rung == "sigterm" and commands_for(f.rung, node([loop, new], T0 + 8), *step_args(f)) == [
        "kill -s TERM 5000 5200"]                  # the parent first, then its new child
    assert "restarts what is killed" in f.next_step


@pytest.mark.parametrize("case", ["parent is init", "started before the kill", "the target survived",
                                  "another program", "no memory"])
def test_what_is_not_a_respawn(case):
    loop = proc(5000, 1, LOOP, started=T0 - 3600)
    old = proc(5100, 5000, "python3 train.py", started=T0 - 600, mib=70000)
    family = ((5100, 1 if case == "parent is init" else 5000, label(old)),)
    kill = ActionRecord(rung="sigkill", ts=T0, node="gpu07", pids=(5100,), family=family)
    started = T0 - 100 if case == "started before the kill" else T0 + 3
    cmd = "python3 eval.py" if case == "another program" else "python3 train.py"
    new = proc(5200, 1 if case == "parent is init" else 5000, cmd if case != "another program" else "nvtop",
               started=started, mib=0 if case == "no memory" else 69000)
    procs = [loop, new] + ([old] if case == "the target survived" else [])
    assert not [f for f in diagnose(node(procs, T0 + 8), (), [kill]) if f.kind == "respawn"]


# ---------------------------------------------------------------- a real retry loop

from tests.test_ssh import node_a, options  # noqa: E402,F401 (fixture)


def children(pid: int) -> list[int]:
    try:
        return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


async def test_a_real_retry_loop_is_seen_restarting_its_worker_after_sigkill(sshd, node_a, tmp_path, ssh_home):  # noqa: F811
    from console.session import Session
    from console.sources.ssh.source import SshSource
    loop = subprocess.Popen(["sh", "-c", "while :; do sleep 300; done"], start_new_session=True)
    try:
        assert until(lambda: children(loop.pid)), "the loop's first worker"
        worker = children(loop.pid)[0]
        node_a.smi.set(used=(30_000, 4), apps=[(worker, 0, 29_900, "sleep")])
        session = Session([SshSource(node_a.target, options(sshd, tmp_path))])
        await session.poll_all()
        plan = await session.plan(node_a.target, "sigkill", pids=[worker])
        assert plan.commands == (f"kill -s KILL {worker}",)
        await session.execute(plan, verify_window_s=0, deadline_s=0)
        assert until(lambda: children(loop.pid) and children(loop.pid)[0] != worker), "the loop started another"
        again = children(loop.pid)[0]
        node_a.smi.set(used=(30_000, 4), apps=[(again, 0, 29_900, "sleep")])   # it takes the memory back
        found = None
        for _ in range(10):
            snap, = await session.poll_all()
            found = next((f for f in snap.findings if f.kind == "respawn"), None)
            if found:
                break
            await asyncio.sleep(0.2)
        assert found is not None, [f.kind for f in snap.findings]
        assert found.pids == (loop.pid, again) and found.rung == "sigterm"
        assert f"PID {loop.pid} (sh) started sleep again after the SIGKILL" in found.summary
        await session.stop()
    finally:
        os.killpg(loop.pid, signal.SIGKILL)
        loop.wait()
