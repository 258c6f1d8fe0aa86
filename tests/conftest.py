import os
import sys
from pathlib import Path

import pytest

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


os.environ.setdefault("TEXTUAL_ANIMATIONS", "none")


@pytest.fixture
def utc(monkeypatch):
    """Clock times in UTC, whatever the machine's zone (snapshots show the status line's time)."""
    import time
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()
