"""The simulator's dcgm-exporter endpoint (console/sim/exporter.py): format, values that move
with the simulation, many Hostnames on one endpoint, and the HTTP side."""
import re
import urllib.error
import urllib.request

import pytest

from console.clock import FakeClock
from console.sim import exporter as ex
from console.sim.mixes import scenario_of
from console.sim.node import SimNode
from console.sim.server import node_names, node_scenarios, ssh_config_text

LINE = re.compile(r'^(?P<name>[A-Z_]+)\{(?P<labels>(?:[A-Za-z_]+="(?:[^"\\\n]|\\.)*",?)*)\} (?P<value>-?[0-9.]+)$')
LABEL = re.compile(r'([A-Za-z_]+)="((?:[^"\\\n]|\\.)*)"')


def series(text):
    """(metric, labels, value) per sample line; the comment lines checked on the way."""
    out, helped = [], []
    for line in text.splitlines():
        if line.startswith("# HELP "):
            helped.append(line.split()[2])
            continue
        if line.startswith("# TYPE "):
            assert line.split()[2] == helped[-1] and line.split()[3] == "gauge"
            continue
        m = LINE.match(line)
        assert m, line
        labels = {k: re.sub(r"\\(.)", lambda c: {"n": "\n"}.get(c.group(1), c.group(1)), v)
                  for k, v in LABEL.findall(m.group("labels"))}
        out.append((m.group("name"), labels, float(m.group("value"))))
        assert m.group("name") == helped[-1], "samples sit under their own HELP/TYPE"
    assert sorted(helped) == sorted(n for n, _ in ex.METRICS)
    return out


def values(text, metric, host):
    return {int(lab["gpu"]): v for name, lab, v in series(text) if name == metric and lab["Hostname"] == host}


def test_dcgm_exporter_labels_in_its_order():
    clock = FakeClock()
    m = SimNode("slow-teardown", clock=clock, name="gpu01")
    text = ex.Exporter(ex.own_nodes([m], ["slow-teardown"])).render(clock.now()).decode()
    first = [line for line in text.splitlines() if not line.startswith("#")][0]
    keys = [k for k, _ in LABEL.findall(first)]
    assert keys == ["gpu", "UUID", "pci_bus_id", "device", "modelName", "Hostname", "DCGM_FI_DRIVER_VERSION",
                    "container", "namespace", "pod"]
    samples = series(text)
    assert len(samples) == 4 * 8
    lab = samples[0][1]
    assert lab["UUID"] == m.gpus[0].uuid and lab["pci_bus_id"] == m.gpus[0].bus_id and lab["device"] == "nvidia0"
    busy = values(text, ex.USED, "gpu01")
    assert busy[0] > 80000 and busy[7] == 4
    util = values(text, ex.UTIL, "gpu01")
    assert 90 <= util[0] <= 100 and util[7] == 0
    pods = {int(lab["gpu"]): lab["pod"] for name, lab, _ in samples if name == ex.USED}
    assert pods[0] == "pretrain-8b-gpu01" and pods[7] == ""          # no pod on an unused GPU


def test_hostile_hostname_is_escaped_not_interpreted():
    m = SimNode("graceful", clock=FakeClock(), name="x")
    bad = 'evil"} 1\nDCGM_FI_DEV_FB_USED{Hostname="forged'
    text = ex.Exporter([ex.ExportedNode(bad, m)]).render().decode()
    hosts = {lab["Hostname"] for _, lab, _ in series(text)}
    assert hosts == {bad}


def test_a_graceful_kill_frees_memory_and_a_hung_server_keeps_it():
    clock = FakeClock()
    good = SimNode("renamed-workers", clock=clock, name="good")
    hung = SimNode("seed", clock=clock, name="hung")
    exp = ex.Exporter(ex.own_nodes([good, hung], ["renamed-workers", "seed"]))
    before = exp.render(clock.now()).decode()
    assert values(before, ex.USED, "good")[0] > 80000 and values(before, ex.UTIL, "good")[0] == 0
    assert values(before, ex.USED, "hung")[0] > 70000 and values(before, ex.UTIL, "hung")[0] == 0
    good.signal(41388, "TERM")                     # VLLM::EngineCore: its group shuts down
    for pid in [p.pid for p in hung.visible_procs() if p.comm == "python3" and "sglang" in p.args]:
        hung.signal(pid, "TERM")                   # the hung SGLang never runs its handler
    clock.advance(10)
    after = exp.render(clock.now()).decode()
    assert set(values(after, ex.USED, "good").values()) == {4}
    assert values(after, ex.USED, "hung")[0] > 70000 and values(after, ex.UTIL, "hung")[0] == 0
    free = values(after, ex.FREE, "good")
    assert free[0] > values(before, ex.FREE, "good")[0]


def test_the_xid_node_reports_its_last_xid_on_its_gpu():
    m = SimNode("reset-required", clock=FakeClock(), name="x")
    text = ex.Exporter(ex.own_nodes([m], ["reset-required"])).render().decode()
    assert values(text, ex.XID, "x") == {0: 0, 1: 0, 2: 0, 3: 154, 4: 0, 5: 0, 6: 0, 7: 0}


def test_the_fleet_mix_has_busy_stuck_and_xid_nodes_from_four_on():
    first = [scenario_of("fleet", i, 4) for i in range(4)]
    assert first == ["slow-teardown", "renamed-workers", "reset-required", "seed"]
    many = node_scenarios("fleet", 4096)
    assert many.count("slow-teardown") + many.count("graceful") > 4000
    assert 50 < many.count("renamed-workers") + many.count("seed") < 100 and many.count("reset-required") >= 2


def test_exporter_only_many_hostnames_on_one_endpoint_with_their_own_uuids():
    names = node_names(4096)
    nodes = ex.shared_nodes(names, node_scenarios("fleet", 4096), clock=FakeClock())
    assert len({id(n.machine) for n in nodes}) <= 5            # a handful of machines behind 4096 names
    body = ex.Exporter(nodes).render()
    lines = body.count(b"\n")
    assert lines == 4096 * 8 * 4 + 2 * 4
    tail = body[-2000:].decode().splitlines()[-1]
    assert 'Hostname="simnode4096"' in tail
    uuids = set(re.findall(rb'DCGM_FI_DEV_FB_USED\{gpu="0",UUID="([^"]+)"', body))
    assert len(uuids) == 4096


def test_ssh_config_maps_each_hostname_to_its_port(tmp_path):
    text = ssh_config_text(["simnode01", "simnode02"], [2201, 2202], tmp_path / "client key", tmp_path / "kh")
    block = text.split("Host simnode02\n")[1]
    assert "Port 2202" in block and "HostName 127.0.0.1" in block and f'IdentityFile "{tmp_path}/client key"' in block
    assert f"UserKnownHostsFile {tmp_path}/kh" in block


def test_http_serves_metrics_only():
    m = SimNode("graceful", clock=FakeClock(), name="gpu01")
    exp = ex.Exporter(ex.own_nodes([m], ["graceful"]))
    exp.render()
    server = ex.ExporterServer(exp, "127.0.0.1", 0)
    server.start()
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{server.port}/metrics", timeout=10) as r:
            assert r.headers["Content-Type"].startswith("text/plain; version=0.0.4")
            assert r.read() == exp.body
        with pytest.raises(urllib.error.HTTPError) as exc:
            urllib.request.urlopen(f"http://127.0.0.1:{server.port}/", timeout=10)
        assert exc.value.code == 404
    finally:
        server.close()
