"""``nvidia-smi pmon -c 1 -s u`` -> each process's SM utilisation per GPU, and crediting it.

Pure; never raises, whatever the text. What nvidia-smi prints (its man page; the layout below is
the documented one — see docs/field-facts.md for what was and was not seen)::

    # gpu        pid  type    sm   mem   enc   dec   command
    # Idx          #   C/G     %     %     %     %   name
        0      22010     C    98    56     -     -   python3
        1          -     -     -     -     -     -   -

Newer drivers add columns (``jpg``, ``ofa``; a ``fb`` column with ``-s um``), so the ``gpu``,
``pid`` and ``sm`` columns are found by the header line's names, never by position. ``-`` is a
value the driver does not report (not supported, no sample): None, never 0. A device with no
process prints one row of ``-``: no PID, nothing credited. The command name is the last column
and may hold spaces: a row is split into as many fields as the header has names.

A driver or GPU that does not support it prints (keylase/nvidia-patch #89, driver 415.27;
tests/fixtures/real/pmon-not-supported-nvidia-patch-89.txt)::

    Not supported on the device(s)
    Failed to process command line

``parse_pmon`` says so (``PmonParse.unsupported``): the SSH source then asks far less often.
``credit_sm`` puts the busiest GPU's figure on each process the driver lists (the local NVML
source uses it too).
"""
from __future__ import annotations

import bisect
import operator
from dataclasses import dataclass, field
from typing import Mapping, Sequence

from console.model import DriverProc, Proc, proc_with

#: the words nvidia-smi prints when pmon cannot run on the node's GPUs
NOT_SUPPORTED = "Not supported on the device(s)"
#: a process's SM share above this is not a percentage: unknown
_MOST = 100


@dataclass(frozen=True)
class PmonParse:
    """``sm``: {pid: {GPU index: SM % or None where the driver printed ``-``}};
    ``unsupported``: nvidia-smi said pmon is not supported on the device(s)."""
    sm: Mapping[int, Mapping[int, int | None]] = field(default_factory=dict)
    unsupported: bool = False


EMPTY = PmonParse()


def _int(word: str, most: int | None = None) -> int | None:
    """A plain decimal (ASCII digits only: no '²', no '٣'), within ``most``; else None."""
    if not (word.isascii() and word.isdecimal()) or len(word) > 12:
        return None
    value = int(word)
    return value if most is None or value <= most else None


def _header(line: str) -> list[str] | None:
    """The column names of a ``# gpu pid type sm ...`` line, or None for any other line."""
    if not line.startswith("#"):
        return None
    names = line[1:].lower().split()
    return names if {"gpu", "pid", "sm"} <= set(names) else None


def parse_pmon(text: object) -> PmonParse:
    """pmon's text -> PmonParse. Rows before a header line, rows with too few fields, a PID or
    GPU that is not a number, and any other text are left out; the last row of a (PID, GPU)
    wins (``-c 1`` prints one)."""
    if not isinstance(text, str):
        return EMPTY
    columns: list[str] | None = None
    sm: dict[int, dict[int, int | None]] = {}
    unsupported = False
    for line in text.splitlines():
        line = line.strip()
        if not line:
            continue
        if NOT_SUPPORTED.lower() in line.lower():
            unsupported = True
            continue
        names = _header(line)
        if names is not None:
            columns = names
            continue
        if line.startswith("#") or columns is None:
            continue
        words = line.split(None, len(columns) - 1)
        if len(words) < len(columns) - 1:     # the command name may be empty: one fewer field
            continue
        row = dict(zip(columns, words))
        pid, gpu = _int(row.get("pid", "")), _int(row.get("gpu", ""))
        if pid is None or gpu is None or pid <= 0:
            continue
        sm.setdefault(pid, {})[gpu] = _int(row.get("sm", "-"), _MOST)
    return PmonParse(sm=sm, unsupported=unsupported and not sm)


def busiest(per_gpu: Mapping[int, int | None] | None) -> int | None:
    """The highest SM % over a process's GPUs; None when no GPU reports one."""
    values = [v for v in (per_gpu or {}).values() if v is not None]
    return max(values) if values else None


_PID = operator.attrgetter("pid")


def credit_sm(procs: Sequence[Proc], driver_procs: Sequence[DriverProc],
              sm: Mapping[int, Mapping[int, int | None]], cache: dict | None = None, *,
              fresh: bool = False) -> tuple[Proc, ...]:
    """``gpu_sm_pct`` on every process the driver lists here (``local`` not False: a PID of
    another namespace that collides with a local one gets nothing): the busiest of its GPUs,
    None where no GPU reports one; every other process None. ``cache`` (one dict per node, kept
    from poll to poll): the same inputs give the very same tuple, a process whose figure did
    not change is the same object. ``fresh``: the caller vouches that ``procs`` are in PID
    order, one a PID, and that none has a figure yet (the parser's)."""
    if cache is not None:
        memo = cache.get("sm_memo")
        if memo is not None and memo[0] is procs and memo[1] is driver_procs and memo[2] is sm:
            return memo[3]
    listed = {d.pid for d in driver_procs if d.local is not False}
    before = cache.get("sm_made", {}) if cache is not None else {}
    made: dict[int, tuple[Proc, int | None, Proc]] = {}

    def credited(p: Proc, value: int | None) -> Proc:
        hit = before.get(p.pid)
        if hit is None or hit[0] is not p or hit[1] != value:
            hit = (p, value, proc_with(p, gpu_sm_pct=value))
        made[p.pid] = hit
        return hit[2]

    if fresh:
        # no figure on any process yet, in PID order, one each (the parser's): only the listed
        # ones can change, found by bisection, not a walk of a real-size node's 2,000 processes
        out = list(procs)
        for pid in listed:
            i = bisect.bisect_left(procs, pid, key=_PID)
            if i < len(procs) and procs[i].pid == pid:
                value = busiest(sm.get(pid))
                if value is not None:
                    out[i] = credited(procs[i], value)
    else:
        out = []
        for p in procs:
            value = busiest(sm.get(p.pid)) if p.pid in listed else None
            out.append(p if value == p.gpu_sm_pct else credited(p, value))
    result = tuple(out)
    if cache is not None:
        cache["sm_made"] = made
        cache["sm_memo"] = (procs, driver_procs, sm, result)
    return result
