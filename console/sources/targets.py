"""What the operator names on the command line, turned into sources.

``expand_targets`` expands Slurm-style hostlists (``gpu[01-16]``) and a nodes
file (``[user@]host[:port]`` destinations are console/sources/ssh/options.py's);
``make_source`` picks the Source kind for one target. Every bad input raises
ValueError with one line that says what is wrong.
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING, Sequence

from console.probe import DEFAULT_DEVICE_GLOB
from console.sources.ssh.options import SshOptions, parse_destination

if TYPE_CHECKING:
    from console.sources.base import Source

#: the most nodes one command line may expand to (a typo like gpu[1-999999] stops here)
MAX_TARGETS = 4096

_PORT_RE = re.compile(r"^(?P<host>.*?):(?P<port>[0-9]+)$")


def is_special(target: str) -> bool:
    """`local`, `demo` and `demo:NAME` are not SSH destinations."""
    return target == "local" or is_demo_target(target)


#: the schemes of a fleet source (console/sources/prometheus: Prometheus's HTTP query API)
FLEET_SCHEMES = ("prometheus://", "prometheus+https://")


def is_fleet_target(target: str) -> bool:
    """``prometheus://HOST:PORT`` or ``prometheus+https://HOST:PORT``: a fleet read through
    Prometheus, not one node (console/sources/prometheus/endpoint.py checks the rest)."""
    return target.startswith(FLEET_SCHEMES)


def is_demo_target(target: str) -> bool:
    """``demo`` or ``demo:NAME`` (console/sources/sim.py knows the scenarios)."""
    return target == "demo" or target.startswith("demo:")


def _expand_one(word: str) -> list[str]:
    """One command-line word: a special target, a destination, or a hostlist with user/port."""
    if is_special(word):
        return [word]
    if is_fleet_target(word):
        from console.sources.prometheus.endpoint import parse_endpoint
        parse_endpoint(word)         # ValueError of one line for a bad one
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
    # python-hostlist refuses a range or a product past its MAX_SIZE before building it: with
    # ours as that bound, "gpu[1-100000]" (or forty of them) is refused at once, not after
    # building half a gigabyte of names
    bound, hostlist.MAX_SIZE = hostlist.MAX_SIZE, MAX_TARGETS
    try:
        hosts = hostlist.expand_hostlist(rest)
    except (hostlist.BadHostlist, RecursionError) as exc:
        if "too large" in str(exc):
            raise ValueError(f"hostlist {word!r} expands to more than {MAX_TARGETS} nodes (at most {MAX_TARGETS})") from None
        raise ValueError(f"bad hostlist {word!r}: {exc or 'cannot expand'}") from None
    finally:
        hostlist.MAX_SIZE = bound
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


def ssh_source(destination: str, *, ssh: SshOptions | None = None, device_glob: str = DEFAULT_DEVICE_GLOB,
               probe_timeout: float = 10.0) -> Source:
    """Always an SSH node, whatever the text says (a fleet's Hostname ``local`` or ``demo`` is a
    host of that name: never this machine, never the simulator)."""
    parse_destination(destination)
    from console.sources.ssh.source import SshSource
    return SshSource(destination, ssh or SshOptions(), device_glob=device_glob, probe_timeout=probe_timeout)


def make_source(target: str, *, ssh: SshOptions | None = None,
                device_glob: str = DEFAULT_DEVICE_GLOB,
                probe_timeout: float = 10.0) -> Source:
    """The Source for one expanded target: local, demo[:SCENARIO] or an SSH destination.
    A fleet target (``prometheus://``) is no node: PrometheusSource reads it."""
    if is_fleet_target(target):
        raise ValueError(f"{target} is a fleet source (Prometheus), not a node: "
                         "use `gpu-incident snapshot` or the fleet view")
    if target == "local":
        from console.sources.local.source import LocalSource
        return LocalSource(name="local", device_glob=device_glob)
    if is_demo_target(target):
        from console.sources.sim import SimSource, parse_demo_target
        scenario = parse_demo_target(target)
        # one name per scenario, whatever case it was typed in (demo:Seed is demo:seed)
        return SimSource(name=target if target == "demo" else f"demo:{scenario}", scenario=scenario)
    return ssh_source(target, ssh=ssh, device_glob=device_glob, probe_timeout=probe_timeout)
