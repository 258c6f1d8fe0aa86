"""`gate --drain` as the documented Epilog — `exec gpu-incident gate --wait 120 --drain`, no target,
no name mapping — drains the node Slurm ran it on (issue 31 item 6: it asked Slurm for a node named
`local`). This machine has no NVIDIA driver, so its gate fails closed and drains.

Heavy: a real Slurm of its own whose Epilog is the documented one-liner."""
from __future__ import annotations

import re

import pytest

from tests.slurm_fixture import gate_epilog, start_slurm, stop_slurm

pytestmark = pytest.mark.heavy


@pytest.fixture
def local_epilog(tmp_path):
    script, log = gate_epilog(tmp_path, f"--wait 1 --drain --incident-dir {tmp_path / 'incidents'}")
    s = start_slurm(tmp_path, extra=[f"Epilog={script}"])
    try:
        yield s, log
    finally:
        stop_slurm(s)


def test_the_documented_epilog_drains_the_node_slurm_ran_it_on(local_epilog):
    slurm, log = local_epilog
    slurm.reset_node()
    out = slurm.run("sbatch", "--parsable", "-N1", "-w", slurm.node, "--wrap", "true", check=True)
    job = out.stdout.strip().split(";")[0]
    slurm.wait_for(lambda: "rc=" in (log.read_text() if log.exists() else ""), "the Epilog's gate", 90)
    text = log.read_text()
    assert "rc=1" in text and "NOT CLEAN" in text, text
    assert "not known to Slurm" not in text, text
    slurm.wait_for(lambda: slurm.sinfo_state().startswith("drain"), "the drain", 30)
    ident = re.search(r"incident (\d{8}-\d{6}-[0-9a-f]{4})", text).group(1)
    assert f"gpu-incident {ident}" in slurm.sinfo_state(), (slurm.sinfo_state(), job)
