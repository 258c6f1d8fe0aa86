"""Real kernel states, made for real and read through the console's own sources — locally and
over the real sshd — on a node whose NVIDIA driver does not answer (this machine has none):

- a real D-state: a ``vfork()`` parent waits, uninterruptibly, for a child that never execs;
- real device holders: a private character device made with ``mknod`` under a temp dir, and
  ``--device-glob`` pointing at it, held open by real processes;
- a real orphan: a worker whose launcher (its process group's leader) is SIGKILLed is reparented to a
  ``PR_SET_CHILD_SUBREAPER``; its group's leader is gone and it computes nothing: orphaned.

Processes are started by the test and ended by their PIDs.
"""
from __future__ import annotations

import os
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import psutil
import pytest

from console.actions.plan import plan_action
from console.monitor import NodeMonitor
from console.sources.local.source import LocalSource
from console.sources.ssh.source import SshSource
from tests.polling import until
from fake_pynvml import FakeNvml, eight_gpus
from tests.test_ssh import node_a, options  # noqa: F401 (fixture)

PY = sys.executable

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="mknod needs root (CI runs as root)")


@pytest.fixture
def devices(tmp_path) -> Path:
    """nvidia0 and nvidiactl under a private dir: real character devices (1:3, like /dev/null)."""
    d = tmp_path / "dev"
    d.mkdir()
    for name in ("nvidia0", "nvidiactl"):
        os.mknod(d / name, 0o600 | stat.S_IFCHR, os.makedev(1, 3))
    return d


@pytest.fixture
def started():
    """Processes the test starts; each is killed by PID (its children first) at the end."""
    procs: list[subprocess.Popen] = []
    yield procs
    for p in procs:
        try:
            kids = psutil.Process(p.pid).children(recursive=True)
        except psutil.Error:
            kids = []
        for k in kids:
            try:
                k.kill()
            except psutil.Error:
                pass
        if p.poll() is None:
            p.kill()
        p.wait()


def run(started, code: str, *args: str) -> tuple[subprocess.Popen, list[str]]:
    """A python child; returns it and the words of its first line (it prints when set up)."""
    p = subprocess.Popen([PY, "-c", textwrap.dedent(code), *args], stdout=subprocess.PIPE, stdin=subprocess.PIPE,
                         text=True)
    started.append(p)
    return p, p.stdout.readline().split()


VFORK_HOLDER = """
    import ctypes, os, sys
    libc = ctypes.CDLL(None, use_errno=True)
    fds = [os.open(f, os.O_RDONLY) for f in sys.argv[1:]]
    print(os.getpid(), flush=True)
    if libc.vfork() == 0:       # the child shares our memory and never execs: we wait in D
        libc.pause()
        libc._exit(0)
    libc.pause()
"""

HOLDER = """
    import os, sys, time
    fds = [os.open(f, os.O_RDONLY) for f in sys.argv[1:]]
    print(os.getpid(), flush=True)
    sys.stdin.readline()
"""

# a subreaper that starts a launcher, which starts a worker holding the device, then waits for
# a line on stdin to let the launcher exit (the worker is then reparented to the subreaper)
LAUNCHER = """
import os, signal, subprocess, sys
os.setpgid(0, 0)                     # a launcher started from a shell leads its job's process group
w = subprocess.Popen([sys.executable, "-c", "import os, sys, time; fd = os.open(sys.argv[1], os.O_RDONLY); "
                      "print('open', flush=True); time.sleep(600)", sys.argv[1]], stdout=subprocess.PIPE)
w.stdout.readline()                  # the worker holds the device before anyone looks
print(w.pid, flush=True)
sys.stdin.readline()
os.kill(os.getpid(), signal.SIGKILL)  # the launcher dies; its worker lives on in its group
"""

SUBREAPER = """
    import ctypes, os, subprocess, sys
    ctypes.CDLL(None).prctl(36, 1, 0, 0, 0)          # PR_SET_CHILD_SUBREAPER
    launcher = subprocess.Popen([sys.executable, "-c", sys.argv[2], sys.argv[1]], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, text=True)
    worker = launcher.stdout.readline().strip()
    print(os.getpid(), launcher.pid, worker, flush=True)
    sys.stdin.readline()
    launcher.stdin.write("go\\n"); launcher.stdin.flush(); launcher.wait()
    print("launcher-gone", flush=True)
    sys.stdin.readline()
"""


def in_d(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "D"
    except OSError:
        return False


def make_node(request, devices: Path, tmp_path: Path, driver: bool):
    """This machine through the local source, or through the real sshd. ``driver``: a driver
    that answers (one GPU holding memory, no process listed) — else none, as on this machine."""
    glob = f"{devices}/nvidia*"
    if request.param == "local":
        nvml = FakeNvml(eight_gpus()[:1]) if driver else None      # None: the real pynvml, no driver
        return LocalSource("local", device_glob=glob, dmesg_command=("true",), nvml_module=nvml)
    sshd = request.getfixturevalue("sshd")
    request.getfixturevalue("ssh_home")
    smi = request.getfixturevalue("node_a")
    smi.smi.set(used=(40000, 4), apps=()) if driver else smi.smi.set(mode="nodriver")
    return SshSource(smi.target, options(sshd, tmp_path), device_glob=glob)


@pytest.fixture(params=["local", "ssh"])
def node(request, devices, tmp_path):
    """No driver answers (processes and findings must still come)."""
    return make_node(request, devices, tmp_path, driver=False)


@pytest.fixture(params=["local", "ssh"])
def node_with_driver(request, devices, tmp_path):
    """The driver answers: memory used on GPU 0 and no process listed."""
    return make_node(request, devices, tmp_path, driver=True)


async def test_a_real_d_state_holder_is_reported_with_its_wchan_beside_the_driver_error(node, devices, started):
    p, words = run(started, VFORK_HOLDER, str(devices / "nvidia0"), str(devices / "nvidiactl"))
    pid = int(words[0])
    assert until(lambda: in_d(pid)), "the vfork parent never reached D"
    monitor = NodeMonitor(node)
    try:
        snap = await monitor.poll_once()
    finally:
        await node.close()
    assert snap.error is not None and "driver" in snap.error.lower(), snap.error     # no driver here
    proc = snap.proc(pid)
    assert proc is not None and proc.state == "D"
    assert [t.wchan for t in proc.d_threads if t.tid == pid] == ["kernel_clone"], proc.d_threads
    assert sorted(proc.device_files) == [f"{devices}/nvidia0", f"{devices}/nvidiactl"]
    assert proc.device_gpus == (0,)
    found = [f for f in snap.findings if f.kind == "d-state" and pid in f.pids]
    assert found, [(f.kind, f.summary) for f in snap.findings]
    assert "kernel_clone" in found[0].summary + str(found[0].evidence)
    # a process in D is never advised SIGKILL while it sits there
    assert found[0].rung != "sigkill"


async def test_real_device_holders_are_found_by_their_fds_and_f_lists_each_by_pid(node_with_driver, devices,
                                                                                  started):
    node = node_with_driver
    holders = [int(run(started, HOLDER, str(devices / "nvidia0"))[1][0]) for _ in range(2)]
    ctl_only = int(run(started, HOLDER, str(devices / "nvidiactl"))[1][0])
    bystander = int(run(started, HOLDER)[1][0])
    monitor = NodeMonitor(node)
    try:
        snap = await monitor.poll_once()
    finally:
        await node.close()
    for pid in holders:
        assert snap.proc(pid).device_files == (f"{devices}/nvidia0",), snap.proc(pid)
    assert snap.proc(ctl_only).holds_devices and snap.proc(ctl_only).device_gpus == ()
    assert not snap.proc(bystander).holds_devices
    hidden = [f for f in snap.findings if f.kind == "hidden-holder"]
    assert hidden and set(holders) <= set(hidden[0].pids), [(f.kind, f.pids) for f in snap.findings]
    plan = plan_action(snap, "kill-holders", gpus=[0])
    assert {t.pid for t in plan.targets} == set(holders)
    assert plan.commands == (f"kill -s KILL {' '.join(map(str, sorted(holders)))}",) or \
        sorted(plan.commands[0].split()[3:]) == sorted(map(str, holders))
    assert all("fuser" not in c for c in plan.commands)


async def test_a_real_orphan_reparented_to_a_subreaper(node, devices, started):
    p, words = run(started, SUBREAPER, str(devices / "nvidia0"), LAUNCHER)
    reaper, launcher, worker = map(int, words)
    monitor = NodeMonitor(node)
    try:
        before = await monitor.poll_once()
        assert before.proc(worker).ppid == launcher
        assert not [f for f in before.findings if f.kind == "orphan"]
        p.stdin.write("go\n")
        p.stdin.flush()
        assert p.stdout.readline().strip() == "launcher-gone"
        assert until(lambda: psutil.Process(worker).ppid() == reaper)
        after = await monitor.poll_once()
    finally:
        await node.close()
    assert after.proc(worker).ppid == reaper and after.proc(launcher) is None
    orphan = [f for f in after.findings if f.kind == "orphan" and worker in f.pids]
    assert orphan, [(f.kind, f.summary) for f in after.findings]
    assert f"PID {reaper}" in orphan[0].summary
