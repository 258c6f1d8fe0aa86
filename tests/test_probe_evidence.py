"""The evidence a verdict rests on, read from real processes through both real sources (the local
source and the probe over the real sshd): a computing child's CPU ticks rise from poll to poll,
a device holder's executable is read, and a holder frozen in the cgroup v1 freezer with a SIGKILL
sent shows that SIGKILL pending (and state D) until it is thawed.

Serial: the sources read this machine's whole process table, and a frozen process with a pending
SIGKILL is kernel state every such reader sees. Processes are started by the test and ended by
their PIDs; the freezer cgroup is made with a unique name and removed in a ``finally``.
"""
from __future__ import annotations

import os
import signal
import uuid
from pathlib import Path

import psutil
import pytest

from console.model import PciGpu
from console.sources.local.source import LocalSource
from console.sources.ssh.source import SshSource
from fake_pynvml import FakeNvml, eight_gpus
from tests.polling import until
from tests.sshd_fixture import PCI_CONFIG, PCI_GONE
from tests.test_real_kernel import HOLDER, PY, devices, run, started  # noqa: F401 (fixtures)
from tests.test_ssh import node_a, options  # noqa: F401 (fixture)

pytestmark = [pytest.mark.serial,
              pytest.mark.skipif(os.geteuid() != 0, reason="mknod and the freezer need root (CI runs as root)")]

#: a holder of the device files it is given that computes without end
BURNER = """
    import os, sys
    fds = [os.open(f, os.O_RDONLY) for f in sys.argv[1:]]
    print(os.getpid(), flush=True)
    while True:
        pass
"""
FREEZER = Path("/sys/fs/cgroup/freezer")


@pytest.fixture(params=["local", "ssh"])
def node(request, devices, tmp_path):  # noqa: F811
    """This machine through the local source (a fake NVML: one GPU answering) or through the real
    sshd (the test nvidia-smi: two GPUs), holders found by ``devices``."""
    glob = f"{devices}/nvidia*"
    if request.param == "local":
        source = LocalSource("local", device_glob=glob, dmesg_command=("true",),
                             nvml_module=FakeNvml(eight_gpus()[:1]))
    else:
        sshd = request.getfixturevalue("sshd")
        request.getfixturevalue("ssh_home")
        smi = request.getfixturevalue("node_a")
        smi.smi.set(used=(40000, 4), apps=())
        source = SshSource(smi.target, options(sshd, tmp_path), device_glob=glob)
    yield source


def cpu_ticks(pid: int) -> int:
    times = psutil.Process(pid).cpu_times()
    return round((times.user + times.system) * 100)


async def test_a_computing_holder_shows_its_cpu_ticks_rising_over_two_polls(node, devices, started):  # noqa: F811
    burner = int(run(started, BURNER, str(devices / "nvidia0"))[1][0])
    sleeper = int(run(started, HOLDER, str(devices / "nvidia0"))[1][0])
    try:
        first = await node.poll()
        before = first.proc(burner).cpu_ticks
        assert before is not None, first.proc(burner)
        assert until(lambda: cpu_ticks(burner) >= before + 30), "the burner never computed"
        second = await node.poll()               # over SSH a light probe: the holder is watched
    finally:
        await node.close()
    assert second.proc(burner).cpu_ticks >= before + 30, (before, second.proc(burner))
    # what the kernel says, within the polls' own lag
    assert abs(second.proc(burner).cpu_ticks - cpu_ticks(burner)) < 500
    idle = (first.proc(sleeper).cpu_ticks, second.proc(sleeper).cpu_ticks)
    assert None not in idle and idle[1] - idle[0] < 10, idle


async def test_a_device_holder_has_its_executable_read_and_a_bystander_not(node, devices, started):  # noqa: F811
    holder = int(run(started, HOLDER, str(devices / "nvidia0"))[1][0])
    bystander = int(run(started, HOLDER)[1][0])
    try:
        snap = await node.poll()
    finally:
        await node.close()
    p = snap.proc(holder)
    assert p.holds_devices and p.exe == os.path.realpath(PY) == os.readlink(f"/proc/{holder}/exe"), p
    assert p.sigkill_pending is False and p.cpu_ticks is not None
    other = snap.proc(bystander)
    assert other.exe is None and other.sigkill_pending is None and other.cpu_ticks is not None


def _write(path: Path, text: str) -> None:
    with open(path, "w") as f:
        f.write(text)


@pytest.fixture
def freezer_cgroup():
    """A new, uniquely named cgroup of the v1 freezer; removed at the end (the test thaws it)."""
    if not (FREEZER / "cgroup.procs").exists() or not os.access(FREEZER, os.W_OK):
        pytest.skip("no writable cgroup v1 freezer at /sys/fs/cgroup/freezer")
    cg = FREEZER / f"gi-test-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    try:
        cg.mkdir()
    except OSError as exc:
        pytest.skip(f"cannot make a freezer cgroup: {exc}")
    try:
        yield cg
    finally:
        try:
            _write(cg / "freezer.state", "THAWED")
        except OSError:
            pass
        until(lambda: not (cg / "cgroup.procs").read_text().split())
        cg.rmdir()


def _sigkill_pending(pid: int) -> bool:
    status = Path(f"/proc/{pid}/status").read_text()
    masks = [line.split()[1] for line in status.splitlines() if line.startswith(("SigPnd:", "ShdPnd:"))]
    return any(int(m, 16) & (1 << 8) for m in masks)


async def test_a_frozen_holder_sent_sigkill_shows_it_pending_and_in_d(node, devices, started,  # noqa: F811
                                                                      freezer_cgroup):
    cg = freezer_cgroup
    proc, words = run(started, HOLDER, str(devices / "nvidia0"))
    pid = int(words[0])
    try:
        _write(cg / "cgroup.procs", str(pid))
        _write(cg / "freezer.state", "FROZEN")
        assert until(lambda: (cg / "freezer.state").read_text().strip() == "FROZEN"), "never froze"
        os.kill(pid, signal.SIGKILL)
        assert until(lambda: _sigkill_pending(pid)), "the SIGKILL is not pending"
        snap = await node.poll()
        p = snap.proc(pid)
        assert p is not None and p.state == "D" and p.holds_devices, p
        assert p.sigkill_pending is True, p
        assert p.exe == os.path.realpath(PY)
    finally:
        await node.close()
        _write(cg / "freezer.state", "THAWED")
        assert until(lambda: proc.poll() is not None), "the killed holder did not die once thawed"
    assert proc.returncode == -signal.SIGKILL


async def test_the_local_source_reads_the_gpus_the_kernel_module_knows_under_its_root(tmp_path, devices):  # noqa: F811
    root = tmp_path / "node"
    for bus, head in (("0000:18:00.0", PCI_CONFIG), ("0000:2a:00.0", PCI_GONE)):
        (root / "proc/driver/nvidia/gpus" / bus).mkdir(parents=True)
        (root / "sys/bus/pci/devices" / bus).mkdir(parents=True)
        (root / "sys/bus/pci/devices" / bus / "config").write_bytes(head + bytes(60))
    (root / "proc/driver/nvidia/gpus/0000:3b:00.0").mkdir()          # no config file: unreadable
    source = LocalSource("local", device_glob=f"{devices}/nvidia*", dmesg_command=("true",),
                         nvml_module=FakeNvml(eight_gpus()[:1]), node_root=str(root))
    bare = LocalSource("local", device_glob=f"{devices}/nvidia*", dmesg_command=("true",),
                       nvml_module=FakeNvml(eight_gpus()[:1]), node_root=str(tmp_path / "nothing"))
    try:
        snap = await source.poll()
        none = await bare.poll()
    finally:
        await source.close()
        await bare.close()
    assert snap.pci_gpus == (PciGpu("0000:18:00.0", True), PciGpu("0000:2a:00.0", False), PciGpu("0000:3b:00.0", None))
    assert none.pci_gpus is None
    assert snap.driver_list_ok is True and none.driver_list_ok is True
    assert snap.boot_time == psutil.boot_time()
