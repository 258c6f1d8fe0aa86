"""The console fixes glibc's allocator thresholds (console/malloc_tuning.py); a person's own
MALLOC_* variables win. Each case in a child process: the allocator is the process's."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

CODE = "import json; from console import malloc_tuning; print(json.dumps(malloc_tuning.tune()))"


def _tuned(**env: str) -> list[str]:
    out = subprocess.run([sys.executable, "-c", CODE], capture_output=True, text=True, timeout=60,
                         env={**os.environ, **env}, check=True)
    return json.loads(out.stdout)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")
def test_the_thresholds_are_fixed_and_a_persons_own_setting_wins():
    assert _tuned() == ["MALLOC_MMAP_THRESHOLD", "MALLOC_TRIM_THRESHOLD", "MALLOC_ARENA_MAX"]
    assert _tuned(MALLOC_ARENA_MAX="8") == ["MALLOC_MMAP_THRESHOLD", "MALLOC_TRIM_THRESHOLD"]
