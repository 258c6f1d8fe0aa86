"""Telling someone that the watch opened an incident: ``--notify CMD`` runs the operator's command
with the incident's JSON on stdin; ``--webhook URL`` POSTs it. Neither ever blocks the watch:
each runs in the background, bounded (NOTIFY_TIMEOUT_S, then the command's process group is
killed; WEBHOOK_TIMEOUT_S a try, WEBHOOK_TRIES tries), on a thread of its own (a slow receiver
never delays a poll, a signal or a parse). A failure is one line on stderr; the watch goes on.

The command is split like a shell would split it (shlex) and run without a shell: what the
incident JSON holds reaches it on stdin only, never its arguments.
"""
from __future__ import annotations

import asyncio
import json
import logging
import os
import shlex
import signal
import sys
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable
from urllib.parse import urlsplit

log = logging.getLogger("gpu_incident.tell")

NOTIFY_TIMEOUT_S = 10.0
WEBHOOK_TIMEOUT_S = 5.0
#: the pause before a webhook's second try, doubled before each later one
WEBHOOK_BACKOFF_S = 1.0
WEBHOOK_TRIES = 3
OUTPUT_LIMIT = 4096


def notify_argv(command: str) -> list[str]:
    """``--notify CMD`` checked at start: ValueError (one line) for one that cannot run."""
    try:
        argv = shlex.split(command)
    except ValueError as exc:
        raise ValueError(f"--notify: {exc}") from None
    if not argv:
        raise ValueError("--notify: an empty command")
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
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="webhook")
        self.tasks: set[asyncio.Task] = set()
        self.sent = 0
        self.failed = 0

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

    async def _notify(self, argv: list[str], data: bytes) -> None:
        try:
            proc = await asyncio.create_subprocess_exec(
                *argv, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.STDOUT, start_new_session=True)
        except OSError as exc:
            self.failed += 1
            self.warn(f"gpu-incident watch: --notify could not start: {exc.strerror or exc}")
            return
        try:
            out, _ = await asyncio.wait_for(proc.communicate(data), NOTIFY_TIMEOUT_S)
        except (asyncio.TimeoutError, asyncio.CancelledError) as exc:
            _kill_group(proc.pid)
            await proc.wait()
            self.failed += 1
            if isinstance(exc, asyncio.CancelledError):
                raise
            self.warn(f"gpu-incident watch: --notify did not finish within {NOTIFY_TIMEOUT_S:g} s: stopped it")
            return
        except (BrokenPipeError, ConnectionResetError):     # it left without reading stdin
            out = b""
            await proc.wait()
        if proc.returncode == 0:
            self.sent += 1
        else:
            self.failed += 1
            tail = " ".join((out or b"")[-OUTPUT_LIMIT:].decode(errors="replace").split())[-200:]
            self.warn(f"gpu-incident watch: --notify exited {proc.returncode}" + (f": {tail}" if tail else ""))

    async def _webhook(self, url: str, data: bytes) -> None:
        loop = asyncio.get_running_loop()
        why = ""
        for attempt in range(WEBHOOK_TRIES):
            try:
                # one deadline for the whole answer (a socket's timeout is per read: a server that
                # drips bytes would hold it for ever); a post that overruns keeps only its own thread
                await asyncio.wait_for(loop.run_in_executor(self._pool, _post, url, data),
                                       WEBHOOK_TIMEOUT_S * 2)
                self.sent += 1
                return
            except asyncio.TimeoutError:
                why = f"no answer within {WEBHOOK_TIMEOUT_S * 2:g} s"
            except (OSError, ValueError) as exc:
                why = str(getattr(exc, "reason", None) or exc)
            await asyncio.sleep(WEBHOOK_BACKOFF_S * 2 ** attempt)
        self.failed += 1
        self.warn(f"gpu-incident watch: --webhook failed {WEBHOOK_TRIES} times: {why[:200]}")

    async def close(self) -> None:
        if self.tasks:
            await asyncio.wait(set(self.tasks), timeout=NOTIFY_TIMEOUT_S + 1)
        for task in self.tasks:
            task.cancel()
        self._pool.shutdown(wait=False, cancel_futures=True)


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None          # a webhook that redirects is refused, not followed


_OPENER = urllib.request.build_opener(_NoRedirect)


def _post(url: str, data: bytes) -> None:
    req = urllib.request.Request(url, data=data, method="POST",
                                 headers={"Content-Type": "application/json", "User-Agent": "gpu-incident watch"})
    with _OPENER.open(req, timeout=WEBHOOK_TIMEOUT_S) as resp:     # the status is enough: no body read
        if not 200 <= resp.status < 300:
            raise ValueError(f"HTTP {resp.status}")


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)      # its own session: the command and whatever it started
    except (ProcessLookupError, PermissionError):
        pass
