"""The fleet source: dcgm-exporter's metrics read through Prometheus's HTTP query API.

``poll()`` runs one round (console/sources/prometheus/queries.py: six instant queries at
once, each a GET in a worker thread, the whole round under ``timeout_s``; the INFO answer is
kept and asked again every INFO_REFRESH_S, sooner when unknown GPUs appear) and returns a
FleetSnapshot: every node the queries returned, sorted by hostname, with per GPU what the
suspicion rule needs (console/diagnosis/fleet.py ranks and sorts: ``assess(snapshot)``).
``poll()`` never raises: a round that fails as a whole is ``FleetSnapshot.error`` (one line),
a side query that fails (the window's) a warning.

HTTP client: the standard library's urllib in a thread (no new dependency; TLS through the
ssl module, verified by default). The bearer token comes from ``token_file`` or, without one,
the environment variable GPU_INCIDENT_PROMETHEUS_TOKEN; it is read once, here.
"""
from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

from console.config import PROBE_TIMEOUT_S
from console.model import FleetSnapshot
from console.sources.prometheus import client, queries
from console.sources.prometheus.endpoint import Endpoint, parse_endpoint
from console.sources.prometheus.parse import ApiError, build_nodes, parse_vector
from console.sources.workers import DaemonPool
from console.textsafe import one_line

TOKEN_ENV = "GPU_INCIDENT_PROMETHEUS_TOKEN"
#: the INFO query (UUID, model, pod: the largest answer, and what changes least) is asked again
#: after this long, or after INFO_MISSING_S when GPUs without it appeared (a new node, a new pod)
INFO_REFRESH_S = 60.0
INFO_MISSING_S = 15.0
#: the window queries (IDLE, XID: Prometheus's costliest, ~0.7 s of its CPU at 4096 nodes x 8
#: GPUs) are asked again after a tenth of the window, at most WINDOW_REFRESH_MAX_S: becoming
#: suspect may lag by that much; ending it does not (build_nodes ends "idle" on this round's
#: memory and utilisation)
WINDOW_REFRESH_MAX_S = 60.0
#: the queries not asked every round, by group: a group is asked when due, all its queries
#: together, and kept only when all answered (else asked again the next round); "slow" answers
#: stand in for a failed query of their own (the UUIDs of a minute ago beat none), "window"
#: answers do not (a failed XID query is "unknown", never an old "none")
KEPT = {"slow": ("info", "total"), "window": ("idle", "xid")}
TIMEOUT_S = PROBE_TIMEOUT_S      # the --probe-timeout range: one home (console/config.py)
#: reads of one source in flight at once (a round asks at most six queries)
READS_AT_ONCE = 12
_TOKEN_MAX = 16 << 10
_API = "/api/v1/query"


def read_token(token_file: str | None, environ=os.environ) -> str | None:
    """The bearer token: the file's content (whitespace around it dropped), else the
    environment's; None when neither gives one. ValueError (one line) for a file that cannot be
    read, is empty, too large, or holds control characters (a header must not be split)."""
    if token_file is None:
        text = environ.get(TOKEN_ENV, "").strip()
        where = f"${TOKEN_ENV}"
        if not text:
            return None
    else:
        where = f"token file {token_file}"
        try:
            with open(token_file, "rb") as f:
                raw = f.read(_TOKEN_MAX + 1)
        except OSError as exc:
            raise ValueError(f"cannot read {where}: {exc.strerror or exc}") from None
        if len(raw) > _TOKEN_MAX:
            raise ValueError(f"{where} is too large for a token (over {_TOKEN_MAX >> 10} KiB)")
        try:
            text = raw.decode("utf-8").strip()
        except UnicodeDecodeError:
            raise ValueError(f"{where} is not UTF-8 text") from None
        if not text:
            raise ValueError(f"{where} is empty")
    if any(not c.isprintable() or c.isspace() for c in text) or not text.isascii():
        raise ValueError(f"{where} must hold one token: printable ASCII, no spaces or line breaks")
    return text


class PrometheusSource:
    """A fleet read through Prometheus (``prometheus://HOST:PORT`` or ``prometheus+https://``).

    ``window_s``: the suspicion window (console/sources/prometheus/queries.py WINDOW_S bounds
    it); ``timeout_s``: the deadline of one round; ``token_file``: a bearer token (else the
    environment's); ``ca_file``: trust only this CA for TLS (else the system's trust store).
    ValueError (one line) for a bad target, window, timeout, token or CA file."""

    kind = "prometheus"

    def __init__(self, target: str, *, window_s: float = 600, timeout_s: float = 10,
                 token_file: str | None = None, ca_file: str | None = None,
                 max_bytes: int = client.MAX_ANSWER_BYTES) -> None:
        self.target = target
        self.endpoint: Endpoint = parse_endpoint(target)
        queries.duration(window_s)                      # ValueError when out of range
        if not TIMEOUT_S[0] <= timeout_s <= TIMEOUT_S[1]:
            raise ValueError(f"Prometheus timeout {timeout_s:g} s is out of range "
                             f"({TIMEOUT_S[0]:g} to {TIMEOUT_S[1]:g} s)")
        self.window_s = float(window_s)
        self.timeout_s = float(timeout_s)
        self.max_bytes = max_bytes
        self._token = read_token(token_file)
        context = client.tls_context(ca_file) if self.endpoint.scheme == "https" else None
        self._opener = client.make_opener(context)
        self._closed = False
        self._reads = DaemonPool("prometheus read", READS_AT_ONCE)
        self._big = asyncio.Lock()
        self._info_missing = 0
        #: a group of KEPT: when all its queries last answered (absent: ask it this round)
        self._answered_at: dict[str, float] = {}
        #: the last answer of each KEPT query
        self._last: dict[str, list] = {}

    @property
    def name(self) -> str:
        return self.target

    def _get(self, query: str) -> bytes:
        url = self.endpoint.url(_API, {"query": query})
        return client.fetch(self._opener, url, host=self.endpoint.host, port=self.endpoint.port,
                            timeout=self.timeout_s, token=self._token, max_bytes=self.max_bytes)

    async def _query(self, query: str):
        body = await self._reads.run(self._get, query)     # a daemon thread: never the loop's pool
        if len(body) <= (1 << 20):
            return parse_vector(body)
        async with self._big:         # one large answer parsed at a time: a round's memory stays bounded
            return await asyncio.to_thread(parse_vector, body)

    async def poll(self) -> FleetSnapshot:
        started = time.monotonic()
        taken = time.time()

        def failed(line: str) -> FleetSnapshot:
            return FleetSnapshot(source=self.target, taken_at=taken, error=line,
                                 query_ms=(time.monotonic() - started) * 1000, window_s=self.window_s)

        if self._closed:
            return failed("source closed")
        named = queries.round_queries(self.window_s)
        not_due = [group for group in KEPT if not self._due(group)]
        for group in not_due:
            for name in KEPT[group]:
                del named[name]
        tasks = {name: asyncio.ensure_future(self._query(q)) for name, q in named.items()}
        try:
            await asyncio.wait_for(asyncio.gather(*tasks.values(), return_exceptions=True), self.timeout_s)
        except asyncio.TimeoutError:
            where = f"{self.endpoint.host}:{self.endpoint.port}"
            return failed(f"Prometheus at {where} timed out after {self.timeout_s:g} s")
        answers, warnings = {}, []
        for name, task in tasks.items():
            exc = task.exception()
            if exc is None:
                samples, warns = task.result()
                answers[name] = samples
                warnings.extend(warns)
            elif name == "used":
                if isinstance(exc, (client.FetchError, ApiError)):
                    return failed(str(exc))
                return failed(f"Prometheus query failed: {one_line(repr(exc), 200)}")
            else:
                warnings.append(f"{name} query failed: {one_line(exc, 200)}")
        self._keep(answers, not_due)
        try:
            nodes, more = await asyncio.to_thread(
                build_nodes, answers["used"], (), answers.get("util", []),
                answers.get("info", []), answers.get("idle", []), answers.get("xid"), total=answers.get("total", []))
        except Exception as exc:  # noqa: BLE001 - a parser bug must not take the console down
            return failed(f"cannot read Prometheus's answer: {one_line(repr(exc), 200)}")
        warnings.extend(more)
        self._info_missing = sum(1 for n in nodes for g in n.gpus if g.uuid is None)
        if self._token and self.endpoint.scheme == "http":
            warnings.append("the bearer token goes over plain HTTP (use prometheus+https://)")
        if not nodes:
            warnings.append("no dcgm-exporter series (DCGM_FI_DEV_FB_USED and friends) in Prometheus")
        return FleetSnapshot(source=self.target, taken_at=taken, nodes=nodes, warnings=tuple(warnings),
                             query_ms=(time.monotonic() - started) * 1000, window_s=self.window_s)

    def _due(self, group: str) -> bool:
        at = self._answered_at.get(group)
        if at is None:
            return True
        age = time.monotonic() - at
        if group == "slow":
            return age >= INFO_REFRESH_S or (self._info_missing > 0 and age >= INFO_MISSING_S)
        return age >= min(WINDOW_REFRESH_MAX_S, self.window_s / 10)

    def _keep(self, answers: dict[str, list], not_due: list[str]) -> None:
        """Note what this round's KEPT queries answered, and complete ``answers`` with the kept
        answers of the groups not asked (and, for "slow", of its queries that failed)."""
        now = time.monotonic()
        for group, names in KEPT.items():
            if group in not_due:
                answers.update((n, self._last[n]) for n in names)
                continue
            self._last.update((n, answers[n]) for n in names if n in answers)
            if all(n in answers for n in names):
                self._answered_at[group] = now
            else:
                self._answered_at.pop(group, None)
                if group == "slow":
                    answers.update((n, self._last[n]) for n in names if n not in answers and n in self._last)

    async def close(self) -> None:
        self._closed = True
