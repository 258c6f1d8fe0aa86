"""The probe's two speeds lose nothing (console/probe_scope.py, sources/watch.py): over the real
sshd, with real processes that appear outside the watched set or change inside it.

- a zombie, or a hidden holder (a real mknod device), outside the watched set shows at the
  first whole probe after it appeared (the bound: one whole period, shell.WHOLE_MIN_S on an
  ordinary node);
- a thread of a watched process that goes into D (the vfork recipe, from a second thread)
  shows at the next poll, a light one;
- a PID the driver starts listing is credited at once, and watched from the next poll on
  (which reads the whole table: its family is not known yet);
- a PID reused between two whole probes never shows the old process's identity, whether a
  light probe saw the old one go or not (the kernel's PID counter went down: all is new).

The whole period is cut to a second here (the mechanism is the same; the bench measures the
real one). Processes are started by the tests and ended by their PIDs.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from console.monitor import diagnosed
from console.sources import shell
from console.sources.ssh.source import SshSource
from tests.polling import until
from tests.test_real_kernel import devices, in_d, run, started  # noqa: F401 (fixtures)
from tests.test_ssh import node_a, options  # noqa: F401 (fixture)

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="mknod and ns_last_pid need root (CI runs as root)")

#: a parent that never reaps: its child exits on a line on the parent's stdin
UNREAPED = """
    import os, signal, sys
    r, w = os.pipe()
    child = os.fork()
    if child == 0:
        os.close(w); os.read(r, 1); os._exit(0)
    os.close(r)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    print(os.getpid(), child, flush=True)
    sys.stdin.readline(); os.write(w, b"x")
    sys.stdin.readline()
"""

#: opens the device file on a line on stdin
LATE_HOLDER = """
    import os, sys
    print(os.getpid(), flush=True)
    sys.stdin.readline()
    fd = os.open(sys.argv[1], os.O_RDONLY)
    print("open", flush=True)
    sys.stdin.readline()
"""

#: a GPU worker whose second thread vforks (and so waits in D) on a line on stdin
THREAD_VFORK = """
    import ctypes, os, sys, threading
    libc = ctypes.CDLL(None, use_errno=True)
    go = threading.Event()
    def later():
        go.wait()
        if libc.vfork() == 0:
            libc.pause()
            libc._exit(0)
    threading.Thread(target=later, daemon=True).start()
    print(os.getpid(), flush=True)
    sys.stdin.readline(); go.set()
    sys.stdin.readline()
"""


@pytest.fixture
def fast_whole(monkeypatch):
    monkeypatch.setattr(shell, "WHOLE_MAX_S", 1.0)
    monkeypatch.setattr(shell, "WHOLE_MIN_S", 1.0)


def _say(p) -> None:
    p.stdin.write("go\n")
    p.stdin.flush()


async def _polls_until_whole(src: SshSource, limit: int = 400):
    """Polls until a whole probe; (snapshots of the light polls before it, the whole one's)."""
    light = []
    for _ in range(limit):
        snap = await src.poll()
        assert snap.error is None or "driver" in snap.error, snap.error
        if src._scope is not None and src._scope.whole:
            return light, snap
        light.append(snap)
    raise AssertionError("no whole probe came")


async def _settle(src: SshSource) -> None:
    """Polls until the source runs light probes (its first, whole, one done)."""
    for _ in range(5):
        await src.poll()
        if src._scope is not None and not src._scope.whole:
            return
    raise AssertionError("the source never went light")


async def test_a_zombie_outside_the_watched_set_shows_at_the_next_whole_probe(
        sshd, node_a, tmp_path, ssh_home, started, fast_whole):  # noqa: F811
    p, words = run(started, UNREAPED)
    parent, child = int(words[0]), int(words[1])
    src = SshSource(node_a.target, options(sshd, tmp_path))
    try:
        await _settle(src)
        snap = await src.poll()
        assert snap.proc(child).state == "S" and child not in src._scope.watched
        _say(p)
        assert until(lambda: Path(f"/proc/{child}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z")
        light, whole = await _polls_until_whole(src)
        assert whole.proc(child).state == "Z", "the whole probe read it"
        assert any(f.kind == "zombie" and child in f.pids for f in diagnosed(whole).findings)
        after = await src.poll()
        assert child in src._scope.watched and after.proc(child).state == "Z", "watched from then on"
    finally:
        await src.close()


async def test_a_hidden_holder_outside_the_watched_set_shows_at_the_next_whole_probe(
        sshd, node_a, tmp_path, ssh_home, started, devices, fast_whole):  # noqa: F811
    p, words = run(started, LATE_HOLDER, str(devices / "nvidia0"))
    pid = int(words[0])
    src = SshSource(node_a.target, options(sshd, tmp_path), device_glob=f"{devices}/nvidia*")
    try:
        await _settle(src)
        assert not (await src.poll()).proc(pid).device_files
        _say(p)
        assert p.stdout.readline().strip() == "open"
        light, whole = await _polls_until_whole(src)
        assert whole.proc(pid).device_files == (str(devices / "nvidia0"),)
        await src.poll()
        assert pid in src._scope.watched, "a holder is watched from then on"
    finally:
        await src.close()


async def test_a_watched_processs_thread_in_d_shows_at_the_next_poll(
        sshd, node_a, tmp_path, ssh_home, started):  # noqa: F811
    p, words = run(started, THREAD_VFORK)
    pid = int(words[0])
    node_a.smi.set(used=(30000, 4), apps=[(pid, 0, 29000, Path(sys.executable).name)])
    src = SshSource(node_a.target, options(sshd, tmp_path))
    try:
        await _settle(src)
        await src.poll()
        assert pid in src._scope.watched and pid in src._scope.threads
        _say(p)

        def thread_in_d() -> bool:
            return any(in_d(int(t)) for t in os.listdir(f"/proc/{pid}/task") if t != str(pid)) or any(
                Path(f"/proc/{pid}/task/{t}/stat").read_text().rsplit(")", 1)[1].split()[0] == "D"
                for t in os.listdir(f"/proc/{pid}/task"))
        assert until(thread_in_d), "the thread never reached D"
        snap = await src.poll()
        assert not src._scope.whole, "a light probe"
        proc = snap.proc(pid)
        assert proc.state != "D" and [t.tid != pid for t in proc.d_threads] == [True], proc
        assert proc.d_threads[0].wchan, "its wchan read too"
    finally:
        await src.close()


async def test_a_new_driver_pid_is_credited_at_once_and_watched_with_its_family_next(
        sshd, node_a, tmp_path, ssh_home, gpu_workers):  # noqa: F811
    (w0,) = gpu_workers(1)
    src = SshSource(node_a.target, options(sshd, tmp_path))
    try:
        await _settle(src)
        assert w0 not in src._scope.watched
        node_a.smi.set(used=(9000, 4), apps=[(w0, 0, 8800, "sleep")])
        snap = await src.poll()
        assert snap.proc(w0).gpu_memory_mib == {"0": 8800}, "credited in the poll that listed it"
        await src.poll()
        assert src._scope.whole and w0 in src._scope.watched, "the next poll reads all, and watches it"
    finally:
        await src.close()


def _reuse_pid(pid: int, argv: list[str]):
    """Start ``argv`` as PID ``pid`` (free again): the kernel's PID counter set just below it."""
    import subprocess
    Path("/proc/sys/kernel/ns_last_pid").write_text(str(pid - 1))
    p = subprocess.Popen(argv)
    if p.pid != pid:
        p.kill()
        p.wait()
        pytest.skip(f"PID {pid} went to another process first (a busy machine)")
    return p


@pytest.mark.parametrize("seen_gone", [True, False], ids=["a-light-probe-saw-it-go", "reused-between-two-polls"])
async def test_a_reused_pid_never_shows_the_old_process(sshd, node_a, tmp_path, ssh_home, seen_gone):  # noqa: F811
    import subprocess
    old = subprocess.Popen(["sleep", "300"])
    new = None
    src = SshSource(node_a.target, options(sshd, tmp_path))
    try:
        await _settle(src)
        assert (await src.poll()).proc(old.pid).cmdline == "sleep 300"
        pid = old.pid
        old.kill()
        old.wait()
        if seen_gone:
            assert (await src.poll()).proc(pid) is None
        new = _reuse_pid(pid, ["sleep", "301"])
        snap = await src.poll()
        got = snap.proc(pid)
        assert got is not None and got.cmdline == "sleep 301", got
        assert not src._scope.whole or not seen_gone
    finally:
        for p in (old, new):
            if p is not None and p.poll() is None:
                p.kill()
                p.wait()
        await src.close()
