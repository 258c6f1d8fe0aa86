"""A real OpenSSH sshd on 127.0.0.1 for the SSH tests.

One sshd (console/bench/sshd.py: the recipe, shared with `gpu-incident bench`) serves two "nodes" on two ports; ``Match LocalPort`` + ``SetEnv`` give each
its own test nvidia-smi state (tests/bin/nvidia-smi reads $GI_FAKE_SMI) and put
tests/bin first on PATH. Stock MaxSessions / MaxStartups. Started and stopped by
PID; skipped with a reason where /usr/sbin/sshd is missing.

Each node also has its own kernel-module tree: $GI_NODE_ROOT (probe.NODE_ROOT_ENV) points the
probe's pci section at ``<state>/root``, where ``FakeSmi.set`` writes /proc/driver/nvidia/gpus
(a directory per GPU it simulates, named by bus id) and /sys/bus/pci/devices/BUS/config (the
GPU's vendor and device ID; "ff ff ff ff" for one fallen off the bus).

Fixtures: ``ssh_keys`` (session), ``sshd`` (session; ``.nodes`` = two FakeNode),
``ssh_home`` (HOME in a temp dir: no stray ~/.ssh config, keys or agent).
"""
from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from console.bench.sshd import SSHD, LoopbackSshd, HostKey, free_ports, public_line, write_key
from console.probe import NODE_ROOT_ENV

TEST_BIN = Path(__file__).resolve().parent / "bin"
__all__ = ["SSHD", "free_ports", "free_port", "Keys", "make_keys", "Sshd", "FakeSmi", "FakeNode"]


def free_port() -> int:
    return free_ports(1)[0]


@dataclass
class Keys:
    dir: Path
    host_key: Path             # sshd's private host key
    host_public: str           # "ssh-ed25519 AAAA…"
    host_fingerprint: str      # "SHA256:…"
    client_key: Path           # authorized
    stranger_key: Path         # not authorized


def make_keys(root: Path) -> Keys:
    root.mkdir(parents=True, exist_ok=True)
    host = write_key(root / "host_ed25519")
    write_key(root / "client_ed25519")
    write_key(root / "stranger_ed25519")
    return Keys(root, root / "host_ed25519", public_line(host), host.get_fingerprint("sha256"),
                root / "client_ed25519", root / "stranger_ed25519")


GPU_UUIDS = ("GPU-5a1c0c7e-1111-2222-3333-444455556666", "GPU-5a1c0c7e-1111-2222-3333-444455556667")
GPU_BUS = ("00000000:18:00.0", "00000000:2A:00.0")
GPU_NAME = "NVIDIA RTX PRO 6000 Blackwell Server Edition"
#: the first four bytes of the GPUs' PCI config space (vendor 10de, device 2bb5, little-endian) and
#: what a device fallen off the bus reads
PCI_CONFIG = bytes.fromhex("de10b52b")
PCI_GONE = b"\xff" * 4


def pci_dir(bus: str) -> str:
    """00000000:2A:00.0 -> 0000:2a:00.0: its name under /proc/driver/nvidia/gpus and sysfs."""
    return bus[4:].lower()


class FakeSmi:
    """The state tests/bin/nvidia-smi answers from (one directory per node)."""

    def calls(self) -> list[str]:
        """The arguments of every call so far (one line each)."""
        path = self.dir / "calls"
        return path.read_text().splitlines() if path.exists() else []

    def clear_calls(self) -> None:
        (self.dir / "calls").write_text("")

    def __init__(self, root: Path) -> None:
        self.dir = root
        root.mkdir(parents=True, exist_ok=True)
        self.set()

    @property
    def node_root(self) -> Path:
        """The node's fake kernel-module tree (its $GI_NODE_ROOT)."""
        return self.dir / "root"

    def _write_pci(self, count: int, missing, gone) -> None:
        """A directory per GPU in root/proc/driver/nvidia/gpus but the ``missing`` ones, and each
        GPU's config bytes (all ones for the ``gone``); GPUs of earlier calls not there now go."""
        gpus = self.node_root / "proc" / "driver" / "nvidia" / "gpus"
        devices = self.node_root / "sys" / "bus" / "pci" / "devices"
        gpus.mkdir(parents=True, exist_ok=True)
        devices.mkdir(parents=True, exist_ok=True)
        wanted = {pci_dir(GPU_BUS[i]) for i in range(count) if i not in missing}
        for old in gpus.iterdir():
            if old.name not in wanted:
                old.rmdir()
        for i in range(count):
            name = pci_dir(GPU_BUS[i])
            if name in wanted:
                (gpus / name).mkdir(exist_ok=True)
            (devices / name).mkdir(exist_ok=True)
            (devices / name / "config").write_bytes(PCI_GONE if i in gone else PCI_CONFIG)

    def _write(self, name: str, text: str) -> None:
        tmp = self.dir / (name + ".tmp")
        tmp.write_text(text)
        tmp.replace(self.dir / name)

    def set(self, used=(76109, 76113), apps=(), mode="normal", mig=False, recovery=("None", "None"),
            old_smi=False, remap=(0, 0), sm=None, pmon_supported=True, pci_missing=(), pci_gone=(),
            apps_failure: str | None = None) -> None:
        """``used``: MiB per GPU; ``apps``: (pid, gpu index, MiB or None, name).
        ``pci_missing``: GPU indices left out of the kernel module's /proc/driver/nvidia/gpus;
        ``pci_gone``: GPU indices whose PCI config space reads all ones (fallen off the bus); by
        default every GPU is there and answers. ``apps_failure``: the --query-compute-apps call
        prints this and fails (exit 255) instead of listing the processes.
        Mode ``lost``: GPU 1 (bus 0000:2A:00.0) is lost, the others are still printed.
        ``recovery``: what a newer nvidia-smi prints for gpu_recovery_action per GPU; ``old_smi``:
        an older one that rejects that field (exit 2). ``remap``: per GPU, the rows remapped after
        uncorrectable errors and still pending (``-q -d ROW_REMAPPER``; 0: none pending).
        ``sm``: {pid: SM %} of the listed processes as ``pmon -c 1 -s u`` prints them (a PID not
        in it: "-"); ``pmon_supported=False``: pmon prints the refusal of a GPU without it."""
        gpu_rows, mem_rows, list_rows, recovery_rows = [], [], [], []
        for i, mib in enumerate(used):
            if mode == "lost" and i == 1:     # the lost GPU is absent from the rows
                continue
            mig_mode = "Enabled" if mig and i == 0 else "[N/A]"
            gpu_rows.append(f"{i}, {GPU_UUIDS[i]}, {GPU_NAME}, {GPU_BUS[i]}, {mib}, 97887, "
                            f"{3 * i}, Enabled, {mig_mode}")
            recovery_rows.append(f"{gpu_rows[-1]}, {recovery[i]}")
            mem_rows.append(f"{i}, {mib} MiB")
            list_rows.append(f"GPU {i}: {GPU_NAME} (UUID: {GPU_UUIDS[i]})")
            if mig and i == 0:
                list_rows += [f"  MIG 3g.48gb     Device  {d}: (UUID: MIG-0c7e{d}aa0-1111-2222-3333-4444555566{d}0)"
                              for d in range(2)]
        app_rows = [f"{pid}, {GPU_UUIDS[gpu]}, {'[N/A]' if mib is None else mib}, {name}"
                    for pid, gpu, mib, name in apps]
        remap_rows = ["", "==============NVSMI LOG==============", ""]
        for i, rows in enumerate(remap):
            if mode == "lost" and i == 1:
                continue
            remap_rows += [f"GPU {GPU_BUS[i]}", "    Remapped Rows", f"        {'Correctable Error':<34}: 0",
                           f"        {'Uncorrectable Error':<34}: {rows}",
                           f"        {'Pending':<34}: {'Yes' if rows else 'No'}",
                           f"        {'Remapping Failure Occurred':<34}: No", ""]
        pmon_rows = ["# gpu        pid  type    sm   mem   enc   dec   command",
                     "# Idx          #   C/G     %     %     %     %   name"]
        for i in range(len(used)):
            mine = [(pid, name) for pid, gpu, _mib, name in apps if gpu == i]
            pmon_rows += [f"{i:>5} {pid:>10} {'C':>5} {str((sm or {}).get(pid, '-')):>5}     -     -     -   {name}"
                          for pid, name in mine] or [f"{i:>5} {'-':>10}     -     -     -     -     -   -"]
        if not pmon_supported:
            pmon_rows = ["Not supported on the device(s)", "Failed to process command line"]
        self._write("pmon_rc", "0\n" if pmon_supported else "255\n")
        for name, rows in (("gpu", gpu_rows), ("memory", mem_rows), ("list", list_rows),
                           ("apps", app_rows), ("gpu_recovery", recovery_rows), ("remap", remap_rows),
                           ("pmon", pmon_rows)):
            self._write(name, "".join(r + "\n" for r in rows))
        if old_smi:
            self._write("old", "")
        else:
            (self.dir / "old").unlink(missing_ok=True)
        self._write("lost", "Unable to determine the device handle for GPU 0000:2A:00.0: GPU is lost."
                            "  Reboot the system to recover this GPU\n")
        if apps_failure is None:
            (self.dir / "apps_fail").unlink(missing_ok=True)
        else:
            self._write("apps_fail", apps_failure + "\n")
        self._write_pci(len(used), set(pci_missing), set(pci_gone))
        self._write("mode", mode + "\n")

    def calls(self) -> list[str]:
        """The arguments of every call of the test nvidia-smi so far, one per call."""
        try:
            return (self.dir / "calls").read_text().splitlines()
        except FileNotFoundError:
            return []


@dataclass
class FakeNode:
    port: int
    smi: FakeSmi | None          # None: no nvidia-smi on this node's PATH

    @property
    def target(self) -> str:
        return f"root@127.0.0.1:{self.port}"


class Sshd(LoopbackSshd):
    """The test sshd (console/bench/sshd.py): ``nodes`` on ``ports`` get a test nvidia-smi each
    (tests/bin first on PATH, their own $GI_FAKE_SMI); ``bare`` nodes have none on PATH."""

    def __init__(self, root: Path, keys: Keys, ports: list[int], bare_ports: tuple[int, ...] = ()) -> None:
        self.keys = keys
        root.mkdir(parents=True, exist_ok=True)
        self.nodes = [FakeNode(p, FakeSmi(root / f"smi-{p}")) for p in ports]
        self.bare = [FakeNode(p, None) for p in bare_ports]
        env = {n.port: {"PATH": f"{TEST_BIN}:/usr/bin:/bin", "GI_FAKE_SMI": str(n.smi.dir),
                        NODE_ROOT_ENV: str(n.smi.node_root)} for n in self.nodes}
        env.update({n.port: {"PATH": "/usr/bin:/bin"} for n in self.bare})
        super().__init__(root, HostKey(keys.host_key, keys.host_public, keys.host_fingerprint),
                         Path(str(keys.client_key) + ".pub").read_text(), [*ports, *bare_ports], env)

    def write_known_hosts(self, path: Path) -> Path:
        path.write_text("".join(self.known_hosts_line(n.port) for n in [*self.nodes, *self.bare]))
        return path


def require_sshd() -> None:
    if not SSHD.exists():
        pytest.skip("OpenSSH server not installed (/usr/sbin/sshd); .ci/run installs it")
    if os.geteuid() != 0:
        pytest.skip("the sshd tests log in as root and need to run as root")


@pytest.fixture(scope="session")
def ssh_keys(tmp_path_factory) -> Keys:
    require_sshd()
    return make_keys(tmp_path_factory.mktemp("sshkeys"))


@pytest.fixture(scope="session")
def sshd(tmp_path_factory, ssh_keys):
    require_sshd()
    a, b, bare = free_ports(3)
    server = Sshd(tmp_path_factory.mktemp("sshd"), ssh_keys, [a, b], bare_ports=(bare,)).start()
    yield server
    server.stop()


#: the test nvidia-smi's loop interval (probe_loop.LOOP_MS, 1 s on a node) in the tests on the real
#: sshd: a value the test sets shows in the loops' next sample, a fifth of a second later
TEST_LOOP_MS = 200


@pytest.fixture(autouse=True)
def _quick_smi_loops(request, monkeypatch):
    if "sshd" in request.fixturenames:
        from console import probe_loop
        monkeypatch.setattr(probe_loop, "LOOP_MS", TEST_LOOP_MS)


@pytest.fixture
def ssh_home(tmp_path, monkeypatch) -> Path:
    """An empty HOME (no ~/.ssh/config, keys or known_hosts of the person running the tests)."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("SSH_AUTH_SOCK", raising=False)
    return home


@pytest.fixture
def gpu_workers():
    """Real processes to stand for GPU workers (the test nvidia-smi lists their PIDs)."""
    procs: list[subprocess.Popen] = []

    def start(n: int = 1) -> list[int]:
        for _ in range(n):
            procs.append(subprocess.Popen(["sleep", "300"]))
        return [p.pid for p in procs[-n:]]

    yield start
    for p in procs:
        p.kill()
        p.wait()
