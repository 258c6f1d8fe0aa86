"""What the operator sees at 80x24 and 120x36, pinned as SVG snapshots (tests/__snapshots__/).

Deterministic: the simulator and the console's status line run on a FakeClock (shown in UTC),
polling is off and snapshots are posted the way the poller posts them, with the probe time
blanked; the incident has a fixed ID. Update on purpose with
`pytest tests/test_ui_snapshots.py --snapshot-update` and look at the SVGs (or
snapshot_report.html) before committing.
"""
import asyncio
import dataclasses
from pathlib import Path

import pytest

from console.clock import FakeClock
from console.incident import timeline
from console.model import NodeSnapshot
from console.monitor import diagnosed
from console.sources.sim import SimSource
from console.ui.app import IncidentApp

SIZES = [(80, 24), (120, 36)]
INCIDENT = "20251129-095320-demo"


pytestmark = pytest.mark.usefixtures("utc")     # the clock in UTC (tests/conftest.py)


@pytest.fixture(autouse=True)
def _incidents_in_the_default_dir(tmp_path, monkeypatch):
    """The pictures' incidents are where the console puts them by default: its hint for a second
    person then needs no `--incident-dir` (a temporary directory's name differs each run)."""
    monkeypatch.setattr("console.incident.pairing.default_incident_dir", lambda: tmp_path / "incidents")


def poll(src: SimSource) -> NodeSnapshot:
    return dataclasses.replace(diagnosed(asyncio.run(src.poll())), probe_ms=None)


def console(tmp_path, sources) -> IncidentApp:
    tl = timeline.open_incident(tmp_path / "incidents", INCIDENT)
    app = IncidentApp(sources, timeline=tl, autostart=False, clock=FakeClock())
    app.redraw_interval_s = 0          # every posted update drawn at once: the picture is deterministic
    return app


def one_node(tmp_path, scenario: str) -> tuple[IncidentApp, NodeSnapshot]:
    src = SimSource(name="demo", scenario=scenario, clock=FakeClock())
    return console(tmp_path, [src]), poll(src)


def first_screen(snap_compare, tmp_path, scenario, size, *keys) -> bool:
    app, snap = one_node(tmp_path, scenario)

    async def run_before(pilot):
        await app.session.take_reading(snap)
        await pilot.pause()
        if keys:
            await pilot.press(*keys)
        await pilot.pause()
    return snap_compare(app, terminal_size=size, run_before=run_before)


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_seed_first_screen(snap_compare, tmp_path, size):
    assert first_screen(snap_compare, tmp_path, "seed", size)


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_hidden_holders_first_screen(snap_compare, tmp_path, size):
    """Seven findings: at 120x36 all in view, at 80x24 as many as fit and the title says so."""
    assert first_screen(snap_compare, tmp_path, "hidden-holders", size)


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_help(snap_compare, tmp_path, size):
    assert first_screen(snap_compare, tmp_path, "seed", size, "question_mark")


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_confirm_with_nine_targets(snap_compare, tmp_path, size):
    """The launcher and its eight schedulers tagged, k: the prompt stays in view."""
    assert first_screen(snap_compare, tmp_path, "seed", size, "home", *["space"] * 9, "k")


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_several_nodes_one_dead(snap_compare, tmp_path, size):
    """Sorted by trouble: the dead node first (and chosen), then the critical one."""
    clock = FakeClock()
    scenarios = {"gpu01": "graceful", "gpu02": "seed", "gpu04": "reset-required", "gpu05": "renamed-workers"}
    sources = [SimSource(name=n, scenario=s, clock=clock) for n, s in scenarios.items()]
    snaps = [poll(s) for s in sources]
    dead = NodeSnapshot(name="gpu03", taken_at=clock.now(),
                        error="unreachable: connection refused by 10.0.0.3:22 (no sshd listening?)")
    sources.insert(2, SimSource(name="gpu03", scenario="graceful", clock=clock))
    app = console(tmp_path, sources)

    async def run_before(pilot):
        for snap in snaps + [dead]:
            await app.session.take_reading(snap)
        await pilot.pause()
        await pilot.pause()
    assert snap_compare(app, terminal_size=size, run_before=run_before)


SPLIT = [(80, 24), (100, 16)]       # a terminal, and a split tmux pane


def later_screen(snap_compare, tmp_path, scenario, size, act) -> bool:
    """The screen 2 s after ``act(node, now)`` changed the simulated node and returned the
    ActionRecords of what it did (what the console's monitor keeps of its own actions)."""
    from console.monitor import diagnosed as diagnose_with
    clock = FakeClock()
    src = SimSource(name="demo", scenario=scenario, clock=clock)
    app = console(tmp_path, [src])
    actions = act(src.node, clock.now())
    clock.advance(2.0)
    snap = dataclasses.replace(diagnose_with(asyncio.run(src.poll()), (), actions), probe_ms=None)

    async def run_before(pilot):
        await app.session.take_reading(snap)
        await pilot.pause()
        await pilot.pause()
    return snap_compare(app, terminal_size=size, run_before=run_before)


SEED_FAMILY = (72169, 72230, 72294, 72358, 72422, 72486, 72550, 72614, 72678)


@pytest.mark.parametrize("size", SPLIT, ids=lambda s: f"{s[0]}x{s[1]}")
def test_seed_after_sigkill(snap_compare, tmp_path, size):
    """The launcher and its schedulers SIGKILLed 2 s ago: <defunct> with threads stuck in the
    driver, memory still held, the step is to wait; the holders and the first finding stay on screen."""
    from console.model import ActionRecord

    def kill(node, now):
        for pid in SEED_FAMILY:
            node.signal(pid, "KILL")
        return [ActionRecord(rung="sigkill", ts=now, node="demo", pids=SEED_FAMILY, gpus=tuple(range(8)))]
    assert later_screen(snap_compare, tmp_path, "seed", size, kill)


@pytest.mark.parametrize("size", SPLIT, ids=lambda s: f"{s[0]}x{s[1]}")
def test_reset_required_after_r(snap_compare, tmp_path, size):
    """B then R on GPU 3: persistence off, nvidia-persistenced stopped, GPU 3 reset: what B
    stopped is the next step to put back (restore)."""
    from console.model import ActionRecord

    def b_then_r(node, now):
        daemon = next(p for p in node.visible_procs() if p.comm == "nvidia-persiste")
        node.set_persistence(None, False)
        node.systemctl("stop", "nvidia-persistenced")
        node.reset_gpu(3)
        return [ActionRecord(rung="clear-blockers", ts=now - 1, node="demo", pids=(daemon.pid,), gpus=(3,),
                             family=((daemon.pid, 1, "nvidia-persistenced"),)),
                ActionRecord(rung="reset", ts=now, node="demo", gpus=(3,))]
    assert later_screen(snap_compare, tmp_path, "reset-required", size, b_then_r)


def test_the_readme_picture_is_the_seed_first_screen_as_the_app_draws_it():
    """README's picture (docs/seed.svg) is the pinned 120x36 seed snapshot: when the screen
    changes and the snapshot is updated, this says to copy it there too."""
    from pathlib import Path
    root = Path(__file__).resolve().parent
    pinned = root / "__snapshots__" / "test_ui_snapshots" / "test_seed_first_screen[120x36].svg"
    picture = root.parent / "docs" / "seed.svg"
    assert picture.read_bytes() == pinned.read_bytes(), f"cp '{pinned}' {picture}"
    assert "](docs/seed.svg)" in (root.parent / "README.md").read_text()


def _driven_incident(directory) -> "tuple[str, str]":
    """A driving console's incident and live state for the follower: the seed node polled once,
    a hypothesis stated, then quit (the state marked stopped). Written at one fixed time (the
    caller freezes the clocks), so the follower's picture is the same each run."""
    from console.incident.mirror import state_path

    async def drive():
        tl = timeline.open_incident(directory, "pair", by="alice@bastion")
        source = SimSource(name="demo", scenario="seed", clock=FakeClock())
        app = IncidentApp([source], timeline=tl, autostart=False, clock=FakeClock())
        async with app.run_test(size=(120, 36)) as pilot:
            await app.monitors[0].poll_once()
            for _ in range(200):
                if "demo" in app.snapshots:
                    break
                await asyncio.sleep(0.01)
            app.incident.hypothesis("demo", "the schedulers ignore SIGTERM")
            await pilot.press("q")
        tl.close()
        return str(tl.path), str(state_path(tl.path))
    return asyncio.run(drive())


@pytest.mark.parametrize("size", SPLIT, ids=lambda s: f"{s[0]}x{s[1]}")
def test_follower(snap_compare, tmp_path, size, monkeypatch):
    """`gpu-incident follow ID --live` beside the driver, in a terminal and a split pane: the
    GPUs, the holders (the process rows, TP0 to TP7 in order) and the first finding on screen,
    and who drives."""
    import time as real_time

    from console.ui.mirror_view import LiveFollowApp
    monkeypatch.setattr(real_time, "time", lambda: 1764409200.0)      # 2025-11-29 09:40 UTC, every write
    monkeypatch.setattr(timeline, "now_iso", lambda: "2025-11-29T09:40:00.000Z")
    monkeypatch.chdir(tmp_path)                  # the title shows the incident's path as given
    path, state = _driven_incident(Path("incidents"))
    app = LiveFollowApp(path, state, poll_interval=0.05, clock=lambda: 1764409200.0, by="bob@laptop")

    async def run_before(pilot):
        from console.ui.tables import gpu_fitted
        gpus, findings = app.query_one("#gpus"), app.query_one("#findings")

        def settled() -> bool:        # a busy machine: the panels fitted to their laid-out widths
            return (gpus.row_count == 8 and app.table.row_count >= 2 and gpu_fitted(gpus)
                    and findings.row_count >= 2)
        for _ in range(1000):
            if settled():
                break
            await asyncio.sleep(0.01)
        await pilot.pause()
        await pilot.pause()
        assert settled()
    assert snap_compare(app, terminal_size=size, run_before=run_before)
