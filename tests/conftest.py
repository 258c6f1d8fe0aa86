import asyncio
import contextlib
import io
import logging
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

# Byte-code caches on, whatever the machine says (PYTHONDONTWRITEBYTECODE=1 made every worker
# rewrite all test modules, ~8 s, and every `python -m console` child compile the package, ~0.4 s):
# for the test modules imported after this, and for every child process.
sys.dont_write_bytecode = False
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)

import tests.fuzzing  # noqa: F401  (registers the hypothesis profiles before the plugin loads one)

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

# The real-sshd fixtures (one sshd per session, started and stopped by PID).
pytest_plugins = ("tests.sshd_fixture", "tests.sim_fixtures")


@pytest.fixture
def incident_dir(tmp_path: Path) -> Path:
    return tmp_path / "incidents"


@pytest.fixture(autouse=True)
def _no_user_state(tmp_path_factory, monkeypatch):
    """Never write into the real user's state dir from a test."""
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path_factory.mktemp("state")))
    yield


def gpu_incident_cmd() -> list[str]:
    exe = ROOT / ".venv" / "bin" / "gpu-incident"
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "console"]


def run_cli(*args: str) -> subprocess.CompletedProcess:
    """``gpu-incident ARGS`` in this process (console.cli.main, what the entry point calls): its
    exit status, stdout and stderr, as ``subprocess.run`` gives them, without starting an
    interpreter that imports the console again (~0.5 s of CPU a call). A few tests keep the real
    process (the entry point, a closed pipe: tests/test_cli.py); the rest use this."""
    from console import cli
    out, err = io.StringIO(), io.StringIO()
    log = logging.getLogger("gpu_incident")
    handlers, level = list(log.handlers), log.level
    stdout = sys.stdout
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                rc = cli.main(list(args))
            except SystemExit as exc:           # argparse's --help and --version
                rc = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    finally:
        sys.stdout = stdout                     # main() swaps in /dev/null after a broken pipe
        for handler in log.handlers[:]:         # a --debug-log handler stays with its process
            if handler not in handlers:
                log.removeHandler(handler)
                handler.close()
        log.setLevel(level)
    return subprocess.CompletedProcess(["gpu-incident", *args], rc, out.getvalue(), err.getvalue())


os.environ.setdefault("TEXTUAL_ANIMATIONS", "none")

#: how often wait_for looks at an App's state
APP_STEP_S = 0.02


async def wait_for(pilot, predicate, tries: int = 1000, describe=None) -> None:
    """Wait until ``predicate()`` holds while the App under ``pilot`` runs; fail after ``tries``
    steps of APP_STEP_S (and never before tests.polling.BOUND_S: a busy 2-core machine), with
    ``describe(app)`` (the screen, say) in the message.

    The App draws on its own refresh timer meanwhile: the wait is an asyncio sleep, not
    ``pilot.pause(step)``, which posts a message to every widget of the screen and forces a
    repaint at every step (most of an App test's CPU when it waited for a poll or a command)."""
    from tests.polling import BOUND_S
    deadline = time.monotonic() + max(BOUND_S, tries * APP_STEP_S)
    while not (predicate() and _front_ready(pilot.app)):
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached" + (f"; screen:\n{describe(pilot.app)}" if describe else ""))
        await asyncio.sleep(APP_STEP_S)


def screen_text(app) -> str:
    """What the App's screen in front shows, as plain text: every table's rows and every text."""
    from textual.widgets import DataTable, Static

    from console.ui.virtual_table import VirtualTable
    parts = []
    for w in app.screen.query("*"):
        if isinstance(w, DataTable):
            for row in w.ordered_rows:
                parts.append(" ".join(str(c) for c in w.get_row(row.key)))
        elif isinstance(w, VirtualTable):
            parts.extend(" ".join(str(c) for c in w.get_row(key)) for key in w.row_keys)
        elif isinstance(w, Static):
            parts.append(str(w.render()))
    return "\n".join(parts)


def _front_ready(app) -> bool:
    """The screen in front is composed and mounted: a window just pushed (Confirm, a result)
    has its text to read. A busy machine mounts it a while after ``app.screen`` names it, and
    a test that waited only for the name read an empty window."""
    try:
        return app.screen.is_mounted
    except Exception:  # noqa: BLE001 - no screen (the App ended): nothing to wait for
        return True


#: modules whose tests read this machine's whole process table (the local source, the real
#: probe) or leave kernel state every such reader sees (real zombies, D-state threads, orphans,
#: respawning parents): they run in the serial pass, one at a time (README: the test command)
SERIAL_MODULES = frozenset({
    "test_actions", "test_cgroup", "test_checks", "test_local_commands", "test_local_nvml",
    "test_local_procs", "test_parse_probe", "test_probe_bounds", "test_probe_cost", "test_probe_framing",
    "test_probe_two_speeds", "test_real_kernel", "test_reset_blockers", "test_respawn", "test_signal_rung",
    "test_watch",
})
#: modules whose tests on the real sshd judge the node as a whole (a gate that finds it clean, a
#: worker's session that outlives its parent): one at a time with the SERIAL_MODULES too
WHOLE_NODE_MODULES = frozenset({"test_gate", "test_family_sessions"})
#: the xdist group (``--dist loadgroup``) of the serial tests that must not share the machine
#: with one another: one worker runs them in turn
MACHINE = "machine"


@pytest.hookimpl(tryfirst=True)   # before xdist reads the groups (--dist loadgroup)
def pytest_collection_modifyitems(config, items):
    """Mark ``serial`` what must not share the machine with the parallel pass: the SERIAL_MODULES
    and every test on the real sshd (its node is this machine: the probe reads the whole table).

    The serial pass runs on two workers (``-n 2 --dist loadgroup``): the tests of the
    SERIAL_MODULES and WHOLE_NODE_MODULES and those marked serial by hand form one group
    (MACHINE: one worker, one at a time, as before); the other worker takes the rest, tests on
    the real sshd (one sshd per worker, its own ports and test nvidia-smi state) that make no
    kernel state and judge only their own nodes' GPUs and their own processes."""
    for item in items:
        module = item.module.__name__.rsplit(".", 1)[-1] if item.module else ""
        alone = (module in SERIAL_MODULES or module in WHOLE_NODE_MODULES
                 or item.get_closest_marker("serial") is not None)
        if module in SERIAL_MODULES or "sshd" in item.fixturenames:
            item.add_marker(pytest.mark.serial)
        if alone and item.get_closest_marker("serial") is not None:
            item.add_marker(pytest.mark.xdist_group(MACHINE))


@pytest.fixture
def utc(monkeypatch):
    """Clock times in UTC, whatever the machine's zone (snapshots show the status line's time)."""
    import time
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()
