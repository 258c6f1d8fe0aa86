"""times-to-free.log stays bounded and keeps reading (issue 31 item 12): it grew forever, and past
8 MiB it silently read as empty, so every wait fell back to its default."""
from __future__ import annotations

import json

from console.incident import freetimes


def test_a_huge_log_still_reads_its_newest_measurements(tmp_path):
    path = freetimes.path_in(tmp_path)
    old = json.dumps({"node": "gpu01", "after": "job", "seconds": 999.0, "at": 1.0}) + "\n"
    path.write_text(old * 150_000)                          # ~10 MiB of old measurements
    path.chmod(0o600)
    with open(path, "a") as f:
        for s in (3.0, 4.0, 5.0):
            f.write(json.dumps({"node": "gpu01", "after": "sigkill", "seconds": s, "at": 2.0}) + "\n")
    items = freetimes.load(tmp_path)
    assert items and items[-1]["seconds"] == 5.0
    assert freetimes.usually(items, "sigkill", "gpu01") == (4.8, 3)      # the 90th percentile of 3, 4, 5


def test_recording_keeps_the_file_bounded(tmp_path):
    path = freetimes.path_in(tmp_path)
    line = json.dumps({"node": "gpu01", "after": "job", "seconds": 7.0, "at": 1.0}) + "\n"
    path.write_text(line * 40_000)                          # past the rotation size
    path.chmod(0o600)
    freetimes.record(tmp_path, "gpu02", "sigterm", 12.5)
    assert path.stat().st_size < freetimes.ROTATE_BYTES
    lines = path.read_text().splitlines()
    assert len(lines) == freetimes.KEEP and json.loads(lines[-1])["node"] == "gpu02"
    assert oct(path.stat().st_mode & 0o777) == "0o600"
