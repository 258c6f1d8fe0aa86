"""Roles and liveness on real processes, read through the local source (the driver is the fake NVML:
only the driver is simulated) — issue 30's "real processes for every liveness rule":

- a ``setsid`` job computing at PPID 1: detached, computing, no signal advice;
- a device-plugin-like daemon (a real binary named ``nvidia-device-plugin``, run as root) in a
  kubepods-shaped cgroup: node infrastructure, never a hidden holder, allowed by the gate;
- an unprivileged user's python renamed ``Xorg`` holding a GPU: a workload, not the display server;
- a holder frozen by the cgroup v1 freezer with a SIGKILL pending: unkillable, never signalled again.
(The orphan whose group leader was SIGKILLed under a subreaper: tests/test_real_kernel.py.)

Every process is started here and ended by its PID.
"""
from __future__ import annotations

import os
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import textwrap
import uuid as uuidlib
from pathlib import Path

import psutil
import pytest

from console.diagnosis import fitness
from console.monitor import NodeMonitor
from console.sources.local.source import LocalSource
from fake_pynvml import FakeGpu, FakeNvml
from tests.polling import until

PY = sys.executable
GIB = 1 << 30
SYSTEMD_V1 = Path("/sys/fs/cgroup/systemd")
FREEZER = Path("/sys/fs/cgroup/freezer")

pytestmark = [pytest.mark.serial,
              pytest.mark.skipif(os.geteuid() != 0, reason="mknod, cgroups and other users need root")]


@pytest.fixture
def devices():
    """nvidia0 and nvidiactl (real character devices, 1:3) in a directory every user may read."""
    d = Path(tempfile.mkdtemp(prefix="gi-dev-"))
    d.chmod(0o755)
    for name in ("nvidia0", "nvidiactl"):
        os.mknod(d / name, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def pids():
    """PIDs the test started (each killed at the end, by PID)."""
    out: list[int] = []
    yield out
    for pid in out:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    for pid in out:
        try:
            os.waitpid(pid, 0)
        except OSError:
            pass


#: a python another user may run (the venv's lies under root's home)
SYSTEM_PY = shutil.which("python3", path="/usr/bin:/bin") or PY


def start(pids: list[int], code: str, *args: str, user: int | None = None) -> int:
    """A python child that prints a PID on its first line (its own, or a grandchild's); returns it."""
    pre = None if user is None else (lambda: (os.setgroups([]), os.setgid(user), os.setuid(user)))
    p = subprocess.Popen([PY if user is None else SYSTEM_PY, "-c", textwrap.dedent(code), *args],
                         stdout=subprocess.PIPE, text=True, preexec_fn=pre, cwd="/")
    pids.append(p.pid)
    pid = int(p.stdout.readline())
    if pid != p.pid:
        pids.append(pid)
    return pid


def node(devices: Path, gpu: FakeGpu) -> LocalSource:
    return LocalSource("local", device_glob=f"{devices}/nvidia*", dmesg_command=("true",),
                       nvml_module=FakeNvml([gpu]))


async def two_polls(src: LocalSource):
    monitor = NodeMonitor(src)
    try:
        await monitor.poll_once()
        first = await monitor.poll_once()      # noqa: F841 (history: CPU time over the polls)
        return await monitor.poll_once()
    finally:
        await src.close()


SETSID_SPINNER = """
    import os, sys
    if os.fork():                                 # the launcher exits at once: PPID 1, its own session
        os._exit(0)
    os.setsid()
    fd = os.open(sys.argv[1], os.O_RDONLY)
    print(os.getpid(), flush=True)
    while True:
        pass
"""


async def test_a_setsid_job_computing_at_ppid_1_gets_no_signal_advice(devices, pids):
    pid = start(pids, SETSID_SPINNER, str(devices / "nvidia0"))
    assert until(lambda: psutil.Process(pid).ppid() != os.getpid())
    gpu = FakeGpu(0, "00000000:18:00.0", used_mib=20_000, util=100, compute=[(pid, 20_000 * (1 << 20))])
    snap = await two_polls(node(devices, gpu))
    mine = [f for f in snap.findings if pid in f.pids]
    assert mine and not [f for f in mine if f.kind in ("orphan", "hidden-holder")], [(f.kind, f.summary) for f in mine]
    (job,) = [f for f in mine if f.kind == "holder"]
    assert job.rung is None and job.next_step.startswith("Nothing stuck") and "`t`" in job.next_step
    ev = next(e for e in job.evidence["processes"] if e["pid"] == pid)
    assert ev["role"] == "workload" and ev["computing"] is True and ev["liveness"] == "detached"
    assert ev["sid"] == pid and ev["group_leader_alive"] is True


PLUGIN = """
    import os, sys
    fds = [os.open(f, os.O_RDONLY) for f in sys.argv[2:]]
    for fd in fds:
        os.set_inheritable(fd, True)
    print(os.getpid(), flush=True)
    os.execv(sys.argv[1], ["nvidia-device-plugin", "600"])
"""


def _remove_cgroup(leaf: Path, top: Path, started: list[int]) -> None:
    """Kill what the test started that is still in ``leaf`` (by PID), wait until it is empty, and
    remove it and its parents up to ``top`` (those left empty)."""
    try:
        inside = [int(x) for x in (leaf / "cgroup.procs").read_text().split()]
    except OSError:
        inside = []
    for pid in inside:
        if pid in started:
            try:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
            except OSError:
                pass
    until(lambda: not (leaf / "cgroup.procs").read_text().strip(), bound_s=20)
    d = leaf
    while True:
        try:
            d.rmdir()
        except OSError:
            break
        if d == top:
            break
        d = d.parent


@pytest.fixture
def kubepods(pids):
    """A kubepods-shaped cgroup (the cgroupfs driver's path) in the v1 name=systemd hierarchy."""
    if not os.access(SYSTEMD_V1, os.W_OK):
        pytest.skip("no writable name=systemd cgroup v1 hierarchy here")
    top = SYSTEMD_V1 / "kubepods"
    leaf = top / "besteffort" / f"pod{uuidlib.uuid4()}" / ("c0" * 32)
    leaf.mkdir(parents=True)
    yield leaf
    _remove_cgroup(leaf, top, pids)


async def test_a_device_plugin_in_a_kubepods_cgroup_is_infrastructure(devices, pids, kubepods, tmp_path):
    binary = tmp_path / "nvidia-device-plugin"
    shutil.copy("/bin/sleep", binary)
    pid = start(pids, PLUGIN, str(binary), str(devices / "nvidia0"), str(devices / "nvidiactl"))
    (kubepods / "cgroup.procs").write_text(str(pid))
    assert until(lambda: psutil.Process(pid).exe() == str(binary))
    gpu = FakeGpu(0, "00000000:18:00.0", used_mib=4)
    snap = await two_polls(node(devices, gpu))
    p = snap.proc(pid)
    assert p.cgroup is not None and p.cgroup.kubernetes and p.exe == str(binary), p
    assert not [f for f in snap.findings if pid in f.pids and f.kind in ("hidden-holder", "orphan", "holder")]
    work = {s.name: s for s in fitness.signals(snap)}["workloads"]
    assert work.status == fitness.OK and "nvidia-device-plugin" in work.said, work


RENAMED = """
    import os, sys
    fd = os.open(sys.argv[1], os.O_RDONLY)
    os.set_inheritable(fd, True)
    os.execv(sys.executable, ["Xorg", "-c", "import os, time; print(os.getpid(), flush=True); time.sleep(600)"])
"""


async def test_a_users_python_renamed_xorg_is_a_workload_that_fails_the_gate(devices, pids):
    pid = start(pids, RENAMED, str(devices / "nvidia0"), user=65534)
    gpu = FakeGpu(0, "00000000:18:00.0", used_mib=4)
    snap = await two_polls(node(devices, gpu))
    p = snap.proc(pid)
    assert p.user == "nobody" and p.cmdline.startswith("Xorg") and p.exe and "python" in p.exe
    work = {s.name: s for s in fitness.signals(snap)}["workloads"]
    assert work.status == fitness.BAD and f"PID {pid}" in work.said
    assert [f for f in snap.findings if pid in f.pids and f.kind == "hidden-holder"]


FROZEN = """
    import os, sys, time
    fd = os.open(sys.argv[1], os.O_RDONLY)
    print(os.getpid(), flush=True)
    time.sleep(600)
"""


@pytest.fixture
def freezer(pids):
    if not os.access(FREEZER, os.W_OK):
        pytest.skip("no writable cgroup v1 freezer here")
    d = FREEZER / f"gi-frozen-{os.getpid()}-{uuidlib.uuid4().hex[:8]}"
    d.mkdir()
    yield d
    try:
        (d / "freezer.state").write_text("THAWED")      # the pending SIGKILL is taken now
    except OSError:
        pass
    _remove_cgroup(d, d, pids)


async def test_a_frozen_holder_with_sigkill_pending_is_unkillable_and_never_signalled_again(devices, pids,
                                                                                              freezer):
    pid = start(pids, FROZEN, str(devices / "nvidia0"))
    (freezer / "cgroup.procs").write_text(str(pid))
    (freezer / "freezer.state").write_text("FROZEN")
    assert until(lambda: (freezer / "freezer.state").read_text().strip() == "FROZEN")
    os.kill(pid, signal.SIGKILL)
    gpu = FakeGpu(0, "00000000:18:00.0", used_mib=30_004, compute=[(pid, 30_000 * (1 << 20))])
    snap = await two_polls(node(devices, gpu))
    p = snap.proc(pid)
    assert p is not None and p.sigkill_pending is True and (p.state == "D" or p.d_threads), p
    mine = [f for f in snap.findings if pid in f.pids or pid in f.evidence.get("targets", ())]
    assert mine, [(f.kind, f.summary) for f in snap.findings]
    assert all(f.rung not in ("sigterm", "sigkill", "kill-holders") for f in mine), [(f.kind, f.rung) for f in mine]
    assert any(f.rung == "wait" and "SIGKILL pending" in f.next_step for f in mine)
    assert {s.name: s for s in fitness.signals(snap)}["stuck"].status == fitness.BAD
