"""Another user's incident directory cannot redirect the console's writes (it runs as root).

The attack: a directory owned by `nobody` holding symlinks `<id>.jsonl` and `<id>.md` to files
of root's. The symlinks are planted by `nobody` itself (setpriv), then root runs the CLI.
"""
from __future__ import annotations

import os
import shutil
import stat
import subprocess
import tempfile
from pathlib import Path

import pytest

from console.incident import safefiles, timeline
from tests.conftest import gpu_incident_cmd

NOBODY = 65534
AS_NOBODY = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups"]


def run(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(gpu_incident_cmd() + list(args), capture_output=True, text=True, timeout=120,
                          cwd=cwd, env={**os.environ, "TERM": "dumb"})


@pytest.fixture
def planted():
    """(incident dir owned by nobody with planted symlinks, {victim path: its bytes})."""
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        pytest.skip("needs root and setpriv (util-linux)")
    base = Path(tempfile.mkdtemp(prefix="gpu-incident-nobody-"))
    try:
        os.chmod(base, 0o711)                             # nobody may pass through, not write
        victims = {base / "root-owned.jsonl": b'{"precious": "root state"}\n',
                   base / "root-owned.md": b"# root's own notes\n"}
        for path, data in victims.items():
            path.write_bytes(data)
            os.chmod(path, 0o644)
        shared = base / "incidents"
        shared.mkdir(mode=0o755)
        os.chown(shared, NOBODY, NOBODY)
        plant = subprocess.run(AS_NOBODY + ["sh", "-c", "ln -s ../root-owned.jsonl inc.jsonl && "
                                                         "ln -s ../root-owned.md inc.md"],
                               cwd=shared, capture_output=True, text=True, timeout=30)
        assert plant.returncode == 0, plant.stderr
        assert (shared / "inc.jsonl").is_symlink() and os.lstat(shared / "inc.md").st_uid == NOBODY
        yield shared, victims
    finally:
        shutil.rmtree(base, ignore_errors=True)


def untouched(victims: dict[Path, bytes]) -> bool:
    return all(path.read_bytes() == data for path, data in victims.items())


def test_root_refuses_an_incident_dir_owned_by_another_user(planted):
    shared, victims = planted
    r = run("demo", "--incident-dir", str(shared), "--incident", "inc")
    assert r.returncode == 2, r.stderr
    [line] = r.stderr.splitlines()
    assert line == (f"gpu-incident: incident dir {shared} belongs to nobody (uid {NOBODY}), not to root "
                    "(uid 0): refusing to write there (choose another with --incident-dir)")
    assert untouched(victims)


def test_export_by_id_from_that_dir_never_reads_or_writes_through_the_links(planted, tmp_path):
    shared, victims = planted
    r = run("timeline", "export", "inc", "--incident-dir", str(shared), "-o", str(shared / "inc.md"))
    assert r.returncode == 2 and len(r.stderr.splitlines()) == 1
    assert "inc.jsonl is a symbolic link: refusing to read through it" in r.stderr
    assert untouched(victims)
    # exporting a real incident onto the planted .md replaces the link, never writes through it
    with timeline.open_incident(tmp_path / "mine", "real") as tl:
        tl.append("note", "what happened")
    r = run("timeline", "export", str(tl.path), "-o", str(shared / "inc.md"))
    assert r.returncode == 0, r.stderr
    assert untouched(victims)
    out = shared / "inc.md"
    assert not out.is_symlink() and out.read_text().startswith("# Incident real")
    assert stat.S_IMODE(out.stat().st_mode) == 0o600 and out.stat().st_uid == 0


def test_a_dir_others_can_write_is_refused_even_when_it_is_ours(tmp_path):
    shared = tmp_path / "incidents"
    shared.mkdir()
    os.chmod(shared, 0o777)
    r = run("demo", "--incident-dir", str(shared))
    assert r.returncode == 2
    assert r.stderr.splitlines() == [f"gpu-incident: incident dir {shared} is writable by group and others "
                                     "(mode 0777): refusing to write there (chmod go-w it, or choose "
                                     "another with --incident-dir)"]
    assert os.listdir(shared) == []


def test_the_incident_file_is_never_opened_through_a_symlink(incident_dir, tmp_path):
    incident_dir.mkdir(mode=0o700)
    victim = tmp_path / "victim"
    victim.write_bytes(b"keep me\n")
    (incident_dir / "inc.jsonl").symlink_to(victim)
    with pytest.raises(safefiles.UnsafeFile, match="inc.jsonl is a symbolic link"):
        timeline.open_incident(incident_dir, "inc")
    assert victim.read_bytes() == b"keep me\n"
    os.mkfifo(incident_dir / "fifo.jsonl")
    with pytest.raises(safefiles.UnsafeFile, match="not a regular file"):
        timeline.open_incident(incident_dir, "fifo")


def test_an_export_replaces_a_link_at_its_target_and_leaves_what_it_pointed_to(tmp_path):
    victim = tmp_path / "victim.md"
    victim.write_bytes(b"original\n")
    target = tmp_path / "out.md"
    target.symlink_to(victim)
    safefiles.write_atomic(target, b"# Incident x\n")
    assert victim.read_bytes() == b"original\n"
    assert not target.is_symlink() and target.read_bytes() == b"# Incident x\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.md", "victim.md"]   # no temp file left
    with pytest.raises(IsADirectoryError):
        safefiles.write_atomic(tmp_path, b"x")


async def test_the_e_key_never_writes_through_a_link_planted_at_the_export(incident_dir, tmp_path):
    pytest.importorskip("textual")
    from console.clock import FakeClock
    from console.sources.sim import SimSource
    from console.ui.app import IncidentApp
    from tests.polling import eventually
    tl = timeline.open_incident(incident_dir, "inc")
    victim = tmp_path / "victim.md"
    victim.write_bytes(b"original\n")
    (incident_dir / "inc.md").symlink_to(victim)
    app = IncidentApp([SimSource(name="demo", scenario="seed", clock=FakeClock())], timeline=tl)
    async with app.run_test(size=(80, 24)) as pilot:
        app.incident.note("demo", "exported below")
        await pilot.press("e")
        assert await eventually(lambda: not (incident_dir / "inc.md").is_symlink())
        await pilot.press("q")
    tl.close()
    assert victim.read_bytes() == b"original\n"
    md = (incident_dir / "inc.md").read_text()
    assert md.startswith("# Incident inc") and "exported below" in md
    assert stat.S_IMODE((incident_dir / "inc.md").stat().st_mode) == 0o600
