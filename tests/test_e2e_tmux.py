"""End to end as a person sees it: `gpu-incident demo` in a real terminal (tmux, 80x24), keys
pressed, the screen read back. tmux is installed by .ci/run.

Heavy (the second pass of .ci/run): a real terminal and a new interpreter per console, ~5 s of
waiting for the screen; budget 30 s. The same keys and panels are tested in-process with an App
(tests/test_ui_*.py) in the default suite."""
from __future__ import annotations

import shutil
import subprocess
import sys
import uuid

import pytest

from tests.polling import until

pytestmark = [pytest.mark.heavy,
              pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed (.ci/run installs it)")]


class Tmux:
    def __init__(self, tmp_path):
        self.server = f"gi-test-{uuid.uuid4().hex[:8]}"
        self.tmp = tmp_path

    def __call__(self, *args: str) -> str:
        return subprocess.run(["tmux", "-L", self.server, *args], capture_output=True, text=True,
                              timeout=30).stdout

    def start(self, *argv: str) -> None:
        env = f"XDG_STATE_HOME={self.tmp / 'state'} TEXTUAL_ANIMATIONS=none"
        command = f"env {env} {sys.executable} -m console {' '.join(argv)}; echo EXITED $?; sleep 30"
        self("new-session", "-d", "-x", "80", "-y", "24", command)

    def screen(self) -> str:
        return self("capture-pane", "-p")

    def shows(self, text: str) -> bool:
        return until(lambda: text in self.screen())

    def stop(self) -> None:
        self("kill-server")        # the server this test started, by its own socket name


@pytest.fixture
def tmux(tmp_path):
    t = Tmux(tmp_path)
    yield t
    t.stop()


def test_demo_at_80x24_shows_the_seed_and_answers_keys(tmux):
    tmux.start("demo", "--incident", "e2e")
    assert tmux.shows("sglang::scheduler_TP0"), tmux.screen()
    assert "GPU  Memory used/total" in tmux.screen()
    screen = tmux.screen()
    lines = screen.splitlines()
    assert len(lines) <= 24 and all(len(line) <= 80 for line in lines)
    assert "76109MiB" in screen or "76109" in screen, screen        # GPU 0 as nvidia-smi prints it
    assert "findings" in screen
    tmux("send-keys", "?")
    assert tmux.shows("Keys"), tmux.screen()
    assert "SIGKILL" in tmux.screen()
    tmux("send-keys", "End")            # Help is taller than 24 lines: it scrolls to its last key
    assert tmux.shows("command palette"), tmux.screen()
    assert "escape closes this screen" in tmux.screen()
    tmux("send-keys", "Escape")
    assert tmux.shows("GPU  Memory used/total"), tmux.screen()      # the help closed, the tables are back
    tmux("send-keys", "q")
    assert tmux.shows("EXITED 0"), tmux.screen()
