"""What the on-call pastes and what the console refuses before it starts: `gate` and `watch` print
a command that opens the nodes as they were read (the SSH files, the incident dir, shell-quoted);
a missing `-i` key is refused up front; `--incident ID` that names no incident says "new incident"
and offers the IDs that look like it; `demo:Seed` is the seed scenario."""
from __future__ import annotations

import shlex

import pytest

from conftest import run_cli, wait_for
from console import cli
from console.clock import FakeClock
from console.incident.timeline import open_incident
from console.session import watch
from console.session.core import Session
from console.sources.sim import SimSource
from console.monitor import diagnosed


def ssh_files(tmp_path) -> list[str]:
    key = tmp_path / "client key"           # a space: the printed command must quote it
    key.write_text("not a real key\n")
    return ["--known-hosts", str(tmp_path / "known_hosts"), "-i", str(key),
            "--ssh-config", str(tmp_path / "ssh config"), "--accept-new-host-keys"]


def pasted(line: str) -> list[str]:
    """The words a shell makes of the command at the end of the line ("…: gpu-incident …")."""
    words = shlex.split(line[line.index("gpu-incident --incident"):].rstrip(")"))
    assert words[0] == "gpu-incident"
    return words[1:]


def test_gate_prints_a_continue_command_with_the_ssh_files_it_ran_with(tmp_path):
    incidents = tmp_path / "my incidents"
    r = run_cli("gate", "demo:graceful", "--wait", "0", "--incident-dir", str(incidents), *ssh_files(tmp_path))
    assert r.returncode == 1, r.stderr
    last = r.stdout.splitlines()[-1]
    args = cli.build_console_parser().parse_args(pasted(last))      # as the console reads it, pasted
    assert args.targets == ["demo:graceful"] and args.incident and (incidents / f"{args.incident}.jsonl").exists()
    assert args.known_hosts == str(tmp_path / "known_hosts") and args.identity == [str(tmp_path / "client key")]
    assert args.ssh_config == str(tmp_path / "ssh config") and args.accept_new_host_keys
    assert args.incident_dir == str(incidents)


async def test_watch_says_its_cause_once_for_every_gpu_and_tells_a_command_that_works_pasted(tmp_path):
    source = SimSource(name="gpu07", scenario="seed", clock=FakeClock())
    lines: list[str] = []
    told: list[dict] = []
    options = ["--known-hosts", str(tmp_path / "known hosts"), "-i", str(tmp_path / "key")]
    w = watch.Watcher(Session([source]), open_incident=lambda: open_incident(tmp_path), say=lines.append,
                      tell=told.append, idle_after=0, options=options)
    await w.update(diagnosed(await source.poll()))
    await w.stop()
    opened = next(x for x in lines if "opened incident" in x)
    assert "idle-memory: GPUs 0-7 hold 74.3 GiB each at 0 % utilisation" in opened, opened
    assert opened.count("holds") == 0 and opened.count("hold ") == 1, opened
    args = cli.build_console_parser().parse_args(pasted(opened))
    assert args.known_hosts == str(tmp_path / "known hosts") and args.identity == [str(tmp_path / "key")]
    assert args.targets == ["gpu07"] and args.incident == told[0]["incident"]
    assert shlex.split(told[0]["continue"])[1:] == pasted(opened)
    assert told[0]["severity"] in ("high", "critical")          # the notification's top-level severity


@pytest.mark.parametrize("command", [["demo"], ["gate", "demo"], ["watch", "demo"], ["snapshot", "demo"]])
def test_a_missing_key_file_is_refused_up_front_in_one_line(tmp_path, command):
    r = run_cli(*command, "-i", str(tmp_path / "no-such-key"), "--incident-dir", str(tmp_path)) \
        if command[0] != "snapshot" else run_cli(*command, "-i", str(tmp_path / "no-such-key"))
    assert r.returncode == 2
    assert r.stderr.strip() == f"gpu-incident: cannot read key file {tmp_path / 'no-such-key'} (-i): " \
                               "No such file or directory"
    assert not list(tmp_path.glob("*.jsonl"))       # no incident opened for it


def test_watch_help_shows_a_percent_sign_once():
    r = run_cli("watch", "--help")
    assert r.returncode == 0 and "0%%" not in r.stdout and "held at 0% too long" in " ".join(r.stdout.split())


def test_a_scenario_name_is_taken_whatever_its_case():
    r = run_cli("snapshot", "--json", "demo:Seed", "demo:MPS")
    assert r.returncode == 0, r.stderr
    assert '"name": "demo:seed"' in r.stdout and '"name": "demo:mps"' in r.stdout


def test_an_unknown_incident_id_is_new_and_the_ones_like_it_are_offered(tmp_path):
    from console.session.startup import new_incident
    for ident in ("20261203-101500-ab12", "20261203-101500-ab13", "other"):
        (tmp_path / f"{ident}.jsonl").write_text("")
    assert new_incident(tmp_path, "20261203-101500-ab12") == (False, [])
    is_new, near = new_incident(tmp_path, "20261203-101500-ab21")
    assert is_new and sorted(near) == ["20261203-101500-ab12", "20261203-101500-ab13"] and "other" not in near


async def test_the_console_says_new_incident_on_the_top_line_and_in_the_messages(tmp_path):
    from console.session.startup import new_incident_words
    from console.ui.app import IncidentApp
    from console.ui.details import DetailScreen
    tl = open_incident(tmp_path, "inc-7")
    app = IncidentApp([SimSource(name="demo", scenario="seed", clock=FakeClock())], timeline=tl,
                      new_incident=new_incident_words("inc-7", ["inc-1"]))
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_for(pilot, lambda: "demo" in app.snapshots)
        top = str(app.query_one("#status").render())
        assert top.rstrip().endswith("new inc-7") or "new incident inc-7" in top, top
        await pilot.press("m")
        await wait_for(pilot, lambda: isinstance(app.screen, DetailScreen))
        shown = " ".join(app.screen.text.split())
        assert "new incident inc-7" in shown and "did you mean inc-1?" in shown, shown
