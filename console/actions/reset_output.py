"""What `nvidia-smi -r` said, GPU by GPU: reset, or not and why. Pure; never raises.

The wordings, as real nodes print them (tests/fixtures/real/reset-*):

    GPU 00000000:1A:00.0 was successfully reset.
    The following GPUs could not be reset:
      GPU 00000000:1A:00.0: In use by another client
    GPU 00000000:C1:00.0 is currently in use by another process.      (older drivers)

and, where the output names no GPU, the exit status says why: 3 not supported, 4 no permission,
15 the GPU fell off the bus, 255 in use by another client.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

_BUS = r"([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9A-Fa-f])"
_OK_RE = re.compile(rf"\bGPU {_BUS} was successfully reset")
_ONE_LINE_RE = re.compile(rf"\bGPU {_BUS} could not be reset:\s*(.*)$")
_LISTED_RE = re.compile(rf"^\s*GPU {_BUS}:\s*(.*)$")
_OLD_IN_USE_RE = re.compile(rf"\bGPU {_BUS} is currently in use by another process")
_OTHER_RE = re.compile(rf"\b(?:Resetting|Unable to reset|Failed to reset) GPU {_BUS}\S*?:?\s*(.*)$")
RC_REASONS = {3: "not supported", 4: "no permission", 15: "the GPU fell off the bus",
              255: "in use by another client"}


@dataclass(frozen=True)
class ResetOutcome:
    bus_id: str | None      # as printed ("00000000:1A:00.0"); None when only the exit status speaks
    reset: bool
    reason: str = ""        # why not ("In use by another client"); "" when reset


def _why(text: str, rc: int | None) -> str:
    words = " ".join(text.split()).rstrip(".")
    return words or RC_REASONS.get(rc or 0, f"exit {rc}" if rc is not None else "no reason given")


def parse_reset_output(text: str, rc: int | None) -> list[ResetOutcome]:
    """Each GPU the output names, in order; a GPU named twice (two runs pasted) appears twice."""
    out: list[ResetOutcome] = []
    listing = False
    for line in str(text).splitlines():
        m = _OK_RE.search(line)
        if m:
            out.append(ResetOutcome(m.group(1), True))
            listing = False
            continue
        if "could not be reset:" in line:
            m = _ONE_LINE_RE.search(line)
            if m:
                out.append(ResetOutcome(m.group(1), False, _why(m.group(2), rc)))
            listing = m is None
            continue
        if listing:
            m = _LISTED_RE.match(line)
            if m:
                out.append(ResetOutcome(m.group(1), False, _why(m.group(2), rc)))
                continue
            listing = False
        m = _OLD_IN_USE_RE.search(line)
        if m:
            out.append(ResetOutcome(m.group(1), False, "in use by another process"))
            continue
        m = _OTHER_RE.search(line)
        if m:
            out.append(ResetOutcome(m.group(1), False, _why(m.group(2), rc)))
    if not out and rc not in (None, 0):
        out.append(ResetOutcome(None, False, _why("", rc)))
    return out


def reset_outcome_line(outcomes: list[ResetOutcome], rc: int | None) -> str:
    """'GPU 00000000:1A:00.0 not reset: In use by another client' / '8 GPUs reset (A … H)'."""
    last: dict[str | None, ResetOutcome] = {}
    for o in outcomes:
        last.pop(o.bus_id, None)
        last[o.bus_id] = o
    done = [o.bus_id for o in last.values() if o.reset and o.bus_id]
    refused: dict[str, list[str]] = {}
    for o in last.values():
        if not o.reset:
            refused.setdefault(o.reason, []).append(o.bus_id or "")
    parts = []
    for reason, buses in refused.items():
        named = [b for b in buses if b]
        who = ("GPU " + named[0]) if len(named) == 1 else (f"GPUs {', '.join(named)}" if named else "the GPU")
        parts.append(f"{who} not reset: {reason}")
    if len(done) == 1:
        parts.append(f"GPU {done[0]} reset")
    elif done:
        parts.append(f"{len(done)} GPUs reset ({done[0]} … {done[-1]})")
    if not parts and rc not in (None, 0):
        parts.append(f"not reset: {_why('', rc)}")
    return "; ".join(parts)
