"""Workers in another session (causes from the field, 2: MPI / TensorRT-LLM ranks started with
setsid kept 20 GiB after their launcher died): before a parent is signalled its whole family is
snapshotted, other process groups and sessions included, and after it each one is checked; one
that outlived the parent is named in the outcome. On snapshots, and with real processes over the
real sshd."""
from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

from console.actions.plan import plan_action
from console.model import DriverProc, Gpu, NodeSnapshot, Proc
from console.sources.parse_proc import parse_stat_line
from tests.polling import until
from tests.test_ssh import node_a, options  # noqa: F401 (fixture)

UUID0 = "GPU-0"


def test_the_stat_record_gives_the_process_group_and_the_session():
    st = parse_stat_line("812 (python3) S 700 812 812 0 -1 4194560 " + " ".join(["0"] * 44))
    assert (st.ppid, st.pgrp, st.session) == (700, 812, 812)
    cut = parse_stat_line("812 (python3) S 700")
    assert cut is not None and cut.pgrp is None and cut.session is None


def snap() -> NodeSnapshot:
    def proc(pid, ppid, sid, name, mib=0):
        return Proc(pid=pid, ppid=ppid, state="S", user="alice", name=name, cmdline=name, start_ticks=pid * 10,
                    create_time=1.0e9 + pid, pgid=sid, sid=sid, gpu_memory_mib={"0": mib} if mib else {},
                    device_files=("/dev/nvidia0",) if mib else ())
    procs = (Proc(pid=1, ppid=0, state="S", user="root", name="systemd", cmdline="/sbin/init", start_ticks=1),
             proc(700, 1, 700, "mpirun"), proc(812, 700, 812, "rank0", 20_950), proc(813, 700, 700, "rank1", 20_950))
    return NodeSnapshot(name="gpu07", taken_at=1.0e9 + 900,
                        gpus=(Gpu(index=0, uuid=UUID0, name="H100", bus_id="00000000:18:00.0",
                                  memory_used_mib=41_904, memory_total_mib=81_559, utilization_pct=0),),
                        processes=procs,
                        driver_processes=tuple(DriverProc(pid=p, gpu_index=0, gpu_uuid=UUID0, used_memory_mib=20_950,
                                                          name=n) for p, n in ((812, "rank0"), (813, "rank1"))))


def test_signalling_a_launcher_snapshots_its_descendants_and_names_those_in_their_own_session():
    plan = plan_action(snap(), "sigterm", pids=[700])
    assert plan.commands == ("kill -s TERM 700",)
    assert [(d.pid, d.sid) for d in plan.descendants] == [(812, 812), (813, 700)]
    assert any("1 descendant in a session of its own (PID 812)" in n for n in plan.notes), plan.notes


def children(pid: int) -> list[int]:
    try:
        return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


async def test_a_real_worker_in_its_own_session_outlives_its_parent_and_the_outcome_says_so(
        sshd, node_a, tmp_path, ssh_home):  # noqa: F811
    from console.session import Session
    from console.sources.ssh.source import SshSource
    launcher = subprocess.Popen(["sh", "-c", "setsid sleep 300 & sleep 300 & wait"], start_new_session=True)
    workers: list[int] = []
    try:
        def apart_from_it() -> list[int]:
            return [w for w in children(launcher.pid) if os.getsid(w) != launcher.pid]
        assert until(lambda: len(children(launcher.pid)) == 2 and apart_from_it()), "a worker in its own session"
        workers = children(launcher.pid)
        apart, = apart_from_it()
        node_a.smi.set(used=(41_000, 4), apps=[(w, 0, 20_000, "sleep") for w in workers])
        session = Session([SshSource(node_a.target, options(sshd, tmp_path))])
        await session.poll_all()
        plan = await session.plan(node_a.target, "sigterm", pids=[launcher.pid])
        assert plan.commands == (f"kill -s TERM {launcher.pid}",)
        assert sorted(d.pid for d in plan.descendants) == sorted(workers)
        assert any(f"(PID {apart})" in n and "session of its own" in n for n in plan.notes), plan.notes
        outcome = await session.execute(plan, verify_window_s=3, deadline_s=3)
        assert until(lambda: launcher.poll() is not None), "the launcher went"
        assert "2 of its 2 descendants outlived it" in outcome.text, outcome.text
        assert f"{apart} (sleep, own session)" in outcome.text, outcome.text
        await session.stop()
    finally:
        for pid in [launcher.pid, *workers]:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        launcher.wait()
