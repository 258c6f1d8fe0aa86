"""nvidia-smi in loop mode (console/probe_loop.py) over a real sshd with the test nvidia-smi
(tests/bin/nvidia-smi: it counts its starts and, with -lms, prints a timestamped sample every
interval): NVML starts once per probe shell, not twice a poll; the loops are the console's own
processes, never holders; they end with the console; a node whose nvidia-smi cannot loop is
asked per poll; R, B and F stop them first and say so."""
from __future__ import annotations

import asyncio
import time

import psutil

from console.actions.plan import plan_action
from console.diagnosis import diagnose
from console.session import Session
from console.sources.ssh.source import SshSource
from tests.polling import eventually, until
from tests.test_ssh import node_a, options  # noqa: F401 (fixture)


def _alive(pid: int) -> bool:
    """Running (not a zombie); a process that ends while looked at is not."""
    try:
        return psutil.Process(pid).status() != "zombie"
    except psutil.NoSuchProcess:
        return False


def _starts(node, since: int) -> list[str]:
    return node.smi.calls()[since:]


async def _poll_until(src, predicate, bound_s: float = 12.0, pause: float = 0.1):
    """Poll until ``predicate(snapshot)``; fail after ``bound_s`` (the loops sample every
    probe_loop.LOOP_MS, sshd_fixture.TEST_LOOP_MS here: a new value shows within a second)."""
    snap = None
    deadline = time.monotonic() + bound_s
    while True:
        snap = await src.poll()
        if predicate(snap):
            return snap
        if time.monotonic() > deadline:
            raise AssertionError(f"not reached; last: error={snap.error} warnings={snap.warnings}")
        await asyncio.sleep(pause)


async def test_the_loops_start_once_and_a_steady_poll_starts_no_nvidia_smi(sshd, node_a, tmp_path, ssh_home,
                                                                           gpu_workers):  # noqa: F811
    (w0,) = gpu_workers(1)
    node_a.smi.set(used=(61000, 1200), apps=[(w0, 0, 60000, "sleep")])
    src = SshSource(node_a.target, options(sshd, tmp_path))
    per_poll = SshSource(node_a.target, options(sshd, tmp_path))
    per_poll.smi_loop = False
    try:
        await src.poll()
        await _poll_until(src, lambda s: src.loop_pids and not src._per_poll)
        since = len(node_a.smi.calls())
        for _ in range(4):
            snap = await src.poll()
            await asyncio.sleep(0.1)
        # a steady poll in loop mode starts no nvidia-smi for the GPUs and their processes; only
        # the processes' SM share (pmon), every probe.PMON_EVERY polls while a process is listed
        started = _starts(node_a, since)
        assert set(started) <= {"pmon -c 1 -s u"} and len(started) <= 1, started
        since = len(node_a.smi.calls())
        assert snap.error is None and snap.proc(w0).gpu_memory_mib == {"0": 60000}
        assert [g.memory_used_mib for g in snap.gpus] == [61000, 1200]
        # the loops' answer is the per-poll calls' answer
        plain = await per_poll.poll()
        assert snap.gpus == plain.gpus and snap.driver_processes == plain.driver_processes
        assert len(_starts(node_a, since)) == 5          # that fresh shell's GPU, apps, -L, -q and pmon calls
        # the loops are the console's own processes (children of its probe shell)
        assert set(src.loop_pids) <= set(snap.own_pids)
        loops = [psutil.Process(p) for p in src.loop_pids]
        assert all("nvidia-smi" in " ".join(p.cmdline()) and "-lms" in p.cmdline() for p in loops)
        # the memory it reports follows the node: the worker ends, the driver stops listing it
        node_a.smi.set(used=(300, 1200), apps=[])
        freed = await _poll_until(src, lambda s: not s.driver_processes and s.gpu(0).memory_used_mib == 300)
        assert freed.error is None
    finally:
        pids = list(src.loop_pids)
        await src.close()
        await per_poll.close()
    gone = await eventually(lambda: not any(_alive(p) for p in pids), bound_s=10)
    assert gone, "closing the console ends its nvidia-smi loops"


async def test_the_loops_hold_device_files_and_are_never_holders(sshd, node_a, tmp_path, ssh_home):  # noqa: F811
    devices = tmp_path / "dev"
    devices.mkdir()
    held = devices / "nvidia0"
    held.write_text("")
    (node_a.smi.dir / "holds").write_text(str(held) + "\n")     # the stand-in's loop opens it
    node_a.smi.set(used=(300, 200))
    src = SshSource(node_a.target, options(sshd, tmp_path), device_glob=f"{devices}/nvidia*")
    try:
        await src.poll()
        await _poll_until(src, lambda s: src.loop_pids and not src._per_poll)
        src.request_whole()
        snap = await _poll_until(src, lambda s: any(p.holds_devices for p in s.processes))
        holders = [p for p in snap.processes if p.holds_devices]
        assert holders and all(p.pid in snap.own_pids for p in holders), "the loops' processes are the console's"
        findings = diagnose(snap)
        assert not [f for f in findings if set(f.pids) & {p.pid for p in holders}], findings
        plan = plan_action(snap, "kill-holders", gpus=(0,))
        assert not set(t.pid for t in plan.targets) & {p.pid for p in holders}
    finally:
        (node_a.smi.dir / "holds").unlink(missing_ok=True)
        await src.close()


async def test_reset_blocker_and_holder_plans_stop_the_loops_first_and_say_so(sshd, node_a, tmp_path,
                                                                             ssh_home):  # noqa: F811
    node_a.smi.set(used=(300, 200))
    src = SshSource(node_a.target, options(sshd, tmp_path))
    session = Session([src])
    try:
        await src.poll()
        snap = await _poll_until(src, lambda s: src.loop_pids and not src._per_poll)
        plan = await session.plan(src.name, "reset", gpus=(0,), seen=snap)
        said = "\n".join(plan.notes)
        assert "nvidia-smi loop" in said and all(str(p) in said for p in src.loop_pids), said
        loops = list(src.loop_pids)
        await session.stop_smi_loop(src)
        assert src._loop_paused and await eventually(
            lambda: not any(_alive(p) for p in loops),
            bound_s=10), "the loops were stopped"
        since = len(node_a.smi.calls())
        after = await src.poll()
        assert after.error is None and src._per_poll and not src._loop, "paused: per-poll calls, no loop"
        assert not any("-lms" in c for c in _starts(node_a, since))
        session.resume_smi_loop(src)
        await _poll_until(src, lambda s: src.loop_pids and set(src.loop_pids).isdisjoint(loops))
    finally:
        await src.close()


async def test_an_nvidia_smi_that_cannot_loop_is_asked_per_poll(sshd, node_a, tmp_path, ssh_home):  # noqa: F811
    node_a.smi.set(mode="noloop")
    since = len(node_a.smi.calls())
    src = SshSource(node_a.target, options(sshd, tmp_path))
    try:
        t0 = time.monotonic()
        for _ in range(40):                                  # until the source rests the loops
            snap = await src.poll()
            assert snap.error is None and [g.memory_used_mib for g in snap.gpus] == [76109, 76113]
            if src._loop_off_until > t0:
                break
            await asyncio.sleep(0.1)                         # a refused loop ends meanwhile
        assert src._loop_off_until > t0, "the loops kept dying: the source rests them"
        for _ in range(2):                                   # rested: polls start no loop
            snap = await src.poll()
            assert snap.error is None and [g.memory_used_mib for g in snap.gpus] == [76109, 76113]
        assert not src._loop and src._per_poll
        starts = [c for c in _starts(node_a, since) if "-lms" in c]
        assert 0 < len(starts) <= 2 * (3 + 1), starts       # a few tries, then per-poll calls only
        warned = [w for w in snap.warnings if "nvidia-smi loop" in w]
        assert not warned or "Invalid combination" in warned[0]
    finally:
        await src.close()


async def test_a_failing_driver_is_asked_per_poll_and_no_loop_starts(sshd, node_a, tmp_path, ssh_home):  # noqa: F811
    node_a.smi.set(mode="nodriver")
    src = SshSource(node_a.target, options(sshd, tmp_path))
    try:
        since = len(node_a.smi.calls())
        for _ in range(4):
            snap = await src.poll()
        assert snap.error and "driver" in snap.error, snap.error
        assert not any("-lms" in c for c in _starts(node_a, since)), "no loop on a node whose driver fails"
    finally:
        await src.close()


def test_a_loop_whose_start_time_is_unread_is_stopped_only_while_it_is_still_a_loop():
    """(probe_loop.guarded_stop_command: the fallback guard is the loop's own command line.)"""
    import subprocess
    from console import probe_loop
    loop = subprocess.Popen(["timeout", str(probe_loop.LOOP_RENEW_S), "sh", "-c", "sleep 60", "nvidia-smi",
                             "--query-gpu=index", "-lms", str(probe_loop.LOOP_MS)])
    other = subprocess.Popen(["sleep", "60"])
    try:
        refused = subprocess.run(["sh", "-c", probe_loop.guarded_stop_command(other.pid)], capture_output=True,
                                 text=True)
        assert refused.returncode == 3 and "no longer an nvidia-smi loop" in refused.stderr
        assert other.poll() is None, "a process that is not a loop of ours is never signalled"
        stopped = subprocess.run(["sh", "-c", probe_loop.guarded_stop_command(loop.pid)])
        assert stopped.returncode == 0 and loop.wait(10) is not None
    finally:
        for p in (loop, other):
            p.kill()
            p.wait()


def _assert_loops_end(tmp_path, path: str, sh: str, kill, bound_s: float, orphan: bool = False) -> None:
    """Start the loops as the probe shell does (the test nvidia-smi, ``path`` for the node's
    tools), wait for each nvidia-smi under its two timeouts, ``kill(shell, outer timeouts)``,
    and assert every one of them ends within ``bound_s``; whatever is left is killed by PID.
    ``orphan``: the test nvidia-smi goes on when its parent is gone, as a real one does."""
    import os
    import signal
    import subprocess
    from console import probe
    smi = tmp_path / "smi"
    smi.mkdir()
    (smi / "mode").write_text("normal\n")
    (smi / "gpu").write_text("0, GPU-a, H100, 00000000:01:00.0, 1, 81559, 0, Enabled, Disabled\n")
    (smi / "gpu_recovery").write_text("0, GPU-a, H100, 00000000:01:00.0, 1, 81559, 0, Enabled, Disabled, None\n")
    if orphan:
        (smi / "orphan").touch()
    env = dict(os.environ, GI_FAKE_SMI=str(smi), TMPDIR=str(tmp_path),
               PATH=os.path.join(os.path.dirname(__file__), "bin") + os.pathsep + path)
    shell = subprocess.Popen([sh, "-c", probe.loop_command() + "; sleep 60"], env=env, stdout=subprocess.PIPE,
                             text=True)
    mine: list[int] = []
    try:
        started = shell.stdout.readline().split()
        assert started[0] == "started", started
        outer = [int(p) for p in started[1:3]]
        mine += outer

        def below() -> list[int]:
            try:
                return [k.pid for p in outer for k in psutil.Process(p).children(recursive=True)]
            except psutil.NoSuchProcess:
                return []
        # each loop runs its nvidia-smi under two timeouts (forked a moment after the shell said started)
        assert until(lambda: len(below()) >= 4), "no nvidia-smi under its two timeouts"
        mine += below()
        kill(shell, outer)
        shell.wait()

        def gone() -> bool:
            return not any(_alive(p) for p in mine)
        assert until(gone, bound_s), [psutil.Process(p).cmdline() for p in mine if psutil.pid_exists(p)]
    finally:
        if shell.poll() is None:
            shell.kill()
            shell.wait()
        for p in mine:
            try:
                os.kill(p, signal.SIGKILL)
            except OSError:
                pass


def test_a_probe_shell_killed_outright_takes_its_loops_along(tmp_path):
    """SIGKILL leaves no trap to run: the loops still end (setpriv's parent-death signal), never
    an nvidia-smi holding the device files after the console's shell is gone."""
    import os
    import shutil
    import signal
    import pytest
    if shutil.which("setpriv") is None:
        pytest.skip("util-linux setpriv is not installed here")
    _assert_loops_end(tmp_path, os.environ["PATH"], "sh", lambda shell, outer: shell.send_signal(signal.SIGKILL), 10,
                      orphan=True)


def test_a_loop_orphaned_before_its_death_signal_still_ends_by_its_own_timeout(tmp_path, monkeypatch):
    """setpriv sets the parent-death signal after the fork: an outer timeout killed in between
    leaves the loop none (an orphaned test loop ran on for ten minutes). Here a node without
    setpriv, the shell and the outer timeouts killed outright: the loop's own timeout
    (probe_loop.LOOP_OWN_S, cut to 2 s) still ends its nvidia-smi."""
    import os
    import shutil
    import signal
    from console import probe_loop
    monkeypatch.setattr(probe_loop, "LOOP_OWN_S", 2)
    tools = tmp_path / "tools"                # this node's tools: no setpriv among them
    tools.mkdir()
    for tool in ("sh", "timeout", "mktemp", "head", "grep", "rm", "cat", "date", "sed", "sleep", "printf", "stdbuf"):
        found = shutil.which(tool)
        if found is not None:
            (tools / tool).symlink_to(found)

    def kill_outright(shell, outer) -> None:
        for p in [shell.pid, *outer]:
            os.kill(p, signal.SIGKILL)
    _assert_loops_end(tmp_path, str(tools), str(tools / "sh"), kill_outright, 15, orphan=True)


async def test_x_on_a_reset_finding_shows_the_loop_stops_that_execute_runs(sshd, node_a, tmp_path,
                                                                           ssh_home):  # noqa: F811
    """x plans through the session's one door on the engine thread, as R does: its Confirm lists
    the loop stops that execute then runs (before, x planned on the screen's thread without them)."""
    from console.incident import timeline
    from console.model import Finding
    from console.ui.app import IncidentApp
    from console.ui.confirm import ConfirmScreen
    from conftest import wait_for
    node_a.smi.set(used=(61000, 200))
    src = SshSource(node_a.target, options(sshd, tmp_path))
    tl = timeline.open_incident(tmp_path / "incidents", "loops")
    app = IncidentApp([src], timeline=tl, interval=0.3, engine_thread=True)
    try:
        async with app.run_test(size=(120, 36)) as pilot:
            await wait_for(pilot, lambda: bool(src.loop_pids) and not src._per_poll
                           and app.snapshots.get(src.name) is not None, tries=2000)
            assert app.engine.running
            reset = Finding(kind="ghost-memory", severity="high", summary="GPU 0: 59.6 GiB nobody accounts for",
                            next_step="Reset GPU 0", gpus=(0,), rung="reset")
            app.escalation.apply_finding(reset)
            await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen), tries=2000)
            text = app.screen.text
            assert "nvidia-smi -r -i 0" in text
            assert "stops its own nvidia-smi loops" in text and all(str(p) in text for p in src.loop_pids), text
            await pilot.press("escape")
            await wait_for(pilot, lambda: not isinstance(app.screen, ConfirmScreen), tries=500)
            await pilot.press("q")
            await wait_for(pilot, lambda: not app.is_running, tries=500)
    finally:
        await src.close()
        tl.close()
