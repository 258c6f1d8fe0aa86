"""The contracts hold: mypy passes on the session and the actions (pyproject.toml [tool.mypy]:
strict there, the rest of console read for its types), which also checks that the concrete
sources, timeline, monitor and clocks satisfy the Protocols of console/actions/ports.py where
console/session hands them to ``execute``. mypy keeps its cache in .mypy_cache (~5 s cold)."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from console.actions.ports import NvmlHolder
from console.actions.slurm import SlurmActionSource
from console.clock import FakeClock

ROOT = Path(__file__).resolve().parent.parent


def test_mypy_passes_on_the_session_and_the_actions():
    res = subprocess.run([sys.executable, "-m", "mypy", "console/session", "console/actions"], cwd=ROOT,
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stdout + res.stderr


class _Client:
    clock = FakeClock()
    timeout = 5.0
    where = "this machine"

    def __init__(self) -> None:
        self.ran: list[str] = []

    async def run(self, line: str, timeout: float | None = None):
        self.ran.append(line)
        raise AssertionError("nothing may run")


async def test_a_slurm_action_source_refuses_a_signal_and_sends_nothing():
    client = _Client()
    source = SlurmActionSource(client, "gpu07", "gpu07")
    res = await source.signal(4242, "KILL", start_ticks=1, create_time=None)
    assert res.rc == 3 and not res.ok and "refused" in res.stderr and client.ran == []
    await source.close()
    assert not isinstance(source, NvmlHolder)        # it holds no NVML handle to let go of
