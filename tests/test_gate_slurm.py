"""The gate as a real Slurm's Epilog (tests/slurm_fixture.py with ``Epilog=``), over the test sshd
whose nvidia-smi reads what the job leaves behind: a job that leaves a daemonised child holding
GPU memory drains the node with the incident in its reason; a clean job leaves it idle.

Heavy: a Slurm of its own (its config names the Epilog), a job each."""
from __future__ import annotations

import os
import re

import pytest

from console.incident.timeline import load, resolve
from tests.slurm_fixture import gate_epilog, start_slurm, stop_slurm
from tests.sshd_fixture import GPU_UUIDS

pytestmark = pytest.mark.heavy


@pytest.fixture(scope="module")
def epilog_slurm(tmp_path_factory, sshd):
    """A Slurm whose Epilog runs `gpu-incident gate` against the first test sshd node."""
    root = tmp_path_factory.mktemp("slurm-gate")
    node = sshd.nodes[0]
    kh = sshd.write_known_hosts(root / "known_hosts")
    (root / "gate.toml").write_text(f'[slurm]\nnodes = {{ "{node.target}" = "demo" }}\n')
    script, log = gate_epilog(root, f"{node.target} --known-hosts {kh} -i {sshd.keys.client_key} "
                                    f"--ssh-config /dev/null --wait 3 --drain --config {root / 'gate.toml'} "
                                    f"--incident-dir {root / 'incidents'}")
    s = start_slurm(root, extra=[f"Epilog={script}"])
    try:
        yield s, node, log, root
    finally:
        stop_slurm(s)


def run_job(slurm, wrap: str) -> None:
    out = slurm.run("sbatch", "--parsable", "-N1", "-w", "demo", "--wrap", wrap, check=True)
    job = out.stdout.strip().split(";")[0]
    slurm.wait_for(lambda: not slurm.run("squeue", "-h", "-j", job, "-o", "%i").stdout.strip(), f"job {job} to end")


def test_a_job_that_leaves_a_gpu_holder_behind_drains_the_node_naming_the_incident(epilog_slurm):
    slurm, node, log, root = epilog_slurm
    slurm.reset_node()
    node.smi.set(used=(70_000, 4), apps=())
    apps = node.smi.dir / "apps"
    pidfile = root / "leftover.pid"
    # the job's "worker" outlives it (setsid: out of the job's process group), holding 69 GB
    run_job(slurm, f"setsid sleep 300 </dev/null >/dev/null 2>&1 & echo $! > {pidfile}; "
                   f"echo \"$!, {GPU_UUIDS[0]}, 69000, sleep\" > {apps}.tmp && mv {apps}.tmp {apps}")
    try:
        slurm.wait_for(lambda: "rc=" in (log.read_text() if log.exists() else ""), "the Epilog's gate", 60)
        text = log.read_text()
        assert "rc=1" in text and "NOT CLEAN" in text and "GPU 0 holds 68.4 GiB" in text, text
        slurm.wait_for(lambda: slurm.sinfo_state().startswith("drain"), "the drain", 30)
        state = slurm.sinfo_state()
        ident = re.search(r"incident (\d{8}-\d{6}-[0-9a-f]{4})", text).group(1)
        # the gate's own drain reason stays (Slurm keeps it when the Epilog's failure comes after)
        # the leftover runs detached (setsid, PPID 1): the job's GPU memory held, named as such —
        # never the node's daemons (persistenced blocks a reset, it is no reason to drain)
        assert state == f"drained|gpu-incident {ident}: holder", state
        entries = load(resolve(ident, root / "incidents"))[0]
        pid = int(pidfile.read_text())
        states = next(e for e in entries if e.kind == "check" and e.text.startswith("states"))
        assert f"{pid} S" in states.text           # the leftover, as it was when the gate saw it
        assert any(e.kind == "action" and "State=DRAIN" in (e.command or "") for e in entries)
    finally:
        try:
            os.kill(int(pidfile.read_text()), 9)
        except (OSError, ValueError):
            pass
        node.smi.set(used=(4, 4), apps=())


def test_a_clean_job_leaves_the_node_idle_and_the_gate_says_how_long_memory_took(epilog_slurm):
    slurm, node, log, root = epilog_slurm
    slurm.reset_node()
    log.write_text("")
    node.smi.set(used=(4, 4), apps=())
    run_job(slurm, "true")
    slurm.wait_for(lambda: "rc=" in log.read_text(), "the Epilog's gate", 60)
    text = log.read_text()
    assert "rc=0" in text and "clean (GPUs back to idle in 0 s)" in text, text
    assert slurm.sinfo_state().split("|")[0] == "idle"
