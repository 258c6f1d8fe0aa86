"""Bounded probes: a flooding node is capped and says "too much output"; one deadline covers the
read and the parse; parsing never blocks the event loop; a hung driver leaves the processes.

Over the real sshd (tests/sshd_fixture.py: a stand-in nvidia-smi whose mode the test sets) and
on in-process nodes. Parse times are printed by tests/test_parse_proc.py, never asserted here.
"""
from __future__ import annotations

import asyncio
import re
import subprocess
import threading

import pytest

from console import probe
from console.bench.synth import big_probe_text
from console.clock import FakeClock
from console.diagnosis import diagnose
from console.model import CommandResult
from console.probe import MIB, ProbeLimits
from console.sources import shell
from console.sources.capture import Capture, TooMuchOutput
from console.sources.shell import ShellSource
from console.sources.sim import SimSource
from console.sources.ssh.options import SshOptions
from console.sources.ssh.source import SshSource

SMALL = ProbeLimits(section_bytes=2 * MIB, probe_bytes=4 * MIB)


def options(sshd, tmp_path) -> SshOptions:
    return SshOptions(known_hosts=str(sshd.write_known_hosts(tmp_path / "known_hosts")),
                      identity=(str(sshd.keys.client_key),), connect_timeout=3.0)


@pytest.fixture
def nodes(sshd):
    for node in sshd.nodes:
        node.smi.set()
    yield sshd.nodes
    for node in sshd.nodes:
        node.smi.set()


@pytest.fixture
def holder(tmp_path):
    """A real process holding a device file under tmp_path (the probe's --device-glob)."""
    dev = tmp_path / "dev" / "nvidia0"
    dev.parent.mkdir()
    dev.write_text("")
    with open(dev) as f:
        proc = subprocess.Popen(["sleep", "300"], stdin=f)
    yield proc, str(tmp_path / "dev" / "nvidia*")
    proc.kill()
    proc.wait()


# ---------------------------------------------------------------- the reader's caps

def test_capture_knows_the_end_and_refuses_a_section_or_a_probe_over_its_cap():
    mark = "::gi-t::"
    cap = Capture(mark, "driver", ProbeLimits(section_bytes=100, probe_bytes=250))
    assert not cap.feed(f"{mark} begin meta\n1\n{mark} end meta 0\n{mark} begin driver\n".encode())
    assert not cap.feed(f"x\n{mark} end driver 0".encode())       # the marker's line is not over yet
    assert cap.feed(b"\n") and cap.complete
    cap = Capture(mark, "driver", ProbeLimits(section_bytes=100, probe_bytes=250))
    cap.feed(f"{mark} begin meta\nok\n{mark} end meta 0\n{mark} begin gpu\n".encode())
    with pytest.raises(TooMuchOutput, match=r"too much output \(0 MiB in probe section 'gpu'; cap 0 MiB per section\)"):
        for _ in range(20):
            cap.feed(b"y" * 10)
    assert cap.before_cut().decode() == f"{mark} begin meta\nok\n{mark} end meta 0\n"
    cap = Capture(mark, "driver", ProbeLimits(section_bytes=100, probe_bytes=250))
    with pytest.raises(TooMuchOutput, match="in one probe"):
        for i in range(10):
            cap.feed(f"{mark} begin s{i}\n{'z' * 40}\n{mark} end s{i} 0\n".encode())
    with pytest.raises(ValueError):
        ProbeLimits(section_bytes=10, probe_bytes=5)


class Canned(ShellSource):
    """A node whose shell prints what ``make(mark)`` returns for the probe."""
    kind = "canned"

    def __init__(self, make, **kw) -> None:
        super().__init__("canned", **kw)
        self.make = make

    async def _exec(self, script: str, timeout: float) -> CommandResult:
        mark = re.match(r"echo '(\S+) begin", script).group(1)
        return CommandResult(command="probe", rc=0, stdout=self.make(mark))


async def test_a_section_over_its_cap_is_too_much_output_and_the_sections_before_it_stay():
    def flood(mark: str) -> str:
        text = big_probe_text(mark, processes=700)
        return text.replace(f"{mark} begin gpu\n", f"{mark} begin gpu\n" + "0, GPU-x, flood\n" * 200_000)

    whole = await Canned(lambda mark: big_probe_text(mark, processes=700), limits=SMALL).poll()
    snap = await Canned(flood, limits=SMALL).poll()
    assert whole.error is None and snap.error.startswith("too much output (") and "section 'gpu'" in snap.error
    # the process sections came first: all there; the driver's are not read
    assert [p.pid for p in snap.processes] == [p.pid for p in whole.processes] and snap.gpus == ()


# ---------------------------------------------------------------- parse: deadline, off the loop

async def test_parsing_runs_off_the_event_loop_so_other_nodes_keep_updating(monkeypatch):
    threads = []
    real = shell._parse

    def watched(*args):
        if args[0] == big.name:            # (small output, the other node's, is parsed on the loop)
            threads.append(threading.current_thread() is threading.main_thread())
        return real(*args)

    monkeypatch.setattr(shell, "_parse", watched)
    big = Canned(lambda mark: big_probe_text(mark, processes=20_000), probe_timeout=120)
    other = SimSource(name="other", clock=FakeClock())
    task = asyncio.create_task(big.poll())
    polls = 0
    while not task.done():
        assert (await other.poll()).error is None
        polls += 1
    snap = await task
    assert snap.error is None and len(snap.processes) == 20_000
    assert threads and not any(threads), "every parse of the big node ran in a worker thread"
    assert polls >= 2, "the other node kept polling while the big one was parsed"


async def test_the_deadline_covers_the_parse_and_one_parse_at_a_time(monkeypatch):
    running, most = [0], [0]
    real = shell._parse

    def counted(*args):
        running[0] += 1
        most[0] = max(most[0], running[0])
        try:
            return real(*args)
        finally:
            running[0] -= 1

    monkeypatch.setattr(shell, "_parse", counted)
    src = Canned(lambda mark: big_probe_text(mark, processes=20_000), probe_timeout=0.05)
    first = await src.poll()
    assert first.error.startswith("probe timed out after 0.05 s (parsing ") and "MiB of output" in first.error
    second = await src.poll()              # waits for the first parse rather than start another
    assert second.error is not None and "timed out" in second.error
    assert most[0] == 1
    await src._parsing                     # let the last parse end inside this test


# ---------------------------------------------------------------- a hung driver

async def test_hung_nvidia_smi_on_the_seed_still_lists_processes_with_the_default_deadline():
    src = SimSource(clock=FakeClock())
    await src.run("kill -9 72169")        # the seed's moment: workers defunct, threads stuck in the driver
    before = await src.poll()
    src.node.nvsmi_hang = True
    started = src.clock.now()
    snap = await src.poll()
    assert snap.error == "nvidia-smi timed out (the driver may be hung)"
    # one nvidia-smi call timed out; the two after it were skipped (the node's own clock)
    assert src.clock.now() - started == pytest.approx(probe.NVSMI_TIMEOUT_S, abs=0.5)
    assert before.error is None and [p.pid for p in snap.processes] == [p.pid for p in before.processes]
    assert any(p.d_threads for p in snap.processes) and any(p.holds_devices for p in snap.processes)
    kinds = {f.kind for f in diagnose(snap)}
    assert {"probe-hung", "zombie", "d-state"} <= kinds, kinds


@pytest.mark.heavy      # several seconds: the second pass of .ci/run
async def test_hung_nvidia_smi_over_ssh_leaves_processes_and_fds_within_the_default_deadline(
        sshd, nodes, tmp_path, ssh_home, holder):
    proc, glob = holder
    nodes[0].smi.set(mode="hang")
    src = SshSource(nodes[0].target, options(sshd, tmp_path), device_glob=glob)
    assert src.probe_timeout == probe.DEFAULT_PROBE_TIMEOUT_S
    try:
        snap = await src.poll()
        assert snap.error == "nvidia-smi timed out (the driver may be hung)"
        p = snap.proc(proc.pid)
        assert p is not None and p.state in "SR" and p.holds_devices and p.start_ticks
        assert "probe-hung" in {f.kind for f in diagnose(snap)}
        # the probe shell survived (apps and list were skipped, not killed at the deadline)
        assert src.connects == 1 and src._shell is not None
    finally:
        await src.close()


async def test_a_probe_cut_by_its_deadline_keeps_the_sections_that_arrived(sshd, nodes, tmp_path, ssh_home,
                                                                         holder):
    proc, glob = holder
    nodes[0].smi.set(mode="hang")
    src = SshSource(nodes[0].target, options(sshd, tmp_path), device_glob=glob, probe_timeout=1.5)
    try:
        snap = await src.poll()
        assert snap.error == "probe timed out after 1.5 s"
        assert snap.proc(proc.pid).holds_devices            # read before the driver hung
        assert "probe section 'gpu' cut short" in snap.warnings
    finally:
        await src.close()


# ---------------------------------------------------------------- a flooding node over ssh

async def test_flooding_nvidia_smi_is_too_much_output_and_another_node_keeps_updating(
        sshd, nodes, tmp_path, ssh_home, holder):
    proc, glob = holder
    opts = options(sshd, tmp_path)
    flooding = SshSource(nodes[0].target, opts, device_glob=glob, limits=SMALL)
    live = SshSource(nodes[1].target, opts)
    try:
        assert (await flooding.poll()).error is None
        nodes[0].smi.set(mode="flood")
        task = asyncio.create_task(flooding.poll())
        seen = []
        while not task.done():
            nodes[1].smi.set(used=(1000 + len(seen), 2000))
            snap = await live.poll()
            assert snap.error is None
            seen.append(snap.gpu(0).memory_used_mib)
        snap = await task
        assert re.fullmatch(r"too much output \(2(\.\d)? MiB in probe section 'gpu'; cap 2 MiB per section\)",
                            snap.error), snap.error
        assert snap.proc(proc.pid).holds_devices, "the process sections before the flood are kept"
        assert seen == sorted(set(seen)), "the live node kept its own rhythm"
        nodes[0].smi.set()
        snap = await flooding.poll()                 # a fresh probe shell, same connection
        assert snap.error is None and snap.gpu(0).memory_used_mib == 76109 and flooding.connects == 1
    finally:
        await asyncio.gather(flooding.close(), live.close())
