"""SSH settings shared by every SSH target, and the ``[user@]host[:port]`` destination syntax."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class SshOptions:
    """SSH settings shared by every SSH target (the CLI's SSH flags)."""
    ssh_config: str | None = None          # None: ~/.ssh/config when it exists
    identity: tuple[str, ...] = ()         # -i files, tried before the agent's keys
    known_hosts: str | None = None         # None: UserKnownHostsFile from the config, else ~/.ssh/known_hosts
    accept_new_host_keys: bool = False     # record keys of hosts not yet known (never changed ones)
    connect_timeout: float = 10.0          # TCP connect + SSH handshake + authentication
    keepalive: float = 15.0                # seconds between keepalives; 3 missed answers drop the link
    reconnect_min: float = 1.0             # first reconnect delay; doubles per failure (with jitter)
    reconnect_max: float = 30.0
    max_channels: int = 8                  # per node, the probe shell included (sshd allows 10)

    def __post_init__(self) -> None:
        if isinstance(self.identity, str):
            object.__setattr__(self, "identity", (self.identity,))
        else:
            object.__setattr__(self, "identity", tuple(self.identity or ()))
        if self.max_channels < 1:
            raise ValueError("max_channels must be at least 1")


def parse_destination(dest: str) -> tuple[str | None, str, int | None]:
    """Split ``[user@]host[:port]`` into (user, host, port); IPv6 as ``[::1]:22`` or bare ``::1``."""
    text = dest.strip()
    if not text or any(c.isspace() for c in text):
        raise ValueError(f"bad SSH destination {dest!r}: empty or contains spaces")
    if text.startswith("ssh://"):
        text = text[len("ssh://"):].rstrip("/")
    user: str | None = None
    if "@" in text:
        user, _, text = text.rpartition("@")
        if not user:
            raise ValueError(f"bad SSH destination {dest!r}: empty user name")
    port_text: str | None = None
    if text.startswith("["):
        close = text.find("]")
        if close < 0:
            raise ValueError(f"bad SSH destination {dest!r}: '[' without ']'")
        host, rest = text[1:close], text[close + 1:]
        if rest:
            if not rest.startswith(":"):
                raise ValueError(f"bad SSH destination {dest!r}: unexpected {rest!r} after ']'")
            port_text = rest[1:]
    elif text.count(":") > 1:          # a bare IPv6 address: no port possible
        host = text
    elif ":" in text:
        host, _, port_text = text.partition(":")
    else:
        host = text
    if not host:
        raise ValueError(f"bad SSH destination {dest!r}: no host")
    if any(c in host for c in "[]/,"):
        raise ValueError(f"bad SSH destination {dest!r}: bad host name {host!r}")
    port: int | None = None
    if port_text is not None:
        if not port_text.isdecimal() or not 0 < int(port_text) < 65536:
            raise ValueError(f"bad SSH destination {dest!r}: port must be a number from 1 to 65535")
        port = int(port_text)
    return user, host, port


def format_destination(user: str | None, host: str, port: int | None) -> str:
    """The inverse of parse_destination."""
    h = f"[{host}]" if ":" in host and port is not None else host
    return (f"{user}@" if user else "") + h + (f":{port}" if port is not None else "")
