"""The first screen, driven as a user would (Textual pilot at 80x24) against the simulator."""
import pytest

import conftest

pytest.importorskip("textual")

from console.clock import FakeClock  # noqa: E402
from console.sources.sim import SimSource  # noqa: E402
from console.ui.app import IncidentApp  # noqa: E402


wait_for = conftest.wait_for


def palette_offers(app, title: str) -> bool:
    """The command palette lists this command (its search has caught up with the typing)."""
    from textual.widgets import OptionList
    return any(title in str(lst.get_option_at_index(i).prompt)
               for lst in app.screen.query(OptionList) for i in range(lst.option_count))


screen_text = conftest.screen_text


async def test_demo_shows_seed_gpus_and_selects_top_holder(incident_dir):
    from console.incident import timeline
    tl = timeline.open_incident(incident_dir)
    app = IncidentApp([SimSource(name="demo", scenario="seed", clock=FakeClock())], timeline=tl)
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_for(pilot, lambda: "demo" in app.snapshots and app.query_one("#procs").row_count)
        from textual.widgets import DataTable
        gpus = app.query_one("#gpus", DataTable)
        cells = [str(gpus.get_row(r.key)[1]) for r in gpus.ordered_rows]
        assert cells[0] == "76109MiB / 97887MiB" and cells[7] == "76069MiB / 97887MiB"
        assert app.focused is app.query_one("#procs")
        key = app.selected_process_key
        proc = app.snapshots["demo"].proc(int(key.split(":")[1]))
        assert proc.gpu_memory_total_mib == max(p.gpu_memory_total_mib for p in app.snapshots["demo"].processes)
        # the cursor stays on the same process across polls
        await pilot.press("down")
        chosen = app.selected_process_key
        await app.monitors[0].poll_once()
        await pilot.pause()
        assert app.selected_process_key == chosen
        await pilot.press("question_mark")
        await pilot.pause()
        assert "help" in type(app.screen).__name__.lower()
        await pilot.press("escape")
        await pilot.press("q")
    assert [e.text for e in tl.entries][-1] == "console stopped"


async def test_markup_and_escape_codes_in_names_render_literally():
    from console.model import NodeSnapshot, Proc
    from console.ui.text import literal
    evil = "[bold red]pwn[/] \x1b[2J\x1b]0;title\x07"
    t = literal(evil)
    assert t.plain.startswith("[bold red]pwn[/] \\x1b[2J") and "\x1b" not in t.plain
    app = IncidentApp([SimSource(name="demo", scenario="graceful", clock=FakeClock())], autostart=False)
    async with app.run_test(size=(80, 24)) as pilot:
        snap = NodeSnapshot(name="demo", taken_at=0, processes=(
            Proc(pid=10, ppid=1, state="S", user="x", name="evil", cmdline=evil,
                 gpu_memory_mib={"0": 5}),))
        await app.session.take_reading(snap)
        await pilot.pause()
        from textual.widgets import DataTable
        row = app.query_one("#procs").get_row("demo:10")
        assert "[bold red]pwn[/]" in str(row[-1]) and "\x1b" not in str(row[-1])


async def test_unknown_theme_is_refused():
    with pytest.raises(ValueError, match="unknown theme"):
        IncidentApp([SimSource(name="demo", scenario="seed", clock=FakeClock())], theme_name="nope")


async def test_theme_from_themes_dir_is_applied():
    app = IncidentApp([SimSource(name="demo", scenario="seed", clock=FakeClock())], theme_name="daylight",
                      autostart=False)
    async with app.run_test(size=(80, 24)):
        assert app.theme == "daylight" and app.current_theme.dark is False


async def test_a_dead_node_shows_its_error_while_the_live_one_updates(incident_dir):
    from textual.widgets import DataTable

    from console.sources.ssh.source import SshSource
    from console.sources.ssh.options import SshOptions
    from tests.sshd_fixture import free_port
    dead = SshSource(f"root@127.0.0.1:{free_port()}", SshOptions(connect_timeout=2.0))
    live = SimSource(name="demo", scenario="seed", clock=FakeClock())
    app = IncidentApp([dead, live], interval=0.2)
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_for(pilot, lambda: dead.name in app.snapshots and "demo" in app.snapshots)
        nodes = app.query_one("#nodes")
        assert str(nodes.get_cell(dead.name, "state")).startswith("✖ unreachable")
        assert "connection refused" in str(nodes.get_cell(dead.name, "finding"))     # why, beside it
        assert str(nodes.get_cell("demo", "state")) == "holding"     # never "ok" beside 594 GiB held
        # the live node keeps its own rhythm
        seen = {id(app.snapshots["demo"])}
        await wait_for(pilot, lambda: seen.add(id(app.snapshots["demo"])) or len(seen) >= 3)
        # several nodes: the node table has the focus, the failing node is first and chosen,
        # and says why, in one line, over empty tables
        assert app.focused is nodes and nodes.row_keys == [dead.name, "demo"]
        assert app.current_node == dead.name
        assert "unreachable" in str(app.query_one("#findings", DataTable).get_row("error")[0])
        await pilot.press("down")                 # ↓ works at once: the next node
        await pilot.pause()
        assert app.current_node == "demo"
        await wait_for(pilot, lambda: app.query_one("#gpus", DataTable).row_count == 8)
        # the operator's choice stays as polls re-sort the table
        await wait_for(pilot, lambda: seen.add(id(app.snapshots["demo"])) or len(seen) >= 5)
        assert app.current_node == "demo" and tables_selected(nodes) == "demo"


def tables_selected(table):
    from console.ui import tables
    return tables.selected_key(table)


async def test_enter_shows_the_whole_finding_with_the_exact_commands():
    from textual.widgets import DataTable

    from console.ui.details import DetailScreen
    app = IncidentApp([SimSource(name="demo", scenario="renamed-workers", clock=FakeClock())])
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_for(pilot, lambda: app.query_one("#findings", DataTable).row_count > 0
                       and "demo" in app.snapshots)
        app.query_one("#findings", DataTable).focus()
        await pilot.press("home", "enter")
        await pilot.pause()
        assert isinstance(app.screen, DetailScreen)
        text = app.screen.text
        top = app.snapshots["demo"].findings[0]
        assert top.kind == "orphan"
        assert top.summary in " ".join(text.split()) or top.summary[:60] in text
        assert "$ kill -s TERM" in text            # the exact command line, before anything runs
        await pilot.press("escape")
        # Enter on a process shows its full command line and state
        app.query_one("#procs").focus()
        await pilot.press("enter")
        await pilot.pause()
        text = app.screen.text
        assert "VLLM::" in text and "parent" in text


async def test_the_seed_moment_hypothesis_wait_verdict(incident_dir):
    """h: 'the memory needs more time'; w: 5 s later nothing came back; v: refuted is suggested."""
    from console.incident import timeline
    from console.ui.details import DetailScreen
    from console.ui.prompts import VerdictScreen
    tl = timeline.open_incident(incident_dir)
    app = IncidentApp([SimSource(name="demo", scenario="seed", clock=FakeClock())], timeline=tl)
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_for(pilot, lambda: "demo" in app.snapshots)
        await pilot.press("h")
        await pilot.pause()
        await pilot.press(*"the memory needs more time to be released")
        await pilot.press("enter")
        await pilot.pause()
        await pilot.press("w")
        await wait_for(pilot, lambda: any(e.kind == "check" for e in tl.entries))
        check = [e for e in tl.entries if e.kind == "check"][-1]
        hyp = [e for e in tl.entries if e.kind == "hypothesis"][-1]
        assert check.hypothesis == hyp.seq
        assert check.command.startswith("nvidia-smi --query-gpu=index,memory.used --format=csv,noheader")
        assert check.gpu_memory_after["0"] == 76109 and check.gpu_memory_after == check.gpu_memory_before
        assert "no memory came back within 5 s" in check.text
        await wait_for(pilot, lambda: isinstance(app.screen, DetailScreen))
        await pilot.press("escape")
        await pilot.press("v")
        await pilot.pause()
        assert isinstance(app.screen, VerdictScreen) and app.screen.suggested == "refuted"
        await pilot.press("enter")
        await pilot.pause()
        verdict = tl.entries[-1]
        assert verdict.kind == "verdict" and verdict.verdict == "refuted" and verdict.hypothesis == hyp.seq
        # with no open hypothesis, v says so and writes nothing
        count = len(tl.entries)
        await pilot.press("v")
        await pilot.pause()
        assert len(tl.entries) == count and not isinstance(app.screen, VerdictScreen)


async def test_check_picker_runs_port_check_and_records_it(incident_dir):
    from console.incident import timeline
    tl = timeline.open_incident(incident_dir)
    app = IncidentApp([SimSource(name="demo", scenario="seed", clock=FakeClock())], timeline=tl)
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_for(pilot, lambda: "demo" in app.snapshots)
        await pilot.press("c")
        await pilot.pause()
        from textual.widgets import OptionList
        options = app.screen.query_one(OptionList)
        names = [options.get_option_at_index(i).id for i in range(options.option_count)]
        options.highlighted = names.index("port")
        await pilot.press("enter")
        await pilot.pause()
        await pilot.press("enter")          # the port prompt, 8000 prefilled
        await wait_for(pilot, lambda: any(e.kind == "check" for e in tl.entries))
        entry = [e for e in tl.entries if e.kind == "check"][-1]
        assert entry.text.startswith("port:") and "8000" in entry.text and "not" in entry.text.lower()


async def test_space_tags_and_filter_narrows(incident_dir):
    from textual.widgets import DataTable
    app = IncidentApp([SimSource(name="demo", scenario="seed", clock=FakeClock())])
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_for(pilot, lambda: app.query_one("#procs").row_count > 3)
        first = app.selected_process_key
        await pilot.press("space")
        await pilot.press("space")
        await pilot.pause()
        assert len(app.tagged) == 2 and first in app.tagged
        assert app.selected_pids() == sorted(int(k.split(":")[1]) for k in app.tagged)
        await pilot.press("slash")
        await pilot.pause()
        await pilot.press(*"TP3", "enter")
        await pilot.pause()
        procs = app.query_one("#procs")
        shown = [str(procs.get_row(key)[-1]).strip() for key in procs.row_keys]
        assert shown == ["sglang::scheduler_TP3"], shown


async def test_k_shows_confirm_with_exact_command_then_kills_and_verifies(incident_dir):
    """The seed: k on tagged workers -> Confirm (exact kill line) -> y -> action entry, memory stays."""
    from textual.widgets import DataTable

    from console.incident import timeline
    from console.ui.confirm import ConfirmScreen
    tl = timeline.open_incident(incident_dir)
    src = SimSource(name="demo", scenario="seed", clock=FakeClock())
    app = IncidentApp([src], timeline=tl)
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_for(pilot, lambda: app.query_one("#procs").row_count > 3)
        procs = app.query_one("#procs")
        procs.move_cursor(row=procs.get_row_index("demo:72169"))     # the launcher
        await pilot.press("k")
        await pilot.pause()
        assert isinstance(app.screen, ConfirmScreen)
        shown = app.screen.text
        assert "Confirm" in shown and "$ kill -s KILL 72169" in shown and "demo" in shown
        assert "--attention-backend flashinfer" in shown        # the target's command line
        await pilot.press("n")                                    # cancel: nothing ran
        await pilot.pause()
        assert src.node.proc(72169) is not None and not isinstance(app.screen, ConfirmScreen)
        await pilot.press("k")
        await pilot.pause()
        await pilot.press("y")
        await wait_for(pilot, lambda: any(e.outcome for e in tl.entries), tries=300)
        action = [e for e in tl.entries if e.kind == "action"][-1]
        outcome = [e for e in tl.entries if e.outcome][-1]
        assert action.command == "kill -s KILL 72169" and [t["pid"] for t in action.targets] == [72169]
        assert outcome.action == action.seq and outcome.rc == 0
        assert outcome.freed_mib == 0 and outcome.gpu_memory_after == action.gpu_memory_before
        await pilot.press("q")


async def test_read_only_leaves_the_dangerous_keys_unbound_and_the_action_layer_still_refuses(incident_dir):
    from console.incident import timeline
    from console.ui import keys
    from console.ui.app import HelpScreen
    tl = timeline.open_incident(incident_dir)
    src = SimSource(name="demo", scenario="graceful", clock=FakeClock())
    app = IncidentApp([src], timeline=tl, read_only=True)
    async with app.run_test(size=(120, 36)) as pilot:
        await wait_for(pilot, lambda: app.query_one("#procs").row_count > 0)
        assert "READ-ONLY" in str(app.query_one("#mode").render())
        assert app.focused is app.query_one("#procs")
        bound = {b.binding.id for b in app.active_bindings.values()}    # what the footer draws from
        assert "quit" in bound and "filter" in bound and not bound & {"sigterm", "sigkill", "signal"}
        await pilot.press("t", "k", "f9")               # not bound: nothing opens, nothing is recorded
        await pilot.pause()
        assert app.screen is app.screen_stack[0] and not any(e.kind == "action" for e in tl.entries)
        await pilot.press("question_mark")
        await wait_for(pilot, lambda: isinstance(app.screen, HelpScreen))
        helped = screen_text(app)
        assert "SIGKILL" not in helped and "reset the selected GPU" not in helped and "filter the table in focus" in helped
        await pilot.press("escape")
        await pilot.press("ctrl+p")
        await pilot.pause()
        await pilot.press(*"filter")
        await wait_for(pilot, lambda: palette_offers(app, "Filter the table in focus"))
        for title in ("SIGTERM the selected", "Reboot this node", "Drain this node"):
            assert not palette_offers(app, title)
        await pilot.press("escape")
        await pilot.pause()
        # any other way in (x's next step, a script) still meets the action layer's refusal
        app.run_worker(app.action_act("sigterm"))
        await wait_for(pilot, lambda: "READ-ONLY" in getattr(app.screen, "text", ""))
        await pilot.press("y")
        await wait_for(pilot, lambda: any(e.kind == "action" for e in tl.entries))
        entry = [e for e in tl.entries if e.kind == "action"][-1]
        assert "read-only" in entry.text and entry.rc is None
        snap = await src.poll()
        assert sum(g.memory_used_mib for g in snap.gpus) > 100000     # nothing was signalled
    assert {k.id for k in keys.KEYS if k.dangerous} == {"sigterm", "sigkill", "signal", "kill-holders", "reset",
                                                         "clear-blockers", "drain", "resume", "next-step-all"}


async def test_palette_reboot_needs_the_node_name_typed(incident_dir):
    from textual.widgets import Input

    from console.incident import timeline
    from console.ui.confirm import ConfirmScreen
    tl = timeline.open_incident(incident_dir)
    src = SimSource(name="demo", scenario="reset-required", clock=FakeClock())
    app = IncidentApp([src], timeline=tl)
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_for(pilot, lambda: "demo" in app.snapshots)
        await pilot.press("ctrl+p")
        await pilot.pause()
        await pilot.press(*"reboot this node")
        await wait_for(pilot, lambda: palette_offers(app, "Reboot this node"))
        await pilot.press("enter")
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen))
        shown = app.screen.text
        assert "$ systemctl reboot" in shown and "Type the node's name (demo)" in shown
        await pilot.press("y")                       # y alone does nothing here
        await pilot.press(*"dem", "enter")           # a wrong name: nothing runs
        await pilot.pause()
        assert isinstance(app.screen, ConfirmScreen)
        assert not any(e.kind == "action" for e in tl.entries)
        app.screen.query_one(Input).value = ""
        await pilot.press(*"demo", "enter")
        await wait_for(pilot, lambda: any(e.kind == "action" for e in tl.entries), tries=300)
        assert [e for e in tl.entries if e.kind == "action"][-1].command == "systemctl reboot"


async def test_keys_are_remapped_by_the_config_file(tmp_path):
    from textual.widgets import DataTable, Static
    from textual.widgets._footer import FooterKey

    from console.ui.app import HelpScreen
    from console.ui.palette import _commands

    from console.config import load_config
    from console.ui.confirm import ConfirmScreen
    cfg = tmp_path / "c.toml"
    cfg.write_text('[keys]\nsigkill = "K"\n')
    config = load_config(str(cfg))
    app = IncidentApp([SimSource(name="demo", scenario="seed", clock=FakeClock())], keymap=config.keys)
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_for(pilot, lambda: app.query_one("#procs").row_count > 0)
        await pilot.press("k")
        await pilot.pause()
        assert not isinstance(app.screen, ConfirmScreen)     # k no longer kills
        await pilot.press("K")
        await pilot.pause()
        assert isinstance(app.screen, ConfirmScreen)
        await pilot.press("escape")
        await pilot.pause()
        # the new key everywhere: footer, Help, palette
        footer = {fk.action: fk.key_display for fk in app.screen.query(FooterKey)}
        assert footer["app.act('sigkill')"] == "K", footer     # on the process panel, which has focus
        await pilot.press("question_mark")
        await pilot.pause()
        assert isinstance(app.screen, HelpScreen)
        help_text = str(app.screen.query_one("#help-body", Static).render())
        assert "  K         SIGKILL" in help_text and "  k         SIGKILL" not in help_text
        await pilot.press("escape")
        await pilot.pause()
        hints = {title: hint for title, _cb, hint in _commands(app)}
        assert hints["SIGKILL the selected/tagged processes"].startswith("K — ")
        assert hints["SIGTERM the selected/tagged processes"].startswith("t — ")
    with pytest.raises(ValueError, match="unknown action id"):
        IncidentApp([SimSource(name="demo", scenario="seed", clock=FakeClock())], keymap={"nuke": "x"})


async def test_x_on_a_finding_does_its_next_step_through_confirm(incident_dir):
    """renamed-workers: the orphan finding's next step (SIGTERM the five) from its detail screen."""
    from textual.widgets import DataTable

    from console.incident import timeline
    from console.ui.confirm import ConfirmScreen
    from console.ui.details import DetailScreen
    tl = timeline.open_incident(incident_dir)
    src = SimSource(name="demo", scenario="renamed-workers", clock=FakeClock())
    app = IncidentApp([src], timeline=tl)
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_for(pilot, lambda: "demo" in app.snapshots and app.query_one("#findings", DataTable).row_count)
        app.query_one("#findings", DataTable).focus()
        await pilot.press("home", "enter")
        await wait_for(pilot, lambda: isinstance(app.screen, DetailScreen))
        assert "x: do this next step" in app.screen.text
        await pilot.press("x")
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen))
        shown = app.screen.text
        assert "$ kill -s TERM 41388 41403 41451 41499 41547" in shown
        await pilot.press("y")
        await wait_for(pilot, lambda: any(e.outcome for e in tl.entries), tries=1000)
        outcome = [e for e in tl.entries if e.outcome][-1]
        assert outcome.freed_mib and outcome.freed_mib > 300000      # the orphans let go of ~344 GiB


async def test_the_memory_chart_marks_an_action_with_its_key_as_remapped():
    """The chart's letter is the key that sends the action here: a [keys] remap reaches it."""
    from console.output.memory_series import Mark
    from console.ui.memory_chart import MemoryChart
    app = IncidentApp([SimSource(name="demo", scenario="seed", clock=FakeClock())],
                      keymap={"sigterm": "T"}, autostart=False)
    async with app.run_test(size=(80, 24)):
        chart = app.query_one("#gpu-chart", MemoryChart)
        assert chart.letter(Mark(0.0, "sigterm")) == "T"
        assert chart.letter(Mark(0.0, "sigkill")) == "k"          # not remapped: its own key
        assert chart.letter(Mark(0.0, "reboot")) == "X"           # palette only: the record's letter


def test_a_process_that_renamed_itself_is_shown_by_the_name_the_findings_use():
    """33, item 9: hidden-holders' findings say pt_data_worker (the comm a data loader sets);
    the process panel showed only the command line, so the two never met."""
    from console.model import Proc
    from console.ui.tables import process_text
    worker = Proc(pid=39021, ppid=1, state="S", user="mlops", name="pt_data_worker",
                  cmdline="/usr/bin/python3 -u finetune.py --config c.yaml")
    assert process_text(worker) == "pt_data_worker: /usr/bin/python3 -u finetune.py --config c.yaml"
    plain = Proc(pid=1563, ppid=1, state="S", user="root", name="nvidia-persiste",
                 cmdline="/usr/bin/nvidia-persistenced --user nvidia-persistenced")
    assert process_text(plain) == plain.cmdline                 # comm cut at 15: still its command line
    assert process_text(Proc(pid=2, ppid=0, state="S", user="root", name="kthreadd", cmdline="")) == "[kthreadd]"
