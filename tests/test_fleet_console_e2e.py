"""The fleet table end to end, as the on-call engineer runs it: `gpu-incident prometheus://…`
in a real terminal (tmux, 80x24) against a REAL Prometheus scraping `gpu-incident simulate
--scenario fleet --exporter-port` (four nodes, also served over SSH, with the ssh_config the
simulator writes); the stuck nodes first, enter reaches the node over SSH by its Hostname in the
same incident, escape comes back.

Heavy (real services): ~20-40 s on a 2-core machine. Skips with the reason when prometheus or
tmux is not installed (.ci/run installs both).
"""
import json
import shutil

import pytest

from console.bench.prometheus import prometheus_binary, start_prometheus, start_simulator, wait_for_series
from tests.polling import until
from tests.test_e2e_tmux import Tmux

pytestmark = [pytest.mark.heavy, pytest.mark.timeout(300)]


@pytest.fixture
def fleet(tmp_path):
    if prometheus_binary() is None:
        pytest.skip("prometheus is not installed (apt-get install prometheus; .ci/run does)")
    if shutil.which("tmux") is None:
        pytest.skip("tmux is not installed (.ci/run installs it)")
    sim = start_simulator(["--scenario", "fleet", "--nodes", "4", "--state-dir", str(tmp_path / "sim")], tmp_path)
    try:
        prom = start_prometheus([f"127.0.0.1:{sim.port}"], tmp_path, scrape_interval="1s")
    except BaseException:
        sim.stop()
        raise
    try:
        wait_for_series(prom.port, 4 * 8)
        yield prom, tmp_path / "sim"
    finally:
        prom.stop()
        sim.stop()


def test_the_fleet_table_finds_the_stuck_node_and_enter_opens_it_over_ssh(fleet, tmp_path):
    prom, state = fleet
    tmux = Tmux(tmp_path)
    try:
        tmux.start(f"prometheus://127.0.0.1:{prom.port}", "--suspicion-window", "3s", "--fleet-interval", "1",
                   "--ssh-config", str(state / "ssh_config"), "--known-hosts", str(state / "known_hosts"),
                   "-i", str(state / "client_key"), "--incident", "fleet-e2e")

        def table_rows() -> list[str]:
            return [line.split()[0] for line in tmux.screen().splitlines()[2:6] if line.strip()]
        # the stuck nodes first once the window has passed: Xid 154, then memory held at 0 %
        stuck_first = ["simnode03", "simnode02", "simnode04"]
        assert until(lambda: table_rows()[:3] == stuck_first, 90, 0.5), tmux.screen()
        screen = tmux.screen()
        lines = screen.splitlines()
        assert len(lines) <= 24 and all(len(line) <= 80 for line in lines)
        assert lines[0].lstrip().startswith(f"prometheus://127.0.0.1:{prom.port}") and "4 nodes" in lines[0]
        assert "Xid" in lines[2] and "each at 0%" in lines[3], screen
        assert "? Help" in lines[-1] and "q Quit" in lines[-1]
        tmux("send-keys", "Enter")                                     # simnode03, by its Hostname, over SSH
        assert tmux.shows("viewing simnode03"), tmux.screen()
        assert tmux.shows("nvidia-persistenced"), tmux.screen()       # its processes, read over SSH
        assert "esc Fleet" in tmux.screen()
        tmux("send-keys", "Escape")
        assert tmux.shows("Open node"), tmux.screen()
        tmux("send-keys", "Down", "Enter")                             # a second node joins the list
        assert tmux.shows("2 nodes"), tmux.screen()
        tmux("send-keys", "q")
        assert tmux.shows("EXITED 0"), tmux.screen()
    finally:
        tmux.stop()
    incident = tmp_path / "state" / "gpu-incident" / "incidents" / "fleet-e2e.jsonl"
    notes = [json.loads(line) for line in incident.read_text().splitlines()]
    opened = [e for e in notes if "from the fleet" in e["text"]]
    assert [e["node"] for e in opened] == ["simnode03", "simnode02"]
    assert "suspect: " in opened[0]["text"] and "Xid 154" in opened[0]["text"]
