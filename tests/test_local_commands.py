"""LocalSource.run (real /bin/sh) and LocalSource.signal (real signals, identity checks)."""
from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import psutil
import pytest

from console.sources.local.source import LocalSource
from fake_pynvml import FakeNvml


@pytest.fixture
def src() -> LocalSource:
    return LocalSource("local", nvml_module=FakeNvml([]), dmesg_command=("true",))


@pytest.fixture
def child():
    procs: list[subprocess.Popen] = []

    def start() -> subprocess.Popen:
        p = subprocess.Popen(["sleep", "60"])
        procs.append(p)
        return p

    yield start
    for p in procs:
        if p.poll() is None:
            p.kill()
        p.wait()


def alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


async def test_run_captures_output_and_status(src):
    res = await src.run("echo out; echo err >&2; exit 4", timeout=5)
    assert (res.command, res.rc, res.stdout, res.stderr, res.error) == (
        "echo out; echo err >&2; exit 4", 4, "out\n", "err\n", None)
    assert not res.ok


async def test_missing_nvidia_smi_is_rc_127_as_sh_says(src):
    env_path = os.environ.get("PATH", "")
    if any(Path(d, "nvidia-smi").exists() for d in env_path.split(":") if d):
        pytest.skip("nvidia-smi is installed here")
    res = await src.run("nvidia-smi -r -i 3", timeout=5)
    assert res.rc == 127
    assert "nvidia-smi" in res.stderr and "not found" in res.stderr
    assert res.error is None


async def test_timeout_kills_the_whole_process_group(src, tmp_path):
    pidfile = tmp_path / "bg"
    res = await src.run(f"echo started; sleep 30 & echo $! > {pidfile}; wait", timeout=0.5)
    assert res.rc is None and res.error == "timed out after 0.5s"
    assert res.stdout == "started\n"                 # what it printed before the deadline
    bg = int(pidfile.read_text())
    for _ in range(100):
        if not alive(bg):
            break
        time.sleep(0.01)
    assert not alive(bg)


async def test_background_child_does_not_hold_run_open(src):
    res = await src.run("sleep 30 & echo done", timeout=1)
    assert res.stdout == "done\n" and res.rc == 0 and res.error is None    # not held open to the deadline


async def test_sigterm_reaches_a_real_child(src, child):
    p = child()
    ct = psutil.Process(p.pid).create_time()
    res = await src.signal(p.pid, "TERM", create_time=ct)
    assert res.rc == 0 and res.ok
    assert res.command == f"kill -s TERM {p.pid}"
    assert p.wait(timeout=5) == -signal.SIGTERM


async def test_sigkill_by_sig_name_with_start_ticks(src, child):
    p = child()
    snap = await src.poll()
    me = snap.proc(p.pid)
    res = await src.signal(p.pid, "SIGKILL", start_ticks=me.start_ticks,
                           create_time=me.create_time)
    assert res.command == f"kill -s KILL {p.pid}" and res.rc == 0
    assert p.wait(timeout=5) == -signal.SIGKILL


async def test_wrong_create_time_is_refused_and_process_survives(src, child):
    p = child()
    ct = psutil.Process(p.pid).create_time()
    res = await src.signal(p.pid, "KILL", create_time=ct - 5)
    assert res.rc == 3
    assert "refused" in res.stderr and "no longer the same process" in res.stderr
    with pytest.raises(subprocess.TimeoutExpired):     # refused: no signal reached it
        p.wait(timeout=0.3)


async def test_wrong_start_ticks_is_refused(src, child):
    p = child()
    snap = await src.poll()
    res = await src.signal(p.pid, "TERM", start_ticks=snap.proc(p.pid).start_ticks + 1)
    assert res.rc == 3 and "refused" in res.stderr
    assert p.poll() is None


async def test_own_pid_parent_and_init_are_refused(src):
    for pid in (os.getpid(), os.getppid()):
        res = await src.signal(pid, "TERM")
        assert res.rc == 3 and "this console" in res.stderr
        assert res.command == f"kill -s TERM {pid}"
    for pid in (1, 0, -1):
        res = await src.signal(pid, "KILL")
        assert res.rc == 3 and "refused" in res.stderr


async def test_gone_process_is_no_such_process(src, child):
    p = child()
    created = psutil.Process(p.pid).create_time()
    p.kill()
    p.wait()
    res = await src.signal(p.pid, "TERM", create_time=created)
    assert res.rc == 1 and "No such process" in res.stderr


async def test_a_signal_without_a_known_start_time_is_refused(src, child):
    p = child()
    res = await src.signal(p.pid, "TERM")
    assert res.rc == 3 and "PID-reuse guard" in res.stderr
    assert p.poll() is None


async def test_bad_signal_name(src, child):
    p = child()
    res = await src.signal(p.pid, "NOPE")
    assert res.rc == 2 and "invalid signal" in res.stderr
    assert p.poll() is None
