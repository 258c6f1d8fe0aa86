"""A node's error that the operator must act on (a host key not trusted, a failed
authentication) shows its remedy first and whole at 80 and 120 columns, `enter` on the error row
opens it, and `m` holds it. The error lines are the SSH source's own words (console/sources/ssh/),
posted as the poller posts a reading."""
import time

import pytest

import conftest

pytest.importorskip("textual")

from console.model import NodeSnapshot  # noqa: E402
from console.ui.app import IncidentApp  # noqa: E402
from console.sources.sim import SimSource  # noqa: E402
from console.clock import FakeClock  # noqa: E402

wait_for = conftest.wait_for

HOST_KEY = ("host key not trusted for 127.0.0.1:2222 (ssh-ed25519 SHA256:q1w2e3r4t5y6u7i8o9p0a1s2d3f4g5h6j7k8l9z0x1c): "
            "not in /home/oncall/.ssh/known_hosts; check the fingerprint, then add it or rerun with "
            "--accept-new-host-keys")
AUTH = ("authentication failed for root@127.0.0.1:2223: the node accepted none of the configured or default "
        "keys (~/.ssh/id_*)")

KEY_FILE = "cannot use the SSH settings for 127.0.0.1:2224: Invalid private key"


def failing(name: str, error: str) -> NodeSnapshot:
    return NodeSnapshot(name=name, taken_at=time.time(), error=error)


def findings_text(app) -> str:
    table = app.query_one("#findings")
    return "\n".join(str(table.get_row(row.key)[0]) for row in table.ordered_rows)


@pytest.mark.parametrize("size", [(80, 24), (120, 36)])
async def test_the_remedy_of_a_host_key_error_is_first_and_whole_enter_opens_it_and_m_holds_it(size):
    from console.ui.details import DetailScreen
    app = IncidentApp([SimSource(name="gpu07", scenario="seed", clock=FakeClock())], autostart=False)
    async with app.run_test(size=size) as pilot:
        await app.session.take_reading(failing("gpu07", HOST_KEY))
        await wait_for(pilot, lambda: "ERROR" in findings_text(app))
        shown = findings_text(app)
        lines = shown.splitlines()
        assert lines[0].startswith("ERROR    → check the key's fingerprint"), shown
        joined = " ".join(line.strip() for line in lines)
        assert "or rerun with --accept-new-host-keys to record keys of hosts not yet known" in joined, shown
        assert all(len(line) <= size[0] - 2 for line in lines), shown         # wrapped, never cut
        top = str(app.query_one("#status").render())
        assert "✖ check the key's fingerprint" in top, top
        app.query_one("#findings").focus()
        await pilot.press("home", "enter")
        await wait_for(pilot, lambda: isinstance(app.screen, DetailScreen))
        text = " ".join(app.screen.text.split())
        assert "What to do" in text and "--accept-new-host-keys to record keys" in text and "SHA256:q1w2" in text
        await pilot.press("escape")
        await wait_for(pilot, lambda: not isinstance(app.screen, DetailScreen))
        await pilot.press("m")
        await wait_for(pilot, lambda: isinstance(app.screen, DetailScreen))
        text = " ".join(app.screen.text.split())
        assert "✖ gpu07: check the key's fingerprint" in text and "host key not trusted for 127.0.0.1:2222" in text


async def test_the_node_table_names_the_cause_and_what_to_do_first():
    sources = [SimSource(name=n, scenario="seed", clock=FakeClock()) for n in ("gpu07", "gpu08", "gpu09")]
    app = IncidentApp(sources, autostart=False)
    async with app.run_test(size=(100, 16)) as pilot:
        await app.session.take_reading(failing("gpu07", HOST_KEY))
        await app.session.take_reading(failing("gpu08", AUTH))
        await app.session.take_reading(failing("gpu09", KEY_FILE))
        nodes = app.query_one("#nodes")
        await wait_for(pilot, lambda: str(nodes.get_cell("gpu09", "state")) == "✖ ssh settings")
        assert str(nodes.get_cell("gpu07", "state")) == "✖ host key"
        assert str(nodes.get_cell("gpu08", "state")) == "✖ authentication"
        assert str(nodes.get_cell("gpu08", "finding")).startswith("give a key this node accepts: rerun with -i")
        assert str(nodes.get_cell("gpu09", "finding")).startswith("check the key files (-i KEY)")
