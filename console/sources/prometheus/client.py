"""One GET against Prometheus's HTTP API (stdlib urllib, run in a worker thread by the source).

Bounded every way: a socket timeout per read and one deadline for the whole answer (a server
that drips a byte at a time is cut off when it passes: the socket is shut down under the read),
the source's own deadline around the whole round,
at most ``max_bytes`` of answer read (and at most that much after gzip), no redirect followed
(a redirect would carry the bearer token to wherever it points). TLS is verified against the
system's trust store, or a CA file. Every failure raises FetchError with one line that names the
cause in the words the snapshot contract uses: "refused", "unreachable", "timed out", the HTTP
status, Prometheus's own error text.
"""
from __future__ import annotations

import http.client
import socket
import ssl
import threading
import time
import urllib.error
import urllib.request
import zlib

from console.sources.prometheus.parse import ApiError, parse_vector
from console.textsafe import one_line

#: the most bytes one answer may have (a 4096-node x 8-GPU round's largest answer is ~10 MiB;
#: parsing an answer takes ~10x its size: this bounds a round's memory)
MAX_ANSWER_BYTES = 24 << 20
_CHUNK = 1 << 16


class FetchError(Exception):
    """The query got no answer to use: one printable line."""


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, req, fp, code, msg, headers, newurl):  # noqa: D102
        return None          # urllib then raises HTTPError with the 3xx status


def make_opener(context: ssl.SSLContext | None) -> urllib.request.OpenerDirector:
    """No redirect followed, and no proxy: urllib would take ``http_proxy``/``https_proxy`` from
    the environment on its own and hand the bearer token to the proxy, whose failures then read
    as Prometheus's."""
    handlers: list = [_NoRedirect(), urllib.request.ProxyHandler({})]
    if context is not None:
        handlers.append(urllib.request.HTTPSHandler(context=context))
    return urllib.request.build_opener(*handlers)


def tls_context(ca_file: str | None = None) -> ssl.SSLContext:
    """Verified TLS: the system's trust store, or only ``ca_file`` (ValueError of one line when
    it cannot be read)."""
    try:
        return ssl.create_default_context(cafile=ca_file)
    except (OSError, ssl.SSLError) as exc:
        reason = getattr(exc, "strerror", None) or str(exc)
        raise ValueError(f"cannot use CA file {ca_file}: {one_line(reason, 120)}") from None


def _socket_of(resp) -> socket.socket | None:
    """The socket under an http.client response (None where the layout is another)."""
    raw = getattr(getattr(resp, "fp", None), "raw", None)
    sock = getattr(raw, "_sock", None)
    return sock if isinstance(sock, socket.socket) else None


def _cut_at(deadline: float, resp) -> threading.Timer | None:
    """Shut the answer's socket down when ``deadline`` passes (a blocked read then returns)."""
    sock = _socket_of(resp)
    if sock is None:
        return None

    def cut() -> None:
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
    timer = threading.Timer(max(0.0, deadline - time.monotonic()), cut)
    timer.daemon = True
    timer.start()
    return timer


class _Late(Exception):
    """The whole-answer deadline passed (``args[0]``: the bytes that came by then)."""


def _read_capped(resp, max_bytes: int, deadline: float = float("inf")) -> bytes:
    gz = (resp.headers.get("Content-Encoding") or "").strip().lower() == "gzip"
    inflate = zlib.decompressobj(16 + zlib.MAX_WBITS) if gz else None
    out = bytearray()
    read = getattr(resp, "read1", resp.read)      # what has arrived, not a whole chunk's worth
    while True:
        try:
            chunk = read(_CHUNK)
        except (OSError, ValueError, http.client.HTTPException):
            if time.monotonic() > deadline:
                raise _Late(len(out)) from None     # the socket was cut under the read
            raise
        if time.monotonic() > deadline:
            raise _Late(len(out))
        if not chunk:
            break
        if inflate is not None:
            chunk = inflate.decompress(chunk, max_bytes + 1 - len(out))
        out += chunk
        if len(out) > max_bytes:
            raise FetchError(f"answer too large (over {max_bytes >> 20} MiB)")
    if inflate is not None:
        try:
            out += inflate.flush()
        except zlib.error:
            raise FetchError("answer is not valid gzip") from None
    return bytes(out)


def _where(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def fetch(opener: urllib.request.OpenerDirector, url: str, *, host: str, port: int, timeout: float,
          token: str | None = None, max_bytes: int = MAX_ANSWER_BYTES) -> bytes:
    """The body of a 200 answer to GET ``url``; FetchError otherwise."""
    headers = {"Accept": "application/json", "Accept-Encoding": "gzip", "User-Agent": "gpu-incident"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    req = urllib.request.Request(url, headers=headers, method="GET")
    where = _where(host, port)
    deadline = time.monotonic() + timeout
    try:
        with opener.open(req, timeout=timeout) as resp:
            timer = _cut_at(deadline, resp)
            try:
                return _read_capped(resp, max_bytes, deadline)
            except _Late as late:
                raise FetchError(f"Prometheus at {where} timed out after {timeout:g} s (the answer did not "
                                 f"finish: {late.args[0]} bytes came)") from None
            finally:
                if timer is not None:
                    timer.cancel()
    except urllib.error.HTTPError as exc:
        raise FetchError(_http_error(exc, max_bytes)) from None
    except urllib.error.URLError as exc:
        raise FetchError(_os_error(exc.reason, where, timeout)) from None
    except (OSError, http.client.HTTPException, zlib.error) as exc:
        raise FetchError(_os_error(exc, where, timeout)) from None


def _http_error(exc: urllib.error.HTTPError, max_bytes: int) -> str:
    status = f"HTTP {exc.code}" + (f" {one_line(exc.reason, 60)}" if exc.reason else "")
    if exc.code in (401, 403):
        return f"{status} (authentication: check the bearer token)"
    if exc.code == 404:
        return f"{status} (no Prometheus API at this address?)"
    if 300 <= exc.code < 400:
        return f"{status}: redirect to {one_line(exc.headers.get('Location', '?'), 120)} not followed"
    try:
        body = _read_capped(exc, min(max_bytes, 1 << 20))
        parse_vector(body)
    except ApiError as api:
        if str(api).startswith("Prometheus error"):
            return f"{status}: {api}"
    except (FetchError, OSError, http.client.HTTPException, zlib.error):
        pass
    return status


def _os_error(reason: object, where: str, timeout: float) -> str:
    if isinstance(reason, ssl.SSLCertVerificationError):
        return f"TLS certificate of {where} not trusted ({one_line(reason.verify_message or reason, 120)})"
    if isinstance(reason, ssl.SSLError):
        return f"TLS failed with {where} ({one_line(reason.reason or reason, 120)})"
    if isinstance(reason, (TimeoutError, socket.timeout)):
        return f"Prometheus at {where} timed out after {timeout:g} s"
    if isinstance(reason, ConnectionRefusedError):
        return f"Prometheus at {where} refused the connection (nothing listening?)"
    if isinstance(reason, socket.gaierror):
        return f"Prometheus at {where} unreachable: the name does not resolve"
    if isinstance(reason, (ConnectionResetError, http.client.RemoteDisconnected, http.client.IncompleteRead)):
        return f"Prometheus at {where} closed the connection mid-answer"
    if isinstance(reason, OSError) and reason.strerror:
        return f"Prometheus at {where} unreachable: {one_line(reason.strerror, 120)}"
    return f"Prometheus at {where} unreachable: {one_line(reason, 120)}"
