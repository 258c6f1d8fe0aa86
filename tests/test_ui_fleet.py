"""The fleet table (fleet mode, a prometheus:// target), driven as an operator drives it: the
suspects come first, a dead source keeps the last data on screen marked stale, labels from the
source render literally, and enter opens a node's console over real SSH in the same incident.

Fleet rounds are posted the way the FleetMonitor posts them (FleetUpdated); the Prometheus
source itself is console/sources/prometheus/'s to test against a real Prometheus."""
from __future__ import annotations

import re

import asyncio
import dataclasses

import pytest

pytest.importorskip("textual")

from console.clock import FakeClock  # noqa: E402
from console.incident import timeline  # noqa: E402
from console.model import FleetSnapshot  # noqa: E402
from console.monitor import FleetMonitor  # noqa: E402
from console.sources.sim import SimSource  # noqa: E402
from console.sources.ssh.options import SshOptions  # noqa: E402
from console.sources.targets import make_source  # noqa: E402
from console.textsafe import printable  # noqa: E402
from console.ui.app import HelpScreen, IncidentApp  # noqa: E402
from console.ui.fleet_view import FleetScreen, FleetSetup, FleetUpdated  # noqa: E402
from console.ui.fleet_table import FleetTable  # noqa: E402
from tests.fleet_fixtures import SOURCE, assessed, mixed_fleet, node  # noqa: E402
from tests.polling import eventually  # noqa: E402


class PostedOnly:
    """A fleet source for tests that post their rounds: never asked (autostart=False)."""

    async def poll(self) -> FleetSnapshot:
        raise AssertionError("not polled in these tests")

    async def close(self) -> None:
        pass


class Answers:
    """A fleet source that answers every round with the same snapshot (the FleetMonitor polls it)."""

    def __init__(self, snap: FleetSnapshot) -> None:
        self.snap = snap
        self.polls = 0

    async def poll(self) -> FleetSnapshot:
        self.polls += 1
        return self.snap

    async def close(self) -> None:
        pass


def screen(app) -> str:
    return "\n".join("".join(seg.text for seg in strip) for strip in app.screen._compositor.render_strips())


def fleet_app(node_source=None, *, tl=None, source=None, clock=None) -> IncidentApp:
    """Fleet mode with only the fleet target; ``source``: polled (autostart), else rounds are posted."""
    node_source = node_source or (lambda host: SimSource(name=host, scenario="seed", clock=FakeClock()))
    return IncidentApp([], timeline=tl, autostart=source is not None, clock=clock or FakeClock(1_012.0),
                       fleet=FleetSetup(source or PostedOnly(), SOURCE, node_source))


def table(app) -> FleetTable:
    return app.get_screen("fleet").query_one(FleetTable)


def order(app) -> list[str]:
    return [n.hostname for n in table(app).nodes]


async def test_suspects_first_by_rank_then_hostname_and_the_header_counts_them():
    app = fleet_app()
    async with app.run_test(size=(80, 24)) as pilot:
        assert isinstance(app.screen, FleetScreen)
        app.post_message(FleetUpdated(mixed_fleet(taken_at=1_000.0)))
        assert await eventually(lambda: len(table(app).nodes) == 6)
        assert order(app) == ["gpu-0004", "gpu-0002", "gpu-0003", "gpu-0000", "gpu-0001", "gpu-0005"]
        await pilot.pause()
        text = screen(app)
        lines = text.splitlines()
        assert lines[0].split() == ["prometheus://prom.example:9090", "12", "s", "ago", "query", "42", "ms", "6",
                                    "nodes", "3", "suspect"]
        assert lines[2].startswith("gpu-0004") and lines[2].split()[5:7] == ["GPUs", "0-7:"]
        assert "79" in lines[2].split()[4] and "Xid 79 (GPU has fallen" in lines[2]
        assert lines[3].startswith("gpu-0002") and "560/637" in lines[3] and "0%" in lines[3]
        assert "GPUs 0-7: 70.0 GiB each at 0% for 10 min" in lines[3]
        assert "gpu-0004  8× NVIDIA H100 80GB HBM3" in text          # the highlighted node in full
        # the cursor moves, and stays on its node when a new round reorders the table
        await pilot.click(FleetTable, offset=(3, 4))             # the fourth row: gpu-0000
        assert await eventually(lambda: table(app).current.hostname == "gpu-0000")
        await pilot.press("home", "down", "down")
        assert table(app).current.hostname == "gpu-0003"
        quiet = mixed_fleet(taken_at=1_010.0)
        nodes = tuple(node("gpu-0004") if n.hostname == "gpu-0004" else n for n in quiet.nodes)
        app.post_message(FleetUpdated(assessed(nodes, 1_010.0)))
        assert await eventually(lambda: order(app)[0] == "gpu-0002")
        assert table(app).current.hostname == "gpu-0003"


async def test_a_dead_source_keeps_the_last_data_marked_stale_and_keys_still_answer():
    app = fleet_app()
    async with app.run_test(size=(80, 24)) as pilot:
        app.post_message(FleetUpdated(mixed_fleet(taken_at=1_000.0)))
        assert await eventually(lambda: len(table(app).nodes) == 6)
        dead = FleetSnapshot(source=SOURCE, taken_at=1_011.0,
                             error="connection refused (unreachable)")
        app.post_message(FleetUpdated(dead))
        assert await eventually(lambda: table(app).stale)
        await pilot.pause()
        text = screen(app)
        assert len(table(app).nodes) == 6 and order(app)[0] == "gpu-0004"
        assert text.splitlines()[1].strip() == "✖ stale (data of 12 s ago): connection refused (unreachable)"
        assert "connection refused (unreachable)" in app.activity.history()[0].text      # m: in full
        assert "Suspicion (stale: last data kept)" in text
        await pilot.press("down")
        assert table(app).current.hostname == "gpu-0002"
        await pilot.press("question_mark")
        assert await eventually(lambda: isinstance(app.screen, HelpScreen))
        await pilot.press("escape")
        # the source answers again: fresh data, no error line
        app.post_message(FleetUpdated(mixed_fleet(taken_at=1_012.0)))
        assert await eventually(lambda: not table(app).stale)
        assert await eventually(lambda: "✖" not in screen(app))


async def test_the_fleet_monitor_turns_a_hanging_or_failing_source_into_an_error_round():
    class Hangs:
        async def poll(self):
            await asyncio.Event().wait()

        async def close(self):
            pass

    class Fails(Hangs):
        async def poll(self):
            raise ConnectionRefusedError(111, "Connection refused")

    got: list[FleetSnapshot] = []
    hung = await FleetMonitor(Hangs(), name=SOURCE, timeout=0.2, on_update=got.append).poll_once()
    assert "timed out" in hung.error and not hung.nodes and got == [hung]
    failed = await FleetMonitor(Fails(), name=SOURCE, timeout=5).poll_once()
    assert "Connection refused" in failed.error and failed.source == SOURCE


HOSTILE = "[bold]gpu-x[/bold]\n\x1b[31m"
PAYLOAD_MODEL = "[/bogus] H100"
PAYLOAD_POD = "ns/[@click=app.quit]pod[/]"


async def test_hostnames_models_and_pods_from_the_source_render_literally():
    hostile = dataclasses.replace(node(HOSTILE, model=PAYLOAD_MODEL, pod=PAYLOAD_POD),
                                  suspicion="[b]held[/b] at 0%\x1b[2J", suspicion_rank=2)
    snap = FleetSnapshot(source=SOURCE, taken_at=1_000.0, nodes=(hostile, node("gpu-0001")))
    app = fleet_app()
    async with app.run_test(size=(160, 30)) as pilot:
        app.post_message(FleetUpdated(snap))
        assert await eventually(lambda: len(table(app).nodes) == 2)
        await pilot.pause()
        text = screen(app)
        assert printable(HOSTILE) in text                      # "[bold]gpu-x[/bold]\x0a\x1b[31m"
        assert "[b]held[/b] at 0%\\x1b[2J" in text
        assert f"8× {PAYLOAD_MODEL}" in text and PAYLOAD_POD in text
        assert "\x1b" not in text
        await pilot.press("question_mark")
        assert await eventually(lambda: isinstance(app.screen, HelpScreen))
        await pilot.press("escape")
        assert app.is_running and app.return_code is None


async def test_slash_filters_the_fleet_by_hostname():
    app = fleet_app()
    async with app.run_test(size=(80, 24)) as pilot:
        app.post_message(FleetUpdated(mixed_fleet()))
        assert await eventually(lambda: len(table(app).nodes) == 6)
        await pilot.press("slash")
        await pilot.press(*"0003", "enter")
        assert await eventually(lambda: order(app) == ["gpu-0003"])
        assert await eventually(lambda: "filter: 0003 (1 shown)" in screen(app))
        await pilot.press("slash", "ctrl+u", "enter")          # empty clears
        assert await eventually(lambda: len(order(app)) == 6)


async def test_the_fleet_screen_offers_its_keys_and_not_the_node_panels():
    app = fleet_app()
    async with app.run_test(size=(80, 24)) as pilot:
        app.post_message(FleetUpdated(mixed_fleet()))
        assert await eventually(lambda: len(table(app).nodes) == 6)
        await pilot.pause()
        footer = screen(app).splitlines()[-1]
        assert "Open node" in footer and "? Help" in footer and "q Quit" in footer
        assert "Wait" not in footer and "Fleet" not in footer and "Drain" not in footer
        said = len(app.activity.history())
        await pilot.press("w", "t", "a", "D", "U")            # node keys: nothing happens here
        await pilot.pause()
        assert isinstance(app.screen, FleetScreen) and len(app.activity.history()) == said
        assert not app.workers or all(w.group != "checks" for w in app.workers)
        await pilot.press("question_mark")
        assert await eventually(lambda: isinstance(app.screen, HelpScreen))
        assert await eventually(lambda: "on the fleet table" in screen(app))


async def test_enter_opens_the_node_in_the_same_incident_and_escape_comes_back(incident_dir):
    tl = timeline.open_incident(incident_dir, "fleet-demo")
    source = Answers(mixed_fleet())
    app = fleet_app(tl=tl, source=source)
    try:
        async with app.run_test(size=(80, 24)) as pilot:
            assert await eventually(lambda: len(table(app).nodes) == 6)
            assert source.polls == 1
            await pilot.press("enter")                              # the top suspect: gpu-0004
            assert await eventually(lambda: not isinstance(app.screen, FleetScreen))
            assert [s.name for s in app.sources] == ["gpu-0004"] and app.current_node == "gpu-0004"
            assert await eventually(lambda: app.snapshots.get("gpu-0004") is not None)
            note = [e for e in tl.entries if "from the fleet" in e.text]
            assert len(note) == 1 and note[0].node == "gpu-0004"
            assert note[0].text == ("opened gpu-0004 from the fleet (prometheus://prom.example:9090): "
                                    "suspect: GPUs 0-7: Xid 79 (GPU has fallen off the bus)")
            assert await eventually(lambda: "esc Fleet" in screen(app).splitlines()[-1])
            await pilot.press("escape")
            assert await eventually(lambda: isinstance(app.screen, FleetScreen))
            await pilot.press("down", "enter")                       # a second node: added, not replacing
            assert await eventually(lambda: [s.name for s in app.sources] == ["gpu-0004", "gpu-0002"])
            assert app.current_node == "gpu-0002"
            assert await eventually(lambda: app.query_one("#nodes").row_count == 2)
            await pilot.press("escape", "up", "enter")              # the first again: chosen, not added twice
            assert await eventually(lambda: app.current_node == "gpu-0004")
            assert len(app.sources) == 2
            await pilot.press("q")
    finally:
        tl.close()


async def test_a_hostname_that_is_no_ssh_destination_says_so_and_stays_on_the_fleet():
    def node_source(host: str):
        return make_source(host)                 # raises ValueError: not a destination
    snap = FleetSnapshot(source=SOURCE, taken_at=1_000.0, nodes=(node("bad host[1"),))
    app = fleet_app(node_source)
    async with app.run_test(size=(80, 24)) as pilot:
        app.post_message(FleetUpdated(snap))
        assert await eventually(lambda: len(table(app).nodes) == 1)
        await pilot.press("enter")
        assert await eventually(lambda: "cannot open bad host[1" in app.activity.history()[0].text)
        assert isinstance(app.screen, FleetScreen) and app.sources == []


# ---------------------------------------------------------------- real SSH behind the hostnames

def ssh_config(tmp_path, sshd, ports: dict[str, int]):
    kh = sshd.write_known_hosts(tmp_path / "known_hosts")
    cfg = tmp_path / "ssh_config"
    cfg.write_text("".join(f"Host {host}\n    Hostname 127.0.0.1\n    Port {port}\n    User root\n"
                           f"    IdentityFile {sshd.keys.client_key}\n    UserKnownHostsFile {kh}\n"
                           for host, port in ports.items()))
    return SshOptions(ssh_config=str(cfg), connect_timeout=3)


async def test_enter_opens_a_real_ssh_node_and_an_unreachable_one_shows_its_error(sshd, tmp_path, ssh_home,
                                                                                 incident_dir):
    from tests.sshd_fixture import free_port
    a = sshd.nodes[0]
    a.smi.set()
    options = ssh_config(tmp_path, sshd, {"gpu-a": a.port, "gpu-gone": free_port()})
    snap = assessed((node("gpu-a", used_mib=76109, util=0, n=2, held=True), node("gpu-gone", xid=79)))
    tl = timeline.open_incident(incident_dir, "fleet-ssh")
    app = fleet_app(lambda host: make_source(host, ssh=options, probe_timeout=5), tl=tl, source=Answers(snap))
    try:
        async with app.run_test(size=(80, 24)) as pilot:
            assert await eventually(lambda: len(table(app).nodes) == 2)
            await pilot.press("down", "enter")                       # gpu-a, over real SSH
            assert await eventually(lambda: app.snapshots.get("gpu-a") is not None
                                    and app.snapshots["gpu-a"].error is None), app.snapshots.get("gpu-a")
            assert app.snapshots["gpu-a"].gpu(0).memory_used_mib == 76109
            await pilot.press("escape", "up", "enter")               # gpu-gone: nothing listens there
            assert await eventually(lambda: app.snapshots.get("gpu-gone") is not None)
            assert "refused" in app.snapshots["gpu-gone"].error or "unreachable" in app.snapshots["gpu-gone"].error
            assert await eventually(lambda: "✖" in screen(app))      # the node's own error line
            await pilot.press("question_mark")                        # and the console answers keys
            assert await eventually(lambda: isinstance(app.screen, HelpScreen))
            await pilot.press("escape")
            assert [e.node for e in tl.entries if "from the fleet" in e.text] == ["gpu-a", "gpu-gone"]
            await pilot.press("q")
    finally:
        tl.close()


async def test_the_palette_on_the_fleet_table_offers_no_node_action_and_notes_belong_to_no_node(incident_dir):
    from console.ui.palette import _commands
    tl = timeline.open_incident(incident_dir, "fleet-palette")
    app = fleet_app(tl=tl)
    try:
        async with app.run_test(size=(80, 24)) as pilot:
            app.post_message(FleetUpdated(mixed_fleet()))
            assert await eventually(lambda: len(table(app).nodes) == 6)
            titles = [title for title, _cb, _help in _commands(app)]
            assert "Note" in titles and "Help: every key" in titles
            assert not [t for t in titles if "SIGTERM" in t or t.startswith("Check:") or "Reboot" in t], titles
            await pilot.press("n", *"looking at the fleet", "enter")
            assert await eventually(lambda: any(e.text == "looking at the fleet" for e in tl.entries))
            assert [e.node for e in tl.entries if e.text == "looking at the fleet"] == [None]
            await pilot.press("enter")                               # a node opened: the node actions are back
            assert await eventually(lambda: not isinstance(app.screen, FleetScreen))
            assert any("SIGTERM" in title for title, _cb, _help in _commands(app))
            await pilot.press("escape")
            assert await eventually(lambda: isinstance(app.screen, FleetScreen))
            assert await eventually(lambda: "gpu-0004 (opened)" in screen(app))      # the node list has it
            opened = [line for line in screen(app).splitlines() if re.search(r"\s(-|[0-9]+) \(opened\) ", line)]
            assert len(opened) == 1 and opened[0].lstrip().startswith("gpu-0004"), "and its row in the table"
            assert "1 node " in str(app.query_one("#status").render())
    finally:
        tl.close()


def test_one_fleet_source_at_a_time_and_the_fleet_interval_from_the_config(tmp_path, capsys):
    from console.cli import apply_config, build_console_parser, main
    assert main(["prometheus://a.example:9090", "prometheus://b.example:9090"]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        "gpu-incident: one fleet source at a time (got prometheus://a.example:9090, prometheus://b.example:9090)"]
    config = tmp_path / "config.toml"
    config.write_text("[defaults]\nfleet_interval = 30\n")
    parser = build_console_parser()
    args = parser.parse_args(["prometheus://a.example:9090", "--config", str(config)])
    apply_config(args, parser)
    assert args.fleet_interval == 30.0
    assert parser.parse_args(["--fleet-interval", "5"]).fleet_interval == 5.0
    config.write_text("[defaults]\nfleet_interval = 0\n")
    assert main(["prometheus://a.example:9090", "--config", str(config)]) == 2
    assert "fleet_interval must be between 0.1 and 3600" in capsys.readouterr().err
