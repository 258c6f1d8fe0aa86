"""A fleet node's ``Hostname`` (as dcgm-exporter labels it) -> the SSH destination to drill in.

Pure. In order: a destination from the nodes file whose host is that name (or whose first label
is, ``gpu01`` for ``root@gpu01.example.org:2222``); else ``HOSTNAME.DOMAIN`` with
``--ssh-domain DOMAIN``; else the name itself, which ssh_config may map (``Host gpu01`` /
``HostName`` / ``Port``: the SSH source honours ``--ssh-config``, and ``gpu-incident simulate``
writes one for its nodes). With ``--ssh-domain`` a dotted Hostname must be inside that domain.
The destination is always an SSH one: a Hostname ``local`` or ``demo`` is a host of that name,
never this machine or the simulator (targets.ssh_source). A Hostname is text a node produced: one that is not a plain host name
(letters, digits, ``.``, ``-``, ``_``; no leading ``-`` or ``.``) is refused with ValueError,
never turned into a destination.
"""
from __future__ import annotations

import re
from typing import Iterable, Mapping

from console.sources.ssh.options import parse_destination

_HOSTNAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,252}$")
_DOMAIN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9.-]{0,252}$")


def check_domain(domain: str) -> str:
    """``--ssh-domain``: a DNS suffix (``example.org``; a leading dot is dropped)."""
    d = domain.strip().lstrip(".")
    if not _DOMAIN.match(d) or ".." in d or d.endswith("."):
        raise ValueError(f"bad --ssh-domain {domain!r}: expected a DNS suffix such as example.org")
    return d


def nodes_index(destinations: Iterable[str]) -> dict[str, str]:
    """Destinations (a nodes file's) by host name and by its first label; the first one named
    wins. Hostlists must be expanded before (console/sources/targets.expand_targets)."""
    index: dict[str, str] = {}
    for dest in destinations:
        try:
            _user, host, _port = parse_destination(dest)
        except ValueError:
            continue
        index.setdefault(host.lower(), dest)
    for host, dest in list(index.items()):
        short = host.split(".", 1)[0]
        if short != host:
            index.setdefault(short, dest)
    return index


def ssh_destination(hostname: str, *, nodes: Mapping[str, str] | None = None,
                    domain: str | None = None) -> str:
    """The destination the per-node console connects to for this fleet node."""
    if not _HOSTNAME.fullmatch(hostname or "") or ".." in hostname:     # fullmatch: "gpu01\n" too
        raise ValueError(f"Hostname {hostname!r} is not a plain host name; no SSH destination made from it")
    if nodes:
        key = hostname.lower()
        hit = nodes.get(key) or nodes.get(key.split(".", 1)[0])
        if hit:
            return hit
    if domain:
        d = check_domain(domain)
        if hostname.lower().endswith("." + d.lower()):
            return hostname
        if "." in hostname:        # gpu07.attacker.example, 127.0.0.1: not the operator's domain
            raise ValueError(f"Hostname {hostname!r} is outside --ssh-domain {d}; no SSH destination made from it")
        return f"{hostname}.{d}"
    return hostname
