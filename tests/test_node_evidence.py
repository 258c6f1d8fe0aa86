"""The node-level evidence of every source (console/model.py: NodeSnapshot.pci_gpus,
driver_list_ok, boot_time; Proc.exe, sigkill_pending, cpu_ticks) and where a snapshot travels:

- the probe over the real sshd: the GPUs the kernel module knows under $GI_NODE_ROOT (one left out
  of the tree while nvidia-smi lists it, one reading all ones), the driver's process list failing;
- the simulator: the same sections answered from its state (a lost GPU reads ff), executables,
  a scenario's pending SIGKILL, CPU time that advances for the processes that compute;
- NVML (tests/fake_pynvml.py): whether the process calls answered;
- ``snapshot --json``, the follower's mirror and ``unchanged.alike``;
- the kernel-log lines the probe keeps (probe.KERNEL_MARKS), and what the pci section costs.
"""
from __future__ import annotations

import dataclasses
import json

import psutil
import pytest

from console import probe
from console.clock import FakeClock
from console.diagnosis.unchanged import alike
from console.incident.mirror import snapshot_from_data, snapshot_to_data
from console.model import NodeSnapshot, PciGpu, Proc
from console.output.json import node_json
from console.sources.local import nvml as _nvml
from console.sources.local.source import LocalSource, read_pci
from console.sources.parse import parse_xid
from console.sources.sim import SimSource
from console.sources.ssh.source import SshSource
from fake_pynvml import FakeNvml, eight_gpus, nvml_error
from tests.real_fixtures import load
from tests.sshd_fixture import GPU_BUS, PCI_CONFIG, pci_dir
from tests.test_ssh import node_a, options  # noqa: F401 (fixture)

import pynvml


# ---------------------------------------------------------------- over the real sshd

async def _poll_once(sshd, node, tmp_path, **kw) -> NodeSnapshot:
    src = SshSource(node.target, options(sshd, tmp_path), **kw)
    src.smi_loop = False                  # the per-poll queries: their exit status is the answer
    try:
        return await src.poll()
    finally:
        await src.close()


async def test_over_ssh_every_gpu_the_kernel_module_knows_is_on_the_bus_by_default(sshd, node_a, tmp_path,  # noqa: F811
                                                                                    ssh_home):
    snap = await _poll_once(sshd, node_a, tmp_path)
    assert snap.error is None, snap.error
    assert snap.pci_gpus == tuple(PciGpu(pci_dir(b), True) for b in GPU_BUS)
    assert snap.driver_list_ok is True
    assert snap.boot_time == psutil.boot_time()


async def test_over_ssh_a_gpu_missing_from_the_tree_and_one_fallen_off_the_bus(sshd, node_a, tmp_path,  # noqa: F811
                                                                              ssh_home):
    node_a.smi.set(pci_missing=(1,))       # nvidia-smi lists two GPUs, the kernel module's tree one
    snap = await _poll_once(sshd, node_a, tmp_path)
    assert len(snap.gpus) == 2 and snap.pci_gpus == (PciGpu(pci_dir(GPU_BUS[0]), True),)
    node_a.smi.set(pci_gone=(0,))          # its config space reads ff ff ff ff
    snap = await _poll_once(sshd, node_a, tmp_path)
    assert snap.pci_gpus == (PciGpu(pci_dir(GPU_BUS[0]), False), PciGpu(pci_dir(GPU_BUS[1]), True))


async def test_over_ssh_a_failing_process_list_is_driver_list_ok_false(sshd, node_a, tmp_path, ssh_home):  # noqa: F811
    node_a.smi.set(apps_failure="Unable to determine the device handle for GPU 0000:2A:00.0: Unknown Error")
    snap = await _poll_once(sshd, node_a, tmp_path)
    assert snap.gpus and snap.driver_list_ok is False
    node_a.smi.set(apps=())                # an empty answer is an answer
    snap = await _poll_once(sshd, node_a, tmp_path)
    assert snap.driver_processes == () and snap.driver_list_ok is True


async def test_over_ssh_a_node_without_the_kernel_tree_reads_as_unknown(sshd, tmp_path, ssh_home):
    bare = sshd.bare[0]                    # no $GI_NODE_ROOT, no nvidia-smi: this machine's own /proc
    snap = await _poll_once(sshd, bare, tmp_path)
    assert snap.pci_gpus is None and snap.driver_list_ok is False


# ---------------------------------------------------------------- the simulator

async def test_the_simulator_answers_the_pci_tree_from_its_gpus():
    clock = FakeClock()
    src = SimSource(scenario="seed", clock=clock)
    node = src.node
    snap = await src.poll()
    assert snap.pci_gpus == tuple(PciGpu(g.pci_dir, True) for g in node.gpus)
    assert snap.driver_list_ok is True and snap.boot_time == node.btime
    node.gpus[3].lost = True               # fallen off the bus: nvidia-smi calls it lost, the bus reads ff
    node.gpus[5].in_kernel_tree = False    # nvidia-smi lists it, the kernel module's tree does not
    src = SimSource(node=node)
    snap = await src.poll()
    by_bus = {g.bus_id: g.present for g in snap.pci_gpus}
    assert by_bus[node.gpus[3].pci_dir] is False and node.gpus[5].pci_dir not in by_bus
    assert len(by_bus) == 7 and sum(1 for v in by_bus.values() if v) == 6
    # nvidia-smi's compute-apps query fails with a lost GPU (exit 15): no list of who holds memory
    assert snap.driver_list_ok is False


async def test_the_simulator_without_a_driver_has_no_tree():
    src = SimSource(scenario="seed", clock=FakeClock())
    src.node.driver_state = "not-loaded"
    snap = await src.poll()
    assert snap.pci_gpus is None and snap.driver_list_ok is False


async def test_simulated_holders_have_executables_cpu_time_and_a_marked_sigkill():
    clock = FakeClock()
    src = SimSource(scenario="slow-teardown", clock=clock)
    first = await src.poll()
    workers = [p for p in first.processes if p.device_files and p.name == "python3"]
    daemon = next(p for p in first.processes if p.name == "nvidia-persiste")
    assert workers and all(p.exe == "/usr/bin/python3.10" for p in workers)
    assert daemon.exe == "/usr/bin/nvidia-persistenced" and daemon.sigkill_pending is False
    assert all(p.sigkill_pending is False for p in workers)
    bystander = next(p for p in first.processes if p.name == "htop")
    assert bystander.exe is None and bystander.sigkill_pending is None
    # the training ranks compute (a whole CPU each): their ticks advance with the clock
    src.node.procs[workers[0].pid].sigkill_pending = True     # the scenario's mark
    clock.advance(3)
    second = await src.poll()
    w = second.proc(workers[0].pid)
    assert w.cpu_ticks - workers[0].cpu_ticks >= 250          # ~100 ticks a second, user + system
    assert w.sigkill_pending is True and second.proc(workers[1].pid).sigkill_pending is False
    assert second.proc(daemon.pid).cpu_ticks - daemon.cpu_ticks < 5
    # killed: the leader a zombie, a thread left in D in the driver's teardown; the SIGKILL shows
    # in the shared mask while it sits there
    src.node.signal(workers[1].pid, "KILL")
    clock.advance(0.1)
    third = await src.poll()
    dying = third.proc(workers[1].pid)
    assert dying.d_threads and dying.sigkill_pending is True and dying.exe is None


def test_simulated_status_shows_the_masks_as_the_kernel_prints_them():
    from console.sim.node import SimNode
    from console.sim import vfs
    node = SimNode("seed", clock=FakeClock())
    p = next(q for q in node.visible_procs() if q.fds)
    lines = [ln for ln in vfs.read_file(node, f"/proc/{p.pid}/status").split("\n") if "Pnd" in ln]
    assert lines == ["SigPnd:\t0000000000000000", "ShdPnd:\t0000000000000000"]
    p.sigkill_pending = True
    lines = [ln for ln in vfs.read_file(node, f"/proc/{p.pid}/status").split("\n") if "Pnd" in ln]
    assert lines == ["SigPnd:\t0000000000000100", "ShdPnd:\t0000000000000100"]
    assert vfs.listdir(node, "/proc/driver/nvidia/gpus") == sorted(g.pci_dir for g in node.gpus)


# ---------------------------------------------------------------- the local source's parts

def test_read_pci_reads_directories_and_config_heads(tmp_path):
    assert read_pci(str(tmp_path)) is None
    gpus = tmp_path / "proc/driver/nvidia/gpus"
    gpus.mkdir(parents=True)
    assert read_pci(str(tmp_path)) == ()
    for bus, head in (("0000:18:00.0", PCI_CONFIG), ("0000:2a:00.0", b"\xff" * 4), ("0000:3b:00.0", b"\xde")):
        (gpus / bus).mkdir()
        (tmp_path / "sys/bus/pci/devices" / bus).mkdir(parents=True)
        (tmp_path / "sys/bus/pci/devices" / bus / "config").write_bytes(head)
    (gpus / "0000:c1:00.0").mkdir()
    assert read_pci(str(tmp_path)) == (PciGpu("0000:18:00.0", True), PciGpu("0000:2a:00.0", False),
                                       PciGpu("0000:3b:00.0", None), PciGpu("0000:c1:00.0", None))


def test_nvml_says_whether_its_process_calls_answered():
    assert _nvml.read_nvml(FakeNvml(eight_gpus()[:2])).driver_list_ok is True
    gpus = eight_gpus()[:2]
    gpus[1].errors["nvmlDeviceGetComputeRunningProcesses"] = pynvml.NVML_ERROR_UNKNOWN
    reading = _nvml.read_nvml(FakeNvml(gpus))
    assert reading.error is None and len(reading.gpus) == 2 and reading.driver_list_ok is False
    gpus = eight_gpus()[:2]
    gpus[0].errors["nvmlDeviceGetGraphicsRunningProcesses"] = pynvml.NVML_ERROR_NOT_SUPPORTED
    assert _nvml.read_nvml(FakeNvml(gpus)).driver_list_ok is True         # graphics alone is not the list
    gpus = eight_gpus()[:2]
    gpus[1].errors["nvmlDeviceGetMemoryInfo"] = pynvml.NVML_ERROR_GPU_IS_LOST
    reading = _nvml.read_nvml(FakeNvml(gpus))
    assert reading.lost_gpus and reading.driver_list_ok is False           # its processes are unknown
    assert nvml_error(pynvml.NVML_ERROR_UNKNOWN) is not None


def test_the_local_source_says_not_asked_without_nvml_and_failed_without_a_driver():
    source = LocalSource("local", dmesg_command=("true",), nvml_module=FakeNvml(eight_gpus()[:1]))
    assert source._driver_list_ok(_nvml.NvmlReading(error=_nvml.NO_PYNVML)) is None
    assert source._driver_list_ok(_nvml.NvmlReading(error=_nvml.DRIVER_NOT_LOADED)) is False
    assert source._driver_list_ok(_nvml.NvmlReading(warnings=("NVML released for a GPU reset",))) is None
    assert source._driver_list_ok(_nvml.NvmlReading(driver_list_ok=True)) is True


# ---------------------------------------------------------------- where a snapshot travels

def _evidence_snapshot() -> NodeSnapshot:
    procs = (Proc(pid=10, ppid=1, state="D", user="u", name="python3", cmdline="python3 train.py",
                  device_files=("/dev/nvidia0",), cpu_ticks=12345, exe="/usr/bin/python3.10", sigkill_pending=True),
             Proc(pid=11, ppid=1, state="S", user="u", name="bash", cmdline="-bash", cpu_ticks=7))
    return NodeSnapshot(name="n1", taken_at=1_800_000_000.0, processes=procs,
                        pci_gpus=(PciGpu("0000:18:00.0", True), PciGpu("0000:2a:00.0", False)),
                        driver_list_ok=False, boot_time=1_799_000_000.0)


def test_snapshot_json_carries_the_evidence():
    doc = json.loads(json.dumps(node_json(_evidence_snapshot())))
    assert doc["pci_gpus"] == [{"bus_id": "0000:18:00.0", "present": True},
                               {"bus_id": "0000:2a:00.0", "present": False}]
    assert doc["driver_list_ok"] is False and doc["boot_time"] == 1_799_000_000.0
    p, q = doc["processes"]
    assert (p["cpu_ticks"], p["exe"], p["sigkill_pending"]) == (12345, "/usr/bin/python3.10", True)
    assert (q["cpu_ticks"], q["exe"], q["sigkill_pending"]) == (7, None, None)
    empty = node_json(NodeSnapshot(name="n2", taken_at=1.0))
    assert empty["pci_gpus"] is None and empty["driver_list_ok"] is None and empty["boot_time"] is None


def test_the_mirror_rebuilds_the_evidence_and_reads_bad_types_as_unknown():
    snap = _evidence_snapshot()
    data = json.loads(json.dumps(snapshot_to_data(snap)))
    back = snapshot_from_data(data)
    assert back.pci_gpus == snap.pci_gpus and isinstance(back.pci_gpus[0], PciGpu)
    assert (back.driver_list_ok, back.boot_time) == (False, 1_799_000_000.0)
    assert back.proc(10) == snap.proc(10)
    for bad in ("abc", [{"bus_id": 5}], [["0000:18:00.0", True]], {"bus_id": "x"}, 3):
        assert snapshot_from_data({**data, "pci_gpus": bad}).pci_gpus is None
    odd = snapshot_from_data({**data, "pci_gpus": [{"bus_id": "0000:18:00.0", "present": "yes"}],
                              "driver_list_ok": "no", "boot_time": "soon",
                              "processes": [{**data["processes"][0], "cpu_ticks": "many", "exe": 3,
                                             "sigkill_pending": "maybe"}]})
    assert odd.pci_gpus == (PciGpu("0000:18:00.0", None),)
    assert odd.driver_list_ok is None and odd.boot_time is None
    p = odd.proc(10)
    assert p.cpu_ticks is None and p.exe is None and p.sigkill_pending is None


def test_unchanged_reads_the_evidence_but_not_the_cpu_time():
    a = _evidence_snapshot()
    busier = dataclasses.replace(a, processes=tuple(dataclasses.replace(p, cpu_ticks=(p.cpu_ticks or 0) + 100)
                                                    for p in a.processes))
    assert alike(a, busier)
    assert not alike(a, dataclasses.replace(a, pci_gpus=(PciGpu("0000:18:00.0", True),)))
    assert not alike(a, dataclasses.replace(a, driver_list_ok=True))
    assert not alike(a, dataclasses.replace(a, boot_time=1_799_500_000.0))
    for change in ({"sigkill_pending": False}, {"exe": "/usr/bin/python3.12"}):
        procs = (dataclasses.replace(a.processes[0], **change), a.processes[1])
        assert not alike(a, dataclasses.replace(a, processes=procs))


# ---------------------------------------------------------------- the kernel log the probe keeps

@pytest.mark.parametrize("line", [
    "[ 1843.308145] NVRM: The NVIDIA GPU 0000:b3:00.0",
    "               NVRM: (PCI ID: 10de:26b5) installed in this system has",
    "               NVRM: fallen off the bus and is not responding to commands.",
    "[  101.000000] NVRM: GPU 0000:06:00.0: GPU has fallen off the bus.",
    "[  102.000000] NVRM: GPU at PCI:0000:06:00: GPU is lost",
    "[  103.000000] NVRM: nvAssertOkFailedNoLog: Assertion failed: Reset required [NV_ERR_RESET_REQUIRED] "
    "(0x00000063) returned from pRmApi->Control(pRmApi, RES_GET_CLIENT_HANDLE(pKernelChannel)",
    "[  104.000000] NVRM: Xid (PCI:0000:18:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.",
])
def test_the_probe_keeps_the_lines_a_gpu_off_the_bus_or_needing_a_reset_leaves(line):
    import subprocess
    assert probe.kernel_line(line)
    assert parse_xid(line + "\n")[0] == [line]
    # the node's own grep -E of the probe's pattern keeps it too
    kept = subprocess.run(["grep", "-E", probe.KERNEL_LINES_ERE], input=line + "\n", capture_output=True, text=True)
    assert kept.stdout == line + "\n"


def test_a_node_with_no_xid_keeps_the_three_line_fallen_off_form_through_its_own_grep():
    import subprocess
    body = load("fallen-off-bus-no-xid-nvsentinel-155.log").body
    grep = probe.XID.split("| ", 1)[1]          # the probe's own filter, after dmesg
    kept = subprocess.run(["sh", "-c", grep], input=body, capture_output=True, text=True).stdout
    assert kept.count("\n") == 3 and "probe routine" not in kept and "loading NVIDIA" not in kept


async def test_the_simulator_keeps_a_fallen_off_gpu_lines_in_the_kernel_log():
    src = SimSource(scenario="seed", clock=FakeClock())
    node = src.node
    for text in ("NVRM: The NVIDIA GPU 0000:41:00.0", "NVRM: (PCI ID: 10de:2bb5) installed in this system has",
                 "NVRM: fallen off the bus and is not responding to commands.",
                 "NVRM: The NVIDIA probe routine failed for 1 device(s)."):
        node.klog(text)
    snap = await src.poll()
    tail = [line.split("] ", 1)[1] for line in snap.kernel_log[-3:]]
    assert tail[0] == "NVRM: The NVIDIA GPU 0000:41:00.0" and tail[2].startswith("NVRM: fallen off the bus")
    assert not any("probe routine" in line for line in snap.kernel_log)


# ---------------------------------------------------------------- what the pci section costs

async def test_the_pci_section_is_asked_every_pci_every_polls_and_at_once_when_a_gpu_is_lost():
    clock = FakeClock()
    src = SimSource(scenario="seed", clock=clock)
    asked = []
    for _ in range(2 * probe.PCI_EVERY):
        await src.poll()
        asked.append("pci" not in src._skip)
        clock.advance(1)
    assert asked == ([True] + [False] * (probe.PCI_EVERY - 1)) * 2
    src.node.gpus[2].lost = True
    await src.poll()                       # the driver's answer changed: a GPU lost
    snap = await src.poll()
    assert "pci" not in src._skip
    assert {g.bus_id: g.present for g in snap.pci_gpus}[src.node.gpus[2].pci_dir] is False
