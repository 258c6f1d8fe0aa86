"""`gpu-incident bench`: runs end to end, reports what it promises, refuses bad usage.

Figures are reported, never asserted: only their presence, shape and sign are.
"""
from __future__ import annotations

import argparse
import json
import platform

import pytest

from console.bench import run as bench_run
from console.bench.run import HEADLINE, MAX_NODES, TARGETS, Plan, run_bench, table
from console.bench.ssh import measure_target
from console.bench.stats import percentile
from console.bench.synth import big_probe_text
from console.diagnosis import diagnose
from console.sim.server import start_sim_servers
from console import probe
from console.sources.parse import parse_probe
from console.sources.ssh.options import SshOptions
from tests.sshd_fixture import free_port

FIGURES = ("p50", "p95", "max")
EXPECTED = {
    "transport.probe_local", "transport.ssh_kept", "transport.ssh_fresh",
    "fanout.round", "fanout.key_to_frame", "fanout.cpu", "fleet_ui.key_to_frame", "startup.demo", "local.snapshot",
    "probe.sim_poll.seed", "probe.parse.seed", "probe.diagnose.seed", "probe.parse_diagnose.seed",
    "probe.parse.big", "probe.diagnose.big", "probe.parse_diagnose.big",
    "ui.first_update.seed", "ui.update.seed", "ui.first_update.big", "ui.update.big",
    "ui.first_update.big_all", "ui.update.big_all", "ui.first_update.huge_all", "ui.update.huge_all",
    "ssh.first_snapshot", "ssh.poll", "ssh.probe", "ssh.round", "ssh.cpu_per_s",
}
FLEET_KEYS = ("fleet_nodes", "fleet_query_ms_p50", "fleet_query_ms_p99", "fleet_rss_mib", "fleet_suspects",
              "fleet_prometheus_ms_per_round", "fleet_prometheus_eval_ms_per_round", "fleet_console_cpu_ms_per_round",
              "fleet_console_share_pct")


def bench_args(**kw) -> argparse.Namespace:
    base = dict(quick=True, json=True, nodes=2, target=None)
    base.update(kw)
    return argparse.Namespace(**base)


def tiny(quick: bool, nodes: int | None) -> Plan:
    """The shortest plan that still runs every part (the figures are not what is tested)."""
    return Plan(True, nodes or 2, 2, sim_polls=3, seed_iterations=3, big_iterations=2, rounds=2,
                cpu_seconds=1, ui_updates=1, transport_polls=3, fresh_polls=1, fanout_window_s=0.5, keys=1,
                fanout_settle_s=0.2, fleet_nodes=4, fleet_rounds=2, fleet_scrape_s=1.0, fleet_window_s=2.0,
                fleet_keys=2, realsize_polls=2, realsize_table=(50, 100), fanout_table=(60, 120))


@pytest.mark.heavy      # several seconds: the second pass of .ci/run
def test_quick_json_runs_end_to_end_with_the_documented_document(capsys, ssh_home, monkeypatch):
    monkeypatch.setattr(Plan, "make", classmethod(lambda cls, quick, nodes: tiny(quick, nodes)))
    assert run_bench(bench_args()) == 0
    out = capsys.readouterr().out
    doc = json.loads(out)
    assert isinstance(doc["version"], str) and doc["version"]
    assert doc["machine"]["cpus"] >= 1 and doc["machine"]["python"] == platform.python_version()
    from console.bench.prometheus import prometheus_binary
    fleet = prometheus_binary() is not None
    if fleet:
        assert doc["errors"] == []
    else:       # the fleet part says what is missing (.ci/run installs it)
        assert doc["errors"] == ["fleet: prometheus is not installed (apt-get install prometheus): fleet part skipped"]
    # every headline figure, measured side by side in this run, with its target's verdict
    assert doc["repetitions"] == bench_run.REPS == 3
    for key in HEADLINE:
        if key in FLEET_KEYS and not fleet:
            assert doc[key] is None
            continue
        assert isinstance(doc[key], (int, float)) and not isinstance(doc[key], bool), (key, doc[key])
    assert doc["fanout_nodes"] == 2 and doc["fanout_interval_s"] == 1.0
    assert doc["nvidia_smi_starts_per_poll"] < 0.5, \
        "a kept shell's steady poll starts no nvidia-smi (2 a poll without loop mode): its loops answer"
    assert doc["speedup_vs_fresh_ssh"] > 1 and doc["node_cpu_ms_per_poll"] > 0
    assert set(doc["targets"]) == set(TARGETS)
    assert all(v["met"] in (True, False) and v["target"][:2] in ("<=", ">=") for k, v in doc["targets"].items()
               if fleet or k not in FLEET_KEYS)
    by_name = {r["name"]: r for r in doc["results"]}
    assert set(by_name) == EXPECTED | ({"fleet.round"} if fleet else set())
    if fleet:
        assert doc["fleet_nodes"] == 4 and doc["fleet_suspects"] == 3 and by_name["fleet.round"]["n"] == 2
    for r in doc["results"]:
        assert r["unit"] in ("ms", "ms/s", "%"), r
        assert isinstance(r["n"], int) and r["n"] >= 1, r
        for key in FIGURES:
            assert isinstance(r[key], (int, float)) and r[key] > 0, (r["name"], key, r[key])
        assert r["p50"] <= r["p95"] <= r["max"], r
    # the sizes asked for are the sizes measured
    assert by_name["fanout.key_to_frame"]["n"] == 3 and by_name["fanout.cpu"]["n"] == 3
    assert by_name["transport.ssh_fresh"]["n"] == 3 and by_name["transport.ssh_kept"]["n"] == 9
    assert by_name["ssh.first_snapshot"]["n"] == 2 and by_name["ssh.first_snapshot"]["failed"] == 0
    assert by_name["ssh.poll"]["n"] == 2 * doc["config"]["rounds"]
    assert by_name["ssh.cpu_per_s"]["unit"] == "ms/s" and by_name["ssh.cpu_per_s"]["polls"] >= 2
    assert by_name["probe.parse_diagnose.big"]["processes"] == 2000
    assert by_name["probe.parse_diagnose.big"]["gpus"] == 8
    assert by_name["ui.update.huge_all"]["processes"] == 100_000
    assert by_name["fleet_ui.key_to_frame"]["n"] == 2 and by_name["fleet_ui.key_to_frame"]["nodes"] == 4
    assert doc["config"] == {"quick": True, "nodes": 2, "ssh_nodes": 2, "rounds": doc["config"]["rounds"],
                             "cpu_seconds": doc["config"]["cpu_seconds"], "target": None}
    # the human view of the same document names every figure and result, and no error section
    text = table(doc)
    for name in [*EXPECTED, *HEADLINE]:
        assert name in text
    assert ("errors" not in text if fleet else "prometheus is not installed" in text) and "% of one core" in text


def test_quick_defaults_to_256_nodes_for_the_fan_out():
    assert Plan.make(True, None).nodes == 256 and Plan.make(False, None).nodes == 256
    assert Plan.make(True, 1024).nodes == 1024


@pytest.mark.parametrize("nodes", [0, -1, MAX_NODES + 1, 10_000])
def test_bad_node_count_is_one_line_usage_error(nodes, capsys):
    with pytest.raises(ValueError) as err:
        run_bench(bench_args(nodes=nodes))
    message = str(err.value)
    assert "\n" not in message and "--nodes" in message and f"{MAX_NODES}" in message
    assert capsys.readouterr().out == ""          # nothing measured, nothing printed


@pytest.mark.parametrize("target", ["demo", "local", "bad host", "root@host:99999"])
def test_target_that_is_not_an_ssh_destination_is_usage_error(target, capsys):
    with pytest.raises(ValueError) as err:
        run_bench(bench_args(target=target))
    assert "\n" not in str(err.value)
    assert capsys.readouterr().out == ""


async def test_target_measured_over_kept_and_fresh_connections(tmp_path, ssh_home):
    async with await start_sim_servers("seed", 1, None, tmp_path / "state") as servers:
        options = SshOptions(known_hosts=str(servers.known_hosts), identity=(str(servers.client_key),))
        before = len(servers.nodes[0].history)
        results, errors = await measure_target(servers.targets[0], options, device_glob="/dev/nvidia*",
                                               probe_timeout=10.0, rounds=2)
        probes = [c for _t, c in servers.nodes[0].history[before:] if "begin gpu" in c]
    assert errors == []
    by_name = {r.name: r for r in results}
    assert set(by_name) == {"target.first_poll", "target.kept", "target.kept.probe", "target.fresh"}
    assert len(by_name["target.kept"].samples) == 2 and len(by_name["target.fresh"].samples) == 2
    assert all(x > 0 for r in results for x in r.samples)
    assert by_name["target.kept"].as_dict()["gpus"] == 8
    assert len(probes) == 5, "first + 2 kept + 2 fresh polls reached the node"


async def test_unreachable_target_is_reported_as_an_error_not_raised(ssh_home):
    port = free_port()
    results, errors = await measure_target(f"root@127.0.0.1:{port}", SshOptions(connect_timeout=3),
                                           device_glob="/dev/nvidia*", probe_timeout=5.0, rounds=2)
    assert results == []
    assert len(errors) == 1 and "refused" in errors[0] and f"{port}" in errors[0]


def test_big_node_goes_through_the_real_parser_with_field_faults():
    mark = probe.new_mark()
    snap = parse_probe("big", big_probe_text(mark), mark, taken_at=1_796_000_000.0)
    assert snap.error is None and snap.warnings == ()
    assert len(snap.processes) == 2000 and len(snap.gpus) == 8
    assert [g.index for g in snap.gpus] == list(range(8))
    kinds = {f.kind for f in diagnose(snap)}
    assert {"zombie", "d-state", "orphan", "hidden-holder", "foreign-pid", "ghost-memory", "xid",
            "reset-blocker"} <= kinds
    # successive polls differ (the UI part needs real changes to apply), and the text is deterministic
    assert big_probe_text(mark, tick=1) != big_probe_text(mark) == big_probe_text(mark)


def test_percentile_interpolates_between_ranks():
    assert percentile([5.0], 95) == 5.0
    assert percentile([4.0, 1.0, 3.0, 2.0], 50) == 2.5
    assert percentile(list(range(1, 101)), 95) == pytest.approx(95.05)
    assert percentile([1.0, 2.0], 100) == 2.0
    with pytest.raises(ValueError):
        percentile([], 50)


def test_fleet_account_is_prometheus_own_time_per_round_and_the_consoles_cpu_as_a_share_of_it():
    from console.bench.fleet import account
    got = account([30.0, 50.0], {"http": 1.0, "engine": 0.5}, {"http": 1.6, "engine": 0.9})
    # Prometheus says 400 ms of evaluation over 2 rounds: 200 a round; the console spent 40 a round
    assert got == {"fleet_prometheus_ms_per_round": 300.0, "fleet_prometheus_eval_ms_per_round": 200.0,
                   "fleet_console_cpu_ms_per_round": 40.0, "fleet_console_share_pct": 20.0}
    assert account([], {"http": 0, "engine": 0}, {"http": 0, "engine": 0}) == {}
