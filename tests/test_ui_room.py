"""Room on the screen: the findings are never hidden behind empty space, the footer keeps
`? Help` and `q Quit` at 80 columns, Confirm and details keep their prompt in view, progress
goes to a status line instead of toasts over the findings, and several nodes come sorted by
trouble. Driven as a user would (Textual pilot) against the simulator; what is asserted is
what the terminal shows (the compositor's lines)."""
import asyncio
import dataclasses

import pytest

import conftest

pytest.importorskip("textual")

from console.clock import FakeClock  # noqa: E402
from console.model import Finding  # noqa: E402
from console.monitor import diagnosed  # noqa: E402
from console.sources.sim import SimSource  # noqa: E402
from console.ui import layout, tables  # noqa: E402
from console.ui.app import IncidentApp  # noqa: E402


async def wait_for(pilot, predicate, tries=500):
    await conftest.wait_for(pilot, predicate, tries, describe=screen)


def screen(app) -> str:
    """The terminal as the user sees it (every layer), as plain text."""
    return "\n".join("".join(seg.text for seg in strip) for strip in app.screen._compositor.render_strips())


def lines(app) -> list[str]:
    return screen(app).split("\n")


def status_line(app) -> str:
    """The status line above the footer (one line; two when a sentence is longer), as shown."""
    box = app.query_one("#activity").region
    return " ".join(line.strip() for line in lines(app)[box.y:box.bottom])


def in_view(app, table_id: str) -> int:
    """Rows of a table wholly on screen now."""
    table = app.query_one(f"#{table_id}")
    border = 0 if table_id == "gpus" else 1             # the others have a rule above or below
    return tables.rows_in_view(table, table.outer_size.height - border)


def blank_rows_below(app, table_id: str) -> int:
    """Lines of a table's panel below its last row (empty space)."""
    table = app.query_one(f"#{table_id}")
    border = 0 if table_id == "gpus" else 1
    return table.outer_size.height - border - tables.content_lines(table)


# ---------------------------------------------------------------- the share of rows (pure)

def test_the_rest_goes_to_the_findings_and_processes_take_what_they_need():
    got = layout.fit(34, [layout.Panel("findings", 5, 3, 0.5), layout.Panel("gpus", 9, 3, 0.5),
                          layout.Panel("procs", 12, 5)], rest="findings")
    assert got == {"findings": 13, "gpus": 9, "procs": 12}


def test_when_room_is_short_findings_get_up_to_half_before_the_processes():
    got = layout.fit(34, [layout.Panel("findings", 15, 3, 0.5), layout.Panel("gpus", 9, 3, 0.5),
                          layout.Panel("procs", 40, 5)], rest="findings")
    assert got["findings"] == 15 and got["gpus"] == 9 and got["procs"] == 10 and sum(got.values()) == 34


def test_every_panel_keeps_its_least_and_a_tiny_terminal_cuts_from_the_last():
    got = layout.fit(21, [layout.Panel("nodes", 30, 5, 0.5), layout.Panel("findings", 20, 3, 0.5),
                          layout.Panel("gpus", 9, 3, 0.5), layout.Panel("procs", 12, 5)], rest="findings")
    assert got == {"nodes": 10, "findings": 3, "gpus": 3, "procs": 5}
    tiny = layout.fit(6, [layout.Panel("findings", 20, 3), layout.Panel("procs", 12, 5)])
    assert tiny == {"findings": 3, "procs": 3}


# ---------------------------------------------------------------- the findings get the room

async def test_every_finding_is_in_view_at_120x36_and_nothing_blank_above_them():
    """The seed after SIGKILL (zombies in D, the blockers): every finding whole on screen at 120x36 (once 2, under blank
    process rows); at 80x24 the title says how many are in view."""
    from console.model import ActionRecord
    clock = FakeClock()
    source = SimSource(name="demo", scenario="seed", clock=clock)
    app = IncidentApp([source], autostart=False)
    async with app.run_test(size=(120, 36)) as pilot:
        monitor = app.monitors[0]
        await monitor.poll_once()
        monitor.actions.append(ActionRecord(rung="sigkill", ts=clock.now(), node="demo"))
        await source.run("kill -s KILL " + " ".join(str(p.pid) for p in monitor.latest.processes
                                                      if p.name.startswith("sglang::schedul")))
        clock.advance(5)
        snap = await monitor.poll_once()
        n = len(snap.findings)
        assert n >= 3, [f.kind for f in snap.findings]
        await app.session.take_reading(snap)
        await wait_for(pilot, lambda: app.query_one("#findings").row_count == n)
        await wait_for(pilot, lambda: in_view(app, "findings") == n)
        assert blank_rows_below(app, "procs") <= 0                   # no empty space above the findings
        assert f"findings: {n} ·" in screen(app)                    # the title says no "in view" part
        await pilot.resize_terminal(80, 24)                          # recomputed on resize
        await wait_for(pilot, lambda: f"findings: {n}, " in screen(app) and "in view (↓)" in screen(app))
        assert in_view(app, "findings") >= 2 and blank_rows_below(app, "procs") <= 0


def test_lines_to_spare_show_the_first_findings_next_step_whole_then_its_summary_never_more_than_the_room():
    from console.model import NodeSnapshot
    long = "word " * 60
    findings = (Finding(kind="holder", severity="info", summary="first " + long, next_step="do " + long),
                Finding(kind="xid", severity="low", summary="second " + long, next_step="then " + long))
    snap = NodeSnapshot(name="n", taken_at=0.0, findings=findings)

    def lines(rows) -> list[int]:
        return [tables.cell_lines(cells) for cells in rows.values()]
    assert lines(tables.finding_rows(snap, 80)) == [2, 2]                   # no room given: two lines each
    assert lines(tables.finding_rows(snap, 80, room=4)) == [2, 2]
    first = tables.finding_rows(snap, 80, room=7)
    assert lines(first) == [5, 2]                                     # the three to spare: the first's step
    text = list(first.values())[0][0].plain
    assert text.count("→") == 1 and text.split("→")[1].rstrip().endswith("…")   # cut where more follows
    assert lines(tables.finding_rows(snap, 80, room=15)) == [10, 5]         # the first whole before the second
    assert lines(tables.finding_rows(snap, 80, room=40)) == [10, 10]        # both whole: the rest stays blank
    whole = list(tables.finding_rows(snap, 80, room=60).values())[0][0].plain
    assert "…" not in whole and whole.split().count("word") == 120        # both parts whole


async def test_findings_fill_the_lines_their_panel_has_to_spare_and_the_panels_do_not_move():
    """At 120x36 the seed's two findings have lines to spare: the first one's next step and
    summary show whole (no …); the panels keep the rows the short findings gave them."""
    app = IncidentApp([SimSource(name="demo", scenario="seed", clock=FakeClock())])
    async with app.run_test(size=(120, 36)) as pilot:
        await wait_for(pilot, lambda: "gives them the chance to stop their own workers" in screen(app))
        procs = app.query_one("#procs").styles.height.value
        findings = app.query_one("#findings")
        assert findings.base_lines == 4 and tables.content_lines(findings) > 4
        await pilot.resize_terminal(80, 24)                     # no line to spare: cut again
        await wait_for(pilot, lambda: tables.content_lines(app.query_one("#findings")) == 4)
        assert "gives them the chance" not in screen(app)
        await pilot.resize_terminal(120, 36)
        await wait_for(pilot, lambda: "gives them the chance to stop their own workers" in screen(app))
        assert app.query_one("#procs").styles.height.value == procs


async def test_at_200x50_the_process_panel_holds_no_blank_rows_and_every_finding_shows():
    app = IncidentApp([SimSource(name="demo", scenario="seed", clock=FakeClock())])
    async with app.run_test(size=(200, 50)) as pilot:
        await wait_for(pilot, lambda: "demo" in app.snapshots and app.query_one("#procs").row_count == 10)
        await wait_for(pilot, lambda: blank_rows_below(app, "procs") == 0)
        assert in_view(app, "findings") == app.query_one("#findings").row_count == 2


# ---------------------------------------------------------------- footer at 80 columns

@pytest.mark.parametrize("size", [(80, 24), (120, 36)])
async def test_the_footer_shows_help_and_quit_and_fits(size):
    from textual.widgets._footer import FooterKey
    app = IncidentApp([SimSource(name="demo", scenario="seed", clock=FakeClock())])
    async with app.run_test(size=size) as pilot:
        await wait_for(pilot, lambda: "demo" in app.snapshots)
        await wait_for(pilot, lambda: lines(app)[-1].strip())        # the footer is drawn
        footer = lines(app)[-1]
        assert "? Help" in footer and "q Quit" in footer and "t TERM" in footer and "k KILL" in footer, footer
        keys = {fk.key_display for fk in app.screen.query(FooterKey)}
        assert all(fk.region.right <= size[0] for fk in app.screen.query(FooterKey)), keys


# ---------------------------------------------------------------- Confirm and details keep their prompt

async def test_confirm_with_nine_targets_at_80x24_keeps_y_in_view_and_scrolls_to_tp7():
    from console.ui.confirm import ConfirmScreen
    app = IncidentApp([SimSource(name="demo", scenario="seed", clock=FakeClock())])
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_for(pilot, lambda: app.query_one("#procs").row_count == 10)
        await pilot.press("home", *["space"] * 9, "k")
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen))
        await pilot.pause()
        shown = screen(app)
        assert "y: run it" in shown and "$ kill -s KILL 72169 72230" in shown and "9 targets" in shown
        assert "sglang::scheduler_TP7" not in shown and "↓ pgdn end: more" in shown
        await pilot.press("end")
        await wait_for(pilot, lambda: "sglang::scheduler_TP7" in screen(app))
        assert "y: run it" in screen(app) and "$ kill -s KILL" in screen(app)   # still pinned
        await pilot.press("escape")


async def test_finding_details_at_80x24_keep_x_in_view_and_scroll():
    from console.ui.details import DetailScreen
    src = SimSource(name="demo", scenario="renamed-workers", clock=FakeClock())
    app = IncidentApp([src], autostart=False)
    async with app.run_test(size=(80, 24)) as pilot:
        snap = await app.monitors[0].poll_once()
        top = snap.findings[0]
        long = dataclasses.replace(top, evidence={**top.evidence, **{f"line{i:02d}": f"value {i}" for i in range(30)}})
        posted = dataclasses.replace(snap, findings=(long,) + snap.findings[1:])
        await app.session.take_reading(posted)
        await wait_for(pilot, lambda: app.snapshots.get("demo") is posted)     # drawn (redraws are batched)
        await wait_for(pilot, lambda: app.query_one("#findings").row_count == len(snap.findings))
        app.query_one("#findings").focus()
        await pilot.press("home", "enter")
        await wait_for(pilot, lambda: isinstance(app.screen, DetailScreen))
        await pilot.pause()
        assert "x: do this next step (Confirm first)" in screen(app)
        assert "↓ pgdn end: more" in screen(app) and "line29" not in screen(app)
        await pilot.press("end")
        await wait_for(pilot, lambda: "line29" in screen(app))
        assert "x: do this next step (Confirm first)" in screen(app)


# ---------------------------------------------------------------- a status line, not toasts

async def test_progress_and_outcome_go_to_the_status_line_never_over_the_findings(incident_dir):
    from textual.widgets._toast import Toast

    from console.incident import timeline
    from console.ui.details import DetailScreen
    tl = timeline.open_incident(incident_dir)
    app = IncidentApp([SimSource(name="demo", scenario="graceful", clock=FakeClock())], timeline=tl)
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_for(pilot, lambda: app.query_one("#procs").row_count > 0)
        assert f"gpu-incident follow {tl.incident_id}" in screen(app)       # before anything was said
        await pilot.press("t")
        await pilot.pause()
        await pilot.press("y")
        await wait_for(pilot, lambda: any(e.outcome for e in tl.entries), tries=1000)
        await wait_for(pilot, lambda: "freed" in status_line(app))
        status = status_line(app)
        assert "demo: SIGTERM 1 process" in status and not app.screen.query(Toast)
        await pilot.press("m")                                              # the history, most recent first
        await wait_for(pilot, lambda: isinstance(app.screen, DetailScreen))
        said = [s.text for s in app.activity.history()]
        assert "freed" in said[0] and "verifying for up to" in said[1]
        assert "verifying for up to" in app.screen.text and "Messages, most recent first" in app.screen.text


async def test_an_outcome_is_read_whole_over_three_lines_and_a_longer_one_says_m_has_it():
    """At 80x24 an outcome of three lines' length is whole in the line above the footer; one
    longer ends with a mark that says `m` holds it whole (never cut without saying so)."""
    app = IncidentApp([SimSource(name="demo", scenario="seed", clock=FakeClock())])
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_for(pilot, lambda: app.query_one("#findings").row_count > 0)
        three = ("demo:reset-required: Reset GPU 3: done: GPU 00000000:41:00.0 reset; GPU 3 freed 60.0 GiB "
                 "in 0 s; persistence mode and nvidia-persistenced still off since B: once the GPU is healthy, "
                 "x restores them")
        app.say(three)
        await wait_for(pilot, lambda: "x restores them" in status_line(app))
        assert "m: whole" not in status_line(app)
        await wait_for(pilot, lambda: not app.query_one("#findings").region.overlaps(app.query_one("#activity").region))
        app.say("a much longer outcome " * 20 + "THE END")
        await wait_for(pilot, lambda: "m: whole" in status_line(app))
        assert "THE END" not in status_line(app) and "THE END" in app.activity.latest.text


async def test_a_waits_progress_is_whole_above_the_footer_and_short_at_the_top(incident_dir):
    from console.incident import timeline
    tl = timeline.open_incident(incident_dir)
    app = IncidentApp([SimSource(name="demo", scenario="seed")], timeline=tl)
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_for(pilot, lambda: "demo" in app.snapshots)
        await pilot.press("w")
        try:
            await wait_for(pilot, lambda: "⏳ demo: wait-and-reread: " in status_line(app) and " of " in status_line(app),
                           tries=1000)
        except AssertionError:
            raise AssertionError(status_line(app) + "\n" + lines(app)[0]) from None
        assert "⏳ wait" in lines(app)[0], lines(app)[0]            # the top: what and how far, in few words


async def test_an_error_pops_up_briefly_at_the_top_not_over_the_findings():
    from textual.widgets._toast import Toast
    app = IncidentApp([SimSource(name="demo", scenario="seed", clock=FakeClock())])
    async with app.run_test(size=(80, 24), notifications=True) as pilot:
        await wait_for(pilot, lambda: app.query_one("#findings").row_count > 0)
        app.notify("export failed: disk full", severity="error")
        await wait_for(pilot, lambda: app.screen.query(Toast))
        await pilot.pause()
        toast = app.screen.query_one(Toast)
        assert toast.region.bottom <= app.query_one("#findings").region.y
        assert "export failed: disk full" in status_line(app)


async def test_the_incident_id_is_on_screen(incident_dir):
    from console.incident import timeline
    tl = timeline.open_incident(incident_dir)
    app = IncidentApp([SimSource(name="demo", scenario="seed", clock=FakeClock())], timeline=tl)
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_for(pilot, lambda: "demo" in app.snapshots)
        await pilot.press("w")                                   # the status line moves on…
        await wait_for(pilot, lambda: app.activity.latest and "wait-and-reread" in app.activity.latest.text)
        # …the ID stays at the top (polled: on a loaded machine the frame may come a moment later)
        await wait_for(pilot, lambda: tl.incident_id in lines(app)[0])


# ---------------------------------------------------------------- several nodes

def failing(name):
    from console.model import NodeSnapshot
    return NodeSnapshot(name=name, taken_at=0.0, error="unreachable: connection refused by 10.0.0.9:22")


async def test_several_nodes_come_sorted_by_trouble_with_the_worst_chosen_and_focused():
    clock = FakeClock()
    names = ("a-graceful", "b-seed", "c-dead", "d-reset")
    scenario = {"a-graceful": "graceful", "b-seed": "seed", "d-reset": "reset-required"}
    sources = [SimSource(name=n, scenario=scenario.get(n, "graceful"), clock=clock) for n in names]
    app = IncidentApp(sources, autostart=False)
    async with app.run_test(size=(120, 36)) as pilot:
        nodes = app.query_one("#nodes")
        assert app.focused is nodes
        for src, monitor in zip(sources, app.monitors):
            if src.name == "c-dead":
                await app.session.take_reading(failing(src.name))
            else:
                await monitor.poll_once()
        await wait_for(pilot, lambda: len(app.snapshots) == 4)
        await pilot.pause()
        order = nodes.row_keys
        assert order == ["c-dead", "d-reset", "a-graceful", "b-seed"]     # failing, critical, then by name
        assert app.current_node == "c-dead" and tables.selected_key(nodes) == "c-dead"
        await pilot.press("down")                                          # ↓ works at once
        await wait_for(pilot, lambda: app.current_node == "d-reset")
        # the seed's row names the finding that carries its next step, with its GiB
        seed = str(nodes.get_cell("b-seed", "finding"))
        assert seed.startswith("info holder 594.6 GiB → sigterm") and "reset-blocker" not in seed
        # a node gets worse: it moves up; the cursor stays on the node the operator chose
        worse = dataclasses.replace(app.snapshots["a-graceful"], findings=(
            Finding(kind="xid", severity="critical", summary="Xid 79 on GPU 0", next_step="reboot", gpus=(0,),
                    rung="reboot"),) + app.snapshots["a-graceful"].findings)
        await app.session.take_reading(worse)
        await wait_for(pilot, lambda: nodes.row_keys[1] == "a-graceful")
        assert app.current_node == "d-reset" and tables.selected_key(nodes) == "d-reset"


async def test_the_gpu_panel_shows_only_the_node_in_view_when_a_node_with_fewer_gpus_comes_into_view(monkeypatch):
    """At 80x24 the memory chart gives way to a GPU table that needs the room. A node of eight
    GPUs, then a dead one chosen: the GPU panel stays the dead node's, frame after frame (the
    chart's refit used to draw the node it was made for, and the two nodes' refits undid each
    other on every frame: the panel flickered between them and the screen never idled)."""
    from textual.widgets import DataTable
    clock = FakeClock()
    sources = [SimSource(name=n, scenario="reset-required", clock=clock) for n in ("gpu03", "gpu04")]
    app = IncidentApp(sources, autostart=False)
    app.redraw_interval_s = 0                   # each update drawn as it comes
    async with app.run_test(size=(80, 24)) as pilot:
        eight = diagnosed(await sources[1].poll())
        await app.session.take_reading(eight)
        await app.session.take_reading((failing("gpu03")))              # dead: first in the order, chosen
        nodes = app.query_one("#nodes")
        await wait_for(pilot, lambda: len(app.snapshots) == 2 and nodes.row_keys == ["gpu03", "gpu04"]
                       and app.current_node == "gpu03" and app.query_one("#gpus", DataTable).row_count == 0)
        await pilot.pause()
        shown = []
        real = tables.sync_gpu_table
        monkeypatch.setattr(tables, "sync_gpu_table", lambda table, snap: (shown.append(snap), real(table, snap)))
        await asyncio.sleep(0.5)                    # nothing new comes: nothing to draw
        assert len(shown) <= 2 and all(s is None or s.name == "gpu03" for s in shown), \
            f"the GPU panel was drawn {len(shown)} times in half a second, for {sorted({s.name for s in shown if s})}"


async def test_twelve_nodes_all_show_at_120x36():
    clock = FakeClock()
    sources = [SimSource(name=f"gpu{i:02d}", scenario="graceful", clock=clock) for i in range(1, 13)]
    app = IncidentApp(sources, autostart=False)
    async with app.run_test(size=(120, 36)) as pilot:
        for m in app.monitors:
            await m.poll_once()
        await wait_for(pilot, lambda: len(app.snapshots) == 12)
        await wait_for(pilot, lambda: in_view(app, "nodes") == 12)
        shown = screen(app)
        assert all(f"gpu{i:02d}" in shown for i in range(1, 13))


async def test_one_node_starts_on_its_processes():
    app = IncidentApp([SimSource(name="demo", scenario="seed", clock=FakeClock())])
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_for(pilot, lambda: app.query_one("#procs").row_count > 0)
        assert app.focused is app.query_one("#procs")


def test_on_a_tight_terminal_the_node_table_gives_up_rows_before_the_processes():
    """A split pane of 100x16 with several nodes: the room is 13 lines, the panels' least 16.
    The node table (floor 3: its rule, header and the node on screen) gives first, so the
    processes keep their title, header and two rows: the holders show."""
    panels = [layout.Panel("nodes", 14, 5, 0.5, floor=3), layout.Panel("findings", 6, 3, 0.5),
              layout.Panel("gpus", 9, 3, 0.5), layout.Panel("procs", 12, 5)]
    got = layout.fit(13, panels, rest="findings")
    assert got == {"nodes": 3, "findings": 3, "gpus": 3, "procs": 4}
    roomy = layout.fit(21, panels, rest="findings")
    assert roomy["nodes"] >= 5 and roomy["procs"] >= 5           # with room, nothing gives up
