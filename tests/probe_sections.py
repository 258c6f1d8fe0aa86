"""Probe text for parser tests: processes written as ``ps -eo pid=,user=,args=`` rows (easy to
read in a test) rendered as the probe's args, uids and users sections (console/probe_scope.py)."""
from __future__ import annotations

import re

_ROW = re.compile(r" *([0-9]+) +(\S+)(?: +(.*))?")


def ps_sections(rows: str, mark: str) -> str:
    """The args, uids and users sections for ``rows`` (a user name gets a made-up uid)."""
    uid_of: dict[str, int] = {}
    args, uids = [], []
    for line in rows.split("\n"):
        m = _ROW.fullmatch(line)
        if m is None:
            continue
        pid, user, argv = m.group(1), m.group(2), m.group(3) or ""
        uid = uid_of.setdefault(user, 0 if user == "root" else 1000 + len(uid_of))
        args += [f"/proc/{pid}/cmdline:{w}\0" for w in argv.split(" ") if w]
        uids.append(f"/proc/{pid}/status:Uid:\t{uid}\t{uid}\t{uid}\t{uid}\n")
    users = "".join(f"{name}:x:{uid}:{uid}::/home/{name}:/bin/sh\n" for name, uid in uid_of.items())
    return "".join(f"{mark} begin {name}\n{body}{mark} end {name} 0\n"
                   for name, body in (("args", "".join(args)), ("uids", "".join(uids)), ("users", users)))
