"""A verdict's exit status survives a reader that went away (issue 31 item 7): `gate … | logger`
with the logger gone must not turn NOT CLEAN into 0, nor `snapshot --fail-on` a hit into 0."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest


def run_into_closed_pipe(*argv: str) -> tuple[int, str]:
    """Run the CLI with stdout a pipe whose reader is already closed (EPIPE on the first write)."""
    r, w = os.pipe()
    os.close(r)
    try:
        p = subprocess.run([sys.executable, "-m", "console", *argv], stdout=w, stderr=subprocess.PIPE,
                           text=True, timeout=120)
    finally:
        os.close(w)
    return p.returncode, p.stderr


@pytest.mark.parametrize("argv", [
    ("gate", "demo:graceful", "--wait", "0", "--json"),
    ("gate", "demo:graceful", "--wait", "0"),
    ("snapshot", "demo", "--json", "--fail-on", "low"),
])
def test_a_failing_verdict_keeps_its_exit_status_when_stdout_is_a_broken_pipe(argv, tmp_path):
    extra = ("--incident-dir", str(tmp_path)) if argv[0] == "gate" else ()
    rc, err = run_into_closed_pipe(*argv, *extra)
    assert rc == 1, err
    assert "Traceback" not in err and "exit status" in err
