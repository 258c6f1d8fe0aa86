"""`gpu-incident gate`: exit 0 when the GPUs are back to idle, 1 when held or unreadable (with the
evidence in a new incident), 2 for bad usage — on the simulator and over a real sshd with real
processes standing for the job's leftovers (the test nvidia-smi lists their PIDs)."""
from __future__ import annotations

import json
import threading

import pytest

from console import cli
from console.incident.timeline import load, resolve
from tests.polling import until
from tests.sshd_fixture import free_port


def gate(capsys, *argv: str) -> tuple[int, dict | str, str]:
    rc = cli.main(["gate", *argv])
    out, err = capsys.readouterr()
    return rc, (json.loads(out) if "--json" in argv and out.strip() else out), err


def kinds(path) -> list[str]:
    return [e.kind for e in load(path)[0]]


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))      # no personal ~/.ssh in the way
    monkeypatch.delenv("SSH_AUTH_SOCK", raising=False)
    return tmp_path


def ssh_args(sshd, tmp_path) -> list[str]:
    return ["--known-hosts", str(sshd.write_known_hosts(tmp_path / "known_hosts")),
            "-i", str(sshd.keys.client_key)]


# ---------------------------------------------------------------- on the simulator

def test_a_held_node_fails_and_the_incident_holds_the_evidence_before_anything_is_killed(capsys, tmp_path):
    rc, doc, err = gate(capsys, "demo:graceful", "--wait", "0", "--json", "--incident-dir", str(tmp_path))
    assert rc == 1, err
    node, = doc["nodes"]
    assert doc["clean"] is False and node["clean"] is False and node["seconds_to_free"] is None
    assert "GPUs 0-1 hold 138.7 GiB" in node["held"] and "65163" in node["held"]
    assert any(f["kind"] == "holder" for f in node["findings"])
    path = resolve(doc["incident"], tmp_path)
    entries = load(path)[0]
    checks = {e.text.split(":")[0] for e in entries if e.kind == "check"}
    assert {"holders", "states", "stack", "kernel-log"} <= checks
    evidence = next(e for e in entries if e.kind == "observation")
    assert json.loads(evidence.output)["gpus"][0]["memory_used_mib"] > 60_000
    assert "action" not in kinds(path), "the gate records; it never acts (without --drain)"


def test_a_node_whose_memory_repair_waits_for_a_reset_is_not_clean(capsys, tmp_path):
    """demo:remap-pending: no process and no memory held, but GPU 2's row remap waits for a
    reset: the next job would meet the bad row, so the gate fails it (and says why)."""
    rc, doc, err = gate(capsys, "demo:remap-pending", "--wait", "0", "--json", "--incident-dir", str(tmp_path))
    assert rc == 1, err
    node, = doc["nodes"]
    assert node["clean"] is False and node["held"] == "GPU 2: memory repair waits for a reset", node["held"]


def test_plain_output_is_one_line_a_node_and_says_how_to_go_on(capsys, tmp_path):
    rc, out, _ = gate(capsys, "demo:graceful", "--wait", "0", "--incident-dir", str(tmp_path))
    assert rc == 1
    lines = out.splitlines()
    assert lines[0].startswith("gpu-incident gate: demo:graceful: NOT CLEAN after 0 s: GPUs 0-1 hold")
    assert "gpu-incident --incident " in lines[-1] and len(lines) == 2


@pytest.mark.parametrize("wait", ["-1", "abc", "nan", "4000"])
def test_bad_wait_is_usage_with_one_line(capsys, wait):
    assert cli.main(["gate", "demo", "--wait", wait]) == 2
    err = capsys.readouterr().err
    assert "--wait" in err and len(err.strip().splitlines()) == 1


# ---------------------------------------------------------------- over a real sshd

def test_a_clean_node_passes_at_once_and_opens_no_incident(sshd, home, capsys, tmp_path):
    node = sshd.nodes[0]
    node.smi.set(used=(4, 4), apps=())
    rc, doc, err = gate(capsys, node.target, "--wait", "10", "--json", "--incident-dir", str(tmp_path / "inc"),
                        *ssh_args(sshd, tmp_path))
    assert rc == 0, (doc, err)
    assert doc["clean"] and doc["incident"] is None and doc["nodes"][0]["seconds_to_free"] == 0
    assert not (tmp_path / "inc").exists() or not list((tmp_path / "inc").glob("*.jsonl"))


def test_a_leftover_process_fails_the_gate_and_its_state_is_in_the_evidence(sshd, home, capsys, tmp_path,
                                                                              gpu_workers):
    node = sshd.nodes[0]
    pid, = gpu_workers(1)
    node.smi.set(used=(70_000, 4), apps=((pid, 0, 69_900, "sleep"),))
    rc, doc, err = gate(capsys, node.target, "--wait", "1", "--json", "--incident-dir", str(tmp_path),
                        *ssh_args(sshd, tmp_path))
    assert rc == 1, err
    held = doc["nodes"][0]["held"]
    assert "GPU 0 holds 68.4 GiB" in held and f"PID {pid}" in held
    entries = load(resolve(doc["incident"], tmp_path))[0]
    states = next(e for e in entries if e.kind == "check" and e.text.startswith("states"))
    assert f"{pid} S" in states.text                  # the leftover's state, read before any kill
    kept = json.loads(next(e for e in entries if e.kind == "observation").output)["processes"]
    assert pid in [p["pid"] for p in kept]


def test_memory_that_comes_back_during_the_wait_passes_with_its_time_to_free(sshd, home, capsys, tmp_path):
    from console.incident import freetimes
    node = sshd.nodes[0]
    for seconds in (2.0, 3.0, 4.0):               # what earlier gates measured on this node
        freetimes.record(tmp_path, node.target, "job", seconds)
    node.smi.set(used=(70_000, 4), apps=())
    node.smi.clear_calls()
    result = {}
    args = ["gate", node.target, "--wait", "60", "--json", "--incident-dir", str(tmp_path),
            *ssh_args(sshd, tmp_path)]
    worker = threading.Thread(target=lambda: result.setdefault("rc", cli.main(args)))
    worker.start()
    assert until(lambda: len([c for c in node.smi.calls() if "--query-gpu" in c]) >= 2), "the gate read the node"
    node.smi.set(used=(4, 4), apps=())                # the driver's teardown finished
    worker.join(70)
    doc = json.loads(capsys.readouterr().out)
    assert result["rc"] == 0 and doc["clean"]
    assert doc["nodes"][0]["seconds_to_free"] > 0
    assert doc["nodes"][0]["usually"].endswith("here (after a job, 3 times)")
    kept = freetimes.load(tmp_path)
    assert len(kept) == 4 and kept[-1]["seconds"] == doc["nodes"][0]["seconds_to_free"], "this one kept too"


def test_a_node_that_cannot_be_read_fails_closed(home, capsys, tmp_path):
    dead = f"root@127.0.0.1:{free_port()}"
    rc, doc, _ = gate(capsys, dead, "--wait", "0", "--json", "--incident-dir", str(tmp_path))
    assert rc == 1
    assert doc["nodes"][0]["held"].startswith("not read: ") and "refused" in doc["nodes"][0]["held"]
    assert "hypothesis" in kinds(resolve(doc["incident"], tmp_path))
