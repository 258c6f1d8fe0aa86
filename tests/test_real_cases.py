"""Replay every case of tests/real_cases.py on a node built as the thread's paste shows it, read by
the console's own SSH source over a real OpenSSH sshd, and check the verdict and the next step
(never the wording).

How each part of a case is made real here:

- GPUs, the driver's process rows, GPUs nvidia-smi cannot reach and recovery actions: the files the
  stand-in nvidia-smi (tests/bin/nvidia-smi) answers from, written per test. An unreachable GPU's
  "Unable to determine the device handle ..." line is taken from the fixture's body
  (tests.real_fixtures.load(...).body), never retyped, and printed in the stand-in's ``lost`` mode;
  a hung driver is its ``hang`` mode (the node-side ``timeout`` is cut to 1 s for the test).
  What a paste does not state gets the value of an idle, healthy GPU (0 MiB used or, where the
  driver lists processes, the sum of their rows; 0 % busy; recovery action "None"), so that only
  the case's own evidence differs from a clean node.
- Processes: real child processes, each running a copy of this interpreter named after the
  program (so its comm, argv[0] and /proc/PID/exe basename are the program's, as ps and fuser show
  them), holding real character devices made with os.mknod under a temp dir the source's
  ``device_glob`` points at; a session leader where the paste says so (``sid`` == ``pid``), a CPU
  spin where it is busy. Uninterruptible sleep (D) is the vfork() wait of test_real_kernel.py (its
  wchan is kernel_clone: no test can put a process to sleep inside the NVIDIA driver). Zombies are
  children that exited and that the test reaps only at the end. The cases' PIDs are mapped to the
  real ones where the driver's rows name them. A "PPID 1" orphan is adopted by a child subreaper
  named ``systemd`` (a Slurm node's init): PID 1 of this machine never reaps, so an orphan of it
  would stay a zombie for every later test.
- Kernel lines: a ``dmesg`` stand-in first on the session's PATH (a second sshd of this module's
  own, built by tests/sshd_fixture.Sshd with one more directory on PATH) prints the fixture's body
  for that test only; the probe's own grep keeps what it keeps (Xid and firmware lines).
- ``lspci`` rev ff: NodeSnapshot.pci_gpus is not read by the SSH source yet; until it is, it is
  set on the polled snapshot with dataclasses.replace (from the case's lspci, else every polled GPU
  present), and console.diagnosis.diagnose and fitness.signals run on that snapshot.
- A probe that has hung "for 300 s": one real hung poll, with the earlier hung polls the case
  describes as copies of it at earlier times (diagnose's ``history``).

Only findings about the case's own processes (or about no process: the node, its GPUs) count: a
process elsewhere on this machine is not part of the case.
"""
from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import textwrap
from dataclasses import dataclass, field, replace
from pathlib import Path

import psutil
import pytest

from console import cli, probe
from console import probe_loop
from console.actions.ladder import top_step
from console.diagnosis import diagnose, fitness
from console.model import Finding, NodeSnapshot, PciGpu, bus_key
from console.sources.ssh.options import SshOptions
from console.sources.ssh.source import SshSource
from tests import real_fixtures
from tests.polling import until
from tests.real_cases import BY_FIXTURE, CASES, Case
from tests.sshd_fixture import TEST_BIN, Sshd, free_ports

pytestmark = [
    pytest.mark.serial,     # the probe reads the whole process table; D-state and zombie processes
    pytest.mark.skipif(os.geteuid() != 0, reason="mknod and the sshd tests need root (CI runs as root)"),
]

#: every case of tests/real_cases.py, by its fixture's name (tests/test_real_outputs.py looks for each
#: fixture's name here or there)
REPLAYED = (
    "fuser-persistenced-holds-nvidia0-dra-driver-nvidia-gpu-1037.txt",
    "ps-dcgm-exporter-exiting-hung-dcgm-exporter-215.txt",
    "xid-120-119-after-exporter-sigkill-dcgm-exporter-84.log",
    "ps-d-state-nvidia-daemons-nvidia-docker-377.txt",
    "ps-xorg-d-state-and-defunct-coolgpus-8.txt",
    "xid-45-hung-task-d-state-gpud-117.log",
    "hung-task-nvidia-rm-lock-nvidia-persistenced-15.log",
    "processes-orphans-after-slurm-job-sglang-23627.txt",
    "ps-ppid-1-orphan-sglang-23627.txt",
    "fuser-holder-not-in-table-gluon-nlp-338.txt",
    "handle-unknown-error-hoth-shine-cluster-171.txt",
    "lspci-rev-ff-shine-cluster-171.txt",
    "handle-unknown-error-no-space-syno-nvidia-gpu-driver-22.txt",
    "handle-gpu-is-lost-owod-81.txt",
)
IDS = [name.rsplit(".", 1)[0] for name in REPLAYED]
INTERPRETER = os.path.realpath(sys.executable)
PY_HOME = sys.base_prefix
DEVICE_MAJOR_MINOR = os.makedev(1, 3)      # like /dev/null: opening it does nothing

DMESG = """#!/bin/sh
# A stand-in dmesg for tests/test_real_cases.py: the kernel lines the test wrote for this node
# ($GI_FAKE_SMI/dmesg), else nothing.
cat "${GI_FAKE_SMI:-/nonexistent}/dmesg" 2>/dev/null
exit 0
"""


# ---------------------------------------------------------------- the sshd with a dmesg stand-in

class CaseSshd(Sshd):
    """tests/sshd_fixture.Sshd with one more directory first on the session's PATH (a dmesg)."""

    def __init__(self, root: Path, keys, port: int, extra_bin: Path) -> None:
        super().__init__(root, keys, [port])
        text = self.config.read_text()
        assert f"PATH={TEST_BIN}:" in text, "the sshd recipe no longer sets PATH as this module expects"
        self.config.write_text(text.replace(f"PATH={TEST_BIN}:", f"PATH={extra_bin}:{TEST_BIN}:"))


@pytest.fixture(scope="module")
def case_sshd(tmp_path_factory, ssh_keys):
    root = tmp_path_factory.mktemp("case-sshd")
    extra = root / "bin"
    extra.mkdir()
    (extra / "dmesg").write_text(DMESG)
    (extra / "dmesg").chmod(0o755)
    port, = free_ports(1)
    server = CaseSshd(root / "sshd", ssh_keys, port, extra).start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def node(case_sshd, ssh_home, monkeypatch):
    """The module's one node, reset before and after the test; driver calls time out after 1 s."""
    monkeypatch.setattr(probe, "NVSMI_TIMEOUT_S", 1)
    monkeypatch.setattr(probe_loop, "LOOP_MS", 200)
    n = case_sshd.nodes[0]
    n.smi.set()
    (n.smi.dir / "dmesg").unlink(missing_ok=True)
    yield n
    n.smi.set()
    (n.smi.dir / "dmesg").unlink(missing_ok=True)


def ssh_options(sshd: CaseSshd, tmp_path: Path) -> SshOptions:
    return SshOptions(known_hosts=str(sshd.write_known_hosts(tmp_path / "known_hosts")),
                      identity=(str(sshd.keys.client_key),), connect_timeout=3.0)


# ---------------------------------------------------------------- real processes

@pytest.fixture(scope="module")
def programs(tmp_path_factory) -> "Programs":
    return Programs(tmp_path_factory.mktemp("programs"))


class Programs:
    """Copies of this interpreter named after a program (one copy per name, hard links after)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.base = root / "python-base"
        shutil.copy2(INTERPRETER, self.base)

    def path(self, name: str) -> Path:
        d = self.root / name.replace("/", "_")
        d.mkdir(exist_ok=True)
        exe = d / name
        if not exe.exists():
            os.link(self.base, exe)
        return exe


WORKER = """
import ctypes, json, os, signal, sys
spec = json.loads(sys.argv[1])
if spec.get("session"):
    os.setsid()
fds = [os.open(f, os.O_RDONLY) for f in spec.get("holds") or ()]
print(os.getpid(), flush=True)
state = spec.get("state")
if state == "Z":
    os._exit(0)
if state == "D":                      # the vfork() parent waits in D for a child that never execs
    libc = ctypes.CDLL(None, use_errno=True)
    child = libc.vfork()
    if child == 0:
        libc.pause()
        libc._exit(0)
    os.waitpid(child, 0)              # the child was killed: reap it, so no zombie outlives us
if spec.get("busy"):
    while True:
        pass
signal.pause()
"""

# A child subreaper named like a node's init: starts a launcher (its job's process-group leader)
# that starts the workers in its group and dies; the workers are adopted by this process. On a
# line "end" it kills them and reaps them (nothing is left for PID 1, which does not reap here).
ADOPTER = """
import ctypes, json, os, signal, subprocess, sys
ctypes.CDLL(None).prctl(36, 1, 0, 0, 0)          # PR_SET_CHILD_SUBREAPER
workers, env = json.loads(sys.argv[1]), json.loads(sys.argv[2])
launcher = subprocess.Popen(["slurmstepd", "-c", sys.argv[3], sys.argv[1], sys.argv[4]], executable=sys.argv[5],
                            env=env, stdout=subprocess.PIPE, stdin=subprocess.PIPE, text=True)
pids = launcher.stdout.readline().split()
launcher.stdin.write("go\\n"); launcher.stdin.flush(); launcher.wait()
print(" ".join(pids), flush=True)
sys.stdin.readline()
for pid in map(int, pids):
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
for pid in map(int, pids):
    try:
        os.waitpid(pid, 0)
    except ChildProcessError:
        pass
"""

LAUNCHER = """
import json, os, signal, subprocess, sys
os.setpgid(0, 0)                      # the job's launcher leads its process group
procs = [subprocess.Popen([argv0, "-c", sys.argv[2], json.dumps(spec)], executable=exe, stdout=subprocess.PIPE,
                          stdin=subprocess.DEVNULL) for argv0, exe, spec in json.loads(sys.argv[1])]
pids = [p.stdout.readline().decode().strip() for p in procs]
print(" ".join(pids), flush=True)
sys.stdin.readline()
os.kill(os.getpid(), signal.SIGKILL)  # the job ends; its workers live on in its group
"""


# The parent of a case's live process: a child subreaper that starts it (argv[0], executable and
# spec as arguments) and reaps whatever ends below it (a vfork() child left by a killed D process
# comes back to it, not to PID 1); it exits once nothing is left. The test never signals itself.
PARENT = """
import ctypes, os, sys
ctypes.CDLL(None).prctl(36, 1, 0, 0, 0)          # PR_SET_CHILD_SUBREAPER
if os.fork() == 0:
    os.execv(sys.argv[2], [sys.argv[1], "-c", sys.argv[3], sys.argv[4]])
while True:
    try:
        os.wait()
    except ChildProcessError:
        break
"""


@dataclass
class Started:
    """Processes a test started: each ended by its PID (children first) at the end."""
    popens: list[subprocess.Popen] = field(default_factory=list)
    adopters: list[subprocess.Popen] = field(default_factory=list)

    def end(self) -> None:
        for a in self.adopters:
            try:
                a.stdin.write("end\n")
                a.stdin.flush()
                a.wait(10)
            except (OSError, subprocess.TimeoutExpired):
                _kill_tree(a.pid)
                a.kill()
                a.wait()
        for p in self.popens:
            _kill_tree(p.pid)
            if p.poll() is None:
                p.kill()
            p.wait()


def _kill_tree(pid: int) -> None:
    """Kill a process's descendants by PID, deepest first, and wait for its own children to be
    reaped by it (a vfork() parent reaps its child once it dies)."""
    try:
        kids = psutil.Process(pid).children(recursive=True)
    except psutil.Error:
        return
    for k in reversed(kids):
        try:
            k.kill()
        except psutil.Error:
            pass
    until(lambda: not [k for k in kids if psutil.pid_exists(k.pid) and _ppid(k.pid) == pid], bound_s=5)


def _ppid(pid: int) -> int | None:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return None


def _state(pid: int) -> str | None:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return None


@pytest.fixture
def started():
    s = Started()
    try:
        yield s
    finally:
        s.end()


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    env["PYTHONHOME"] = PY_HOME
    return env


def _spec(p: dict, devices: Path) -> dict:
    return {"holds": [str(devices / Path(h).name) for h in (p.get("holds") or ())],
            "state": p.get("state") if p.get("state") in ("D", "Z") else None,
            "busy": bool(p.get("busy")) or p.get("state") == "R",
            "session": p.get("sid") is not None and p.get("sid") == p.get("pid")}


def start_processes(case: Case, devices: Path, programs: Programs, started: Started) -> dict[int, int]:
    """The case's processes, for real; returns {the paste's PID: the real PID}."""
    procs = case.setup.get("processes") or []
    mapping: dict[int, int] = {}
    adopted = [p for p in procs if p.get("ppid") == 1]
    for p in procs:
        if p in adopted:
            continue
        exe, spec = programs.path(_exe_name(p)), json.dumps(_spec(p, devices))
        if p.get("state") == "Z":       # a zombie: the test is the parent that reaps it only at the end
            popen = subprocess.Popen([p["program"], "-c", WORKER, spec], executable=exe, env=_env(),
                                     stdout=subprocess.PIPE, stdin=subprocess.DEVNULL)
        else:
            popen = subprocess.Popen(["launcher", "-c", PARENT, p["program"], str(exe), WORKER, spec],
                                     executable=programs.path("launcher"), env=_env(), stdout=subprocess.PIPE,
                                     stdin=subprocess.DEVNULL)
        started.popens.append(popen)
        mapping[p["pid"]] = int(popen.stdout.readline())
    if adopted:
        workers = [(p["program"], str(programs.path(_exe_name(p))), _spec(p, devices)) for p in adopted]
        adopter = subprocess.Popen(["systemd", "-c", ADOPTER, json.dumps(workers), json.dumps(_env()), LAUNCHER,
                                    WORKER, str(programs.path("slurmstepd"))], executable=programs.path("systemd"),
                                   env=_env(),
                                   stdout=subprocess.PIPE, stdin=subprocess.PIPE, text=True)
        started.adopters.append(adopter)
        pids = [int(w) for w in adopter.stdout.readline().split()]
        assert len(pids) == len(adopted), "the adopter did not report its workers"
        mapping.update({p["pid"]: real for p, real in zip(adopted, pids)})
        assert until(lambda: all(_ppid(r) == adopter.pid for r in pids)), "the workers were not adopted"
    for p in procs:
        want = p.get("state")
        if want in ("D", "Z"):
            real = mapping[p["pid"]]
            assert until(lambda: _state(real) == want), f"PID {real} never reached {want}"
    return mapping


def _exe_name(p: dict) -> str:
    """The executable's basename: the paste's, else the program's (comm shows its first 15 bytes)."""
    return os.path.basename(p["exe"]) if p.get("exe") else p["program"]


# ---------------------------------------------------------------- the stand-in nvidia-smi's files

def _gpus(case: Case) -> list[dict]:
    """The GPUs the driver lists: the case's, else one per GPU its process rows name."""
    s = case.setup
    if s.get("unreachable") and not s.get("gpus"):
        return []
    gpus = [dict(g) for g in s.get("gpus") or ()]
    rows = s.get("driver_processes") or ()
    known = {g.get("index") for g in gpus}
    for r in rows:
        if r["gpu"] not in known:
            gpus.append({"index": r["gpu"]})
            known.add(r["gpu"])
    if not gpus and not s.get("unreachable"):
        gpus = [{"index": 0}]
    for i, g in enumerate(gpus):
        if g.get("index") is None:
            g["index"] = i
    return sorted(gpus, key=lambda g: g["index"])


def _uuid(i: int) -> str:
    return f"GPU-{i:08x}-7e57-4ca5-8e00-00000000000{i % 10}"


def write_node(node, case: Case, mapping: dict[int, int]) -> list[dict]:
    """Write what the stand-in prints for this case; returns the GPUs it lists."""
    s = case.setup
    d: Path = node.smi.dir
    gpus = _gpus(case)
    rows = s.get("driver_processes") or ()
    # persistence mode: on where the case's node runs the persistence daemon, else off
    persistence = "Enabled" if any(_exe_name(p) == "nvidia-persistenced" for p in s.get("processes") or ()) \
        else "Disabled"
    gpu_rows, recovery_rows, mem_rows, list_rows = [], [], [], []
    for g in gpus:
        i = g["index"]
        listed = sum(r["used_mib"] for r in rows if r["gpu"] == i)
        used = g.get("memory_used_mib") if g.get("memory_used_mib") is not None else listed
        total = g.get("memory_total_mib") or 81920
        bus = g.get("bus_id") or f"00000000:{0x18 + 0x10 * i:02X}:00.0"
        name = g.get("name") or "NVIDIA GPU"
        util = g.get("util_pct") or 0
        row = f"{i}, {_uuid(i)}, {name}, {bus}, {used}, {total}, {util}, {persistence}, [N/A]"
        gpu_rows.append(row)
        recovery_rows.append(f"{row}, {g.get('recovery_action') or 'None'}")
        mem_rows.append(f"{i}, {used} MiB")
        list_rows.append(f"GPU {i}: {name} (UUID: {_uuid(i)})")
    apps = [f"{mapping.get(r['pid'], r['pid'])}, {_uuid(r['gpu'])}, {r['used_mib']}, {r['name']}" for r in rows]
    pmon = ["# gpu        pid  type    sm   mem   enc   dec   command",
            "# Idx          #   C/G     %     %     %     %   name"]
    pmon += [f"{r['gpu']:>5} {mapping.get(r['pid'], r['pid']):>10} {'C':>5}     -     -     -     -   {r['name']}"
             for r in rows]
    files = {"gpu": gpu_rows, "gpu_recovery": recovery_rows, "memory": mem_rows, "list": list_rows, "apps": apps,
             "pmon": pmon, "remap": []}
    for name, lines in files.items():
        (d / name).write_text("".join(line + "\n" for line in lines))
    (d / "pmon_rc").write_text("0\n")
    mode = "normal"
    if (s.get("probe") or {}).get("hung"):
        mode = "hang"
    elif s.get("unreachable"):
        mode = "lost"
        (d / "lost").write_text(handle_lines(case))
    (d / "mode").write_text(mode + "\n")
    write_pci(node, case, gpus)
    body = real_fixtures.load(case.fixture).body
    if case.fixture.endswith(".log"):
        for line in s.get("kernel") or ():
            assert line in body.splitlines(), f"a kernel line of the case is not in its fixture: {line!r}"
        (d / "dmesg").write_text(body)
    return gpus


def write_pci(node, case: Case, gpus: list[dict]) -> None:
    """The node's kernel-module tree ($GI_NODE_ROOT, tests/sshd_fixture.py): a directory per GPU the
    module knows in proc/driver/nvidia/gpus and its config bytes in sys/bus/pci/devices: all ones
    for lspci's "rev ff", a GPU's IDs where lspci shows another revision or the driver lists it, and
    no config file for an unreachable GPU whose revision the paste does not show (unknown)."""
    root = node.smi.node_root
    known: dict[str, bool | None] = {}
    for g in gpus:
        known[(g.get("bus_id") or f"00000000:{0x18 + 0x10 * g['index']:02X}:00.0")[4:].lower()] = True
    for bus in case.setup.get("unreachable") or ():
        known.setdefault(bus[4:].lower(), None)
    for fn, rev in (case.setup.get("lspci") or {}).items():
        if fn.endswith(".0"):
            known[f"0000:{fn.lower()}"] = rev.lower() != "ff"
    proc_gpus, devices = root / "proc" / "driver" / "nvidia" / "gpus", root / "sys" / "bus" / "pci" / "devices"
    for d in (proc_gpus, devices):
        if d.exists():
            shutil.rmtree(d)
        d.mkdir(parents=True)
    for name, present in known.items():
        (proc_gpus / name).mkdir()
        (devices / name).mkdir()
        if present is not None:
            (devices / name / "config").write_bytes(bytes.fromhex("de10b52b") if present else b"\xff" * 4)


def handle_lines(case: Case) -> str:
    """The "Unable to determine the device handle ..." lines of the fixture's body, as pasted; a
    fixture without one (an lspci paste) shows the same GPU's line from the case's other paste."""
    fixtures = [case.fixture] + [c.fixture for c in CASES if c.fixture != case.fixture
                                 and c.setup.get("unreachable") == case.setup.get("unreachable")]
    for name in fixtures:
        lines = [line for line in real_fixtures.load(name).body.splitlines(keepends=True)
                 if line.startswith("Unable to determine the device handle")]
        if lines:
            return "".join(lines)
    bus = case.setup["unreachable"][0].split(":", 1)[1]
    return f"Unable to determine the device handle for GPU {bus}: Unknown Error\n"


# ---------------------------------------------------------------- the replay

@dataclass
class Replay:
    case: Case
    snap: NodeSnapshot                  # polled, with pci_gpus set and diagnosed
    findings: tuple[Finding, ...]       # the ones about the case (its processes, or the node)
    ours: set[int]                      # the case's real PIDs and their descendants
    devices: Path
    mapping: dict[int, int]


def _pci(case: Case, snap: NodeSnapshot) -> tuple[PciGpu, ...]:
    lspci = case.setup.get("lspci")
    if lspci:
        return tuple(PciGpu(f"00000000:{bus.split('.')[0].upper()}.0", rev.lower() != "ff")
                     for bus, rev in sorted(lspci.items()) if bus.endswith(".0"))
    return tuple(PciGpu(g.bus_id, True) for g in snap.gpus)


def make_devices(tmp_path: Path, case: Case) -> Path:
    d = tmp_path / "dev"
    d.mkdir()
    names = {"nvidia0", "nvidiactl"} | {Path(h).name for p in case.setup.get("processes") or ()
                                        for h in p.get("holds") or ()}
    for name in names:
        os.mknod(d / name, 0o600 | stat.S_IFCHR, DEVICE_MAJOR_MINOR)
    return d


async def replay(case: Case, node, sshd, tmp_path: Path, programs: Programs, started: Started) -> Replay:
    devices = make_devices(tmp_path, case)
    mapping = start_processes(case, devices, programs, started)
    write_node(node, case, mapping)
    src = SshSource(node.target, ssh_options(sshd, tmp_path), device_glob=f"{devices}/nvidia*", probe_timeout=8)
    hung = case.setup.get("probe") or {}
    history: list[NodeSnapshot] = []
    try:
        snap = await src.poll()
        if not hung.get("hung"):
            # a second reading, as the console has before anyone presses x: a job's CPU time over the
            # two says whether it computes (one reading cannot: console/diagnosis/liveness.py)
            await asyncio.sleep(0.5)
            history, snap = [snap], await src.poll()
    finally:
        await src.close()
    if snap.pci_gpus is None:                 # not read by the source yet (see the module's doc)
        snap = replace(snap, pci_gpus=_pci(case, snap))
        history = [replace(h, pci_gpus=snap.pci_gpus) for h in history]
    if hung.get("hung") and hung.get("for_s"):
        assert snap.error and "timed out" in snap.error, snap.error
        history = [replace(snap, taken_at=snap.taken_at - hung["for_s"] * k / 2) for k in (2, 1)]
    findings = diagnose(snap, history)
    snap = replace(snap, findings=findings)
    ours = set(mapping.values())
    for pid in list(ours):
        try:
            ours |= {k.pid for k in psutil.Process(pid).children(recursive=True)}
        except psutil.Error:
            pass
    mine = tuple(f for f in findings if not f.pids or set(f.pids) & ours
                 or set(f.evidence.get("targets", ()) or ()) & ours)
    return Replay(case, snap, mine, ours, devices, mapping)


def check_verdict(r: Replay) -> None:
    case, findings = r.case, r.findings
    shown = [(f.kind, f.rung, f.pids, f.summary[:100]) for f in findings]
    kinds = {f.kind for f in findings}
    assert set(case.kinds) <= kinds, f"missing kinds {set(case.kinds) - kinds}; findings: {shown}"
    assert not set(case.not_kinds) & kinds, f"kinds that must not be there: {set(case.not_kinds) & kinds}; {shown}"
    wrong = [(f.kind, f.rung, f.pids) for f in findings if f.rung in case.not_rungs]
    assert not wrong, f"rungs that must not be proposed: {wrong}; findings: {shown}"
    if case.rung_established:
        top = top_step(findings)
        assert (top.rung if top else None) == case.rung, f"next step {top and (top.kind, top.rung)}; {shown}"
    if case.gate_clean is not None:
        sig = fitness.signals(r.snap)
        assert fitness.clean(sig) == case.gate_clean, "\n".join(    # every signal whole, the odd ones first
            f"{s.name}: {s.status}: {s.said}" for s in sorted(sig, key=lambda s: s.status in ("ok", "n/a")))


@pytest.mark.parametrize("fixture", REPLAYED, ids=IDS)
async def test_case_verdict(fixture, node, case_sshd, tmp_path, programs, started):
    case = BY_FIXTURE[fixture]
    r = await replay(case, node, case_sshd, tmp_path, programs, started)
    check_verdict(r)


# ---------------------------------------------------------------- the gate CLI on some cases

#: the signals of which one at least a case's evidence must turn bad in `gate --json` — None: every
#: one ok or n/a
GATE_CASES = {
    "fuser-persistenced-holds-nvidia0-dra-driver-nvidia-gpu-1037.txt": None,
    "ps-ppid-1-orphan-sglang-23627.txt": ("workloads",),
    "fuser-holder-not-in-table-gluon-nlp-338.txt": ("workloads",),
    # a node whose only GPU is lost: nvidia-smi listed none (the node error), or the GPU is missing
    "handle-gpu-is-lost-owod-81.txt": ("answered", "gpus_present"),
}


@pytest.mark.parametrize("fixture", list(GATE_CASES), ids=[f.rsplit(".", 1)[0] for f in GATE_CASES])
async def test_gate_cli_on_the_case(fixture, node, case_sshd, tmp_path, programs, started, capsys):
    case = BY_FIXTURE[fixture]
    devices = make_devices(tmp_path, case)
    mapping = start_processes(case, devices, programs, started)
    write_node(node, case, mapping)
    argv = ["gate", node.target, "--wait", "0", "--json", "--incident-dir", str(tmp_path / "inc"),
            "--known-hosts", str(case_sshd.write_known_hosts(tmp_path / "known_hosts")),
            "-i", str(case_sshd.keys.client_key), "--device-glob", f"{devices}/nvidia*"]
    rc = await asyncio.to_thread(cli.main, argv)
    out = capsys.readouterr().out
    doc = json.loads(out)
    signals = doc["nodes"][0]["signals"]
    statuses = {name: s["status"] for name, s in signals.items()} if isinstance(signals, dict) else \
        {s["name"]: s["status"] for s in signals}
    assert rc == (0 if case.gate_clean else 1), (rc, signals)
    assert doc["nodes"][0]["clean"] is case.gate_clean, signals
    bad = GATE_CASES[fixture]
    if bad is None:
        assert all(v in (fitness.OK, fitness.NA) for v in statuses.values()), signals
    else:
        assert fitness.BAD in {statuses[b] for b in bad}, signals


# ---------------------------------------------------------------- the corpus itself

def test_the_corpus_holds_at_least_12_cases_from_distinct_threads():
    assert sorted(REPLAYED) == sorted(c.fixture for c in CASES), "every case is replayed, each once"
    assert len(CASES) >= 12
    assert len({c.fixture for c in CASES}) == len(CASES), "a fixture is replayed twice"
    threads = {real_fixtures.load(c.fixture).source.split()[0] for c in CASES}
    assert len(threads) >= 12, sorted(threads)
