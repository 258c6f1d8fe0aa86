"""What ``nvidia-cuda-mps-control`` answers, read: pure, never raises (fuzzed in
tests/test_mps.py).

The control daemon takes one command a line on its stdin (``echo get_server_list |
nvidia-cuda-mps-control``). NVIDIA documents the answers of the two listing commands as PIDs:
``get_server_list`` "prints out a list of all PIDs of server instances", ``get_client_list <PID>``
"lists the PIDs of client applications connected to a server instance assigned to the given
PID" — one PID a line, nothing when there is none. No public thread read here pastes a real
answer, so the format is NVIDIA's documented one (docs/field-facts.md says so). When no daemon
answers on the pipe directory the program was given (``CUDA_MPS_PIPE_DIRECTORY``, default
/tmp/nvidia-mps), it prints ``Cannot find MPS control daemon process`` and exits 1 (the words
scripts in the field match; which stream they come on is not documented, so both are read).

The check (console/checks/registry.py ``mps-clients``) frames its two questions with marker
lines (``::servers::``, ``::clients::``) and the exit status of each after ``::rc::``.
"""
from __future__ import annotations

import re

NO_DAEMON = "Cannot find MPS control daemon process"
SERVERS_MARK, CLIENTS_MARK, RC_MARK = "::servers::", "::clients::", "::rc::"
MAX_PID = 4_194_304
_PID_RE = re.compile(r"[0-9]{1,7}")
_LINE_LIMIT = 200


def parse_pid_lines(text: str) -> tuple[list[int], list[str]]:
    """(PIDs, one a line, in order and once each; the other non-blank lines, cut to 200 chars)."""
    pids: list[int] = []
    other: list[str] = []
    for raw in str(text).splitlines():
        line = raw.strip()
        if not line:
            continue
        if _PID_RE.fullmatch(line) and 0 < int(line) <= MAX_PID:
            if int(line) not in pids:
                pids.append(int(line))
        else:
            other.append(line[:_LINE_LIMIT])
    return pids, other


def no_daemon(text: str) -> bool:
    """The control program found no daemon to talk to."""
    return NO_DAEMON.lower() in str(text).lower()


def parse_mps_check(text: str) -> dict:
    """The ``mps-clients`` check's output -> {"servers": [PIDs], "clients": [PIDs] or None (not
    asked), "daemon": False when no control daemon answered (else True, None when unknown),
    "error": the first line that is not a PID (or None), "rc": {"servers": n, "clients": n},
    "timed_out": a question that ran into its timeout (rc 124)}."""
    parts: dict[str, list[str]] = {}
    rcs: dict[str, int | None] = {}
    current = ""
    for raw in str(text).splitlines():
        line = raw.strip()
        if line in (SERVERS_MARK, CLIENTS_MARK):
            current = line.strip(":")
            parts[current] = []
            continue
        if line.startswith(RC_MARK):
            word = line[len(RC_MARK):].strip()
            rcs[current] = int(word) if word.isdecimal() and len(word) <= 3 else None
            continue
        parts.setdefault(current, []).append(raw)
    servers, server_other = parse_pid_lines("\n".join(parts.get("servers", ())))
    clients: list[int] | None = None
    client_other: list[str] = []
    if "clients" in parts:
        clients, client_other = parse_pid_lines("\n".join(parts["clients"]))
    other = server_other + client_other + parse_pid_lines("\n".join(parts.get("", ())))[1]
    missing = any(no_daemon(line) for line in other)
    timed_out = 124 in rcs.values() or 137 in rcs.values()
    daemon: bool | None = False if missing else (True if "servers" in parts and not timed_out and not other
                                                  else None)
    error = next((line for line in other if no_daemon(line)), other[0] if other else None)
    if error is None and timed_out:
        error = "nvidia-cuda-mps-control did not answer within its timeout"
    return {"servers": servers, "clients": clients, "daemon": daemon, "error": error,
            "rc": {k: v for k, v in rcs.items() if k}, "timed_out": timed_out}
