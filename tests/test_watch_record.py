"""The watch when it cannot record (issue 31 item 2): an incident directory on a read-only mount or
a full disk — a sick node's disk failing is a normal way for this to happen. It says so on stderr
once per cause, still tells someone with the evidence inline (never a page about an empty file
without saying so), counts the failure, and tries again at the next reading. Real mounts (tmpfs,
read-only and tiny), made and unmounted by the test."""
from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from console.incident.timeline import load, open_incident
from tests.test_watch import reading, watcher


def mount(where: Path, *options: str) -> None:
    where.mkdir(parents=True, exist_ok=True)
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", ",".join(("mode=700", *options)), "tmpfs", str(where)],
                       capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {r.stderr.strip()}")


@pytest.fixture
def mounts():
    made: list[Path] = []
    yield made
    for m in reversed(made):
        subprocess.run(["umount", str(m)], capture_output=True)


pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="mounting a tmpfs needs root")


async def test_a_read_only_incident_dir_is_said_once_told_inline_counted_and_retried(tmp_path, mounts):
    inc = tmp_path / "inc"
    mount(inc, "ro")
    mounts.append(inc)
    warned: list[str] = []
    w, session, source, lines, told, clock = watcher(tmp_path, warn=warned.append)
    w.open_incident = lambda: open_incident(inc)
    held = await reading(source)
    for _ in range(3):
        await w.update(held)
        clock.t += 1
    assert len(told) == 1 and told[0]["recorded"] is False and told[0]["incident"] is None
    assert "Read-only" in told[0]["not_recorded"]
    assert any(p["holds_devices"] for p in told[0]["evidence"]["processes"])      # the evidence itself
    assert len(warned) == len(told[0]["causes"]) and all("cannot record" in line for line in warned)
    assert w.record_failures == 3
    subprocess.run(["mount", "-o", "remount,rw", str(inc)], check=True)            # the disk is back
    await w.update(held)
    assert len(told) == 2 and told[1]["recorded"] is True and told[1]["incident"]
    path, = inc.glob("*.jsonl")
    assert load(path)[0][0].text.startswith("watch opened this incident")
    await session.stop()
    await w.stop()


async def test_a_full_disk_never_pages_about_an_empty_file_without_saying_so(tmp_path, mounts):
    inc = tmp_path / "full"
    mount(inc, "size=64k")
    mounts.append(inc)
    fd = os.open(inc / "filler", os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        while os.write(fd, b"\0" * 4096):
            pass
    except OSError:
        pass                                      # ENOSPC: the disk is full
    finally:
        os.close(fd)
    warned: list[str] = []
    w, session, source, lines, told, clock = watcher(tmp_path, warn=warned.append)
    w.open_incident = lambda: open_incident(inc)
    await w.update(await reading(source))
    assert len(told) == 1 and told[0]["recorded"] is False, told[0].get("not_recorded")
    assert "space" in told[0]["not_recorded"].lower()
    assert told[0]["evidence"]["processes"] and warned
    assert w.record_failures >= 1
    await session.stop()
    await w.stop()


def test_the_metrics_page_counts_what_could_not_be_recorded():
    from console.session import metrics
    text = metrics.page([], {"gpu07": True}, 0, 0, [], 3)
    assert "gpu_incident_record_failures_total 3" in text.splitlines()
