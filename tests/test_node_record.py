"""What the session writes into the incident about a node (console/session/node_record.py): the
workload by owner, Slurm job and container with the process that started it; the findings,
bounded, each change once; the facts, a simulated node marked."""
from __future__ import annotations

import dataclasses

from console.clock import FakeClock
from console.incident.timeline import Timeline
from console.model import Cgroup, Finding, Gpu, NodeSnapshot, Proc
from console.session import Session, node_record
from console.sources.sim import SimSource

STEP = "/system.slice/slurmstepd.scope/job_1392969/step_0/user/task_0"
POD = "/kubepods.slice/kubepods-pod1234.slice/cri-containerd-abcdef0123456789.scope"


def snap(**kw) -> NodeSnapshot:
    procs = (
        Proc(pid=500, ppid=1, state="S", user="alice", name="srun", cmdline="srun python train.py"),
        Proc(pid=501, ppid=500, state="S", user="alice", name="python", cmdline="python train.py --rank 0",
             gpu_memory_mib={"0": 70000}, cgroup=Cgroup(path=STEP)),
        Proc(pid=502, ppid=500, state="S", user="alice", name="python", cmdline="python train.py --rank 1",
             gpu_memory_mib={"1": 70000}, cgroup=Cgroup(path=STEP)),
        Proc(pid=600, ppid=1, state="S", user="bob", name="vllm", cmdline="vllm serve m",
             gpu_memory_mib={"2": 30000},
             cgroup=Cgroup(path=POD, runtime="containerd", container_id="abcdef0123456789", pod_uid="1234")),
    )
    gpus = tuple(Gpu(index=i, uuid=f"u{i}", name="NVIDIA H100 80GB HBM3", bus_id=f"b{i}", memory_used_mib=70000,
                     memory_total_mib=81559) for i in range(3))
    return NodeSnapshot(name="gpu07", taken_at=0.0, gpus=gpus, processes=procs, driver_version="580.95.05", **kw)


def test_the_workload_names_owner_job_container_and_launcher():
    slurm, pod = node_record.workload(snap())
    assert slurm == {"user": "alice", "job": "1392969", "commands": ["python train.py --rank 0",
                                                                      "python train.py --rank 1"],
                     "pids": 2, "parent": {"pid": 500, "user": "alice", "command": "srun python train.py"}}
    assert pod["user"] == "bob" and pod["container"] == "containerd abcdef012345" and pod["pod"] == "1234"
    assert "parent" not in pod, "PID 1 is no launcher"


def test_the_facts_say_the_gpus_driver_kernel_and_a_demo():
    facts = node_record.facts(snap(), kernel="6.8.0-87-generic", demo=True)
    assert facts["gpus"] == [{"model": "NVIDIA H100 80GB HBM3", "count": 3}] and facts["gpu_count"] == 3
    assert (facts["driver"], facts["kernel"], facts["demo"]) == ("580.95.05", "6.8.0-87-generic", True)
    assert "demo" not in node_record.facts(snap(), kernel=None, demo=False)


def test_a_finding_is_recorded_bounded_and_a_change_is_said_in_words():
    big = Finding(kind="zombie", severity="critical", summary="x" * 5000, next_step="", pids=tuple(range(100)),
                  gpus=(0,), evidence={"wchan": "_nv043417rm", "threads": [{"tid": 1}], "pids": list(range(100))})
    rec = node_record.finding_record(big)
    assert len(rec["pids"]) == 16 and rec["npids"] == 100 and len(rec["summary"]) <= 600
    assert rec["evidence"]["wchan"] == "_nv043417rm" and "threads" not in rec["evidence"]
    assert len(rec["evidence"]["pids"]) == 16
    before = frozenset({("holder", "low")})
    assert node_record.change_text("gpu07", [big], before) == "findings on gpu07: zombie (critical) new; holder gone"


async def test_a_finding_that_flaps_is_recorded_a_bounded_number_of_times(tmp_path, monkeypatch):
    from console.session import core
    monkeypatch.setattr(core, "MAX_FINDING_CHANGES", 3)
    clock = FakeClock()
    src = SimSource(name="gpu07", scenario="seed", clock=clock)
    tl = Timeline(tmp_path / "i.jsonl", by="t@h")
    s = Session([src], timeline=tl, clock=clock)
    first, = await s.poll_all()
    assert tl.entries[0].facts["demo"] is True and tl.entries[0].workload
    flap = Finding(kind="d-state", severity="high", summary="flap", next_step="")
    for i in range(10):
        await s.take_reading(first if i % 2 else dataclasses.replace(first, findings=first.findings + (flap,)))
    changes = [e for e in tl.refresh() if e.text.startswith("findings on gpu07")]
    assert len(changes) == 3 and changes[0].findings[0]["kind"] == "d-state"
    tl.close()
