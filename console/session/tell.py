"""Telling someone that the watch opened an incident: ``--notify CMD`` runs the operator's command
with the incident's JSON on stdin; ``--webhook URL`` POSTs it. Neither ever blocks the watch, nor
its exit:

- the command runs in the background, bounded (NOTIFY_TIMEOUT_S, then its process group is
  killed); its output is read to its end but at most NOTIFY_OUTPUT_CAP bytes are kept (the rest
  is drained and dropped), so a command that prints gigabytes costs the watch no memory;
- each webhook try is a POST on a daemon thread of its own, started when the try starts, with one
  deadline (WEBHOOK_TIMEOUT_S) from that start over the whole of it: connecting, sending, and the
  whole answer's status line and headers — not a read's timeout, so a receiver that drips its
  answer is cut (its connection shut down) at the deadline and the next try goes out. At most
  WEBHOOK_CONCURRENCY tries are in flight; one that waits its turn has not started its clock,
  so a burst loses no page and sends none twice. WEBHOOK_TRIES tries, WEBHOOK_BACKOFF_S apart
  (doubled each time);
- :meth:`Teller.close` gives what is in flight CLOSE_TIMEOUT_S, then stops it (the command's
  group killed, the POST's connection cut) and returns; the threads are daemons, never joined,
  so a stuck DNS lookup or receiver never holds the process at exit (SIGTERM under systemd).

A failure is one line on stderr, made printable (console/textsafe.py): what the command printed or
a receiver's HTTP reason phrase never reaches the terminal as escape sequences. The watch goes on.

The command is split like a shell would split it (shlex) and run without a shell: what the
incident JSON holds reaches it on stdin only, never its arguments. It is checked at start
(:func:`notify_argv`): a command not on PATH, or a path that is not an executable file, is a
usage error then, not a surprise at the first incident.
"""
from __future__ import annotations

import asyncio
import json
import logging
import os
import shlex
import shutil
import signal
import socket
import sys
import threading
import urllib.error
import urllib.request
from typing import Any, Callable
from urllib.parse import urlsplit

from console.textsafe import one_line

log = logging.getLogger("gpu_incident.tell")

NOTIFY_TIMEOUT_S = 10.0
#: bytes of the command's output kept (its last ones); the rest is read and dropped
NOTIFY_OUTPUT_CAP = 64 * 1024
#: one webhook try, from its own start: connect, send, the answer's status line and headers
WEBHOOK_TIMEOUT_S = 5.0
#: the pause before a webhook's second try, doubled before each later one
WEBHOOK_BACKOFF_S = 1.0
WEBHOOK_TRIES = 3
#: webhook tries in flight at once (each on its own daemon thread); the others wait their turn
WEBHOOK_CONCURRENCY = 16
#: how long close() lets a page in flight finish before it stops it
CLOSE_TIMEOUT_S = 5.0
#: characters of a failure's detail on its line
DETAIL_LIMIT = 200


def notify_argv(command: str) -> list[str]:
    """``--notify CMD`` checked at start: ValueError (one line) for one that cannot run — it cannot
    be split, it is empty, it names no command on PATH, or a path that is not an executable file."""
    try:
        argv = shlex.split(command)
    except ValueError as exc:
        raise ValueError(f"--notify: {exc}") from None
    if not argv:
        raise ValueError("--notify: an empty command")
    exe = argv[0]
    shown = one_line(repr(exe), DETAIL_LIMIT)
    if os.sep in exe:
        if not os.path.exists(exe):
            raise ValueError(f"--notify: {shown} does not exist")
        if not os.path.isfile(exe) or not os.access(exe, os.X_OK):
            raise ValueError(f"--notify: {shown} is not an executable file")
    elif shutil.which(exe) is None:
        raise ValueError(f"--notify: no command {shown} on PATH")
    return argv


def webhook_url(url: str) -> str:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"--webhook: an http:// or https:// URL, not {url!r}")
    return url


class Teller:
    def __init__(self, *, notify: list[str] | None = None, webhook: str | None = None,
                 warn: Callable[[str], None] | None = None) -> None:
        self.notify = notify
        self.webhook = webhook
        self.warn = warn or (lambda line: print(line, file=sys.stderr, flush=True))
        self._slots: asyncio.Semaphore | None = None
        self.tasks: set[asyncio.Task] = set()
        self.sent = 0
        self.failed = 0

    def _say(self, line: str) -> None:
        """One printable line: nothing a command or a receiver wrote reaches stderr raw."""
        self.warn(one_line(line))

    def __call__(self, doc: dict) -> None:
        """Start telling (returns at once)."""
        data = (json.dumps(doc, indent=1) + "\n").encode()
        loop = asyncio.get_running_loop()
        jobs = [self._notify(self.notify, data)] if self.notify else []
        if self.webhook:
            jobs.append(self._webhook(self.webhook, data))
        for job in jobs:
            task = loop.create_task(job)
            self.tasks.add(task)
            task.add_done_callback(self.tasks.discard)

    # ---------------------------------------------------------------- --notify

    async def _notify(self, argv: list[str], data: bytes) -> None:
        try:
            proc = await asyncio.create_subprocess_exec(
                *argv, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.STDOUT, start_new_session=True)
        except OSError as exc:
            self.failed += 1
            self._say(f"gpu-incident watch: --notify could not start: {exc.strerror or exc}")
            return
        try:
            out = await asyncio.wait_for(_talk(proc, data), NOTIFY_TIMEOUT_S)
        except (asyncio.TimeoutError, asyncio.CancelledError) as exc:
            _kill_group(proc.pid)
            await proc.wait()
            self.failed += 1
            if isinstance(exc, asyncio.CancelledError):
                raise
            self._say(f"gpu-incident watch: --notify did not finish within {NOTIFY_TIMEOUT_S:g} s: stopped it")
            return
        if proc.returncode == 0:
            self.sent += 1
        else:
            self.failed += 1
            tail = " ".join(out.decode(errors="replace").split())[-DETAIL_LIMIT:]
            self._say(f"gpu-incident watch: --notify exited {proc.returncode}" + (f": {tail}" if tail else ""))

    # ---------------------------------------------------------------- --webhook

    async def _webhook(self, url: str, data: bytes) -> None:
        if self._slots is None:
            self._slots = asyncio.Semaphore(WEBHOOK_CONCURRENCY)
        why = ""
        for attempt in range(WEBHOOK_TRIES):
            if attempt:
                await asyncio.sleep(WEBHOOK_BACKOFF_S * 2 ** (attempt - 1))
            async with self._slots:             # the try's clock starts once it has its turn
                post = _Post(url, data)
                try:
                    await asyncio.wait_for(post.start(), WEBHOOK_TIMEOUT_S)
                    self.sent += 1
                    return
                except asyncio.TimeoutError:
                    why = f"no whole answer within {WEBHOOK_TIMEOUT_S:g} s (cut)"
                except urllib.error.HTTPError as exc:
                    why = f"HTTP {exc.code} {exc.reason}"
                    exc.close()
                except urllib.error.URLError as exc:
                    why = str(exc.reason)
                except Exception as exc:        # noqa: BLE001 - OSError, http.client's, a refused redirect
                    why = str(exc) or type(exc).__name__
                finally:
                    post.abort()                # a try that overran: its connection is shut down now
        self.failed += 1
        self._say(f"gpu-incident watch: --webhook failed {WEBHOOK_TRIES} times: {one_line(why, DETAIL_LIMIT)}")

    async def close(self) -> None:
        """Let what is in flight finish for CLOSE_TIMEOUT_S, then stop it; returns within about
        CLOSE_TIMEOUT_S + 1 s whatever a command or a receiver does."""
        if self.tasks:
            await asyncio.wait(set(self.tasks), timeout=CLOSE_TIMEOUT_S)
        for task in list(self.tasks):
            task.cancel()
        if self.tasks:
            await asyncio.wait(set(self.tasks), timeout=1.0)


async def _talk(proc: asyncio.subprocess.Process, data: bytes) -> bytes:
    """Give the command its stdin, read its output to the end keeping the last NOTIFY_OUTPUT_CAP
    bytes, wait for it."""
    stdin, stdout = proc.stdin, proc.stdout
    assert stdin is not None and stdout is not None

    async def feed() -> None:
        try:
            stdin.write(data)
            await stdin.drain()
        except (BrokenPipeError, ConnectionResetError):     # it left without reading stdin
            pass
        finally:
            try:
                stdin.close()
            except (BrokenPipeError, ConnectionResetError):
                pass
    feeding = asyncio.ensure_future(feed())
    kept = bytearray()
    try:
        while chunk := await stdout.read(65536):
            kept += chunk
            if len(kept) > NOTIFY_OUTPUT_CAP:
                del kept[:len(kept) - NOTIFY_OUTPUT_CAP]
        await feeding
        await proc.wait()
    finally:
        feeding.cancel()
    return bytes(kept)


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None          # a webhook that redirects is refused, not followed


class _Post:
    """One webhook POST on a daemon thread of its own. Its connection is kept (a second descriptor
    of the same socket) from the moment it is made, so :meth:`abort` can shut it down from outside:
    a read blocked on a dripping receiver returns at once, whatever the socket's own timeout."""

    def __init__(self, url: str, data: bytes) -> None:
        self.url = url
        self.data = data
        self._lock = threading.Lock()
        self._handle: socket.socket | None = None
        self._aborted = False

    def start(self) -> asyncio.Future:
        loop = asyncio.get_running_loop()
        fut: asyncio.Future = loop.create_future()

        def settle(ok: bool, value: Any) -> None:
            if not fut.done():
                fut.set_result(value) if ok else fut.set_exception(value)

        def work() -> None:
            try:
                self._run()
                result: tuple[bool, Any] = (True, None)
            except BaseException as exc:        # noqa: BLE001 - handed to the loop as they are
                result = (False, exc)
            try:
                loop.call_soon_threadsafe(settle, *result)
            except RuntimeError:                # the loop is gone: nobody waits for this try
                pass
        threading.Thread(target=work, name="webhook", daemon=True).start()
        return fut

    def keep(self, sock: socket.socket) -> None:
        """The connection just made (plain or TLS): a second descriptor of its socket is kept for
        :meth:`abort`; one made after the deadline is closed at once."""
        with self._lock:
            if self._aborted:
                sock.close()
                raise TimeoutError("the try's deadline passed")
            self._handle = socket.socket(fileno=os.dup(sock.fileno()))

    def _release(self) -> None:
        with self._lock:
            if self._handle is not None:
                self._handle.close()
                self._handle = None

    def abort(self) -> None:
        with self._lock:
            self._aborted = True
            if self._handle is not None:
                try:
                    self._handle.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                self._handle.close()
                self._handle = None

    def _run(self) -> None:
        try:
            opener = urllib.request.build_opener(_NoRedirect, _Http(self), _Https(self))
            req = urllib.request.Request(self.url, data=self.data, method="POST",
                                         headers={"Content-Type": "application/json",
                                                  "User-Agent": "gpu-incident watch"})
            with opener.open(req, timeout=WEBHOOK_TIMEOUT_S) as resp:   # the status is enough: no body read
                if not 200 <= resp.status < 300:
                    raise ValueError(f"HTTP {resp.status} {resp.reason}")
        finally:
            self._release()


class _Hooked:
    """urllib's handler whose connections hand their socket to :meth:`_Post.keep` once made (the
    public ``connect()`` and ``sock`` of http.client's connections: proxies, TLS and the rest as
    urllib does them)."""

    def __init__(self, post: _Post) -> None:
        super().__init__()
        self._post = post

    def do_open(self, http_class: Any, req: Any, **kwargs: Any) -> Any:
        post = self._post

        class Connection(http_class):           # type: ignore[misc, valid-type]
            def connect(self) -> None:
                super().connect()
                post.keep(self.sock)
        return super().do_open(Connection, req, **kwargs)   # type: ignore[misc]


class _Http(_Hooked, urllib.request.HTTPHandler):
    pass


class _Https(_Hooked, urllib.request.HTTPSHandler):
    pass


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)      # its own session: the command and whatever it started
    except (ProcessLookupError, PermissionError):
        pass
