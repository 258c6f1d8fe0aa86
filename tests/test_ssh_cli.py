"""`gpu-incident snapshot` against real sshd nodes, as an operator runs it."""
from __future__ import annotations

import json
import os
import subprocess

from tests.conftest import gpu_incident_cmd
from tests.sshd_fixture import free_port


def snapshot(tmp_path, *args: str) -> tuple[int, dict | None, str]:
    env = dict(os.environ, HOME=str(tmp_path))          # no personal ~/.ssh in the way
    env.pop("SSH_AUTH_SOCK", None)
    p = subprocess.run([*gpu_incident_cmd(), "snapshot", *args, "--json"], capture_output=True,
                       text=True, env=env, timeout=60)
    return p.returncode, (json.loads(p.stdout) if p.stdout.strip() else None), p.stderr


def test_snapshot_of_ssh_nodes_in_the_order_given(sshd, tmp_path):
    a, b = sshd.nodes
    kh = sshd.write_known_hosts(tmp_path / "known_hosts")
    closed = free_port()
    nodes_file = tmp_path / "nodes"
    nodes_file.write_text(f"# the rack\n{b.target}\nroot@127.0.0.1:{closed}  # switched off\n")
    rc, doc, err = snapshot(tmp_path, a.target, "--nodes-file", str(nodes_file), "--known-hosts", str(kh),
                            "-i", str(sshd.keys.client_key))
    assert rc == 0, err
    names = [n["name"] for n in doc["nodes"]]
    assert names == [a.target, b.target, f"root@127.0.0.1:{closed}"]
    live, other, dead = doc["nodes"]
    assert live["error"] is None and [g["memory_used_mib"] for g in live["gpus"]] == [76109, 76113]
    assert other["error"] is None and live["processes"]
    assert "refused" in dead["error"] and dead["gpus"] == []


def test_snapshot_refuses_an_unknown_host_key_and_says_why(sshd, tmp_path):
    node = sshd.nodes[0]
    kh = tmp_path / "known_hosts"
    kh.write_text("")
    rc, doc, err = snapshot(tmp_path, node.target, "--known-hosts", str(kh), "-i", str(sshd.keys.client_key))
    assert rc == 0, err
    error = doc["nodes"][0]["error"]
    assert error.startswith(f"host key not trusted for 127.0.0.1:{node.port}")
    assert sshd.keys.host_fingerprint in error and "--accept-new-host-keys" in error
    assert doc["nodes"][0]["gpus"] == [] and kh.read_text() == ""

    rc, doc, err = snapshot(tmp_path, node.target, "--known-hosts", str(kh), "-i", str(sshd.keys.client_key),
                            "--accept-new-host-keys")
    assert doc["nodes"][0]["error"] is None
    assert kh.read_text() == sshd.known_hosts_line(node.port)
