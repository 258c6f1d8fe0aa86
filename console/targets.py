"""What the operator names on the command line, turned into sources.

``expand_targets`` expands Slurm-style hostlists (``gpu[01-16]``) and a nodes
file; ``parse_destination`` splits ``[user@]host[:port]`` (IPv6 in brackets);
``make_source`` picks the Source kind for one target. Every bad input raises
ValueError with one line that says what is wrong.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Sequence

from console.probe import DEFAULT_DEVICE_GLOB

if TYPE_CHECKING:
    from console.sources.base import Source

#: the most nodes one command line may expand to (a typo like gpu[1-999999] stops here)
MAX_TARGETS = 4096
DEFAULT_SCENARIO = "seed"

_PORT_RE = re.compile(r"^(?P<host>.*?):(?P<port>[0-9]+)$")


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


def is_special(target: str) -> bool:
    """`local`, `demo` and `demo:NAME` are not SSH destinations."""
    return target == "local" or target == "demo" or target.startswith("demo:")


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


def _expand_one(word: str) -> list[str]:
    """One command-line word: a special target, a destination, or a hostlist with user/port."""
    if is_special(word):
        return [word]
    if not word or any(c.isspace() or not c.isprintable() for c in word):
        raise ValueError(f"bad target {word!r}: empty, or contains spaces or control characters")
    user, sep, rest = word.rpartition("@")
    prefix = f"{user}@" if sep else ""
    if sep and not user:
        raise ValueError(f"bad target {word!r}: empty user name")
    # an IPv6 literal in brackets is a destination, not a hostlist
    if (rest.startswith("[") and ":" in rest.partition("]")[0]) or rest.count(":") > 1:
        parse_destination(word)
        return [word]
    suffix = ""
    m = _PORT_RE.match(rest)
    if m and "]" not in m.group("port"):
        rest, suffix = m.group("host"), ":" + m.group("port")
    if "[" not in rest and "]" not in rest and "," not in rest:
        parse_destination(word)
        return [word]
    import hostlist
    try:
        hosts = hostlist.expand_hostlist(rest)
    except (hostlist.BadHostlist, RecursionError) as exc:
        raise ValueError(f"bad hostlist {word!r}: {exc or 'cannot expand'}") from None
    if not hosts:
        raise ValueError(f"hostlist {word!r} names no host")
    if len(hosts) > MAX_TARGETS:
        raise ValueError(f"hostlist {word!r} expands to {len(hosts)} nodes (at most {MAX_TARGETS})")
    out = []
    for h in hosts:
        target = prefix + h + suffix
        parse_destination(target)
        out.append(target)
    return out


def read_nodes_file(path: str) -> list[str]:
    """Targets from a file: one or more per line, `#` starts a comment."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise ValueError(f"cannot read nodes file {path}: {reason}") from None
    words: list[str] = []
    for line in text.splitlines():
        words.extend(line.split("#", 1)[0].split())
    if not words:
        raise ValueError(f"nodes file {path} lists no targets")
    return words


def expand_targets(targets: Sequence[str], nodes_file: str | None = None) -> list[str]:
    """Command-line targets, then the nodes file's, expanded; duplicates dropped, order kept.

    With neither, the default target ``local``.
    """
    words = [t for t in targets]
    if nodes_file is not None:
        words.extend(read_nodes_file(nodes_file))
    if not words:
        return ["local"]
    seen: dict[str, None] = {}
    for word in words:
        for target in _expand_one(word.strip()):
            seen.setdefault(target, None)
            if len(seen) > MAX_TARGETS:
                raise ValueError(f"more than {MAX_TARGETS} targets")
    return list(seen)


def make_source(target: str, *, ssh: SshOptions | None = None,
                device_glob: str = DEFAULT_DEVICE_GLOB,
                probe_timeout: float = 10.0) -> Source:
    """The Source for one expanded target: local, demo[:SCENARIO] or an SSH destination."""
    if target == "local":
        from console.sources.local import LocalSource
        return LocalSource(name="local", device_glob=device_glob)
    if target == "demo" or target.startswith("demo:"):
        scenario = target.partition(":")[2] or DEFAULT_SCENARIO
        from console.sources.sim import SimSource
        try:
            return SimSource(name=target, scenario=scenario)
        except KeyError:
            raise ValueError(f"unknown demo scenario {scenario!r}") from None
    parse_destination(target)
    from console.sources.ssh import SshSource
    return SshSource(target, ssh or SshOptions(), device_glob=device_glob,
                     probe_timeout=probe_timeout)
