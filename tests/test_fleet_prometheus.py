"""The fleet end to end with a REAL Prometheus (Debian's `prometheus`, which .ci/run installs)
scraping `gpu-incident simulate --scenario fleet --exporter-port`: the stuck nodes come first
in `snapshot prometheus://… --json`, a graceful kill over the simulator's SSH clears a node, a
dead Prometheus is one line and exit 0, TLS is verified.

Heavy (real services): a module-wide simulator (4 nodes over SSH + the exporter) and Prometheus
(scrape every second, two jobs scraping the one exporter), ~20-40 s on a 2-core machine. Skips
with the reason when prometheus is not installed (.ci/run installs it).
"""
import asyncio
import json
import subprocess

import pytest

from console.bench.prometheus import prometheus_binary, start_prometheus, start_simulator, wait_for_series
from tests.conftest import gpu_incident_cmd
from tests.polling import until

pytestmark = [pytest.mark.heavy, pytest.mark.timeout(300)]
WINDOW = "3s"
BOUND_S = 90.0


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    if prometheus_binary() is None:
        pytest.skip("prometheus is not installed (apt-get install prometheus; .ci/run does)")
    work = tmp_path_factory.mktemp("fleet")
    sim = start_simulator(["--scenario", "fleet", "--nodes", "4", "--state-dir", str(work / "sim")], work)
    try:
        prom = start_prometheus([f"127.0.0.1:{sim.port}"], work, scrape_interval="1s", jobs=2)
    except BaseException:
        sim.stop()
        raise
    try:
        wait_for_series(prom.port, 4 * 8)
        yield sim, prom, work
    finally:
        prom.stop()
        sim.stop()


def snapshot(port, *more, scheme="prometheus"):
    r = subprocess.run([*gpu_incident_cmd(), "snapshot", f"{scheme}://127.0.0.1:{port}", "--json",
                        "--suspicion-window", WINDOW, *more], capture_output=True, text=True, timeout=60)
    return r


def nodes_of(r):
    assert r.returncode in (0, 1), r.stderr
    return json.loads(r.stdout)["nodes"]


def test_stuck_nodes_come_first(fleet):
    _sim, prom, _work = fleet
    got = {}

    def settled():
        got["nodes"] = nodes_of(snapshot(prom.port))
        return [n["name"] for n in got["nodes"]][:3] == ["simnode03", "simnode02", "simnode04"]
    assert until(settled, BOUND_S, 0.5), [(n["name"], n["suspicion"]) for n in got["nodes"]]
    nodes = got["nodes"]
    assert [n["name"] for n in nodes] == ["simnode03", "simnode02", "simnode04", "simnode01"]
    assert "Xid 154" in nodes[0]["suspicion"] and "GPU 3:" in nodes[0]["suspicion"]
    assert nodes[1]["suspicion"].startswith("GPUs 0-3: 86.0 GiB each at 0% for 3 s")
    assert nodes[2]["suspicion"].startswith("GPUs 0-7: ")
    assert nodes[3]["suspicion"] is None and nodes[3]["gpus"][0]["utilization_pct"] > 50
    assert all(len(n["gpus"]) == 8 for n in nodes), "two jobs scrape the exporter: each GPU counts once"
    g = nodes[1]["gpus"][0]
    assert g["memory_used_mib"] > 80000 and g["memory_total_mib"] > g["memory_used_mib"]
    assert nodes[1]["processes"] == [] and nodes[1]["ssh_destination"] == "simnode02"
    assert snapshot(prom.port, "--fail-on", "high").returncode == 1


def test_a_graceful_kill_over_ssh_clears_the_node(fleet):
    sim, prom, work = fleet
    from console.sources.ssh.options import SshOptions
    from console.sources.ssh.source import SshSource

    def suspects():
        return {n["name"] for n in nodes_of(snapshot(prom.port)) if n["suspicion"]}
    assert until(lambda: "simnode02" in suspects(), BOUND_S, 0.5)

    async def kill():       # the node reached by its Hostname through the simulator's ssh_config
        src = SshSource("simnode02", SshOptions(ssh_config=str(work / "sim" / "ssh_config")))
        try:
            return await src.run("kill -s TERM 41388")
        finally:
            await src.close()
    result = asyncio.run(kill())
    assert result.rc == 0, result
    assert until(lambda: "simnode02" not in suspects(), BOUND_S, 0.5)
    node = next(n for n in nodes_of(snapshot(prom.port)) if n["name"] == "simnode02")
    assert all(g["memory_used_mib"] < 100 for g in node["gpus"])
    assert {"simnode03", "simnode04"} <= suspects()


def test_a_dead_prometheus_is_one_line_and_exit_0(tmp_path, fleet):
    sim, _prom, _work = fleet
    prom = start_prometheus([f"127.0.0.1:{sim.port}"], tmp_path)
    port = prom.port
    prom.stop()
    r = snapshot(port, "--fail-on", "high")
    assert r.returncode == 0, r.stderr
    (node,) = json.loads(r.stdout)["nodes"]
    assert "refused" in node["error"] and "\n" not in node["error"] and node["gpus"] == []


def test_tls_is_refused_unless_the_ca_is_trusted(tmp_path, fleet):
    sim, _prom, _work = fleet
    made = subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                           "-nodes", "-keyout", str(tmp_path / "key.pem"), "-out", str(tmp_path / "cert.pem"),
                           "-days", "2", "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"],
                          capture_output=True, text=True)
    if made.returncode != 0:
        pytest.skip(f"openssl cannot make a test certificate: {made.stderr.strip()[:200]}")
    web = tmp_path / "web.yml"
    web.write_text(f"tls_server_config:\n  cert_file: {tmp_path / 'cert.pem'}\n  key_file: {tmp_path / 'key.pem'}\n")
    prom = start_prometheus([f"127.0.0.1:{sim.port}"], tmp_path, web_config=web)
    try:
        refused = nodes_of(snapshot(prom.port, scheme="prometheus+https"))
        assert len(refused) == 1 and "not trusted" in refused[0]["error"]
        def trusted():
            nodes = nodes_of(snapshot(prom.port, "--prometheus-ca", str(tmp_path / "cert.pem"),
                                      scheme="prometheus+https"))
            return all(n["error"] is None and n["gpus"] for n in nodes)
        assert until(trusted, BOUND_S, 0.5)
    finally:
        prom.stop()
