"""The watch's state as Prometheus text (``--metrics-port P``, on 127.0.0.1 only), so an existing
Alertmanager can page on it::

    gpu_incident_open{node="gpu07",kind="ghost-memory"} 1      one per open cause
    gpu_incident_node_up{node="gpu07"} 1                        the node's last poll answered
    gpu_incident_incidents_opened_total 3
    gpu_incident_notify_failures_total 0
    gpu_incident_time_to_free_seconds_bucket{after="sigkill",le="30"} 11   every time-to-free kept

Label values are escaped as the exposition format says (backslash, quote, newline), so a node
name cannot forge a line. Any request gets the page; the answer is bounded and the connection
closed.

Any local user can connect to the port, and the watch runs as root: the server never holds more
than MAX_CONNECTIONS connections at once (it accepts no more until one ends; the others wait in
the kernel's queue, costing the watch no descriptor), a connection whose request has not arrived
within REQUEST_TIMEOUT_S is closed unanswered, and one that does not take its answer within
WRITE_TIMEOUT_S is dropped. When a connection cannot be accepted (the process out of descriptors,
the kernel out of memory) the server says so in one line on stderr for the whole episode — no
traceback — and tries again every ACCEPT_RETRY_S.
"""
from __future__ import annotations

import asyncio
import errno
import logging
import socket
import sys
from typing import Callable

from console.textsafe import one_line

log = logging.getLogger("gpu_incident.metrics")

#: connections served at once; more wait in the kernel's accept queue (BACKLOG), not in the watch
MAX_CONNECTIONS = 16
BACKLOG = 16
#: a connection's request must have arrived by then, or it is closed unanswered
REQUEST_TIMEOUT_S = 2.0
WRITE_TIMEOUT_S = 5.0
#: the pause between tries to accept while connections cannot be accepted
ACCEPT_RETRY_S = 0.5
READ_LIMIT = 8192
#: accept() failures that say nothing about this server: the client left before it was accepted
_CLIENT_GONE = {errno.ECONNABORTED, errno.EPROTO, errno.EPERM, errno.EINTR, errno.EAGAIN}


def label(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


#: the histogram's bucket bounds, seconds
BUCKETS = (1, 5, 10, 30, 60, 120, 300, 600)


def histogram(times: list[dict]) -> list[str]:
    """``gpu_incident_time_to_free_seconds`` by what came before (a job, a rung), cumulative."""
    out = ["# HELP gpu_incident_time_to_free_seconds How long GPU memory took to come back here.",
           "# TYPE gpu_incident_time_to_free_seconds histogram"]
    by: dict[str, list[float]] = {}
    for item in times:
        by.setdefault(str(item.get("after")), []).append(float(item["seconds"]))
    for after, values in sorted(by.items()):
        a = label(after)
        for bound in BUCKETS:
            out.append(f'gpu_incident_time_to_free_seconds_bucket{{after="{a}",le="{bound}"}} '
                       f"{sum(1 for v in values if v <= bound)}")
        out.append(f'gpu_incident_time_to_free_seconds_bucket{{after="{a}",le="+Inf"}} {len(values)}')
        out.append(f'gpu_incident_time_to_free_seconds_sum{{after="{a}"}} {round(sum(values), 1)}')
        out.append(f'gpu_incident_time_to_free_seconds_count{{after="{a}"}} {len(values)}')
    return out


def page(open_causes: list[tuple[str, str]], nodes_up: dict[str, bool], opened: int, failures: int,
         times: list[dict] | None = None, record_failures: int = 0) -> str:
    out = ["# HELP gpu_incident_open A cause the watch opened an incident for, still present.",
           "# TYPE gpu_incident_open gauge"]
    out += [f'gpu_incident_open{{node="{label(n)}",kind="{label(k)}"}} 1' for n, k in sorted(set(open_causes))]
    out += ["# HELP gpu_incident_node_up The node's last poll answered.", "# TYPE gpu_incident_node_up gauge"]
    out += [f'gpu_incident_node_up{{node="{label(n)}"}} {int(up)}' for n, up in sorted(nodes_up.items())]
    out += ["# TYPE gpu_incident_incidents_opened_total counter", f"gpu_incident_incidents_opened_total {opened}",
            "# TYPE gpu_incident_notify_failures_total counter", f"gpu_incident_notify_failures_total {failures}",
            "# HELP gpu_incident_record_failures_total Incidents or entries the watch could not write (told anyway).",
            "# TYPE gpu_incident_record_failures_total counter",
            f"gpu_incident_record_failures_total {record_failures}"]
    out += histogram(times or [])
    return "\n".join(out) + "\n"


class Server:
    """The listening socket, its accept loop and the connections it serves (``sockets``,
    ``close()`` and ``wait_closed()`` as asyncio's server has them)."""

    def __init__(self, sock: socket.socket, render: Callable[[], str], warn: Callable[[str], None]) -> None:
        self.sockets = [sock]
        self._sock = sock
        self._render = render
        self._warn = warn
        self._slots = asyncio.Semaphore(MAX_CONNECTIONS)
        self._conns: set[asyncio.Task] = set()
        self._closed = False
        self._task = asyncio.get_running_loop().create_task(self._accept())

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._task.cancel()
        for task in list(self._conns):
            task.cancel()
        try:
            asyncio.get_running_loop().remove_reader(self._sock.fileno())
        except (RuntimeError, ValueError):
            pass
        self._sock.close()

    async def wait_closed(self) -> None:
        await asyncio.wait([self._task, *self._conns], timeout=WRITE_TIMEOUT_S)

    async def _accept(self) -> None:
        loop = asyncio.get_running_loop()
        port = self._sock.getsockname()[1]
        refusing = False
        while True:
            await self._slots.acquire()             # at most MAX_CONNECTIONS accepted at once
            try:
                conn, _ = await loop.sock_accept(self._sock)
            except OSError as exc:
                self._slots.release()
                if exc.errno in _CLIENT_GONE:
                    continue
                if not refusing:                      # one line per episode, never a traceback
                    refusing = True
                    self._warn(one_line(f"gpu-incident watch: metrics port {port}: cannot accept connections "
                                        f"({exc.strerror or exc}); trying again every {ACCEPT_RETRY_S:g} s"))
                await asyncio.sleep(ACCEPT_RETRY_S)
                continue
            except BaseException:
                self._slots.release()
                raise
            refusing = False
            task = loop.create_task(self._answer(conn))
            self._conns.add(task)
            task.add_done_callback(self._conns.discard)

    async def _answer(self, conn: socket.socket) -> None:
        writer = None
        try:
            reader, writer = await asyncio.open_connection(sock=conn, limit=READ_LIMIT)
            try:
                await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), REQUEST_TIMEOUT_S)
            except asyncio.LimitOverrunError:
                pass                                  # a request too long: the page anyway
            except asyncio.IncompleteReadError as exc:
                if not exc.partial:
                    return                            # it left without asking
            # an idle connection (asyncio.TimeoutError) is closed unanswered, below
            body = self._render().encode()
            writer.write(b"HTTP/1.0 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\n"
                         + f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode() + body)
            await asyncio.wait_for(writer.drain(), WRITE_TIMEOUT_S)
        except (OSError, asyncio.TimeoutError):
            pass
        except Exception:                             # noqa: BLE001 - the page failed: the watch goes on
            log.exception("metrics page")
        finally:
            if writer is not None:
                writer.transport.abort() if writer.transport.get_write_buffer_size() else writer.close()
            else:
                conn.close()
            self._slots.release()


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


async def serve(port: int, render: Callable[[], str], warn: Callable[[str], None] = _stderr) -> Server:
    """Serve ``render()`` on 127.0.0.1:``port`` (0: any free port) until ``close()``."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", port))
        sock.listen(BACKLOG)
        sock.setblocking(False)
    except OSError as exc:
        sock.close()
        raise OSError(exc.errno, f"--metrics-port: cannot listen on 127.0.0.1:{port}: {exc.strerror}") from None
    except BaseException:
        sock.close()
        raise
    return Server(sock, render, warn)
