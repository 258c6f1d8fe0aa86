"""Telling someone, and the metrics port, against hostile peers (issue 31, items 3, 9, 10, 11, 14):
real HTTP receivers on 127.0.0.1 (http.server, raw sockets), real notify commands, real
connections to a real metrics port, and the real `gpu-incident watch` process where only it shows
the fault (exit on SIGTERM, exit 2 at start)."""
from __future__ import annotations

import asyncio
import errno
import http.server
import json
import os
import select
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from conftest import gpu_incident_cmd
from console.session import metrics, tell
from tests.polling import eventually, until

ROOT = Path(__file__).resolve().parents[1]


def python(code: str, *args: str, **kwargs) -> subprocess.Popen:
    """A Python of its own running ``code`` (the console importable), pipes on its stdio."""
    return subprocess.Popen([sys.executable, "-c", textwrap.dedent(code), *args], cwd=ROOT, text=True,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, **kwargs)


# ---------------------------------------------------------------- receivers

class SlowReceiver(http.server.ThreadingHTTPServer):
    """Answers every POST 200 after ``delay`` seconds; keeps every body it was given."""
    daemon_threads = True

    def __init__(self, delay: float) -> None:
        self.delay = delay
        self.got: list[dict] = []
        self.lock = threading.Lock()

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(h) -> None:             # noqa: N805
                body = h.rfile.read(int(h.headers["Content-Length"]))
                with self.lock:
                    self.got.append(json.loads(body))
                time.sleep(self.delay)
                h.send_response(200)
                h.send_header("Content-Length", "0")
                h.end_headers()

            def log_message(h, *args) -> None:   # noqa: N805
                pass
        super().__init__(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/hook"

    def stop(self) -> None:
        self.shutdown()
        self.server_close()


class RawReceiver:
    """A raw-socket receiver: reads each request whole, then ``answer(conn)`` (in a thread per
    connection). Records, per connection, when the request was in and when the sender hung up."""

    def __init__(self, answer) -> None:
        self.answer = answer
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.conns: list[dict] = []
        self.lock = threading.Lock()
        self.done = threading.Event()
        threading.Thread(target=self._serve, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.sock.getsockname()[1]}/hook"

    def _serve(self) -> None:
        while not self.done.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._one, args=(conn,), daemon=True).start()

    def _one(self, conn: socket.socket) -> None:
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = conn.recv(65536)
            if not chunk:
                conn.close()
                return
            data += chunk
        head, body = data.split(b"\r\n\r\n", 1)
        length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n")
                      if line.lower().startswith(b"content-length:"))
        while len(body) < length:
            body += conn.recv(65536)
        record = {"in": time.monotonic(), "gone": None, "body": body}
        with self.lock:
            self.conns.append(record)
        try:
            self.answer(conn)
        except OSError:
            pass
        record["gone"] = time.monotonic()
        conn.close()

    def stop(self) -> None:
        self.done.set()
        self.sock.close()


def drip(conn: socket.socket) -> None:
    """Promises an answer and drips it a byte every 50 ms, for ever (until the sender hangs up)."""
    conn.sendall(b"HTTP/1.1 200 OK\r\nX-Drip: ")
    while True:
        time.sleep(0.05)
        conn.sendall(b"x")
        conn.setblocking(False)            # the sender hung up: a read says so at once
        try:
            if conn.recv(1) == b"":
                return
        except BlockingIOError:
            pass
        finally:
            conn.setblocking(True)


# ---------------------------------------------------------------- item 3: webhooks

async def test_a_burst_of_20_pages_to_a_slow_receiver_each_arrives_exactly_once(monkeypatch):
    """20 incidents at once, a receiver that answers in 2 s: each try's deadline starts with its
    own POST (not while it waits its turn), so none times out in a queue, none is retried after
    it went out, none is lost."""
    receiver = SlowReceiver(2.0)
    warnings: list[str] = []
    teller = tell.Teller(webhook=receiver.url, warn=warnings.append)
    try:
        for n in range(20):
            teller({"incident": f"i{n:02d}"})
        assert await eventually(lambda: teller.sent + teller.failed == 20, 40), (teller.sent, warnings)
        await asyncio.sleep(0.5)                       # nothing more arrives late
        got = sorted(doc["incident"] for doc in receiver.got)
        assert got == [f"i{n:02d}" for n in range(20)], got
        assert teller.sent == 20 and teller.failed == 0 and warnings == []
    finally:
        await teller.close()
        receiver.stop()


async def test_a_dripping_receiver_is_cut_at_the_deadline_and_every_try_is_sent(monkeypatch):
    """A receiver that promises an answer and drips it: each try is abandoned at its own
    deadline (the whole answer's, not a read's) with its connection hung up, and the next try
    goes out; close() returns within its bound."""
    monkeypatch.setattr(tell, "WEBHOOK_TIMEOUT_S", 0.5)
    monkeypatch.setattr(tell, "WEBHOOK_BACKOFF_S", 0.05)
    monkeypatch.setattr(tell, "WEBHOOK_TRIES", 3)
    receiver = RawReceiver(drip)
    warnings: list[str] = []
    teller = tell.Teller(webhook=receiver.url, warn=warnings.append)
    try:
        teller({"incident": "x"})
        assert await eventually(lambda: warnings, 20), receiver.conns
        assert "--webhook failed 3 times" in warnings[0] and "0.5 s" in warnings[0], warnings
        assert len(receiver.conns) == 3, "every try was sent"
        assert await eventually(lambda: all(c["gone"] for c in receiver.conns), 5), "each try hung up"
        for c in receiver.conns:
            assert 0.4 <= c["gone"] - c["in"] < 1.5, c["gone"] - c["in"]
        assert {json.loads(c["body"])["incident"] for c in receiver.conns} == {"x"}
    finally:
        t0 = time.monotonic()
        await teller.close()
        assert time.monotonic() - t0 < 2
        receiver.stop()


async def test_close_returns_within_its_bound_while_a_receiver_drips(monkeypatch):
    monkeypatch.setattr(tell, "CLOSE_TIMEOUT_S", 0.5)
    receiver = RawReceiver(drip)
    teller = tell.Teller(webhook=receiver.url, warn=lambda line: None)
    try:
        teller({"incident": "x"})
        assert await eventually(lambda: receiver.conns)
        t0 = time.monotonic()
        await teller.close()
        assert time.monotonic() - t0 < 0.5 + 1.5
        assert await eventually(lambda: receiver.conns[0]["gone"], 5), "the try in flight hung up"
    finally:
        receiver.stop()


def test_the_watch_exits_on_sigterm_while_a_receiver_drips(tmp_path):
    """The real `gpu-incident watch`: its webhook dripped to, SIGTERM ends it within the close
    bound (1 s here) — no worker thread it must wait for. Before, it was still running 40 s later."""
    receiver = RawReceiver(drip)
    try:
        p = python("""
            import sys
            from console.session import tell
            tell.CLOSE_TIMEOUT_S = 1.0
            from console.cli import main
            sys.exit(main(sys.argv[1:]))
            """, "watch", "demo:hidden-holders", "--interval", "0.2", "--incident-dir", str(tmp_path / "inc"),
                   "--webhook", receiver.url)
        try:
            assert until(lambda: receiver.conns, 30), p.stderr.read() if p.poll() is not None else "no POST"
            time.sleep(0.3)
            p.send_signal(signal.SIGTERM)
            t0 = time.monotonic()
            out, err = p.communicate(timeout=15)
            assert p.returncode == 0 and out.rstrip().endswith("gpu-incident watch: stopped"), (out, err)
            assert time.monotonic() - t0 < 8
            assert "Traceback" not in err
        finally:
            if p.poll() is None:
                p.kill()
                p.wait()
    finally:
        receiver.stop()


# ---------------------------------------------------------------- item 9: notify output

def test_a_notify_that_prints_far_more_is_read_to_its_end_and_kept_to_a_cap():
    """200 MB of output: drained to the command's own exit (not killed), at most 64 KiB kept —
    the watch's memory does not grow with it (before: 2x the output)."""
    p = python("""
        import asyncio
        from console.session import tell
        async def main():
            said = []
            t = tell.Teller(notify=["sh", "-c", "cat >/dev/null; head -c 200000000 /dev/zero | tr '\\\\0' y;"
                                                " printf '\\\\nthe real error\\\\n'; exit 4"], warn=said.append)
            t({"incident": "x"})
            while not said:
                await asyncio.sleep(0.05)
            await t.close()
            print(said[0])
            # this process's own peak (VmHWM); ru_maxrss would carry the parent's from before exec
            print(next(int(ln.split()[1]) for ln in open("/proc/self/status") if ln.startswith("VmHWM:")))
        asyncio.run(main())
        """)
    out, err = p.communicate(timeout=60)
    assert p.returncode == 0, err
    said, maxrss_kib = out.splitlines()
    assert "--notify exited 4: " in said and said.endswith("the real error"), said
    assert int(maxrss_kib) < 120 * 1024, f"{int(maxrss_kib) // 1024} MiB"
    assert tell.NOTIFY_OUTPUT_CAP == 64 * 1024


# ---------------------------------------------------------------- item 10: escape sequences

async def test_escape_sequences_in_notify_output_reach_stderr_printable(capsys):
    teller = tell.Teller(notify=["sh", "-c", r"cat >/dev/null; printf 'bad token \033]0;pwned\007\033[2J\033[31m!\r\n'; exit 1"])
    teller({"incident": "x"})
    assert await eventually(lambda: teller.failed == 1)
    await teller.close()
    err = capsys.readouterr().err
    assert "\x1b" not in err and "\x07" not in err and "\r" not in err, repr(err)
    assert "exited 1: bad token \\x1b]0;pwned\\x07\\x1b[2J\\x1b[31m!" in err, err


async def test_escape_sequences_in_a_webhooks_reason_phrase_reach_stderr_printable(capsys, monkeypatch):
    monkeypatch.setattr(tell, "WEBHOOK_TRIES", 1)

    def hostile(conn: socket.socket) -> None:
        conn.sendall(b"HTTP/1.1 503 \x1b]0;owned\x07\x1b[2Jgone\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
    receiver = RawReceiver(hostile)
    teller = tell.Teller(webhook=receiver.url)
    try:
        teller({"incident": "x"})
        assert await eventually(lambda: teller.failed == 1)
    finally:
        await teller.close()
        receiver.stop()
    err = capsys.readouterr().err
    assert "\x1b" not in err and "\x07" not in err, repr(err)
    assert "HTTP 503 \\x1b]0;owned\\x07\\x1b[2Jgone" in err, err
    assert len(err.splitlines()) == 1


# ---------------------------------------------------------------- item 11: the metrics port

SERVE = """
    import asyncio, os, resource, sys
    from console.session import metrics
    async def main():
        server = await metrics.serve(0, lambda: "gpu_incident_incidents_opened_total 0\\n")
        print(server.sockets[0].getsockname()[1], flush=True)
        loop = asyncio.get_running_loop()
        fillers = []
        def fill():                          # every descriptor this process may have, in use
            try:
                while True:
                    fillers.append(os.open("/dev/null", os.O_RDONLY))
            except OSError:
                pass
        while True:
            line = await loop.run_in_executor(None, sys.stdin.readline)
            if line == "fill\\n":
                resource.setrlimit(resource.RLIMIT_NOFILE, (256, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
                fill()
            elif line == "free\\n":
                while fillers:
                    os.close(fillers.pop())
            elif not line:
                return
            print("ok", flush=True)
    asyncio.run(main())
    """


def line(p: subprocess.Popen, bound_s: float = 20) -> str:
    """The next line the process prints, or "" when none comes within ``bound_s``."""
    ready, _, _ = select.select([p.stdout], [], [], bound_s)
    return p.stdout.readline() if ready else ""


def ended(p: subprocess.Popen) -> None:
    """Its stdin closed (it returns), killed if it does not."""
    try:
        p.stdin.close()
        p.wait(timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        p.kill()
        p.wait()


def fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def scrape(port: int, timeout: float = 10) -> str:
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(b"GET /metrics HTTP/1.0\r\n\r\n")
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    return data.decode()


def test_idle_connections_cannot_exhaust_the_watchs_descriptors():
    """300 connections that never send a request: the server holds at most MAX_CONNECTIONS of
    them at once (the rest wait in the kernel), closes each idle one after its short deadline,
    and answers a scrape once they are gone. Before: one descriptor per connection, for 5 s."""
    p = python(SERVE)
    clients: list[socket.socket] = []
    try:
        port = int(line(p))
        base = fds(p.pid)
        for _ in range(300):
            c = socket.socket()
            c.setblocking(False)
            c.connect_ex(("127.0.0.1", port))
            clients.append(c)
        time.sleep(1.0)
        held = fds(p.pid) - base
        assert held <= getattr(metrics, "MAX_CONNECTIONS", 16), f"{held} connections held at once"
        for c in clients:
            c.close()
        idle = socket.create_connection(("127.0.0.1", port), timeout=30)
        t0 = time.monotonic()
        assert idle.recv(1) == b"", "an idle connection is closed, never answered"
        assert time.monotonic() - t0 < getattr(metrics, "REQUEST_TIMEOUT_S", 2) + 8
        idle.close()
        assert scrape(port).endswith("gpu_incident_incidents_opened_total 0\n")
    finally:
        for c in clients:
            c.close()
        ended(p)


def test_a_watch_out_of_descriptors_says_so_once_per_episode_without_a_traceback():
    """The process out of descriptors (every one in use): a connection cannot be accepted — one
    line on stderr for the episode, no traceback; once descriptors are free the waiting scrape is
    answered; a second episode, a second line. Before: a traceback every second."""
    p = python(SERVE)
    try:
        port = int(line(p))
        for episode in range(2):
            p.stdin.write("fill\n")
            p.stdin.flush()
            assert line(p) == "ok\n"
            waiting = socket.create_connection(("127.0.0.1", port), timeout=20)
            waiting.sendall(b"GET /metrics HTTP/1.0\r\n\r\n")
            time.sleep(2.5)                              # refused for a while: several tries to accept
            p.stdin.write("free\n")
            p.stdin.flush()
            assert line(p) == "ok\n", "the server's loop kept turning"
            answer = b""
            while chunk := waiting.recv(65536):
                answer += chunk
            waiting.close()
            assert answer.startswith(b"HTTP/1.0 200 OK") and answer.endswith(b"opened_total 0\n")
        ended(p)
        err = p.stderr.read()
        assert "Traceback" not in err, err
        lines = err.splitlines()
        assert len(lines) == 2, err
        assert all("metrics port" in x and os.strerror(errno.EMFILE) in x for x in lines), lines
    finally:
        ended(p)


# ---------------------------------------------------------------- item 14: --notify checked at start

@pytest.mark.parametrize("case", ["missing", "absent-path", "not-executable", "directory"])
def test_a_notify_command_that_cannot_run_is_a_usage_error_at_start(tmp_path, case):
    plain = tmp_path / "page-oncall"
    plain.write_text("#!/bin/sh\ncat\n")
    plain.chmod(0o644)
    notify = {"missing": "no-such-page-oncall-cmd --urgent", "absent-path": "/nonexistent/page-oncall",
              "not-executable": f"{plain} --urgent", "directory": str(tmp_path)}[case]
    r = subprocess.run([*gpu_incident_cmd(), "watch", "demo:hidden-holders", "--incident-dir", str(tmp_path / "inc"),
                        "--notify", notify], capture_output=True, text=True, timeout=30)
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert len(r.stderr.splitlines()) == 1 and r.stderr.startswith("gpu-incident: --notify: "), r.stderr
    assert r.stdout == "" and not (tmp_path / "inc").exists(), "nothing watched"


def test_a_notify_on_path_or_by_an_executable_path_is_accepted(tmp_path):
    page = tmp_path / "page-oncall"
    page.write_text("#!/bin/sh\ncat\n")
    page.chmod(0o755)
    assert tell.notify_argv(f"{page} --urgent") == [str(page), "--urgent"]
    assert tell.notify_argv("sh -c 'cat > /dev/null'") == ["sh", "-c", "cat > /dev/null"]
