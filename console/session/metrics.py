"""The watch's state as Prometheus text (``--metrics-port P``, on 127.0.0.1 only), so an existing
Alertmanager can page on it::

    gpu_incident_open{node="gpu07",kind="ghost-memory"} 1      one per open cause
    gpu_incident_node_up{node="gpu07"} 1                        the node's last poll answered
    gpu_incident_incidents_opened_total 3
    gpu_incident_notify_failures_total 0
    gpu_incident_time_to_free_seconds_bucket{after="sigkill",le="30"} 11   every time-to-free kept

Label values are escaped as the exposition format says (backslash, quote, newline), so a node
name cannot forge a line. Any request gets the page; the answer is bounded and the connection
closed (a client that never reads is dropped after WRITE_TIMEOUT_S).
"""
from __future__ import annotations

import asyncio
from typing import Callable

WRITE_TIMEOUT_S = 5.0
READ_LIMIT = 8192


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
         times: list[dict] | None = None) -> str:
    out = ["# HELP gpu_incident_open A cause the watch opened an incident for, still present.",
           "# TYPE gpu_incident_open gauge"]
    out += [f'gpu_incident_open{{node="{label(n)}",kind="{label(k)}"}} 1' for n, k in sorted(set(open_causes))]
    out += ["# HELP gpu_incident_node_up The node's last poll answered.", "# TYPE gpu_incident_node_up gauge"]
    out += [f'gpu_incident_node_up{{node="{label(n)}"}} {int(up)}' for n, up in sorted(nodes_up.items())]
    out += ["# TYPE gpu_incident_incidents_opened_total counter", f"gpu_incident_incidents_opened_total {opened}",
            "# TYPE gpu_incident_notify_failures_total counter", f"gpu_incident_notify_failures_total {failures}"]
    out += histogram(times or [])
    return "\n".join(out) + "\n"


async def serve(port: int, render: Callable[[], str]) -> asyncio.AbstractServer:
    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            try:
                await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), WRITE_TIMEOUT_S)
            except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, asyncio.TimeoutError):
                pass
            body = render().encode()
            writer.write(b"HTTP/1.0 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\n"
                         + f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode() + body)
            await asyncio.wait_for(writer.drain(), WRITE_TIMEOUT_S)
        except (OSError, asyncio.TimeoutError):
            pass
        finally:
            writer.close()
    return await asyncio.start_server(answer, "127.0.0.1", port, limit=READ_LIMIT)
