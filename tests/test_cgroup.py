"""/proc/PID/cgroup -> container, Kubernetes pod or systemd unit: real path formats, the probe's
records, the local source and the real sshd reading a real process's file, and the findings."""
from __future__ import annotations

import os
import subprocess

import pytest
from hypothesis import given, strategies as st

from console.diagnosis import diagnose
from console.model import Cgroup, NodeSnapshot, Proc
from console.sources.cgroup import parse_cgroup, parse_cgroup_records, parse_path
from console.sources.local.source import LocalSource
from console.sources.sim import SimSource
from console.sources.ssh.source import SshSource
from tests.fuzzing import examples
from tests.test_ssh import node_a, options  # noqa: F401 (fixture)

ID = "4f2a0c1e9b7d5e3a1c2b4d6f8e0a5e3a1c2b4d6f8e0a5e3a1c2b4d6f8e0a1b2c"
UID = "9d1e2c3b-7a6f-4e5d-8c9b-0a1b2c3d4e5f"


@pytest.mark.parametrize("text, runtime, container, pod, unit", [
    # docker, cgroupfs driver, cgroup v1 (one line per hierarchy)
    (f"12:devices:/docker/{ID}\n11:memory:/docker/{ID}\n1:name=systemd:/docker/{ID}\n", "docker", ID, None, None),
    # docker, systemd driver, cgroup v2
    (f"0::/system.slice/docker-{ID}.scope\n", "docker", ID, None, None),
    # containerd (CRI) outside Kubernetes' slices, cgroup v2
    (f"0::/system.slice/cri-containerd-{ID}.scope\n", "containerd", ID, None, None),
    # Kubernetes, systemd driver (the pod UID with underscores in the slice name), cgroup v2
    (f"0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{UID.replace('-', '_')}.slice/"
     f"cri-containerd-{ID}.scope\n", "containerd", ID, UID, None),
    (f"0::/kubepods.slice/kubepods-pod{UID.replace('-', '_')}.slice/crio-{ID}.scope\n", "cri-o", ID, UID, None),
    # Kubernetes, cgroupfs driver, cgroup v1
    (f"11:memory:/kubepods/burstable/pod{UID}/{ID}\n0::/\n", None, ID, UID, None),
    (f"4:pids:/kubepods/besteffort/pod{UID}/{ID}\n", None, ID, UID, None),
    # containerd's systemd driver written as the path itself
    (f"0::/system.slice/containerd.service/kubepods-burstable-pod{UID.replace('-', '_')}.slice:cri-containerd:{ID}\n",
     "containerd", ID, UID, None),
    (f"0::/machine.slice/libpod-{ID}.scope\n", "podman", ID, None, None),
    # a systemd service, and places that say nothing
    ("0::/system.slice/nvidia-dcgm.service\n", None, None, None, "nvidia-dcgm.service"),
    ("12:devices:/system.slice/nvidia-persistenced.service\n1:name=systemd:/system.slice/"
     "nvidia-persistenced.service\n", None, None, None, "nvidia-persistenced.service"),
    ("0::/\n", None, None, None, None),
    ("0::/user.slice/user-1000.slice/session-3.scope\n", None, None, None, None),
])
def test_real_cgroup_path_formats(text, runtime, container, pod, unit):
    cg = parse_cgroup(text)
    assert (cg.runtime, cg.container_id, cg.pod_uid, cg.unit) == (runtime, container, pod, unit)
    assert cg.in_container == (container is not None or pod is not None)


def test_describe_names_what_a_person_looks_up():
    assert parse_path(f"/docker/{ID}").describe() == "container 4f2a0c1e9b7d… (docker)"
    assert parse_path(f"/kubepods/burstable/pod{UID}/{ID}").describe() == f"pod {UID}, container 4f2a0c1e9b7d…"
    assert parse_path("/system.slice/nvidia-dcgm.service").describe() == "systemd unit nvidia-dcgm.service"
    assert parse_path("/").describe() == ""


def test_probe_records_are_framed_per_pid():
    text = (f"23 12:devices:/kubepods/burstable/pod{UID}/{ID}\n0::/\0"
            f"24 0::/system.slice/nvidia-dcgm.service\0"
            "25 \0"                                                    # unreadable: nothing
            f"23 0::/docker/{'0' * 64}\0"                              # a second record for 23: ignored
            "26 0::/cut-sho")                                          # no NUL: cut short, not a record
    out = parse_cgroup_records(text)
    assert set(out) == {23, 24}
    assert out[23].pod_uid == UID and out[24].unit == "nvidia-dcgm.service"


@examples(300)
@given(st.text(max_size=400))
def test_parsers_never_raise_on_any_text(text):
    cg = parse_cgroup(text)
    assert cg is None or isinstance(cg, Cgroup)
    for pid, c in parse_cgroup_records(text).items():
        assert pid >= 0 and isinstance(c, Cgroup)


@examples(200)
@given(st.lists(st.tuples(st.integers(0, 10 ** 7), st.text(alphabet=st.characters(blacklist_characters="\0"),
                                                              max_size=80)), max_size=8))
def test_a_record_never_speaks_for_another_pid(records):
    """Whatever a cgroup name holds (newlines, spaces, digits), a record is its own PID's only."""
    text = "".join(f"{pid} {body}\0" for pid, body in records)
    first: dict[int, str] = {}
    for pid, body in records:
        first.setdefault(pid, body)
    out = parse_cgroup_records(text)
    assert set(out) <= set(first)
    for pid, cg in out.items():
        assert cg == parse_cgroup(first[pid])


# ---------------------------------------------------------------- real processes, local and over SSH

@pytest.fixture
def holder(tmp_path):
    dev = tmp_path / "dev"
    dev.mkdir()
    (dev / "nvidia0").write_text("")
    p = subprocess.Popen(["python3", "-c", "import os,sys,time; fd=os.open(sys.argv[1], os.O_RDONLY); "
                          "print(1, flush=True); time.sleep(300)", str(dev / "nvidia0")], stdout=subprocess.PIPE)
    assert p.stdout.readline().strip() == b"1"
    yield p.pid, f"{dev}/nvidia*"
    p.kill()
    p.wait()


async def test_local_source_reads_the_cgroup_of_device_holders_only(holder):
    pid, glob = holder
    src = LocalSource("local", device_glob=glob, dmesg_command=("true",))
    try:
        snap = await src.poll()
    finally:
        await src.close()
    with open(f"/proc/{pid}/cgroup") as fh:
        assert snap.proc(pid).cgroup == parse_cgroup(fh.read())
    assert snap.proc(os.getpid()).cgroup is None        # no device file, not listed by a driver


async def test_the_probe_reads_the_same_cgroup_over_the_real_sshd(holder, sshd, node_a, tmp_path, ssh_home):
    pid, glob = holder
    src = SshSource(node_a.target, options(sshd, tmp_path), device_glob=glob)
    try:
        snap = await src.poll()
    finally:
        await src.close()
    assert snap.error is None, snap.error
    with open(f"/proc/{pid}/cgroup") as fh:
        assert snap.proc(pid).cgroup == parse_cgroup(fh.read())
    assert snap.proc(os.getpid()).cgroup is None


async def test_driver_listed_pids_get_their_cgroup_from_the_next_probe(sshd, node_a, tmp_path, ssh_home, gpu_workers):
    """A process the driver lists may hold no device file (a zombie has closed its files): the next
    probe reads its cgroup too; no new nvidia-smi call and no new scan of /proc for it."""
    (w,) = gpu_workers(1)
    node_a.smi.set(apps=[(w, 0, 1000, "sleep")])
    src = SshSource(node_a.target, options(sshd, tmp_path))
    try:
        first = await src.poll()
        second = await src.poll()
    finally:
        await src.close()
    assert first.proc(w).cgroup is None and not first.proc(w).holds_devices
    with open(f"/proc/{w}/cgroup") as fh:
        assert second.proc(w).cgroup == parse_cgroup(fh.read())


# ---------------------------------------------------------------- findings and the simulator

def test_the_foreign_pid_finding_names_the_container_of_its_host_side_holders():
    from console.model import DriverProc, Gpu
    docker = parse_path(f"/system.slice/docker-{ID}.scope")
    procs = tuple(Proc(pid=pid, ppid=1, state="S", user="root", name="python3", cmdline="python3 train.py",
                       start_ticks=pid, device_files=("/dev/nvidia0",), cgroup=docker) for pid in (501, 502))
    snap = NodeSnapshot(name="n", taken_at=1.0, gpus=(Gpu(0, "GPU-0", "x", "00000000:18:00.0", 40000, 81559),),
                        processes=procs,
                        driver_processes=(DriverProc(pid=2841917, gpu_index=0, gpu_uuid="GPU-0",
                                                     used_memory_mib=39000, name=""),))
    fs = {f.kind: f for f in diagnose(snap)}
    # the host-side holders are named once: by the foreign PIDs' finding, not again as hidden holders
    assert "hidden-holder" not in fs
    assert "held here by python3 in container 4f2a0c1e9b7d… (docker)" in fs["foreign-pid"].summary
    assert fs["foreign-pid"].evidence["containers"] == [
        {"runtime": "docker", "container_id": ID, "pod_uid": None, "pids": [501, 502]}]


async def test_simulated_container_scenario_shows_pod_and_container():
    snap = await SimSource(scenario="container").poll()
    workers = [snap.proc(23), snap.proc(24)]
    assert all(p.cgroup.pod_uid == "7c5d1f2e-8a4b-4c3d-9e1f-0a2b3c4d5e6f" and p.cgroup.container_id.startswith("4f2a0c1e9b7d")
               for p in workers)
    (f,) = [f for f in diagnose(snap) if f.kind == "foreign-pid"]
    assert "held here by python3 in pod 7c5d1f2e…, container 4f2a0c1e9b7d…" in f.summary
    # the next step names the whole pod UID, to look it up (kubectl get pods -A -o custom-columns=…UID)
    assert "pod 7c5d1f2e-8a4b-4c3d-9e1f-0a2b3c4d5e6f, container 4f2a0c1e9b7d…" in f.next_step
    assert f.rung == "sigterm"               # the same ladder as for any target: SIGTERM first


async def test_process_detail_screen_shows_the_container():
    from console.ui.details import proc_detail
    snap = await SimSource(scenario="container").poll()
    text = proc_detail(snap.proc(23), snap).plain
    assert "container      pod 7c5d1f2e-8a4b-4c3d-9e1f-0a2b3c4d5e6f, container 4f2a0c1e9b7d…" in text
    assert "cgroup         /kubepods/burstable/pod7c5d1f2e" in text
