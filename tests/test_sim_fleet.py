"""`gpu-incident simulate --nodes N`: identical nodes share each tick's probe answers (console/sim/
fleet.py), each with its own identity; a node that runs anything else answers for itself."""
from __future__ import annotations

from console.sim.server import start_sim_servers
from console.sources.ssh.options import SshOptions
from console.sources.ssh.source import SshSource


def _options(servers) -> SshOptions:
    return SshOptions(known_hosts=str(servers.known_hosts), identity=(str(servers.client_key),))


async def test_nodes_share_the_probe_answers_each_with_its_own_host_name_and_gpus(tmp_path, ssh_home):
    async with await start_sim_servers("seed", 3, None, tmp_path / "state") as servers:
        assert all(servers.fleet.member(n) for n in servers.nodes)
        sources = [SshSource(t, _options(servers)) for t in servers.targets]
        try:
            snaps = [await s.poll() for s in sources]
        finally:
            for s in sources:
                await s.close()
        assert servers.fleet.shared_answers > 0, "the second and third nodes got the first one's answers"
        assert [s.error for s in snaps] == [None] * 3
        assert [s.hostname for s in snaps] == [n.name for n in servers.nodes]
        uuids = [tuple(g.uuid for g in s.gpus) for s in snaps]
        assert uuids == [tuple(g.uuid for g in n.gpus) for n in servers.nodes] and len(set(uuids)) == 3
        # the same processes and memory otherwise: one machine, three names
        assert len({tuple((p.pid, p.cmdline) for p in s.processes) for s in snaps}) == 1
        # every probe still reached its node (what tests and actions read of a node's history)
        assert all(any("begin meta" in c for _t, c in n.history) for n in servers.nodes)


async def test_a_node_that_runs_a_command_answers_from_its_own_state(tmp_path, ssh_home):
    async with await start_sim_servers("seed", 2, None, tmp_path / "state") as servers:
        a, b = (SshSource(t, _options(servers)) for t in servers.targets)
        try:
            await a.poll()
            await b.poll()
            result = await a.run("kill -9 72169")          # the seed's launcher, on node a only
            assert result.rc == 0, result
            assert not servers.fleet.member(servers.nodes[0]) and servers.fleet.member(servers.nodes[1])
            after_a, after_b = await a.poll(), await b.poll()
        finally:
            await a.close()
            await b.close()
        assert after_a.proc(72169) is None or after_a.proc(72169).state == "Z"
        assert after_b.proc(72169) is not None and after_b.proc(72169).state != "Z"


async def test_nodes_stay_in_the_fleet_when_the_probe_names_the_drivers_pids(tmp_path, ssh_home):
    """The second probe's cgroup section names the PIDs the driver listed at the first: still the
    probe (a node that left the fleet for it would cost the simulator a whole probe per poll)."""
    async with await start_sim_servers("seed", 2, None, tmp_path / "state") as servers:
        sources = [SshSource(t, _options(servers)) for t in servers.targets]
        try:
            for _ in range(2):
                snaps = [await s.poll() for s in sources]
            assert any("begin cgroup" in c and "72" in c.split("begin cgroup", 1)[1]
                       for _t, c in servers.nodes[0].history), "the second probe names the driver's PIDs"
        finally:
            for s in sources:
                await s.close()
        assert [s.error for s in snaps] == [None, None]
        assert all(servers.fleet.member(n) for n in servers.nodes)
