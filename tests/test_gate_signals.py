"""`gpu-incident gate` over a real sshd against each unfit state (issue 30): a GPU missing from the
driver's list, one off the PCI bus, a recovery action, a fresh Xid, a process list that did not
answer — each exits 1 with the signal that said so in `--json`; an idle node whose only holder is
the node's own display server (a real process running a binary named Xorg, listed by the driver with
its framebuffer) exits 0; a clean verdict moves the kernel-log mark."""
from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from tests.sshd_fixture import GPU_BUS, pci_dir
from tests.test_gate import gate, home, ssh_args  # noqa: F401 (fixture)

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the display-server stand-in runs as root")


def signals(doc) -> dict[str, dict]:
    return doc["nodes"][0]["signals"]


def run_gate(capsys, sshd, tmp_path, *more: str):
    return gate(capsys, sshd.nodes[0].target, "--wait", "0", "--json", "--incident-dir", str(tmp_path / "inc"),
                *more, *ssh_args(sshd, tmp_path))


def uptime() -> float:
    with open("/proc/uptime") as f:
        return float(f.read().split()[0])


@pytest.fixture
def node(sshd, home):  # noqa: F811 (home: a fixture)
    n = sshd.nodes[0]
    n.smi.set(used=(4, 4), apps=())
    yield n
    (n.smi.dir / "dmesg").unlink(missing_ok=True)
    n.smi.set()


def test_an_idle_node_whose_display_server_holds_its_framebuffer_is_clean(node, sshd, capsys, tmp_path):
    xorg = tmp_path / "Xorg"
    shutil.copy("/bin/sleep", xorg)
    p = subprocess.Popen([str(xorg), "600"])
    try:
        node.smi.set(used=(304, 4), apps=((p.pid, 0, 300, "/usr/lib/xorg/Xorg"),))
        rc, doc, err = run_gate(capsys, sshd, tmp_path)
    finally:
        p.kill()
        p.wait()
    assert rc == 0, [(k, v) for k, v in signals(doc).items() if v["status"] not in ("ok", "n/a")]
    assert signals(doc)["workloads"]["status"] == "ok" and "Xorg" in signals(doc)["workloads"]["said"]
    assert {s["status"] for s in signals(doc).values()} <= {"ok", "n/a"}


def test_a_gpu_the_kernel_module_knows_but_nvidia_smi_does_not_list_fails_the_gate(node, sshd, capsys, tmp_path):
    node.smi.set(used=(4,), apps=())                      # nvidia-smi prints GPU 0 only ...
    (node.smi.node_root / "proc" / "driver" / "nvidia" / "gpus" / pci_dir(GPU_BUS[1])).mkdir()   # ... of two
    rc, doc, err = run_gate(capsys, sshd, tmp_path)
    assert rc == 1, signals(doc)["gpus_present"]
    assert signals(doc)["gpus_present"]["status"] == "bad"
    assert "missing from the driver's list (1 of 2 listed)" in signals(doc)["gpus_present"]["said"]
    assert any(f["kind"] == "driver-error" and f["severity"] == "critical" for f in doc["nodes"][0]["findings"])


@pytest.mark.parametrize("state, signal, words", [
    (dict(pci_gone=(1,)), "gpus_present", "rev ff"),
    (dict(recovery=("None", "Reset")), "recovery_action", "GPU 1: recovery action gpu_reset"),
    (dict(apps_failure="Failed to get process list: Unknown Error"), "workloads", "did not answer"),
])
def test_each_unfit_state_fails_the_gate_with_its_signal(node, sshd, capsys, tmp_path, state, signal, words):
    node.smi.set(used=(4, 4), apps=(), **state)
    rc, doc, err = run_gate(capsys, sshd, tmp_path)
    assert rc == 1, signals(doc)[signal]
    said = signals(doc)[signal]
    assert said["status"] in ("bad", "unknown") and words in said["said"], signals(doc)
    assert words in doc["nodes"][0]["held"]
    others = {k: v["status"] for k, v in signals(doc).items() if k != signal}
    assert set(others.values()) <= {"ok", "n/a"}, others        # the one state, not a blanket "unknown"


def test_a_fresh_xid_fails_the_gate_an_old_one_does_not_and_a_clean_verdict_moves_the_mark(node, sshd, capsys,
                                                                                           tmp_path):
    line = "[{:12.6f}] NVRM: Xid (PCI:0000:18:00): 79, pid=0, name=, GPU has fallen off the bus."
    up = uptime()
    window = max(5.0, up / 2 - 30)              # this machine's boot may be minutes ago
    old = up - window - 20
    assert old > 0
    args = ("--kernel-window", f"{window:.0f}")
    (node.smi.dir / "dmesg").write_text(line.format(old) + "\n")              # older than the window
    rc, doc, err = run_gate(capsys, sshd, tmp_path, *args)
    assert rc == 0 and signals(doc)["kernel_log"]["status"] == "ok", signals(doc)["kernel_log"]
    marks = tmp_path / "inc" / "gate-marks.log"
    assert marks.exists() and node.target in marks.read_text()
    (node.smi.dir / "dmesg").write_text(line.format(old) + "\n" + line.format(uptime()) + "\n")
    rc, doc, err = run_gate(capsys, sshd, tmp_path, *args)
    assert rc == 1 and signals(doc)["kernel_log"]["status"] == "bad", signals(doc)["kernel_log"]
    assert "since the last clean verdict" in signals(doc)["kernel_log"]["said"]
    # with no verdict on record (another incident dir), the window decides: the new line is in it
    rc, doc, err = gate(capsys, node.target, "--wait", "0", "--json", "--incident-dir", str(tmp_path / "other"),
                        *args, *ssh_args(sshd, tmp_path))
    assert rc == 1 and "in the last" in signals(doc)["kernel_log"]["said"], signals(doc)["kernel_log"]
