"""MIG: instances and their processes shown under their GPU, kill and reset paths with MIG on.

What the data supports: over SSH, ``nvidia-smi -L`` names the instances and
``--query-compute-apps`` lists processes under their GPU's UUID with their memory, but no
query gives an instance's memory or a process's instance (the default table does, in an extra
call the probe does not make); locally NVML gives both (test_local_nvml.py)."""
from __future__ import annotations

from console.actions.plan import plan_action
from console.model import DriverProc, Gpu, MigInstance, NodeSnapshot, Proc
from console.sources.parse import parse_compute_apps, parse_gpu_list
from console.ui.details import gpu_detail, proc_detail
from tests.real_fixtures import load

GPU0 = "GPU-7fdaf0a5-179b-f636-d15d-daf243e3ff16"


def test_real_mig_list_maps_instances_to_their_gpu_and_a_mig_uuid_to_its_gpu_index():
    mig = parse_gpu_list(load("list-mig-7x1g-datadog-33120.txt").body)
    uuids = {GPU0: 0, **{m.uuid: 0 for m in mig[0]}}
    apps = (f"41002, {GPU0}, 9826, python\n"
            f"41003, {mig[0][2].uuid}, 4096, python3\n")       # should a driver print the MIG device's UUID
    procs, warnings = parse_compute_apps(apps, uuids)
    assert not warnings and [(p.pid, p.gpu_index, p.used_memory_mib) for p in procs] == [
        (41002, 0, 9826), (41003, 0, 4096)]


def mig_node(instance_memory: bool) -> NodeSnapshot:
    inst = tuple(MigInstance(1, prof, f"MIG-{gi}", dev, gpu_instance_id=gi if instance_memory else None,
                             compute_instance_id=0 if instance_memory else None,
                             memory_used_mib=used if instance_memory else None,
                             memory_total_mib=19968 if instance_memory else None)
                 for dev, (prof, gi, used) in enumerate((("2g.20gb", 3, 14366), ("2g.20gb", 5, 9826))))
    gpus = (Gpu(1, "GPU-1", "NVIDIA A100-SXM4-80GB", "00000000:41:00.0", 24205, 81920, mig_mode=True,
                mig_instances=inst, persistence_mode=False),)
    procs = tuple(Proc(pid=pid, ppid=1, state="S", user="ml", name="python", cmdline=f"python serve.py {pid}",
                       start_ticks=pid, gpu_memory_mib={"1": mib}, device_files=("/dev/nvidia1",))
                  for pid, mib in ((34965, 14195), (46505, 9807)))
    dprocs = tuple(DriverProc(pid=pid, gpu_index=1, gpu_uuid="GPU-1", used_memory_mib=mib, name="python",
                              gpu_instance_id=gi if instance_memory else None,
                              compute_instance_id=0 if instance_memory else None, local=True)
                   for pid, mib, gi in ((34965, 14195, 3), (46505, 9807, 5)))
    return NodeSnapshot(name="a100", taken_at=1.0, gpus=gpus, processes=procs, driver_processes=dprocs)


def test_gpu_detail_shows_each_instance_with_its_memory_and_processes():
    snap = mig_node(instance_memory=True)
    text = gpu_detail(snap.gpu(1), snap).plain
    block = text[text.index("MIG instances (2)"):]
    first, second = block.index("GI 3 CI 0"), block.index("GI 5 CI 0")
    assert "14366MiB / 19968MiB" in block[first:second] and "34965" in block[first:second]
    assert "46505" in block[second:] and "9826MiB / 19968MiB" in block[second:]
    assert "not in nvidia-smi's CSV queries" not in text
    assert "MIG instance   GPU 1 GI 3 CI 0 (2g.20gb, MIG-3)" in proc_detail(snap.proc(34965), snap).plain


def test_gpu_detail_over_ssh_says_what_the_csv_query_cannot_give():
    snap = mig_node(instance_memory=False)
    text = gpu_detail(snap.gpu(1), snap).plain
    assert text.count("memory not reported") == 2
    assert "on an instance the driver does not name:" in text and "34965" in text
    assert "Per-instance memory and each process's instance are not in nvidia-smi's CSV queries" in text


def test_kill_paths_target_pids_and_reset_warns_for_every_instance():
    snap = mig_node(instance_memory=True)
    kill = plan_action(snap, "sigkill", pids=[34965])
    assert kill.commands == ("kill -s KILL 34965",) and kill.gpus == (1,)
    holders = plan_action(snap, "kill-holders", gpus=[1])
    assert holders.commands == ("kill -s KILL 34965 46505",)
    reset = plan_action(snap, "reset", gpus=[1])
    assert reset.commands == ("nvidia-smi -r -i 1",)
    assert any("resets the whole GPU and its 2 MIG instances (2g.20gb, 2g.20gb)" in n for n in reset.notes)
