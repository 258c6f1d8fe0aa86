"""Host-key trust for SSH nodes: known_hosts files, new keys and changed keys.

Verification is never off: a key is accepted only when a known_hosts file in use
lists it, or -- with ``accept_new_host_keys`` -- when no file knows any key for
that host yet, in which case the key is appended to the file the console records
into. A host whose recorded key differs is refused, whatever the flag says.
"""
from __future__ import annotations

import os
from pathlib import Path

import asyncssh

DEFAULT_USER_KNOWN_HOSTS = "~/.ssh/known_hosts"
DEFAULT_GLOBAL_KNOWN_HOSTS = "/etc/ssh/ssh_known_hosts"
#: parsed known_hosts, shared by every source that reads the same unchanged files: (path,
#: device, inode, size, mtime) of each file -> what they hold
_PARSED: dict[tuple, asyncssh.SSHKnownHosts] = {}
_PARSED_MAX = 16


def host_port(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def known_hosts_pattern(host: str, port: int) -> str:
    """How OpenSSH writes a host in known_hosts: bare on port 22, else ``[host]:port``."""
    return host if port == 22 else f"[{host}]:{port}"


def key_words(key: asyncssh.SSHKey) -> str:
    """``ssh-ed25519 SHA256:…`` -- what the operator compares with ssh-keygen -lf."""
    return f"{key.get_algorithm()} {key.get_fingerprint('sha256')}"


class HostTrust:
    """The known_hosts files one source uses, and the verdict of one connection."""

    def __init__(self, read_files: list[str], record_file: str, accept_new: bool) -> None:
        self.read_files = [str(Path(f).expanduser()) for f in read_files]
        self.record_file = str(Path(record_file).expanduser())
        self.accept_new = accept_new
        self.known: asyncssh.SSHKnownHosts | None = None
        # set by check() during a handshake
        self.offered: asyncssh.SSHKey | None = None
        self.changed = False
        self.recorded = False

    @classmethod
    def for_options(cls, known_hosts: str | None, accept_new: bool,
                    config: object | None) -> "HostTrust":
        """--known-hosts FILE alone when given; else the ssh config's UserKnownHostsFile
        (default ~/.ssh/known_hosts) and GlobalKnownHostsFile (default /etc/ssh/ssh_known_hosts)."""
        if known_hosts:
            return cls([known_hosts], known_hosts, accept_new)
        get = getattr(config, "get", None)
        user_files = list(get("UserKnownHostsFile", ()) or ()) if get else []
        global_files = list(get("GlobalKnownHostsFile", ()) or ()) if get else []
        user_files = user_files or [DEFAULT_USER_KNOWN_HOSTS]
        global_files = global_files or [DEFAULT_GLOBAL_KNOWN_HOSTS]
        return cls(user_files + global_files, user_files[0], accept_new)

    def load(self) -> asyncssh.SSHKnownHosts:
        """Read the files afresh when they changed (another console may have recorded a key):
        files unchanged since another source read them (same inode, size and time) are not
        parsed again -- 1,024 nodes in one known_hosts file would otherwise cost a million
        parsed keys. A missing file trusts nothing; an unreadable or malformed one is an error
        naming it."""
        seen = []
        for name in self.read_files:
            try:
                st = os.stat(name)
            except FileNotFoundError:
                continue
            except OSError as exc:
                raise HostKeyFileError(f"host key check impossible: cannot read {name} "
                                       f"({exc.strerror or exc})") from None
            seen.append((name, st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns))
        known = _PARSED.get(tuple(seen))
        if known is None:
            known = self._parse()
            if len(_PARSED) >= _PARSED_MAX:
                _PARSED.clear()
            _PARSED[tuple(seen)] = known
        self.known = known
        self.offered, self.changed, self.recorded = None, False, False
        return self.known

    def _parse(self) -> asyncssh.SSHKnownHosts:
        texts = []
        for name in self.read_files:
            try:
                texts.append(Path(name).read_text(encoding="utf-8", errors="replace"))
            except FileNotFoundError:
                continue
            except OSError as exc:
                raise HostKeyFileError(f"host key check impossible: cannot read {name} "
                                       f"({exc.strerror or exc})") from None
        try:
            return asyncssh.import_known_hosts("\n".join(texts))
        except (ValueError, asyncssh.KeyImportError) as exc:
            raise HostKeyFileError(f"host key check impossible: bad known_hosts line in "
                                   f"{', '.join(self.read_files)} ({exc})") from None

    def check(self, host: str, addr: str, port: int, key: asyncssh.SSHKey) -> bool:
        """Called for a key no file lists: refuse it, or record it when the host is new."""
        self.offered = key
        assert self.known is not None
        listed = asyncssh.match_known_hosts(self.known, host, addr, None if port == 22 else port)[0]
        if listed:
            self.changed = True
            return False
        if not self.accept_new:
            return False
        self._record(host, port, key)
        self.recorded = True
        return True

    def _record(self, host: str, port: int, key: asyncssh.SSHKey) -> None:
        words = key.export_public_key("openssh").decode().split()[:2]
        line = f"{known_hosts_pattern(host, port)} {' '.join(words)}\n"
        path = Path(self.record_file)
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            if path.stat().st_size:
                with open(path, "rb") as f:
                    f.seek(-1, os.SEEK_END)
                    if f.read(1) != b"\n":
                        line = "\n" + line
            os.write(fd, line.encode())
            os.fsync(fd)
        finally:
            os.close(fd)

    def refusal(self, where: str, reason: str) -> str:
        """The one line shown when the handshake ended in HostKeyNotVerifiable."""
        files = ", ".join(self.read_files)
        if self.offered is None:
            return f"host key not trusted for {where}: {reason}"
        if self.changed:
            return (f"host key CHANGED for {where} ({key_words(self.offered)}): {files} holds a "
                    "different key for this host; refusing to connect (remove the old entry only "
                    "if the change is expected)")
        return (f"host key not trusted for {where} ({key_words(self.offered)}): not in {files}; "
                "check the fingerprint, then add it or rerun with --accept-new-host-keys")


class HostKeyFileError(Exception):
    """A known_hosts file that cannot be used; the message is the node's error line."""
