"""A real OpenSSH sshd on 127.0.0.1, started and stopped by its PID: `gpu-incident bench`
measures the transport against it, and the SSH tests (tests/sshd_fixture.py) run on it.

The recipe: host and client keys in a directory, a config with ``ListenAddress
127.0.0.1``, the ports, ``UsePAM no``, ``StrictModes no``, key authentication only, and per
port (``Match LocalPort``) the session's environment through ``SetEnv`` (PATH with a test
nvidia-smi first, HOME in the directory so the login shell reads nobody's rc files).
``/usr/sbin/sshd -D -e -f CONFIG`` (an absolute path is required); ``stop()`` signals it and
the sessions it serves, found by its PID, never by name.
"""
from __future__ import annotations

import getpass
import os
import re
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Sequence

import asyncssh
import psutil

SSHD = Path("/usr/sbin/sshd")
START_TIMEOUT_S = 10.0


def free_ports(n: int) -> list[int]:
    """``n`` distinct loopback ports nothing listens on (all held until all are chosen)."""
    socks = []
    try:
        for _ in range(n):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def sshd_version() -> tuple[int, int]:
    out = subprocess.run([str(SSHD), "-V"], capture_output=True, text=True)
    m = re.search(r"OpenSSH_(\d+)\.(\d+)", out.stderr + out.stdout)
    return (int(m.group(1)), int(m.group(2))) if m else (0, 0)


def missing() -> str | None:
    """Why a loopback sshd cannot be used here (one line), or None when it can."""
    if not SSHD.exists():
        return f"OpenSSH server not installed ({SSHD}; Debian: apt-get install openssh-server)"
    if shutil.which("ssh") is None:
        return "OpenSSH client not installed (ssh; Debian: apt-get install openssh-client)"
    if os.geteuid() != 0:
        return "a loopback sshd needs root here (its privilege separation directory /run/sshd)"
    return None


def write_key(path: Path) -> asyncssh.SSHKey:
    """A new ed25519 key: ``path`` (0600) and ``path.pub``."""
    key = asyncssh.generate_private_key("ssh-ed25519")
    key.write_private_key(str(path))
    path.chmod(0o600)
    key.write_public_key(str(path) + ".pub")
    return key


def public_line(key: asyncssh.SSHKey) -> str:
    """"ssh-ed25519 AAAA…" (no comment)."""
    return " ".join(key.export_public_key("openssh").decode().split()[:2])


@dataclass
class HostKey:
    path: Path
    public: str             # "ssh-ed25519 AAAA…"
    fingerprint: str        # "SHA256:…"


def make_host_key(path: Path) -> HostKey:
    key = write_key(path)
    return HostKey(path, public_line(key), key.get_fingerprint("sha256"))


class LoopbackSshd:
    """One ``/usr/sbin/sshd -D`` on 127.0.0.1 serving ``ports``; ``env[port]`` is what sshd's
    ``SetEnv`` gives the sessions on that port (HOME defaults to ``root/home``)."""

    def __init__(self, root: Path, host_key: HostKey, authorized: str, ports: Sequence[int],
                 env: Mapping[int, Mapping[str, str]] | None = None) -> None:
        self.root = root
        self.host_key = host_key
        self.ports = list(ports)
        self.proc: subprocess.Popen | None = None
        self.config = root / "sshd_config"
        root.mkdir(parents=True, exist_ok=True)
        home = root / "home"
        home.mkdir(exist_ok=True)
        (root / "authorized_keys").write_text(authorized)
        lines = ["ListenAddress 127.0.0.1", *[f"Port {p}" for p in self.ports],
                 f"HostKey {host_key.path}", f"AuthorizedKeysFile {root / 'authorized_keys'}",
                 f"PidFile {root / 'sshd.pid'}", "UsePAM no", "StrictModes no",
                 "PasswordAuthentication no", "KbdInteractiveAuthentication no",
                 "PermitRootLogin prohibit-password", "LogLevel ERROR"]
        if sshd_version() >= (9, 8):
            lines.append("PerSourcePenalties no")    # many quick logins from one source are fine here
        for port in self.ports:
            # HOME: the session shell reads no rc files of whoever runs this (root's ~/.bashrc
            # would cost every exec ~100 ms and could print or change PATH)
            values = {"HOME": str(home), **dict((env or {}).get(port, {}))}
            lines += [f"Match LocalPort {port}",
                      "    SetEnv " + " ".join(f"{k}={v}" for k, v in values.items())]
        self.config.write_text("\n".join(lines) + "\n")

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    def start(self) -> "LoopbackSshd":
        Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)     # privilege separation directory
        log = open(self.root / "sshd.log", "ab")
        self.proc = subprocess.Popen([str(SSHD), "-D", "-e", "-f", str(self.config)],
                                     stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                     start_new_session=True)
        log.close()
        deadline = time.monotonic() + START_TIMEOUT_S
        for port in self.ports:
            while True:
                if self.proc.poll() is not None:
                    raise RuntimeError(f"sshd exited: {(self.root / 'sshd.log').read_text()[-500:]}")
                try:
                    with socket.create_connection(("127.0.0.1", port), timeout=1) as s:
                        if s.recv(64).startswith(b"SSH-"):
                            break
                except OSError:
                    pass
                if time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError(f"sshd did not listen on {port}")
                time.sleep(0.02)
        return self

    def sessions(self) -> list[psutil.Process]:
        """Every process sshd started (its session processes and their children)."""
        if self.proc is None or self.proc.poll() is not None:
            return []
        try:
            return psutil.Process(self.proc.pid).children(recursive=True)
        except psutil.NoSuchProcess:
            return []

    def _signal_all(self, sig: int) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        family = self.sessions()
        for p in [psutil.Process(self.proc.pid), *family]:
            try:
                p.send_signal(sig)
            except psutil.NoSuchProcess:
                pass

    def kill(self) -> None:
        """SIGKILL sshd and every session it serves: the node vanishes mid-session."""
        self._signal_all(signal.SIGKILL)
        if self.proc is not None:
            self.proc.wait(5)

    def stop(self) -> None:
        self._signal_all(signal.SIGTERM)
        if self.proc is not None:
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.kill()

    def known_hosts_line(self, port: int) -> str:
        return f"[127.0.0.1]:{port} {self.host_key.public}\n"

    def write_known_hosts(self, path: Path) -> Path:
        path.write_text("".join(self.known_hosts_line(p) for p in self.ports))
        return path


def login_user() -> str:
    """Who the loopback sessions log in as: whoever runs this (sshd run by a user other than
    root can only log that user in)."""
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return str(os.getuid())
