"""A remote node over SSH (asyncssh): one kept connection, one round trip per poll.

- The probe goes to a long-lived remote ``sh`` started as an exec request
  (``exec sh``, not a login shell: the PATH sshd gave the session stays). Its
  output is read as bytes, under the byte caps (``limits``), until the end marker
  of the last probe section. A poll has a client-side deadline (``probe_timeout``,
  reading and parsing; shell.py): on expiry, or over a cap, that channel is closed,
  what arrived is parsed, and the next poll starts a new shell; the driver calls
  inside are also bounded on the node by ``timeout`` (probe.py).
- ``run`` opens a fresh channel per command, wraps it in ``timeout`` on the node
  and closes the channel at the client deadline (never ``conn.run(timeout=)``,
  which leaves the command running).
- At most ``max_channels`` (8) channels per node, the probe shell included, so
  sshd's ``MaxSessions 10`` never refuses one; at most 8 handshakes in flight
  across all nodes, so ``MaxStartups 10:30:100`` never drops one.
- A failed connect is retried with exponential backoff and jitter; between tries
  a poll answers at once with the last error. A lost connection is retried on
  the next poll without delay.
"""
from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import random
import shlex
import socket
import time
from dataclasses import replace
from typing import Callable

import asyncssh

from console.clock import REAL_CLOCK, Clock, timeout_ignoring_stalls
from console.model import CommandResult, NodeSnapshot
from console.sources.ssh.options import SshOptions, parse_destination
from console import probe
from console.probe import DEFAULT_COMMAND_TIMEOUT_S, DEFAULT_LIMITS, DEFAULT_PROBE_TIMEOUT_S, ProbeLimits
from console.sources.capture import ProbeOutput, TooMuchOutput
from console.sources.parse import clip
from console.sources.shell import ShellSource
from console.sources.ssh.limits import MAX_HANDSHAKES_PER_SSHD, MAX_HANDSHAKES_TOTAL, ConnectLimiter
from console.sources.ssh.session import session_pids
from console.sources.ssh.trust import HostKeyFileError, HostTrust, host_port

__all__ = ["ConnectLimiter", "MAX_HANDSHAKES_PER_SSHD", "MAX_HANDSHAKES_TOTAL", "SshSource",
           "session_pids"]

log = logging.getLogger("gpu_incident.ssh")

#: keepalives a node may leave unanswered before the connection counts as lost
KEEPALIVE_COUNT_MAX = 3
#: extra seconds the client waits beyond a command's own timeout on the node
CLIENT_GRACE_S = 3.0
#: sshd frees a session a moment after its channel closes: a closed channel keeps its slot
#: this long, and a channel sshd still refuses ("open failed") is retried a few times
CHANNEL_SETTLE_S = 0.05
CHANNEL_OPEN_TRIES = 4
_READ_CHUNK = 1 << 16


class _Client(asyncssh.SSHClient):
    def __init__(self, trust: HostTrust, on_lost: Callable[[Exception | None], None]) -> None:
        self._trust = trust
        self._on_lost = on_lost

    def validate_host_public_key(self, host: str, addr: str, port: int, key: asyncssh.SSHKey) -> bool:
        return self._trust.check(host, addr, port, key)

    def connection_lost(self, exc: Exception | None) -> None:
        self._on_lost(exc)


#: SSH ciphers asked first: AES-GCM (the CPUs of GPU nodes and of the machines consoles run on do
#: AES in hardware: 5.6 us a 16 KiB packet here, against 33 us for chacha20-poly1305, which
#: asyncssh makes two cipher contexts a packet for); then the rest of asyncssh's own order. A
#: Ciphers line in the ssh config is used as it is.
PREFERRED_CIPHERS = (b"aes128-gcm@openssh.com", b"aes256-gcm@openssh.com")
_DEFAULT_CIPHERS: list[bytes] | None = None


def cipher_order(algs) -> list[bytes]:
    """``algs`` with the preferred ciphers it holds first."""
    first = [a for a in PREFERRED_CIPHERS if a in algs]
    return first + [a for a in algs if a not in first]


async def _default_ciphers() -> list[bytes]:
    """asyncssh's own order of ciphers (what it asks where nothing is configured)."""
    global _DEFAULT_CIPHERS
    if _DEFAULT_CIPHERS is None:
        plain = await asyncssh.SSHClientConnectionOptions.construct(host="localhost", config=[])
        _DEFAULT_CIPHERS = list(plain.encryption_algs)
    return _DEFAULT_CIPHERS


class _SetupError(Exception):
    """Options that cannot be used (identity or config file unreadable)."""


def _secs(value: float) -> str:
    return f"{value:g}"


#: connects to a node that reset the connection before the login (sshd's MaxStartups drop)
RESET_TRIES = 2


class SshSource(ShellSource):
    kind = "ssh"
    coalesce_output = True

    def __init__(self, target: str, options: SshOptions | None = None, *,
                 device_glob: str = probe.DEFAULT_DEVICE_GLOB,
                 probe_timeout: float = DEFAULT_PROBE_TIMEOUT_S, limits: ProbeLimits = DEFAULT_LIMITS,
                 clock: Clock = REAL_CLOCK) -> None:
        super().__init__(target, device_glob=device_glob, probe_timeout=probe_timeout, limits=limits)
        self.options = options or SshOptions()
        self.user, self.host, self.port = parse_destination(target)
        self.clock = clock
        self._conn: asyncssh.SSHClientConnection | None = None
        self._conn_opts: asyncssh.SSHClientConnectionOptions | None = None
        self._where = host_port(self.host, self.port or 22)
        self._login = f"{self.user}@{self._where}" if self.user else self._where
        self._connect_lock = asyncio.Lock()
        self._probe_lock = asyncio.Lock()
        self._slots = asyncio.Semaphore(self.options.max_channels)
        self._shell: asyncssh.SSHClientProcess | None = None
        #: (table shape, the shell's own PIDs, the session's PIDs) of the last poll
        self._own_memo: tuple | None = None
        self._shell_stderr: list[bytes] = []
        self._shell_drain: asyncio.Task | None = None
        self._failures = 0
        self._retry_at = 0.0
        self._last_error: str | None = None
        self._lost_reason: str | None = None
        self.connects = 0                   # successful connects, for the UI and tests

    # ------------------------------------------------------------ connection

    @property
    def connected(self) -> bool:
        return self._conn is not None

    def _kwargs(self) -> dict:
        o = self.options
        kw: dict = dict(host=self.host, connect_timeout=o.connect_timeout,
                        keepalive_interval=o.keepalive, keepalive_count_max=KEEPALIVE_COUNT_MAX,
                        password_auth=False, kbdint_auth=False)
        if self.port is not None:
            kw["port"] = self.port
        if self.user:
            kw["username"] = self.user
        if o.ssh_config:
            kw["config"] = [o.ssh_config]
        if o.identity:
            kw["client_keys"] = list(o.identity)
        return kw

    async def _options(self) -> asyncssh.SSHClientConnectionOptions:
        """The ssh config read once (aliases, User, Port, IdentityFile, ProxyJump)."""
        if self._conn_opts is None:
            try:
                opts = await asyncssh.SSHClientConnectionOptions.construct(**self._kwargs())
                if list(opts.encryption_algs) == await _default_ciphers():   # no Ciphers in the ssh config
                    opts = await asyncssh.SSHClientConnectionOptions.construct(
                        options=opts, encryption_algs=[a.decode() for a in cipher_order(opts.encryption_algs)])
            except (OSError, ValueError, asyncssh.Error) as exc:
                what = getattr(exc, "filename", None)
                reason = getattr(exc, "strerror", None) or str(exc)
                raise _SetupError(f"cannot use the SSH settings for {self._where}: "
                                  f"{what + ': ' if what else ''}{reason}") from None
            self._conn_opts = opts
            self._where = host_port(opts.host, opts.port)
            self._login = f"{opts.username}@{self._where}"
        return self._conn_opts

    async def _connect(self) -> asyncssh.SSHClientConnection:
        opts = await self._options()
        via = opts.tunnel or opts.proxy_command
        endpoint = repr(via) if via else (opts.host, opts.port)
        trust = HostTrust.for_options(self.options.known_hosts, self.options.accept_new_host_keys,
                                      opts.config)
        known = trust.load()
        conn_box: list[asyncssh.SSHClientConnection] = []

        def lost(exc: Exception | None) -> None:
            if conn_box and self._conn is conn_box[0]:
                self._connection_lost(exc)

        async with ConnectLimiter.for_loop().slot(endpoint):
            for attempt in range(RESET_TRIES):
                try:
                    conn = await asyncssh.connect(
                        self.host, self.port or (), options=opts,
                        config=[self.options.ssh_config] if self.options.ssh_config else (),
                        known_hosts=known, client_factory=lambda: _Client(trust, lost))
                    break
                except asyncssh.HostKeyNotVerifiable as exc:
                    raise _SetupError(trust.refusal(self._where, exc.reason)) from None
                except ConnectionResetError:
                    # sshd drops a connection at random once MaxStartups' start is reached (it
                    # counts a login until its own child reports it done, a moment after ours
                    # is): a reset before the login is tried again once, a moment later
                    if attempt + 1 == RESET_TRIES:
                        raise
                    await asyncio.sleep(random.uniform(0.1, 0.4))
            conn_box.append(conn)
            if trust.recorded:
                log.warning("%s: recorded new host key in %s", self._where, trust.record_file)
            return conn

    def _describe(self, exc: BaseException) -> str:
        where = self._where
        if isinstance(exc, (_SetupError, HostKeyFileError)):
            return str(exc)
        if isinstance(exc, asyncssh.PermissionDenied):
            offered = ([f"-i {', '.join(self.options.identity)}"] if self.options.identity
                       else ["the configured or default keys (~/.ssh/id_*)"])
            if os.environ.get("SSH_AUTH_SOCK"):
                offered.append("the agent's keys")
            return (f"authentication failed for {self._login}: the node accepted none of "
                    f"{' and '.join(offered)}")
        if isinstance(exc, (asyncio.TimeoutError, TimeoutError)):
            return (f"unreachable: no SSH answer from {where} within "
                    f"{_secs(self.options.connect_timeout)} s (connect timed out)")
        if isinstance(exc, ConnectionRefusedError):
            return f"unreachable: connection refused by {where} (no sshd listening?)"
        if isinstance(exc, socket.gaierror):
            return f"unreachable: cannot resolve {self.host} ({exc.strerror})"
        if isinstance(exc, asyncssh.DisconnectError):
            return f"unreachable: {where} closed the SSH connection ({clip(exc.reason or type(exc).__name__)})"
        if isinstance(exc, OSError):
            return f"unreachable: {where}: {exc.strerror or exc}"
        return f"unreachable: {where}: {clip(repr(exc))}"

    def _backoff(self) -> float:
        o = self.options
        delay = min(o.reconnect_max, o.reconnect_min * 2 ** max(self._failures - 1, 0))
        return delay / 2 + random.uniform(0, delay / 2)

    async def _ensure_connected(self) -> str | None:
        """None when connected, else the error line (the last one while backing off)."""
        if self._conn is not None:
            return None
        async with self._connect_lock:
            if self._conn is not None:
                return None
            if self.clock.monotonic() < self._retry_at and self._last_error:
                return self._last_error
            started = time.monotonic()
            try:
                conn = await self._connect()
            except Exception as exc:  # noqa: BLE001 - every failure is one line of data
                self._failures += 1
                self._last_error = self._describe(exc)
                self._retry_at = self.clock.monotonic() + self._backoff()
                log.info("%s: %s (retry in %.1f s)", self.name, self._last_error,
                         self._retry_at - self.clock.monotonic())
                return self._last_error
            self._conn, self._failures, self._last_error = conn, 0, None
            self._lost_reason = None
            self.connects += 1
            log.debug("%s: connected to %s in %.1f ms", self.name, self._login,
                      (time.monotonic() - started) * 1000)
            return None

    def _connection_lost(self, exc: Exception | None) -> None:
        reason = clip(str(exc)) if exc else "closed by the node"
        self._lost_reason = f"unreachable: connection to {self._where} lost ({reason})"
        self._last_error = self._lost_reason
        self._retry_at = 0.0           # try again on the next poll
        self._conn = None
        self._drop_shell()

    def _lost_or(self, fallback: str) -> str:
        return self._lost_reason or fallback

    # ------------------------------------------------------------ probe shell

    def _shell_token(self) -> object | None:
        return self._shell

    def _release_slot(self) -> None:
        try:
            asyncio.get_running_loop().call_later(CHANNEL_SETTLE_S, self._slots.release)
        except RuntimeError:            # no loop any more: nothing will wait for the slot
            self._slots.release()

    @contextlib.asynccontextmanager
    async def _slot(self):
        await self._slots.acquire()
        try:
            yield
        finally:
            self._release_slot()

    @staticmethod
    async def _open_channel(conn: asyncssh.SSHClientConnection, command: str, *,
                            binary: bool = False) -> asyncssh.SSHClientProcess:
        """A channel running ``command``; ``binary``: its streams carry bytes, not text."""
        text: dict = {"encoding": None} if binary else {"encoding": "utf-8", "errors": "replace"}
        for attempt in range(CHANNEL_OPEN_TRIES):
            try:
                return await conn.create_process(command, **text)
            except asyncssh.ChannelOpenError as exc:
                if exc.code != asyncssh.OPEN_CONNECT_FAILED or attempt == CHANNEL_OPEN_TRIES - 1:
                    raise
                await asyncio.sleep(CHANNEL_SETTLE_S * 2 ** attempt)
        raise AssertionError("unreachable")  # pragma: no cover

    async def _open_shell(self, conn: asyncssh.SSHClientConnection) -> asyncssh.SSHClientProcess:
        await self._slots.acquire()
        try:
            shell = await self._open_channel(conn, "exec sh", binary=True)
        except BaseException:
            self._release_slot()
            raise
        self._shell = shell
        self._shell_stderr = []
        self._shell_drain = asyncio.create_task(self._drain(shell, self._shell_stderr))
        return shell

    @staticmethod
    async def _drain(shell: asyncssh.SSHClientProcess, keep: list[bytes]) -> None:
        """Read the shell's stderr so a chatty command cannot stall the channel."""
        try:
            while chunk := await shell.stderr.read(_READ_CHUNK):
                keep.append(chunk)
                del keep[:-8]
        except (asyncssh.Error, OSError, asyncio.IncompleteReadError):
            pass

    def _drop_shell(self) -> None:
        shell, self._shell = self._shell, None
        if shell is None:
            return
        if self._shell_drain is not None:
            self._shell_drain.cancel()
            self._shell_drain = None
        try:
            shell.close()
        except Exception:  # noqa: BLE001 - the channel may already be gone
            pass
        self._release_slot()

    async def _exec_probe(self, script: str, mark: str, timeout: float) -> ProbeOutput:
        cap = self._capture(mark)
        started = time.monotonic()
        async with self._probe_lock:
            conn = self._conn
            if conn is None:
                return ProbeOutput(error=self._last_error or "unreachable: not connected")
            try:
                async with timeout_ignoring_stalls(timeout):    # loop lag is not the node's
                    shell = self._shell or await self._open_shell(conn)
                    shell.stdin.write(script.encode())
                    while not cap.complete:
                        chunk = await shell.stdout.read(_READ_CHUNK)
                        if not chunk:
                            raise EOFError(cap.data()[-200:].decode("utf-8", "replace"))
                        cap.feed(chunk)
            except TooMuchOutput as exc:
                self._drop_shell()
                log.warning("%s: %s", self.name, exc)
                return ProbeOutput(cap.before_cut(), error=str(exc))
            except TimeoutError:
                self._drop_shell()
                return ProbeOutput(cap.data(), timed_out=True)
            except (EOFError, asyncio.IncompleteReadError, asyncssh.Error, OSError) as exc:
                stderr = b"".join(self._shell_stderr).decode("utf-8", "replace")
                self._drop_shell()
                if self._conn is None or conn.is_closed():
                    if self._conn is conn:
                        self._connection_lost(exc if isinstance(exc, Exception) else None)
                    return ProbeOutput(error=self._lost_or(f"unreachable: connection to {self._where} lost"))
                why = clip(stderr) or clip(str(exc)) or type(exc).__name__
                return ProbeOutput(error=f"probe failed: the remote shell on {self._where} ended ({why})")
            except BaseException:
                self._drop_shell()
                raise
        log.debug("%s: probe %.1f ms, %d bytes", self.name, (time.monotonic() - started) * 1000, cap.size)
        return ProbeOutput(cap.data())

    async def poll(self) -> NodeSnapshot:
        try:
            error = await self._ensure_connected()
            if error is not None:
                return NodeSnapshot(name=self.name, taken_at=time.time(), error=error)
            snap = await super().poll()
            if snap.own_pids:
                memo = self._own_memo
                # the same shape of the table (no PID came or went, no parent changed:
                # proc_read.py counts it) has the same session
                shape = self._parse_cache.get("shape")
                if memo is None or memo[0] != shape or shape is None or memo[1] != snap.own_pids:
                    memo = self._own_memo = (shape, snap.own_pids, session_pids(snap))
                snap = replace(snap, own_pids=memo[2])
            return snap
        except Exception as exc:  # noqa: BLE001 - poll never raises
            log.exception("%s: poll failed", self.name)
            return NodeSnapshot(name=self.name, taken_at=time.time(),
                                error=f"probe failed: {clip(repr(exc))}")

    # ------------------------------------------------------------ commands

    async def _exec(self, command: str, timeout: float = DEFAULT_COMMAND_TIMEOUT_S) -> CommandResult:
        """One command on a fresh channel, bounded on the node and here."""
        started = time.monotonic()

        def result(rc: int | None, out: list[str], err: list[str], error: str | None) -> CommandResult:
            res = CommandResult(command, rc=rc, stdout="".join(out), stderr="".join(err),
                                duration_s=round(time.monotonic() - started, 3), error=error)
            log.debug("%s: ran %r: rc %s, %.3f s%s", self.name, command, rc, res.duration_s,
                      f", {error}" if error else "")
            return res

        try:
            error = await self._ensure_connected()
        except Exception as exc:  # noqa: BLE001
            error = f"unreachable: {clip(repr(exc))}"
        conn = self._conn
        if error is not None or conn is None:
            return result(None, [], [], error or self._lost_or("unreachable: not connected"))
        remote = f"timeout -k 2 {_secs(timeout)} sh -c {shlex.quote(command)}"
        out: list[str] = []
        err: list[str] = []
        proc: asyncssh.SSHClientProcess | None = None

        async def pump(stream: asyncssh.SSHReader, acc: list[str]) -> None:
            while chunk := await stream.read(_READ_CHUNK):
                acc.append(chunk)

        try:
            async with asyncio.timeout(timeout + CLIENT_GRACE_S):
                async with self._slot():
                    proc = await self._open_channel(conn, remote)
                    try:
                        proc.stdin.write_eof()
                        await asyncio.gather(pump(proc.stdout, out), pump(proc.stderr, err))
                        await proc.wait_closed()
                    finally:
                        proc.close()
        except TimeoutError:
            if proc is not None:
                try:
                    proc.send_signal("KILL")
                except Exception:  # noqa: BLE001
                    pass
            return result(None, out, err, f"timed out after {_secs(timeout)} s (channel closed)")
        except asyncssh.ChannelOpenError as exc:
            return result(None, out, err, f"could not open an SSH channel to {self._where}: {clip(exc.reason)}")
        except (asyncssh.Error, OSError, asyncio.IncompleteReadError) as exc:
            if conn.is_closed():
                return result(None, out, err, self._lost_or(f"unreachable: connection to {self._where} lost"))
            return result(None, out, err, f"command failed on {self._where}: {clip(str(exc)) or type(exc).__name__}")
        rc = proc.returncode if proc is not None else None
        if rc is None:
            return result(None, out, err, self._lost_or(f"unreachable: connection to {self._where} lost"))
        if rc in (124, 137) and time.monotonic() - started >= timeout * 0.9:
            return result(rc, out, err, f"timed out after {_secs(timeout)} s (stopped on the node)")
        return result(rc, out, err, None)

    async def close(self) -> None:
        self._drop_shell()
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()
            try:
                await asyncio.wait_for(conn.wait_closed(), 2.0)
            except (asyncio.TimeoutError, asyncssh.Error, OSError):
                pass
