"""The GPU recovery action: nvidia-smi's gpu_recovery_action asked only where it can be known (no
extra nvidia-smi call on an old driver), parsed, simulated, served over the real sshd, and followed
by diagnosis (NVML's side is in test_local_nvml.py)."""
from __future__ import annotations

import os
import re
import shutil
import subprocess

import pytest

from console import probe
from console.diagnosis import diagnose
from console.model import Gpu, NodeSnapshot, recovery_token, recovery_words
from console.output.json import node_json
from console.sim.node import SimNode
from console.sources.parse import parse_gpu_query, parse_probe
from console.sources.sim import SimSource
from console.sources.ssh.source import SshSource
from tests.test_ssh import node_a, options  # noqa: F401 (fixture)

ROW = "3, GPU-x, NVIDIA H100 80GB HBM3, 00000000:41:00.0, 61447, 81559, 0, Enabled, Disabled"
REJECTED = 'Field "gpu_recovery_action" is not a valid field to query.\n\n'
OLD_535 = "NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.104.05  Sat Aug 19 01:15:15 UTC 2023"
NEW_580 = ("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.95.05  Release Build  "
           "(dvs-builder@U22-I3-AF03-09-1)  Thu Sep 18 18:37:29 UTC 2025")
R565 = "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  565.57.01  Release Build  (dvs)  Thu Oct 10"


# ---------------------------------------------------------------- words and parsing

@pytest.mark.parametrize("words, token", [
    ("None", "none"), ("Reset", "gpu_reset"), ("GPU Reset", "gpu_reset"), ("GPU Reset Required", "gpu_reset"),
    ("Node Reboot Required", "node_reboot"), ("Drain P2P", "drain_p2p"), ("Drain and Reset", "drain_and_reset"),
    ("[N/A]", None), ("[Not Supported]", None), ("", None), ("Some Future Action", "some future action"),
])
def test_the_drivers_words_become_one_token(words, token):
    assert recovery_token(words) == token


def test_a_tenth_column_is_the_recovery_action_and_an_old_refusal_is_no_warning():
    gp = parse_gpu_query(ROW + ", Reset\n")
    assert gp.gpus[0].recovery_action == "gpu_reset" and not gp.warnings
    gp = parse_gpu_query(REJECTED + ROW + "\n")          # the in-section fallback of an older nvidia-smi
    assert gp.gpus[0].recovery_action is None and not gp.warnings and gp.error is None
    assert parse_gpu_query(ROW + ", [N/A]\n").gpus[0].recovery_action is None


def test_the_json_says_null_when_the_driver_does_not_say():
    snap = NodeSnapshot(name="n", taken_at=0.0, gpus=(Gpu(0, "GPU-a", "x", "0:1:0.0", 1, 2),
                                                     Gpu(1, "GPU-b", "x", "0:2:0.0", 1, 2, recovery_action="node_reboot")))
    assert [g["recovery_action"] for g in node_json(snap)["gpus"]] == [None, "node_reboot"]


# ---------------------------------------------------------------- the probe's gpu section in a real shell

SMI = """#!/bin/sh
echo "$*" >> "$GI_T/calls"
case "$*" in *gpu_recovery_action*)
  if [ -e "$GI_T/old" ]; then echo 'Field "gpu_recovery_action" is not a valid field to query.'; echo; exit 2; fi
  echo "%s, Reset";;
*) echo "%s";; esac
""" % (ROW, ROW)


@pytest.fixture
def shell_node(tmp_path, monkeypatch):
    (tmp_path / "bin").mkdir()
    smi = tmp_path / "bin" / "nvidia-smi"
    smi.write_text(SMI)
    smi.chmod(0o755)
    monkeypatch.setattr(probe, "DRIVER_VERSION_FILE", str(tmp_path / "version"))

    def run(shell: str, version: str | None, old_smi: bool, probes: int = 3) -> tuple[list[str], list]:
        (tmp_path / "calls").write_text("")
        (tmp_path / "version").unlink(missing_ok=True)
        (tmp_path / "old").unlink(missing_ok=True)
        if version is not None:
            (tmp_path / "version").write_text(version + "\n")
        if old_smi:
            (tmp_path / "old").write_text("")
        line = probe.section_line("::m::", "gpu", probe.driver_call("gpu"))
        env = dict(os.environ, PATH=f"{tmp_path / 'bin'}:{os.environ['PATH']}", GI_T=str(tmp_path))
        out = subprocess.run([shell, "-c", "\n".join([line] * probes)], capture_output=True, text=True,
                             env=env, timeout=30).stdout
        bodies = re.findall(r"::m:: begin gpu\n(.*?)::m:: end gpu (\d+)\n", out, re.DOTALL)
        assert len(bodies) == probes, out
        return (tmp_path / "calls").read_text().splitlines(), [parse_gpu_query(b, int(rc)) for b, rc in bodies]
    return run


SHELLS = [s for s in ("dash", "bash") if shutil.which(s)]


@pytest.mark.parametrize("shell", SHELLS)
def test_an_old_driver_is_never_asked_for_the_field(shell_node, shell):
    calls, gps = shell_node(shell, OLD_535, old_smi=True)
    assert len(calls) == 3 and not any("gpu_recovery_action" in c for c in calls)     # one call per probe
    assert [g.gpus[0].recovery_action for g in gps] == [None] * 3 and not any(g.warnings for g in gps)


@pytest.mark.parametrize("shell", SHELLS)
def test_a_new_driver_answers_in_the_existing_call(shell_node, shell):
    calls, gps = shell_node(shell, NEW_580, old_smi=False)
    assert len(calls) == 3 and all("gpu_recovery_action" in c for c in calls)
    assert [g.gpus[0].recovery_action for g in gps] == ["gpu_reset"] * 3


@pytest.mark.parametrize("shell", SHELLS)
@pytest.mark.parametrize("version", [R565, None])     # a driver too new to rule out, or no version file
def test_a_rejected_field_costs_one_call_once_per_probe_shell(shell_node, shell, version):
    calls, gps = shell_node(shell, version, old_smi=True)
    assert len(calls) == 4            # the first probe asks twice, the shell remembers for the others
    assert ["gpu_recovery_action" in c for c in calls] == [True, False, False, False]
    assert all(g.gpus and g.gpus[0].memory_used_mib == 61447 and not g.warnings for g in gps)


def test_the_version_gate_matches_the_simulator_and_the_shell():
    assert probe.old_driver(OLD_535) and probe.old_driver(OLD_535.replace("535.", "470."))
    assert probe.old_driver(OLD_535.replace("535.", "564."))
    assert not probe.old_driver(R565) and not probe.old_driver(NEW_580) and not probe.old_driver("")


# ---------------------------------------------------------------- the simulator

async def test_simulated_reset_required_reports_reset_then_none_after_the_reset():
    src = SimSource(scenario="reset-required")
    snap = await src.poll()
    assert [g.recovery_action for g in snap.gpus] == ["none"] * 3 + ["gpu_reset"] + ["none"] * 4
    f = [f for f in diagnose(snap) if f.kind == "recovery-action"]
    assert [(x.gpus, x.severity, x.rung) for x in f] == [((3,), "critical", "clear-blockers")]
    for cmd in ("systemctl stop nvidia-persistenced", "nvidia-smi -r -i 3"):
        assert (await src.run(cmd)).rc == 0
    snap = await src.poll()
    assert snap.gpu(3).recovery_action == "none"
    fs = diagnose(snap)
    assert not [f for f in fs if f.kind == "recovery-action"]
    (x154,) = [f for f in fs if f.kind == "xid" and f.evidence["xid"] == 154]
    assert x154.severity == "info" and "no recovery action" in x154.next_step


async def test_simulated_old_driver_is_not_asked_and_its_nvidia_smi_would_refuse():
    node = SimNode("reset-required")
    node.driver_version = "535.230.02"
    src = SimSource(node=node)
    snap = await src.poll()
    assert snap.error is None and not snap.warnings
    assert {g.recovery_action for g in snap.gpus} == {None}
    calls = [script for _, script in node.history if "gpu_recovery_action" in script]
    assert calls and all("case" in c for c in calls)     # only the probe's gated line names it
    r = await src.run(probe.QUERY_GPU_RECOVERY)
    assert r.rc == 2 and 'Field "gpu_recovery_action" is not a valid field to query.' in r.stdout
    # Xid 154 is then what diagnosis follows
    assert any(f.kind == "xid" and f.evidence["xid"] == 154 and f.severity == "critical" for f in diagnose(snap))


# ---------------------------------------------------------------- over the real sshd

async def test_over_ssh_a_new_nvidia_smi_gives_the_action_in_the_same_call(sshd, node_a, tmp_path, ssh_home):
    node_a.smi.set(recovery=("None", "Reset"))
    node_a.smi.clear_calls()
    src = SshSource(node_a.target, options(sshd, tmp_path))
    src.smi_loop = False      # the per-poll calls (loop mode: tests/test_smi_loop.py)
    try:
        for _ in range(2):
            snap = await src.poll()
        assert snap.error is None, snap.error
        assert [g.recovery_action for g in snap.gpus] == ["none", "gpu_reset"]
        # gpu, apps (and -L, -q -d ROW_REMAPPER and pmon at the first probe): no extra call
        assert len(node_a.smi.calls()) == 5 + 2
        f = [f for f in diagnose(snap) if f.kind == "recovery-action"]
        # the stand-in's GPUs have persistence mode on: the reset it asks for waits behind it
        assert [x.gpus for x in f] == [(1,)] and f[0].rung == "clear-blockers"
        assert "GPU Reset" in f[0].summary and "persistence mode off on GPU 1" in f[0].next_step
    finally:
        await src.close()


async def test_over_ssh_an_old_nvidia_smi_does_not_break_the_gpu_query(sshd, node_a, tmp_path, ssh_home):
    node_a.smi.set(old_smi=True)
    node_a.smi.clear_calls()
    src = SshSource(node_a.target, options(sshd, tmp_path))
    src.smi_loop = False      # the per-poll calls (loop mode: tests/test_smi_loop.py)
    try:
        snaps = [await src.poll() for _ in range(3)]
        assert all(s.error is None and not s.warnings for s in snaps), [(s.error, s.warnings) for s in snaps]
        assert all([g.memory_used_mib for g in s.gpus] == [76109, 76113] for s in snaps)
        assert {g.recovery_action for s in snaps for g in s.gpus} == {None}
        # (no /proc/driver/nvidia/version here): one refused call on the first probe, then none
        # gpu, apps (-L, -q and pmon once: no MIG, no process listed)
        assert len(node_a.smi.calls()) == 5 + 2 + 2 + 1
    finally:
        await src.close()


async def test_over_ssh_an_old_driver_version_costs_no_extra_call(sshd, node_a, tmp_path, ssh_home, monkeypatch):
    version = tmp_path / "version"
    version.write_text(OLD_535 + "\n")
    monkeypatch.setattr(probe, "DRIVER_VERSION_FILE", str(version))
    node_a.smi.set(old_smi=True)
    node_a.smi.clear_calls()
    src = SshSource(node_a.target, options(sshd, tmp_path))
    src.smi_loop = False      # the per-poll calls (loop mode: tests/test_smi_loop.py)
    try:
        for _ in range(2):
            snap = await src.poll()
        assert snap.error is None and [g.memory_used_mib for g in snap.gpus] == [76109, 76113]
        assert len(node_a.smi.calls()) == 5 + 2 and not any("gpu_recovery_action" in c for c in node_a.smi.calls())
    finally:
        await src.close()


# ---------------------------------------------------------------- diagnosis follows it

def gpu_snap(token: str | None, kernel_log=()) -> NodeSnapshot:
    gpus = tuple(Gpu(i, f"GPU-{i}", "H100", f"00000000:{0x18 + i:02X}:00.0", 4, 81559, persistence_mode=False,
                     recovery_action=token if i == 0 else "none") for i in range(2))
    return NodeSnapshot(name="n", taken_at=1000.0, gpus=gpus, kernel_log=tuple(kernel_log))


@pytest.mark.parametrize("token, severity, rung, words", [
    ("gpu_reset", "critical", "reset", "Reset GPU 0"),
    ("node_reboot", "critical", "reboot", "Reboot the node"),
    ("system_reboot", "critical", "reboot", "Reboot the node"),
    ("bus_reset", "critical", "reboot", "Reboot the node"),
    ("drain_p2p", "high", None, "Drain peer-to-peer traffic"),
    ("drain_and_reset", "critical", "reset", "Drain first"),
    ("recover_imex_domain", "high", None, "IMEX domain"),
])
def test_each_recovery_action_calls_for_its_rung(token, severity, rung, words):
    (f,) = [f for f in diagnose(gpu_snap(token)) if f.kind == "recovery-action"]
    assert (f.severity, f.rung, f.gpus) == (severity, rung, (0,))
    assert recovery_words(token) in f.summary and words in f.next_step


def test_no_finding_when_none_or_unknown():
    assert not [f for f in diagnose(gpu_snap("none")) if f.kind == "recovery-action"]
    assert not [f for f in diagnose(gpu_snap(None)) if f.kind == "recovery-action"]


XID_154 = ("[ 8124.000001] NVRM: Xid (PCI:0000:18:00): 154, GPU recovery action changed from 0x0 (None) "
           "to 0x1 (GPU Reset Required)")


def test_the_current_action_supersedes_xid_154_and_none_makes_it_history():
    fs = diagnose(gpu_snap("node_reboot", [XID_154]))
    assert not [f for f in fs if f.kind == "xid"]            # one finding, the driver's current word
    (f,) = [f for f in fs if f.kind == "recovery-action"]
    assert f.rung == "reboot" and f.evidence["xid_154"] == XID_154.strip()
    (x,) = [f for f in diagnose(gpu_snap("none", [XID_154])) if f.kind == "xid"]
    assert x.severity == "info" and x.rung is None
    (x,) = [f for f in diagnose(gpu_snap(None, [XID_154])) if f.kind == "xid"]     # unknown: the line rules
    assert x.severity == "critical" and x.rung == "reset"


def test_probe_output_with_the_field_reaches_the_finding():
    mark = "::gi-t::"
    text = (f"{mark} begin gpu\n{ROW}, Reset\n{mark} end gpu 0\n{mark} begin apps\n{mark} end apps 0\n"
            f"{mark} begin stat\n{mark} end stat 0\n{mark} begin ps\n{mark} end ps 0\n"
            f"{mark} begin meta\n{mark} end meta 0\n")
    snap = parse_probe("n", text, mark, taken_at=1.0)
    assert snap.gpu(3).recovery_action == "gpu_reset"
    assert [f.kind for f in diagnose(snap) if f.gpus == (3,)][:1] == ["recovery-action"]

