"""`gpu-incident simulate`: simulated nodes over real SSH, driven exactly like real nodes."""
from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import socket
import stat
import subprocess

import pytest

from console.sim.server import start_sim_servers, unwrap_command
from console.sources.ssh.source import SshSource
from console.sources.ssh.options import SshOptions
from console.sources.targets import expand_targets
from tests.conftest import gpu_incident_cmd
from tests.sshd_fixture import free_port

SEED_USED = [76109, 76113, 76113, 76113, 76113, 76113, 76113, 76069]


@contextlib.asynccontextmanager
async def mixed_fleet(sshd, tmp_path):
    """Two simulated nodes, the real sshd node and a closed port, with one known_hosts for all
    of them as an operator would have: yields (targets, options)."""
    real = sshd.nodes[0]
    real.smi.set()
    closed = free_port()
    async with await start_sim_servers("seed", 2, None, tmp_path / "state") as servers:
        kh = tmp_path / "known_hosts"
        kh.write_text(servers.known_hosts.read_text() + sshd.known_hosts_line(real.port))
        opts = SshOptions(known_hosts=str(kh), identity=(str(servers.client_key), str(sshd.keys.client_key)),
                          connect_timeout=3)
        yield [*servers.targets, real.target, f"root@127.0.0.1:{closed}"], opts


def sim_options(servers) -> SshOptions:
    return SshOptions(known_hosts=str(servers.known_hosts), identity=(str(servers.client_key),),
                      connect_timeout=3)


async def test_state_dir_holds_known_hosts_client_key_and_targets(tmp_path, ssh_home):
    async with await start_sim_servers("seed", 3, None, tmp_path / "state") as servers:
        ports = servers.ports
        assert ports == list(range(ports[0], ports[0] + 3)) and len(servers.nodes) == 3
        assert (tmp_path / "state" / "targets.txt").read_text().splitlines() == [
            f"root@127.0.0.1:{p}" for p in ports]
        assert expand_targets([], str(servers.targets_file)) == servers.targets
        lines = servers.known_hosts.read_text().splitlines()
        assert [ln.split()[0] for ln in lines] == [f"[127.0.0.1]:{p}" for p in ports]
        assert len({ln.split()[2] for ln in lines}) == 3, "a host key per node"
        assert stat.S_IMODE(servers.client_key.stat().st_mode) == 0o600
        first_keys = servers.known_hosts.read_text().split("\n")
    # a restart on other ports keeps the keys: the known_hosts stays valid for the same nodes
    async with await start_sim_servers("seed", 3, None, tmp_path / "state") as again:
        assert [ln.split()[1:] for ln in again.known_hosts.read_text().split("\n")] == \
               [ln.split()[1:] for ln in first_keys]


async def test_simulated_nodes_and_a_real_node_polled_together_one_failing(sshd, tmp_path, ssh_home):
    async with mixed_fleet(sshd, tmp_path) as (targets, opts):
        sources = [SshSource(t, opts) for t in targets]
        try:
            for _ in range(2):
                s1, s2, r, dead = await asyncio.gather(*[s.poll() for s in sources])
                for snap in (s1, s2):
                    assert snap.error is None, snap.error
                    assert [g.memory_used_mib for g in snap.gpus] == SEED_USED
                    assert any(p.name.startswith("sglang") for p in snap.holders)
                assert {s1.hostname, s2.hostname} == {"simnode01", "simnode02"}
                assert r.error is None and [g.memory_used_mib for g in r.gpus] == [76109, 76113]
                assert "refused" in dead.error
            assert all(s.connects == 1 for s in sources[:3])
        finally:
            await asyncio.gather(*[s.close() for s in sources])


async def test_actions_reach_the_simulated_node_through_ssh(tmp_path, ssh_home):
    async with await start_sim_servers("seed", 1, None, tmp_path / "state") as servers:
        src = SshSource(servers.targets[0], sim_options(servers))
        try:
            snap = await src.poll()
            victim = next(p for p in snap.holders if p.gpu_memory_mib and p.state == "S")
            refused = await src.signal(victim.pid, "KILL", start_ticks=victim.start_ticks + 1)
            assert refused.rc == 3 and "refused" in refused.stderr
            spared = (await src.poll()).proc(victim.pid)  # a busy worker reads R one second in three
            assert spared.start_ticks == victim.start_ticks and spared.state in ("R", "S")
            done = await src.signal(victim.pid, "KILL", start_ticks=victim.start_ticks)
            assert done.ok, done
            after = (await src.poll()).proc(victim.pid)
            assert after is None or after.state in ("Z", "X")
            check = await src.run("nvidia-smi --query-gpu=index,memory.used --format=csv,noheader", 5)
            assert check.ok and check.stdout.splitlines()[0] == "0, 76109 MiB"
        finally:
            await src.close()


async def test_bad_scenario_count_and_taken_port(tmp_path):
    with pytest.raises(ValueError, match="no-such"):
        await start_sim_servers("no-such", 1, None, tmp_path / "s")
    with pytest.raises(ValueError, match="--nodes"):
        await start_sim_servers("seed", 0, None, tmp_path / "s")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(OSError, match=f"127.0.0.1:{port}"):
            await start_sim_servers("seed", 1, port, tmp_path / "s")


def test_unwrap_command():
    assert unwrap_command("timeout -k 2 30 sh -c 'kill -s TERM 7'") == ("kill -s TERM 7", 30.0)
    assert unwrap_command("timeout 0.5 sh -c 'sleep 3'") == ("sleep 3", 0.5)
    assert unwrap_command("nvidia-smi -L") == ("nvidia-smi -L", 30.0)
    assert unwrap_command("timeout 5 nvidia-smi -L") == ("timeout 5 nvidia-smi -L", 30.0)
    assert unwrap_command("echo 'unbalanced") == ("echo 'unbalanced", 30.0)


def test_gpu_incident_simulate_serves_until_sigterm(tmp_path):
    env = dict(os.environ, HOME=str(tmp_path))
    env.pop("SSH_AUTH_SOCK", None)
    state = tmp_path / "sim"
    proc = subprocess.Popen([*gpu_incident_cmd(), "simulate", "--scenario", "seed", "--nodes", "2",
                             "--state-dir", str(state)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=env)
    try:
        banner = []
        for line in proc.stdout:
            banner.append(line)
            if "stops the simulator" in line:
                break
        text = "".join(banner)
        assert "serving 2 simulated nodes (scenario seed)" in text, text + proc.stderr.read()
        assert str(state / "targets.txt") in text and str(state / "known_hosts") in text
        snap = subprocess.run([*gpu_incident_cmd(), "snapshot", "--nodes-file", str(state / "targets.txt"),
                               "--known-hosts", str(state / "known_hosts"), "-i", str(state / "client_key"),
                               "--json"], capture_output=True, text=True, env=env, timeout=60)
        doc = json.loads(snap.stdout)
        assert [n["error"] for n in doc["nodes"]] == [None, None]
        assert [g["memory_used_mib"] for g in doc["nodes"][1]["gpus"]] == SEED_USED
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            rc = proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            raise
    assert rc == 0


async def test_one_console_two_simulated_nodes_and_a_real_node_one_failing(sshd, tmp_path, ssh_home):
    """The console itself (Textual pilot, 80x24): the failing node says why, the others stay live."""
    from textual.widgets import DataTable

    from console.ui.app import IncidentApp
    async with mixed_fleet(sshd, tmp_path) as (targets, opts):
        app = IncidentApp([SshSource(t, opts) for t in targets], interval=0.3)
        async with app.run_test(size=(80, 24)) as pilot:
            for _ in range(500):
                if all(t in app.snapshots for t in targets):
                    break
                await pilot.pause(0.02)
            nodes = app.query_one("#nodes")
            states = {t: str(nodes.get_cell(t, "state")) for t in targets}
            why = str(nodes.get_cell(targets[-1], "finding"))     # why it fails, in one line
            assert states[targets[-1]].startswith("✖ unreachable") and "refused" in why
            assert all(not states[t].startswith("✖") for t in targets[:3]), states     # answering (their worst finding, or ok)
            # the live nodes keep polling while the dead one keeps failing
            first = {t: app.snapshots[t] for t in targets[:3]}
            for _ in range(500):
                if all(app.snapshots[t] is not first[t] for t in targets[:3]):
                    break
                await pilot.pause(0.02)
            assert all(app.snapshots[t] is not first[t] for t in targets[:3])
            gpus = app.query_one("#gpus", DataTable)
            assert app.current_node == targets[-1] and gpus.row_count == 0   # the failing node first, chosen
            await pilot.press("down")           # the node table has the focus: the next node's GPUs
            for _ in range(500):
                if app.current_node != targets[-1] and gpus.row_count:
                    break
                await pilot.pause(0.02)
            assert gpus.row_count == len(app.snapshots[app.current_node].gpus) > 0
            await pilot.press("q")
