"""The CLI contract: exit codes, one-line errors, no tracebacks.

Through ``console.cli.main(argv)`` in this process (conftest.run_cli), but for what only the real
process shows (``real``: the installed entry point, its exit status, a reader that leaves).
The two tests of ``snapshot local`` read this machine's whole process table: marked serial."""
import json
import re
import subprocess

import pytest

from conftest import gpu_incident_cmd, run_cli
from tests.polling import until

run = run_cli


def real(*args):
    """The installed command in a process of its own."""
    return subprocess.run([*gpu_incident_cmd(), *args], capture_output=True, text=True, timeout=60)


def test_version():
    for r in (real("--version"), run("--version")):
        assert r.returncode == 0 and r.stdout.startswith("gpu-incident ")


def test_the_real_process_exits_2_with_one_line_on_bad_usage():
    r = real("--no-such-flag")
    assert r.returncode == 2 and r.stderr.startswith("gpu-incident: ") and len(r.stderr.splitlines()) == 1
    assert "Traceback" not in r.stderr


@pytest.mark.parametrize("args", [
    ["--no-such-flag"],
    ["--interval", "0"],
    ["--interval", "soon"],
    ["snapshot", "--json", "--fail-on", "bad"],
    ["simulate", "--port", "99999"],
    ["timeline", "frobnicate"],
    ["timeline", "show", "no-such-incident"],
    ["snapshot", "--json", "gpu[01-"],          # unbalanced hostlist
    ["snapshot", "--json", "demo:no-such-scenario"],
    ["--config", "/nonexistent/config.toml", "demo"],
    ["replay", "/nonexistent/incident.jsonl"],
    ["follow", "/nonexistent/incident.jsonl"],
    ["replay", "/tmp"],
    ["snapshot", "--json", "demo", "--debug-log", "/"],
])
def test_bad_usage_exits_2_with_one_line(args, tmp_path):
    r = run(*args, "--incident-dir", str(tmp_path)) if args[0] == "timeline" else run(*args)
    assert r.returncode == 2, (args, r.stdout, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert "Traceback" not in r.stderr and lines[0].startswith("gpu-incident")


def test_follow_of_an_unknown_id_says_so_in_one_line(tmp_path):
    r = run("follow", "nope", "--incident-dir", str(tmp_path))
    assert r.returncode == 2 and r.stderr.splitlines() == [r.stderr.strip()], r.stderr
    assert "no incident 'nope'" in r.stderr


def test_bad_config_file_names_the_problem(tmp_path):
    cfg = tmp_path / "c.toml"
    cfg.write_text("[defaults]\ninterval = -1\n")
    r = run("--config", str(cfg), "demo")
    assert r.returncode == 2 and f"config file {cfg}: [defaults] interval must be between 0.1 and 3600 s" in r.stderr


def test_timeline_cli_list_show_export(tmp_path):
    from console.incident import timeline
    with timeline.open_incident(tmp_path, "inc-7") as tl:
        tl.append("hypothesis", "memory needs more time", node="gpu07")
        tl.append("check", "wait 5 s", node="gpu07", command="sleep 5; nvidia-smi --query-gpu=index,memory.used --format=csv,noheader",
                  rc=0, output="0, 76109 MiB")
    r = run("timeline", "list", "--incident-dir", str(tmp_path))
    assert r.returncode == 0 and r.stdout.splitlines()[0].split() == [
        "ID", "NODES", "STARTED", "(UTC)", "HYPOTHESES", "ACTIONS", "STATE", "LAST", "ENTRY"]
    row = r.stdout.splitlines()[1].split()
    assert row[:2] == ["inc-7", "gpu07"] and row[4:9] == ["1", "(1", "open)", "0", "open"]
    r = run("timeline", "show", "inc-7", "--incident-dir", str(tmp_path))
    assert "memory needs more time" in r.stdout and "$ sleep 5;" in r.stdout
    out = tmp_path / "pm.md"
    r = run("timeline", "export", str(tl.path), "-o", str(out))
    assert r.returncode == 0 and out.read_text().startswith("# Incident inc-7")
    r = run("timeline", "export", "inc-7", "--format", "json", "--incident-dir", str(tmp_path))
    assert [json.loads(x)["seq"] for x in r.stdout.splitlines()] == [1, 2]


def test_fail_on_exits_1_only_when_a_finding_reaches_the_severity():
    # reset-required: Xid 154 "GPU Reset Required" is at least high
    r = run("snapshot", "--json", "demo:reset-required", "--fail-on", "high")
    assert r.returncode == 1, r.stderr
    doc = json.loads(r.stdout)   # the document is still printed
    kinds = {f["kind"] for f in doc["nodes"][0]["findings"]}
    assert {"xid", "reset-blocker"} <= kinds
    # nothing in the graceful control case is critical
    r = run("snapshot", "--json", "demo:graceful", "--fail-on", "critical")
    assert r.returncode == 0, r.stdout


def test_snapshot_demo_matches_the_seed_and_keeps_target_order():
    r = run("snapshot", "--json", "demo:graceful", "demo")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert [n["name"] for n in doc["nodes"]] == ["demo:graceful", "demo"]
    seed = doc["nodes"][1]
    assert [g["memory_used_mib"] for g in seed["gpus"]] == [76109] + [76113] * 6 + [76069]
    assert {g["memory_total_mib"] for g in seed["gpus"]} == {97887}
    holders = [p for p in seed["processes"] if p["gpu_memory_mib"]]
    assert len(holders) == 8 and all(p["name"].startswith("sglang::") for p in holders)
    assert all(p["ppid"] == 72169 for p in holders)
    launcher = next(p for p in seed["processes"] if p["pid"] == 72169)
    assert "--attention-backend flashinfer" in launcher["cmdline"]
    assert all(f["next_step"] for f in seed["findings"])


@pytest.mark.serial
def test_snapshot_local_without_a_gpu_names_the_driver_and_lists_processes():
    r = run("snapshot", "--json", "local")
    assert r.returncode == 0
    node = json.loads(r.stdout)["nodes"][0]
    if node["gpus"]:
        pytest.skip("this machine has a GPU")
    assert "driver" in node["error"] and "\n" not in node["error"]
    assert any(p["pid"] == 1 for p in node["processes"])


def zombie_state(pid: int) -> str | None:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return None


@pytest.mark.serial
def test_real_zombie_is_reported_by_snapshot_local():
    import sys
    # a parent that forks a child which exits at once, and never reaps it
    parent = subprocess.Popen([sys.executable, "-c",
                               "import os, sys, time\n"
                               "pid = os.fork()\n"
                               "if pid == 0:\n    os._exit(0)\n"
                               "print(pid, flush=True)\n"
                               "time.sleep(60)\n"], stdout=subprocess.PIPE, text=True)
    try:
        zombie = int(parent.stdout.readline())
        assert until(lambda: zombie_state(zombie) == "Z"), "the child never became a zombie"
        r = run("snapshot", "--json", "local")
        node = json.loads(r.stdout)["nodes"][0]
        proc = next(p for p in node["processes"] if p["pid"] == zombie)
        assert proc["state"] == "Z" and proc["ppid"] == parent.pid
        found = [f for f in node["findings"] if f["kind"] == "zombie" and zombie in f["pids"]]
        assert found, node["findings"]
        assert str(parent.pid) in found[0]["summary"] + found[0]["next_step"]  # the non-reaping parent
    finally:
        parent.kill()
        parent.wait()


def test_snapshot_piped_into_head_exits_quietly():
    import shlex
    cmd = " ".join(shlex.quote(c) for c in gpu_incident_cmd())
    r = subprocess.run(f"{cmd} snapshot --json demo demo:graceful | head -c 10", shell=True,
                       capture_output=True, text=True, timeout=60)
    assert r.stdout == '{\n "taken_' and "Traceback" not in r.stderr and "internal error" not in r.stderr


def test_snapshot_without_json_is_a_plain_report():
    r = run("snapshot", "demo:reset-required")
    assert r.returncode == 0
    assert r.stdout.startswith("demo:reset-required: 8 GPUs,")
    assert "GPU 3" in r.stdout and "xid" in r.stdout and "→ " in r.stdout


def test_simulate_help_says_what_it_does_and_lists_the_scenarios():
    from console.sim.scenarios import SCENARIOS
    r = run("simulate", "--help")
    assert r.returncode == 0
    assert "Serve simulated GPU nodes over SSH" in r.stdout
    assert re.search(r"--scenario NAME\s+what the nodes replay", r.stdout) and "--nodes N" in r.stdout
    for name, scenario in SCENARIOS.items():
        assert f"  {name}" in r.stdout and scenario.title[:40] in r.stdout
    r = run("follow", "--help")
    assert "FILE|ID" in r.stdout and "--live" in r.stdout and "--incident-dir DIR" in r.stdout


def test_the_debug_log_is_0600_and_never_written_through_a_planted_link(tmp_path, capsys):
    """--debug-log holds commands, PIDs and host names and the console runs as root: created
    0600; a symbolic link planted at its path is refused (exit 2), its target untouched."""
    import os
    import stat
    from console import cli
    log = tmp_path / "debug.log"
    assert cli.main(["snapshot", "--json", "demo", "--debug-log", str(log)]) == 0
    assert stat.S_IMODE(os.stat(log).st_mode) == 0o600 and log.read_text()
    victim = tmp_path / "victim"
    victim.write_text("keep me\n")
    link = tmp_path / "planted.log"
    link.symlink_to(victim)
    capsys.readouterr()
    assert cli.main(["snapshot", "--json", "demo", "--debug-log", str(link)]) == 2
    assert victim.read_text() == "keep me\n"
    assert len(capsys.readouterr().err.strip().splitlines()) == 1
