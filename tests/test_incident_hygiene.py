"""Incident hygiene (issue 34, item 13): demo incidents apart from real ones — their timings never
size a real wait nor fill the metrics' histogram, `timeline list` hides them and those nobody
acted on that held nothing (`--all` shows them, marked), `timeline prune` removes the untouched
ones — and a gate that meets an error no wait mends says so at once."""
from __future__ import annotations

import asyncio
import subprocess
import sys

from console.incident import consoles, freetimes, hygiene, timeline
from console.model import NodeSnapshot
from console.session import gate
from console.session.metrics import histogram
from console.sources.base import Source


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "console", *args], capture_output=True, text=True, timeout=60)


# ---------------------------------------------------------------- timings

def test_a_demo_s_time_to_free_sizes_no_real_wait_and_no_histogram(tmp_path):
    for seconds in (2, 3, 4):
        freetimes.record(tmp_path, "gpu07", "sigkill", seconds)
    for seconds in (300, 300, 300, 300):
        freetimes.record(tmp_path, "gpu07", "sigkill", seconds, demo=True)     # a simulated node's
    freetimes.record(tmp_path, "demo:seed", "sigkill", 500)                    # one written before the mark
    real = freetimes.load(tmp_path)
    assert sorted(i["seconds"] for i in real) == [2, 3, 4]
    assert freetimes.said(real, "sigkill", "gpu07").startswith("memory usually comes back within 3.8 s here")
    assert len(freetimes.load(tmp_path, demo=True)) == 8, "kept, marked, not counted"
    assert 'gpu_incident_time_to_free_seconds_count{after="sigkill"} 3' in histogram(real)


# ---------------------------------------------------------------- the gate

class NoDriver(Source):
    """A node whose driver is not loaded (the error words of console/sources/parse.py)."""
    kind = "fake"

    async def poll(self) -> NodeSnapshot:
        self.polls = getattr(self, "polls", 0) + 1
        return NodeSnapshot(name=self.name, taken_at=0.0,
                            error="NVIDIA driver not loaded: nvidia-smi couldn't communicate with the NVIDIA driver")

    async def run(self, command, timeout=10.0):
        raise NotImplementedError


async def test_a_gate_on_a_node_without_a_driver_says_so_at_once(tmp_path):
    node = NoDriver("gpu07")
    nodes, incident = await asyncio.wait_for(gate.run(
        [node], wait_s=3600, open_incident=lambda: timeline.open_incident(tmp_path), directory=tmp_path), 60)
    n, = nodes
    assert not n.clean and n.permanent and node.polls == 1, "read once, not for an hour"
    line = gate.line(n, 3600, incident)
    assert "NOT CLEAN at once (waiting would not mend it): not read: NVIDIA driver not loaded" in line, line
    assert incident is not None, "it still opens the incident with what it saw"


def test_what_a_wait_mends_is_waited_for():
    assert not gate.permanent("unreachable: connection refused") and not gate.permanent(
        "nvidia-smi timed out (the driver may be hung)")
    assert gate.permanent("driver/library version mismatch: Failed to initialize NVML")
    assert gate.permanent("no devices: nvidia-smi found no GPU")


# ---------------------------------------------------------------- list and prune

def _incidents(directory):
    with timeline.open_incident(directory, "real-held") as tl:         # a real node held memory: shown
        tl.append("observation", "first reading of gpu07: GPU 0 holds 74.3 GiB", node="gpu07",
                  gpu_memory_before={"0": 76109})
    with timeline.open_incident(directory, "typo") as tl:              # nothing held, nobody acted
        tl.append("note", consoles.CONSOLE_STARTED + "gpu99")
        tl.append("note", "console stopped")
    with timeline.open_incident(directory, "demo-glance") as tl:       # a demo nobody touched
        tl.append("note", consoles.CONSOLE_STARTED + "demo")
        tl.append("observation", "first reading of demo: GPUs 0-7 hold 594.6 GiB", node="demo",
                  gpu_memory_before={"0": 76109}, facts={"demo": True})
        tl.append("note", "console stopped")
    with timeline.open_incident(directory, "demo-practice") as tl:     # a demo somebody practised on
        tl.append("observation", "first reading of demo", node="demo", gpu_memory_before={"0": 76109})
        tl.append("hypothesis", "SIGKILL frees it", node="demo")
    (directory / "demo-glance.state.4242.json").write_text("{}")


def test_timeline_list_shows_the_real_ones_and_all_shows_every_one_marked(tmp_path):
    _incidents(tmp_path)
    r = run("timeline", "list", "--incident-dir", str(tmp_path))
    listed = [ln.split()[0] for ln in r.stdout.splitlines()[1:] if not ln.startswith("(")]
    assert listed == ["real-held"], r.stdout
    assert "(3 hidden: demo incidents and those nobody acted on that held nothing — `timeline list --all`" in r.stdout
    r = run("timeline", "list", "--all", "--incident-dir", str(tmp_path))
    rows = {ln.split()[0]: ln for ln in r.stdout.splitlines()[1:]}
    assert set(rows) == {"real-held", "typo", "demo-glance", "demo-practice"}
    assert "demo, untouched" in rows["demo-glance"] and "demo" in rows["demo-practice"]
    assert "untouched" not in rows["demo-practice"]
    assert "untouched" in rows["typo"] and "demo" not in rows["typo"] and "untouched" in rows["real-held"]


def test_timeline_prune_removes_only_what_nobody_acted_on_and_held_nothing_real(tmp_path):
    _incidents(tmp_path)
    r = run("timeline", "prune", "--dry-run", "--incident-dir", str(tmp_path))
    assert sorted(ln.split()[2] for ln in r.stdout.splitlines()) == ["demo-glance", "typo"], r.stdout
    assert (tmp_path / "typo.jsonl").exists(), "--dry-run removes nothing"
    r = run("timeline", "prune", "--incident-dir", str(tmp_path))
    assert r.returncode == 0 and "removed demo-glance (demo, untouched, 3 entries)" in r.stdout
    left = sorted(p.name for p in tmp_path.iterdir())
    assert "demo-glance.jsonl" not in left and "demo-glance.state.4242.json" not in left and "typo.jsonl" not in left
    assert {"real-held.jsonl", "demo-practice.jsonl"} <= set(left)


def test_an_incident_a_console_is_still_attached_to_is_not_pruned(tmp_path):
    with timeline.open_incident(tmp_path, "live-demo") as tl:
        tl.append("note", consoles.CONSOLE_STARTED + "demo", console={"pid": 1, "host": "elsewhere"})
    entries = timeline.load(tmp_path / "live-demo.jsonl")[0]
    assert not hygiene.prune([("live-demo", tmp_path / "live-demo.jsonl", entries)])
    assert (tmp_path / "live-demo.jsonl").exists()
