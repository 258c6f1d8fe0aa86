"""Names with newlines neither hide nor forge processes: real processes named to attack the
probe's framing, read over the real sshd (tests/sshd_fixture.py), then acted on.

- a comm ``a\\n<victim> (fake`` once overwrote the victim's entry, so `k` on the victim was
  refused ("start time changed"): the victim is listed once, with its own start time;
- a comm ``gpu\\nworker`` once made its process vanish (the driver's PID then looked foreign);
- a device file whose path holds ``\\n/proc/<victim>/fd /dev/nvidia0`` once made `F` kill the
  victim: only the process that holds the file is credited with it;
- the guarded kill reads the start time by the kernel's rule, so a newline-named job can be
  signalled from the console.
"""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from console.actions.plan import plan_action
from console.sources.ssh.options import SshOptions
from console.sources.ssh.source import SshSource
from tests.polling import until


def start_ticks(pid: int) -> int:
    stat = Path(f"/proc/{pid}/stat").read_text()
    return int(stat[stat.rindex(")") + 2:].split()[19])


@pytest.fixture
def procs():
    """Start real processes; each ends by PID at teardown."""
    started: list[subprocess.Popen] = []

    def start(argv: list[str], **kw) -> subprocess.Popen:
        started.append(subprocess.Popen(argv, **kw))
        return started[-1]

    yield start
    for p in started:
        p.kill()
        p.wait()


def named(start, comm: str, hold: str | None = None) -> int:
    """A python child that renames itself to ``comm`` (and keeps ``hold`` open), then sleeps."""
    code = ("import sys, time\n"
            "f = open(sys.argv[2]) if len(sys.argv) > 2 else None\n"
            "open('/proc/self/comm', 'w').write(sys.argv[1])\n"
            "print('ready', flush=True)\n"
            "time.sleep(300)\n")
    p = start([sys.executable, "-c", code, comm, *([hold] if hold else [])], stdout=subprocess.PIPE)
    assert p.stdout.readline() == b"ready\n"
    return p.pid


@pytest.fixture
def node(sshd):
    n = sshd.nodes[0]
    n.smi.set()
    yield n
    n.smi.set()


async def test_newline_names_neither_hide_nor_forge_processes_over_ssh(sshd, node, tmp_path, ssh_home, procs):
    victim = procs(["sleep", "300"]).pid
    forger = named(procs, f"a\n{victim} (fake")
    worker = named(procs, "gpu\nworker")
    parens = named(procs, ") R 1 2 3 (x")
    # a device file whose path carries a forged fd record naming the victim
    evil_dir = tmp_path / "nvidia\n" / "proc" / str(victim) / "fd " / "dev"
    evil_dir.mkdir(parents=True)
    (evil_dir / "nvidia0").write_text("")
    evil = f"{tmp_path}/nvidia\n/proc/{victim}/fd /dev/nvidia0"
    assert Path(evil).exists()
    holder = named(procs, "holder", hold=evil)
    node.smi.set(apps=[(worker, 0, 70000, sys.executable)])      # the driver names the program
    src = SshSource(node.target, SshOptions(known_hosts=str(sshd.write_known_hosts(tmp_path / "kh")),
                                            identity=(str(sshd.keys.client_key),), connect_timeout=3.0),
                    device_glob=f"{tmp_path}/nvidia*")
    try:
        snap = await src.poll()
        assert snap.error is None, snap.error
        pids = [p.pid for p in snap.processes]
        assert len(pids) == len(set(pids))
        # the victim: listed once, its own name and start time
        v = snap.proc(victim)
        assert v.name == "sleep" and v.cmdline == "sleep 300" and v.start_ticks == start_ticks(victim)
        assert snap.proc(forger).name == f"a\n{victim} (fake"
        assert snap.proc(forger).start_ticks == start_ticks(forger)
        assert snap.proc(parens).name == ") R 1 2 3 (x" and snap.proc(parens).state == "S"
        # the newline-named worker is listed, and is the driver's PID (not a foreign one)
        w = snap.proc(worker)
        assert w is not None and w.name == "gpu\nworker" and w.gpu_memory_mib == {"0": 70000}
        assert [d.local for d in snap.driver_processes if d.pid == worker] == [True]
        # the device file is credited to its holder alone
        assert snap.proc(holder).device_files == (evil,)
        assert v.device_files == () and snap.proc(1).device_files == ()
        kill_holders = plan_action(snap, "kill-holders", gpus=[0])
        assert victim not in [t.pid for t in kill_holders.targets]
        # `k` on the victim targets it with its own start time, and the guard lets it through
        plan = plan_action(snap, "sigkill", pids=[victim])
        assert [(t.pid, t.start_ticks) for t in plan.targets] == [(victim, start_ticks(victim))]
        # the newline-named jobs can be signalled from the console (the guard reads the kernel's way)
        for pid in (worker, forger, victim):
            target = snap.proc(pid)
            r = await src.signal(pid, "KILL", start_ticks=target.start_ticks)
            assert r.rc == 0 and not r.stderr, (pid, r)
        assert until(lambda: all(not Path(f"/proc/{pid}").exists() or
                                 Path(f"/proc/{pid}/stat").read_text().split(") ")[-1][0] == "Z"
                                 for pid in (worker, forger, victim)))
    finally:
        await src.close()
