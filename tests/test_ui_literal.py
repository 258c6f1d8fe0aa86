"""Markup and escape codes from a node, a file or a person are shown literally on every surface,
and the console stays alive (console/ui/text.py is the one way text reaches the screen).

Each payload once crashed the console or was interpreted: ``[/bogus]`` raised MarkupError
(exit 1; exit 70 from an action's notification), ``[b]x[/b]`` and ``[link=…]`` were rendered,
``[@click=app.quit]`` became a live action. Driven as a user would (Textual pilot).
"""
import ast
import dataclasses
import pathlib

import pytest

import conftest

pytest.importorskip("textual")

from console.clock import FakeClock  # noqa: E402
from console.incident import timeline  # noqa: E402
from console.sources.sim import SimSource  # noqa: E402
from console.textsafe import printable  # noqa: E402
from console.ui.app import HelpScreen, IncidentApp  # noqa: E402

PAYLOADS = ("[/bogus]", "[b]x[/b]", "[link=http://x]y[/link]", "[@click=app.quit]z[/]", "\x1b[31m")
ALL = " ".join(PAYLOADS)                       # 62 characters: fits one line of a wide screen
SHOWN = printable(ALL)                         # what the screen must show: "... \\x1b[31m"
SIZE = (220, 50)                               # wide enough that nothing is cut


def screen(app) -> str:
    """The terminal as the user sees it (every layer: modals, toasts), as plain text."""
    return "\n".join("".join(seg.text for seg in strip) for strip in app.screen._compositor.render_strips())


def shows(app, text: str) -> bool:
    return text in screen(app)


def toasts(app) -> str:
    """What the console said: each toast on screen as it renders (errors only) and every line
    of its status line (console/ui/activity.py), most recent first."""
    from textual.widgets._toast import Toast
    shown = [str(t.render()) for t in app.screen.query(Toast)]
    return "\n".join(shown + [said.text for said in app.activity.history()])


async def wait_for(pilot, predicate, tries=1000):
    await conftest.wait_for(pilot, predicate, tries, describe=screen)


async def still_alive(pilot) -> None:
    """A key still works: Help opens and closes, and the app has not exited."""
    app = pilot.app
    await pilot.press("question_mark")
    await wait_for(pilot, lambda: isinstance(app.screen, HelpScreen))
    await pilot.press("escape")
    await wait_for(pilot, lambda: not isinstance(app.screen, HelpScreen))
    assert app.return_code is None and app.is_running


def no_escape_on_screen(app) -> None:
    assert "\x1b" not in screen(app)


def dismiss_toasts(app) -> None:
    app.clear_notifications()


# ---------------------------------------------------------------- node data: GPUs, processes

def evil_seed(clock) -> SimSource:
    """The seed node with markup in GPU names and UUIDs and in the top holder's name and argv."""
    src = SimSource(name="demo", scenario="seed", clock=clock)
    node = src.node
    node.gpus[0].name = "H200 " + ALL
    node.gpus[1].uuid = "GPU-" + ALL
    top = node.procs[72294]
    top.comm = "[/bogus]\x1b[31m"
    top.args = "python3 " + ALL
    return src


async def test_gpu_and_process_text_from_the_node_is_literal_everywhere(incident_dir):
    from textual.widgets import DataTable

    from console.ui.details import DetailScreen
    src = evil_seed(FakeClock())
    app = IncidentApp([src], timeline=timeline.open_incident(incident_dir))
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        await wait_for(pilot, lambda: "demo" in app.snapshots and app.query_one("#procs").row_count > 3)
        # the GPU table (its name column is cut at 48 characters) and the process tree
        await wait_for(pilot, lambda: shows(app, "H200 [/bogus] [b]x[/b] [link=http://x]y[/link] …"))
        procs = app.query_one("#procs")
        procs.move_cursor(row=procs.get_row_index("demo:72294"))
        # the node's ps shows control characters in argv as "?" (procps does); the rest literally
        argv = "python3 " + printable(ALL.replace("\x1b", "?"))
        await wait_for(pilot, lambda: shows(app, argv))
        no_escape_on_screen(app)
        # the process detail: name (comm) and command line
        await pilot.press("enter")
        # the window first, its text at its first frame (a busy machine draws it later)
        await wait_for(pilot, lambda: isinstance(app.screen, DetailScreen)
                       and shows(app, argv) and shows(app, "[/bogus]\\x1b[31m"))
        await pilot.press("escape")
        # the GPU detail: name (GPU 0) and UUID (GPU 1)
        gpus = app.query_one("#gpus", DataTable)
        gpus.focus()
        for row, text in ((0, "H200 " + SHOWN), (1, "GPU-" + SHOWN)):
            gpus.move_cursor(row=row)
            await pilot.press("enter")
            await wait_for(pilot, lambda: isinstance(app.screen, DetailScreen) and shows(app, text))
            no_escape_on_screen(app)
            await pilot.press("escape")
            await wait_for(pilot, lambda: not isinstance(app.screen, DetailScreen))
        app.query_one("#procs").focus()
        await still_alive(pilot)


async def test_a_compute_apps_uuid_of_markup_on_a_second_node(incident_dir):
    """The driver lists memory under a UUID no GPU has (the row's key is then the UUID): once
    MarkupError, exit 1, as soon as the cursor reached that node."""
    from textual.widgets import DataTable

    from console.diagnosis import diagnose
    from console.model import DriverProc
    clock = FakeClock()
    good, bad = (SimSource(name="gpu01", scenario="graceful", clock=clock),
                 SimSource(name="gpu02", scenario="seed", clock=clock))
    app = IncidentApp([good, bad], autostart=False)
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        snap = await bad.poll()
        holder = max(snap.processes, key=lambda p: p.gpu_memory_total_mib)
        procs = tuple(dataclasses.replace(p, gpu_memory_mib={ALL: 5}) if p.pid == holder.pid else p
                      for p in snap.processes)
        apps = snap.driver_processes + (DriverProc(pid=holder.pid, gpu_index=None, gpu_uuid=ALL,
                                                   used_memory_mib=5, name=ALL),)
        evil = dataclasses.replace(snap, processes=procs, driver_processes=apps)
        evil = dataclasses.replace(evil, findings=tuple(diagnose(evil)))
        await app.session.take_reading(await good.poll())
        await app.session.take_reading(evil)
        await wait_for(pilot, lambda: len(app.snapshots) == 2)
        nodes = app.query_one("#nodes")
        nodes.focus()          # the node in trouble comes first and is chosen: the cursor is on it
        await wait_for(pilot, lambda: app.current_node == "gpu02")
        await wait_for(pilot, lambda: app.query_one("#procs").row_count > 3)
        app.action_toggle_all()
        app.action_toggle_all()
        procs_table = app.query_one("#procs")
        row = procs_table.get_row(f"gpu02:{holder.pid}")
        assert printable(ALL) in "".join(str(c) for c in row)
        no_escape_on_screen(app)
        await still_alive(pilot)


# ---------------------------------------------------------------- check, action and reset output

async def test_check_output_and_custom_command_output_are_literal(incident_dir):
    from textual.widgets import Input, OptionList

    from console.ui.confirm import ConfirmScreen
    from console.ui.details import DetailScreen
    tl = timeline.open_incident(incident_dir)
    src = SimSource(name="demo", scenario="reset-required", clock=FakeClock())
    src.node.klog("NVRM: " + ALL)
    app = IncidentApp([src], timeline=tl)
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        await wait_for(pilot, lambda: "demo" in app.snapshots)
        # a built-in check whose output carries the payload: the detail shows it literally
        await pilot.press("c")
        await wait_for(pilot, lambda: app.screen.query(OptionList))
        options = app.screen.query_one(OptionList)
        options.highlighted = [options.get_option_at_index(i).id
                               for i in range(options.option_count)].index("kernel-log")
        await pilot.press("enter")
        await wait_for(pilot, lambda: any(e.kind == "check" for e in tl.entries))
        await wait_for(pilot, lambda: isinstance(app.screen, DetailScreen))
        app.screen.query_one("#detail").scroll_end(animate=False)      # the newest kernel line is last
        await wait_for(pilot, lambda: shows(app, "NVRM: " + SHOWN))
        await pilot.press("escape")
        dismiss_toasts(app)
        # a command of one's own: the notification of its (failed) outcome and its output
        for line, out in (("grep -c '^[/]dev' /proc/mounts", None),
                          ("echo '" + ALL + "'; exit 3", SHOWN)):
            await pilot.press("c")
            await wait_for(pilot, lambda: app.screen.query(OptionList))
            await pilot.press("end", "enter")
            await wait_for(pilot, lambda: app.screen.query(Input))
            app.screen.query_one(Input).value = line
            await pilot.press("enter")
            await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen) and shows(app, "$ " + printable(line)))
            count = len(tl.entries)
            await pilot.press("y")
            await wait_for(pilot, lambda: len(tl.entries) > count and tl.entries[-1].outcome is True)
            await wait_for(pilot, lambda: isinstance(app.screen, DetailScreen))    # what it printed
            if out is not None:
                assert shows(app, out)
                await wait_for(pilot, lambda: f"failed (rc 3): {out}" in toasts(app))   # the notification
            await pilot.press("escape")
            await wait_for(pilot, lambda: not isinstance(app.screen, DetailScreen))
            dismiss_toasts(app)
        no_escape_on_screen(app)
        await still_alive(pilot)


async def test_reset_output_with_markup_is_shown_and_the_console_lives(incident_dir):
    """Once an internal error, exit 70: the reset's failure went into a notification as markup."""
    from textual.widgets import DataTable

    from console.ui.confirm import ConfirmScreen
    tl = timeline.open_incident(incident_dir)
    src = SimSource(name="demo", scenario="reset-required", clock=FakeClock())
    src.node.gpus[3].bus_id = "00000000:" + ALL          # nvidia-smi -r names the GPU by its bus id
    app = IncidentApp([src], timeline=tl)
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        await wait_for(pilot, lambda: "demo" in app.snapshots)
        gpus = app.query_one("#gpus", DataTable)
        gpus.focus()
        gpus.move_cursor(row=3)
        await pilot.press("R")
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen))
        await pilot.press("y")
        await wait_for(pilot, lambda: any(e.kind == "action" and (e.command or "").startswith("nvidia-smi -r")
                                          for e in tl.entries), tries=1500)
        sent = [e for e in tl.entries if e.kind == "action"][-1]
        await wait_for(pilot, lambda: any(e.outcome and e.action == sent.seq for e in tl.entries), tries=1500)
        reset = next(e for e in tl.entries if e.outcome and e.action == sent.seq)
        assert ALL in reset.output and reset.rc not in (0, None)
        await wait_for(pilot, lambda: "not reset: in use by another client" in toasts(app).lower())
        no_escape_on_screen(app)
        await still_alive(pilot)


# ---------------------------------------------------------------- what a person types

async def test_hypothesis_note_and_filter_typed_by_a_person_are_literal(incident_dir):
    from textual.widgets import Input

    from console.ui.prompts import VerdictScreen
    tl = timeline.open_incident(incident_dir)
    app = IncidentApp([SimSource(name="demo", scenario="seed", clock=FakeClock())], timeline=tl)
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        await wait_for(pilot, lambda: "demo" in app.snapshots)
        for key in ("h", "n"):
            await pilot.press(key)
            await wait_for(pilot, lambda: app.screen.query(Input))
            app.screen.query_one(Input).value = ALL
            await wait_for(pilot, lambda: shows(app, SHOWN))      # in the prompt as typed, escape shown
            await pilot.press("enter")
            await wait_for(pilot, lambda: not app.screen.query(Input))
        assert [e.text for e in tl.entries if e.kind in ("hypothesis", "note")][-2:] == [SHOWN, SHOWN]
        await pilot.press("v")
        await wait_for(pilot, lambda: isinstance(app.screen, VerdictScreen) and shows(app, SHOWN))
        await pilot.press("escape")
        await pilot.press("slash")
        await wait_for(pilot, lambda: app.screen.query(Input))
        app.screen.query_one(Input).value = "[/bogus]"
        await pilot.press("enter")
        await wait_for(pilot, lambda: shows(app, "filter: [/bogus]"))
        no_escape_on_screen(app)
        await still_alive(pilot)


async def test_node_names_from_a_nodes_file_are_literal(tmp_path):
    from textual.widgets import DataTable

    from console.sources.ssh.options import SshOptions
    from console.sources.targets import expand_targets, make_source
    from tests.sshd_fixture import free_port
    nodes = tmp_path / "nodes"
    names = [p for p in PAYLOADS if "\x1b" not in p]      # a nodes file refuses control characters
    nodes.write_text("".join(f"{p}@127.0.0.1:{free_port()}\n" for p in names))
    targets = expand_targets([], str(nodes))
    assert [t.rpartition("@")[0] for t in targets] == names
    sources = [make_source(t, ssh=SshOptions(connect_timeout=2.0)) for t in targets]
    sources.append(SimSource(name="demo\x1b[31m", scenario="graceful", clock=FakeClock()))
    app = IncidentApp(sources, interval=0.5)
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        await wait_for(pilot, lambda: len(app.snapshots) == len(sources))
        table = app.query_one("#nodes")
        for name in targets:
            assert shows(app, name[:27]), name               # the node column holds 28 characters
        assert shows(app, "demo\\x1b[31m")
        table.focus()
        for _ in sources:                                   # the cursor visits every node
            await pilot.press("down")
            await pilot.pause()
            assert shows(app, "viewing " + printable(app.current_node)[:39])   # the whole name, up to 40
        no_escape_on_screen(app)
        await still_alive(pilot)


async def test_a_key_remapped_to_markup_in_the_config_file_is_shown_literally(tmp_path):
    """The palette's help line names each command's key; once MarkupError, exit 1, on ctrl+p.
    The config file now refuses such a key name (one line naming key and file); a keymap that
    reaches the console another way is still shown literally."""
    from console.config import load_config
    cfg = tmp_path / "c.toml"
    cfg.write_text('[keys]\nsigkill = "[/bogus]"\n')
    with pytest.raises(ValueError, match=r"sigkill.*c\.toml|c\.toml.*sigkill"):
        load_config(str(cfg))
    app = IncidentApp([SimSource(name="demo", scenario="seed", clock=FakeClock())],
                      keymap={"sigkill": "[/bogus]"}, autostart=False)
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        await pilot.press("ctrl+p")
        await pilot.pause()
        await pilot.press(*"SIGKILL the")
        await wait_for(pilot, lambda: shows(app, "[/bogus] — SIGKILL"))
        await pilot.press("escape")
        await wait_for(pilot, lambda: app.screen is app.screen_stack[0])
        await still_alive(pilot)


# ---------------------------------------------------------------- replay and follow

async def test_replay_and_follow_show_such_entries_literally(tmp_path):
    from console.ui.timeline_view import FollowApp, ReplayApp
    tl = timeline.open_incident(tmp_path)
    hyp = tl.append("hypothesis", ALL, node=ALL)
    tl.append("note", ALL, node=ALL)
    tl.append("check", "kernel-log: " + ALL, node=ALL, hypothesis=hyp.seq, command="echo '" + ALL + "'",
              rc=0, output=ALL + "\n" + ALL)
    tl.append("action", "Reset GPU 3: failed (rc 255): " + ALL, node=ALL, command="nvidia-smi -r -i 3", rc=255,
              output="GPU " + ALL + " could not be reset")
    path = str(tl.path)
    for app in (ReplayApp.from_file(path), FollowApp(path, poll_interval=0.05)):
        async with app.run_test(size=SIZE, notifications=True) as pilot:
            for step in range(4):
                if isinstance(app, ReplayApp):
                    await pilot.press("right")
                else:
                    await wait_for(pilot, lambda: app.table.row_count == 4)
                    app.table.move_cursor(row=step)
                await pilot.pause()
                assert shows(app, SHOWN), (type(app).__name__, step, screen(app))
            assert shows(app, "GPU " + SHOWN + " could not be reset")
            no_escape_on_screen(app)
            await pilot.press("q")
        assert app.return_code == 0


# ---------------------------------------------------------------- the chokepoint holds

UI = pathlib.Path(__file__).resolve().parent.parent / "console" / "ui"
#: widgets that parse a plain str as markup: built only through console/ui/text.py's subclasses
PARSING_WIDGETS = {"Static", "DataTable", "OptionList", "Label", "Markdown", "RichLog", "Log", "Pretty",
                   "Input", "TextArea"}     # these two send control characters raw


def test_no_ui_module_hands_textual_a_string_to_parse():
    """Outside console/ui/text.py: no markup-parsing widget built directly, no markup parsed,
    no border title or sub-title set from a str, and every App mixes in LiteralNotify."""
    problems = []
    for path in sorted(UI.glob("*.py")):
        if path.name == "text.py":
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            where = f"{path.name}:{getattr(node, 'lineno', '?')}"
            if isinstance(node, ast.Call):
                fn = node.func
                name = fn.id if isinstance(fn, ast.Name) else fn.attr if isinstance(fn, ast.Attribute) else ""
                if name in PARSING_WIDGETS:
                    problems.append(f"{where}: {name}(...) (use the Literal* widgets of console/ui/text.py)")
                if name in ("Hit", "DiscoveryHit") and not any(
                        k.arg == "help" and isinstance(k.value, ast.Call)
                        and getattr(k.value.func, "id", "") == "literal_content" for k in node.keywords):
                    problems.append(f"{where}: palette help not literal_content(...) (Textual parses it)")
                if name in ("from_markup", "render_markup") or any(
                        k.arg == "markup" and not (isinstance(k.value, ast.Constant) and k.value.value is False)
                        for k in node.keywords):
                    problems.append(f"{where}: markup parsed")
            if isinstance(node, ast.Assign):
                for target in node.targets:
                    if isinstance(target, ast.Attribute) and target.attr in ("border_title", "border_subtitle",
                                                                              "sub_title", "tooltip"):
                        problems.append(f"{where}: {target.attr} set directly (use text.set_title)")
            if isinstance(node, ast.ClassDef):
                bases = [b.value.id if isinstance(b, ast.Subscript) and isinstance(b.value, ast.Name)
                         else getattr(b, "id", "") for b in node.bases]
                if "App" in bases and "LiteralNotify" not in bases:
                    problems.append(f"{where}: App {node.name} without LiteralNotify")
    assert not problems, "\n".join(problems)
