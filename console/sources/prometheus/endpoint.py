"""A fleet target -> the Prometheus base URL it names.

``prometheus://HOST[:PORT][/PATH]`` is plain HTTP, ``prometheus+https://HOST[:PORT][/PATH]`` is
TLS (verified against the system's trust store unless told otherwise). PORT defaults to 9090,
Prometheus's own; PATH is a prefix for a Prometheus behind a reverse proxy (``--web.route-prefix``).
Credentials never go in the target (a bearer token comes from a file or the environment), so a
user part is refused, as are a query, a fragment, spaces and control characters. Every bad
target raises ValueError with one line.
"""
from __future__ import annotations

import urllib.parse
from dataclasses import dataclass

DEFAULT_PORT = 9090
_SCHEMES = {"prometheus": "http", "prometheus+https": "https"}


@dataclass(frozen=True)
class Endpoint:
    target: str          # as given
    scheme: str          # http | https
    host: str            # without brackets
    port: int
    path: str            # "" or "/prefix" (no trailing slash)

    @property
    def base_url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.scheme}://{host}:{self.port}{self.path}"

    def url(self, api_path: str, params: dict[str, str] | None = None) -> str:
        query = "?" + urllib.parse.urlencode(params) if params else ""
        return f"{self.base_url}{api_path}{query}"


def parse_endpoint(target: str) -> Endpoint:
    text = target.strip()
    scheme, sep, rest = text.partition("://")
    if not sep or scheme not in _SCHEMES:
        raise ValueError(f"bad fleet target {target!r}: expected prometheus://HOST:PORT "
                         "or prometheus+https://HOST:PORT")
    if not rest or any(c.isspace() or not c.isprintable() for c in rest):
        raise ValueError(f"bad fleet target {target!r}: empty, or contains spaces or control characters")
    parts = urllib.parse.urlsplit("//" + rest)
    if parts.username is not None or parts.password is not None or "@" in parts.netloc:
        raise ValueError(f"bad fleet target {target!r}: no user or password in the target "
                         "(give a bearer token with --prometheus-token-file)")
    if parts.query or parts.fragment or "?" in rest or "#" in rest:
        raise ValueError(f"bad fleet target {target!r}: no query or fragment")
    try:
        port = parts.port
    except ValueError:
        raise ValueError(f"bad fleet target {target!r}: the port must be a number from 1 to 65535") from None
    host = parts.hostname
    if not host:
        raise ValueError(f"bad fleet target {target!r}: no host")
    if port == 0:
        raise ValueError(f"bad fleet target {target!r}: the port must be a number from 1 to 65535")
    path = parts.path.rstrip("/")
    return Endpoint(target=target, scheme=_SCHEMES[scheme], host=host, port=port or DEFAULT_PORT, path=path)
