"""A real one-node Slurm for tests: munged, slurmctld and slurmd (Debian's `munge` and
`slurm-wlm`; .ci/run installs them), started by PID from a config written here, stopped by PID.

The node is called ``demo`` — the name of the built-in simulated node — so the console's
``demo`` target is the node Slurm drains. Clients find the config through ``SLURM_CONF``
(``Slurm.env``). Where the daemons cannot start (not installed, not root, a daemon exits or
never answers) the tests skip with the reason and the daemon's last log lines: never a
fake scontrol.

Start-up takes a few seconds (slurmctld's first ping of slurmd): module-scoped, one Slurm per
test module. Waits poll ``scontrol ping`` and ``sinfo``; nothing sleeps a fixed time.
"""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.sshd_fixture import free_port

NODE = "demo"
DAEMONS = ("munged", "slurmctld", "slurmd")
START_BOUND_S = 60.0


@dataclass
class Slurm:
    root: Path
    conf: Path
    env: dict[str, str]
    pids: dict[str, int]
    node: str = NODE

    def run(self, *argv: str, check: bool = False, timeout: float = 30) -> subprocess.CompletedProcess:
        return subprocess.run(list(argv), env=self.env, capture_output=True, text=True, timeout=timeout,
                              check=check)

    def node_line(self) -> str:
        return self.run("scontrol", "show", "node", "-o", self.node).stdout

    def sinfo_state(self) -> str:
        """sinfo's long state and reason of the node: ``drained|gpu-incident …``."""
        return self.run("sinfo", "-h", "-N", "-n", self.node, "-o", "%T|%E").stdout.strip()

    def wait_for(self, predicate, what: str, bound_s: float = START_BOUND_S) -> None:
        deadline = time.monotonic() + bound_s
        while not predicate():
            if time.monotonic() > deadline:
                raise AssertionError(f"Slurm: {what} did not come within {bound_s:.0f} s; "
                                     f"sinfo says {self.sinfo_state()!r}")
            time.sleep(0.2)

    def reset_node(self) -> None:
        """Back to IDLE, no drain, no jobs (between tests)."""
        self.run("scancel", "-w", self.node)
        self.run("scontrol", "update", f"NodeName={self.node}", "State=RESUME")
        self.wait_for(lambda: self.sinfo_state().split("|")[0] == "idle", "the node back to idle")

    def log_tail(self, name: str, lines: int = 8) -> str:
        path = self.root / f"{name}.log"
        try:
            return " | ".join(path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"


def _config(root: Path, ctld_port: int, slurmd_port: int, socket: Path, extra: list[str] | None = None) -> str:
    return "\n".join([*(extra or []),
        "ClusterName=gpuincidenttest",
        "SlurmctldHost=localhost(127.0.0.1)",
        f"SlurmctldPort={ctld_port}",
        f"SlurmdPort={slurmd_port}",
        "SlurmUser=root",
        "SlurmdUser=root",
        "AuthType=auth/munge",
        "CredType=cred/munge",
        f"AuthInfo=socket={socket}",
        "ProctrackType=proctrack/linuxproc",     # no cgroup needed
        "TaskPlugin=task/none",
        "SelectType=select/linear",
        "SchedulerType=sched/builtin",
        "JobAcctGatherType=jobacct_gather/none",
        "AccountingStorageType=accounting_storage/none",
        "MpiDefault=none",
        "ReturnToService=2",
        f"StateSaveLocation={root / 'state'}",
        f"SlurmdSpoolDir={root / 'spool'}",
        f"SlurmctldPidFile={root / 'slurmctld.pid'}",
        f"SlurmdPidFile={root / 'slurmd.pid'}",
        f"SlurmctldLogFile={root / 'slurmctld.log'}",
        f"SlurmdLogFile={root / 'slurmd.log'}",
        f"NodeName={NODE} NodeAddr=127.0.0.1 CPUs=1 State=UNKNOWN",
        f"PartitionName=debug Nodes={NODE} Default=YES MaxTime=INFINITE State=UP",
        "",
    ])


def _stop(pids: dict[str, int]) -> None:
    for name in reversed(list(pids)):
        pid = pids[name]
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            continue
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            try:
                done, _ = os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                break
            if done:
                break
            time.sleep(0.05)
        else:
            try:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
            except (ProcessLookupError, ChildProcessError):
                pass


def start_slurm(root: Path, extra: list[str] | None = None) -> Slurm:
    """Start munged, slurmctld and slurmd under ``root``; pytest.skip with the reason if they
    cannot run here."""
    missing = [d for d in DAEMONS if shutil.which(d) is None and not Path(f"/usr/sbin/{d}").exists()]
    missing += [c for c in ("scontrol", "squeue", "sinfo", "sbatch") if shutil.which(c) is None]
    if missing:
        pytest.skip(f"Slurm not installed ({', '.join(missing)} missing); .ci/run installs slurm-wlm and munge")
    if os.geteuid() != 0:
        pytest.skip("the Slurm tests run slurmctld/slurmd as root (SlurmUser=root) and need root")
    for d in ("state", "spool", "munge"):
        (root / d).mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(root, 0o755)
    key = root / "munge" / "munge.key"
    key.write_bytes(os.urandom(1024))
    os.chmod(key, 0o400)
    socket = root / "munge" / "munge.socket"
    conf = root / "slurm.conf"
    conf.write_text(_config(root, free_port(), free_port(), socket, extra))
    env = {**os.environ, "SLURM_CONF": str(conf)}
    pids: dict[str, int] = {}
    sbin = lambda d: shutil.which(d) or f"/usr/sbin/{d}"   # noqa: E731
    commands = {
        "munged": [sbin("munged"), "-F", "--force", f"--socket={socket}", f"--key-file={key}",
                   f"--log-file={root / 'munged.log'}", f"--pid-file={root / 'munged.pid'}",
                   f"--seed-file={root / 'munge' / 'seed'}"],
        "slurmctld": [sbin("slurmctld"), "-D", "-f", str(conf)],
        "slurmd": [sbin("slurmd"), "-D", "-N", NODE, "-f", str(conf)],
    }
    slurm = Slurm(root, conf, env, pids)

    def up(name: str, ready, what: str) -> None:
        with open(root / f"{name}.out", "wb") as out:
            proc = subprocess.Popen(commands[name], env=env, stdout=out, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL)
        pids[name] = proc.pid
        deadline = time.monotonic() + START_BOUND_S
        while not ready():
            if proc.poll() is not None or time.monotonic() > deadline:
                why = (f"exited with {proc.returncode}" if proc.returncode is not None
                       else f"no {what} within {START_BOUND_S:.0f} s")
                out_text = (root / f"{name}.out").read_text(errors="replace").strip().splitlines()[-6:]
                _stop(pids)
                pytest.skip(f"Slurm could not start here: {name} {why}: "
                            f"{' | '.join(out_text) or slurm.log_tail(name)}")
            time.sleep(0.1)

    up("munged", socket.exists, "socket")
    up("slurmctld", lambda: slurm.run("scontrol", "ping").returncode == 0, "answer to scontrol ping")
    up("slurmd", lambda: slurm.sinfo_state().split("|")[0] == "idle", "idle node in sinfo")
    return slurm


def gate_epilog(root: Path, gate_args: str) -> tuple[Path, Path]:
    """An Epilog script in ``root`` that runs `gpu-incident gate GATE_ARGS` as slurmd would (its
    own SLURM_CONF, a bare PATH), appending its output and then "rc=N" to a log: (script, log)."""
    log = root / "epilog.log"
    script = root / "epilog"
    script.write_text(f"""#!/bin/sh
export SLURM_CONF={root / 'slurm.conf'} PATH=/usr/bin:/bin:/usr/sbin:/sbin HOME={root}
{sys.executable} -m console gate {gate_args} >> {log} 2>&1
rc=$?
echo "rc=$rc" >> {log}
exit $rc
""")
    script.chmod(0o755)
    return script, log


def stop_slurm(s: Slurm) -> None:
    """Cancel the jobs and wait until Slurm has none (their slurmstepd report to slurmd and
    exit; stopped earlier, a slurmstepd would wait on for a slurmd that is gone), then stop the
    daemons by PID."""
    s.run("scancel", "-w", s.node)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and s.run("squeue", "-h", "-o", "%A").stdout.strip():
        time.sleep(0.2)
    _stop(s.pids)


@pytest.fixture(scope="module")
def slurm(tmp_path_factory):
    root = tmp_path_factory.mktemp("slurm")
    s = start_slurm(root)
    try:
        yield s
    finally:
        stop_slurm(s)


@pytest.fixture
def slurm_node(slurm, monkeypatch):
    """The running Slurm with its node idle and undrained, SLURM_CONF set for the console."""
    slurm.reset_node()
    monkeypatch.setenv("SLURM_CONF", str(slurm.conf))
    return slurm
