"""Pure parsers for the probe's process sections (stat, ps, dstate, fds, pidns; probe.py).

A process chooses its own comm (15 bytes, any byte but NUL: newlines and parentheses
included), its command line and the names of the files it opens; none of that can make an
entry for another PID or change one. How each section is framed so that it cannot:

- stat: records ``PID (COMM) S f4 … fN\\n`` concatenated. The kernel's rule is "COMM ends at
  the last ')' of the record"; in one stream the record's end is unknown, so the reader takes,
  from the record's " (", the first ')' (within COMM_MAX characters) followed by a state letter
  and at least MIN_STAT_FIELDS numeric fields up to a newline. A comm cannot hold such a tail
  (it is 15 bytes; the tail is 40 and more), so a comm such as ``a\\n<victim> (fake`` stays the
  comm of its own record.
- ps: procps escapes what it prints (a newline in argv as a space, other control characters as
  ``?``), so a line is one process; a PID that still shows up twice is dropped, never merged.
- dstate, fds: NUL-terminated records (a link target may hold newlines, never a NUL).
- pidns: PIDs taken from ``/proc/PID/fd`` paths only.
- exe: NUL-terminated records "/proc/PID TARGET" (find's %h of a path the shell gave: the PID is
  never from the target).
- pend: grep -H lines "/proc/PID/status:SigPnd:\tHEX"; status escapes the name it shows, so no
  process can put a line of its own there, and only lines that start with the field count.

Every function takes text and returns values; none raises on any input, and none yields two
entries for one PID.
"""
from __future__ import annotations

import re
import sys
from dataclasses import dataclass, field
from typing import Mapping

from console.model import ThreadInfo
from console.probe import SIGKILL_BIT

#: the longest comm /proc/PID/stat shows: 15 bytes for a task, 63 for a kernel thread's full name
COMM_MAX = 64
#: numeric fields a stat record has after its state (kernels since 2.6 print 41 and more; the
#: parser needs 19: ppid … starttime)
MIN_STAT_FIELDS = 20

_DIGITS_MAX = 40        # a field longer than this is no kernel number (and int() of it is slow)
# one record: the comm is the shortest run (so the first ')') that a state letter and at least
# MIN_STAT_FIELDS numbers up to a newline follow (group 4: ppid … starttime, each with its space)
_RECORD = re.compile(r"([0-9]{1,10}) \((.{0,%d}?)\) ([A-Za-z]) ((?:-?[0-9]+ ){%d})[-0-9 ]*\n"
                     % (COMM_MAX, MIN_STAT_FIELDS - 1), re.DOTALL)
_PS_LINE = re.compile(r" *([0-9]{1,10}) +(\S+)(?: +(.*))?", re.DOTALL)
_PS_LINE_NO_USER = re.compile(r" *([0-9]{1,10})(?: +(.*))?", re.DOTALL)


@dataclass(frozen=True, slots=True)
class StatLine:
    pid: int
    comm: str
    state: str
    ppid: int
    num_threads: int | None
    start_ticks: int | None
    pgrp: int | None = None         # field 5: its process group
    session: int | None = None      # field 6: its session (setsid starts a new one)
    utime: int | None = None        # field 14: CPU time in user mode, clock ticks
    stime: int | None = None        # field 15: CPU time in the kernel, clock ticks
    #: hash() of the record's text (parse_stat: a record read again unchanged is this StatLine);
    #: not part of what the record says
    h: int | None = field(default=None, compare=False, repr=False)

    @property
    def cpu_ticks(self) -> int | None:
        """utime + stime: the CPU time the process has used (None when either is unreadable)."""
        return None if self.utime is None or self.stime is None else self.utime + self.stime


def parse_stat_line(line: str) -> StatLine | None:
    """One whole /proc/PID/stat record (one file's content): comm may hold spaces, parentheses
    and newlines; by the kernel's rule it ends at the last ')'."""
    open_at = line.find(" (")
    close_at = line.rfind(")")
    if open_at <= 0 or close_at < open_at:
        return None
    pid_text = line[:open_at].strip()
    if not (pid_text.isascii() and pid_text.isdecimal()):
        return None
    fields = line[close_at + 1:].split()
    if not fields:
        return None
    return _stat(int(pid_text), sys.intern(line[open_at + 2:close_at]), fields)


def _stat(pid: int, comm: str, fields: list[str]) -> StatLine | None:
    def num(i: int) -> int | None:
        digits = (fields[i] if len(fields) > i else "").removeprefix("-")
        ok = digits.isascii() and digits.isdecimal() and len(digits) <= _DIGITS_MAX
        return int(fields[i]) if ok else None

    ppid = num(1)
    if ppid is None:
        return None
    def unsigned(i: int) -> int | None:      # a CPU time: the kernel prints it unsigned
        return None if len(fields) > i and fields[i].startswith("-") else num(i)

    return StatLine(pid=pid, comm=comm, state=fields[0][:1], ppid=ppid, num_threads=num(17),
                    start_ticks=num(19), pgrp=_one(num(2), pid, ppid), session=_one(num(3), pid, ppid),
                    utime=unsigned(11), stime=unsigned(12))


def _one(value: int | None, pid: int, ppid: int) -> int | None:
    """``value``, as the PID's or the parent's int object where it is that number (a group or
    session leader's, its parent's): one object, not one more per record (docs/performance.md,
    "Memory")."""
    return pid if value == pid else ppid if value == ppid else value


def _int(digits: str) -> int | None:
    return int(digits) if len(digits) <= _DIGITS_MAX else None


def _from_match(m: re.Match, h: int | None = None) -> StatLine | None:
    nums = m.group(4).split(" ")           # ppid … starttime: the numbers after the state
    ppid = _int(nums[0])
    if ppid is None:
        return None
    pid = int(m.group(1))
    return StatLine(pid=pid, comm=sys.intern(m.group(2)), state=m.group(3), ppid=ppid,
                    num_threads=_int(nums[16]), start_ticks=_int(nums[18]), pgrp=_one(_int(nums[1]), pid, ppid),
                    session=_one(_int(nums[2]), pid, ppid), utime=_nonneg(nums[10]), stime=_nonneg(nums[11]), h=h)


def _nonneg(digits: str) -> int | None:
    """A field the kernel prints unsigned (a CPU time): None for a negative or absurd one."""
    return None if digits.startswith("-") else _int(digits)


def _stat_by_lines(text: str, before: Mapping[int, StatLine], made: set[int]) -> dict[int, StatLine] | None:
    """The usual case, no comm holding a newline: every line is one whole record, and a record
    whose text is the one ``before`` holds for its PID (its hash, ``StatLine.h``) is not read
    again. None when a line is not a whole record (a comm with a newline, output cut short):
    then the stream reader decides. Where every line is a whole record, the stream reader would
    have matched exactly these records (its comm is the shortest that a state and the numbers up
    to a newline follow, and they cannot cross one).

    The PID before the line's first space only says which StatLine to compare with: the record
    is that StatLine only where its whole text hashes as the one it was read from."""
    lines = text.split("\n")
    if lines.pop() != "":
        return None
    out: dict[int, StatLine] = {}
    get = before.get
    # the records come in the order the table has them (the listing's: a whole probe reads the
    # PIDs it lists, in that order; the table keeps it, a PID new since then at its end): each
    # line is first compared with the table's record at the same place
    known = list(before.values())
    at, count = 0, len(known)
    for line in lines:
        key = hash(line)
        here = known[at] if at < count else None
        if here is not None and here.h == key:
            if here.pid not in out:          # the first record of a PID wins
                out[here.pid] = here
            at += 1
            continue
        try:
            old = get(int(line[:line.find(" ")]))
        except ValueError:
            old = None
        if old is not None and old is here:
            at += 1
        if old is not None and old.h == key:
            st, new = old, False
        else:
            try:
                st, new = read_record(line, key), True
            except ValueError:
                made.clear()
                return None
        if st is not None and st.pid not in out:
            out[st.pid] = st
            if new:
                made.add(st.pid)
    return out


def read_record(line: str, h: int | None = None) -> StatLine | None:
    """One line that is one whole stat record (no newline in its comm), ``h`` its hash: its
    StatLine (None: its parent is no number). ValueError where the line is not a whole record."""
    m = _RECORD.fullmatch(line + "\n")
    if m is None:
        raise ValueError("not one whole stat record")
    return _from_match(m, h)


def parse_stat(text: str, before: Mapping[int, StatLine] | None = None,
               made: set[int] | None = None) -> dict[int, StatLine]:
    """``cat /proc/[0-9]*/stat``: the records read one after the other (see the module's doc).

    A record that does not parse (output cut short) is skipped up to the next newline; the
    first record of a PID wins (the kernel prints each once). ``before``: the node's process
    table ({pid: StatLine}); a record whose text is the one its StatLine was read from (the
    record's hash, kept on the StatLine: the text itself is not kept, a real-size node's are
    ~0.6 MB) is that StatLine, not read again. A str hash is 64-bit SipHash under this process's
    secret key: no process on the node can make its record hash as another's. ``made``: filled
    with the PIDs whose StatLine this call made anew (the others are ``before``'s own)."""
    if made is None:
        made = set()
    if before is not None:
        fast = _stat_by_lines(text, before, made)
        if fast is not None:
            return fast
    out: dict[int, StatLine] = {}
    pos, end = 0, len(text)
    while pos < end:
        m = _RECORD.match(text, pos)
        if m is None:
            nl = text.find("\n", pos)
            if nl < 0:
                break
            pos = nl + 1
            continue
        pos = m.end()
        pid = int(m.group(1))
        if pid in out:
            continue
        st = _from_match(m)
        if st is not None:
            out[pid] = st
            made.add(pid)
    return out


def parse_ps(text: str, *, user: bool = True) -> dict[int, tuple[str, str]]:
    """`ps -eo pid=,user:32=,args=` -> {pid: (user, args)}.

    ``user=False``: `ps -eo pid=,args=` (no user column) -> {pid: ("", args)}. A PID on two
    lines is left out (ambiguous): one line never stands for another PID."""
    out: dict[int, tuple[str, str]] = {}
    twice: set[int] = set()
    line_re = _PS_LINE if user else _PS_LINE_NO_USER
    for line in text.split("\n"):
        m = line_re.fullmatch(line.rstrip("\r"))
        if m is None:
            continue
        pid = int(m.group(1))
        entry = (m.group(2), (m.group(3) or "").rstrip()) if user else ("", (m.group(2) or "").rstrip())
        if pid in out or pid in twice:
            twice.add(pid)
            out.pop(pid, None)
            continue
        out[pid] = entry
    return out


def _records(text: str) -> list[str]:
    """The NUL-terminated records; what follows the last NUL (output cut short) is not one."""
    return [r for r in text.split("\0")[:-1] if r]


def parse_dstate(text: str) -> dict[int, list[ThreadInfo]]:
    """NUL-terminated "/proc/PID/task/TID WCHAN STAT-RECORD" -> {pid: [threads in D]}."""
    out: dict[int, dict[int, ThreadInfo]] = {}
    for rec in _records(text):
        parts = rec.split(" ", 2)
        if len(parts) < 3:
            continue
        path = parts[0].split("/")
        if len(path) != 5 or path[0] != "" or path[1] != "proc" or path[3] != "task":
            continue
        if not (path[2].isascii() and path[2].isdecimal() and path[4].isascii() and path[4].isdecimal()):
            continue
        st = parse_stat_line(parts[2])
        if st is None or st.state != "D":
            continue
        wchan = None if parts[1] in ("-", "0") else parts[1]
        out.setdefault(int(path[2]), {}).setdefault(
            int(path[4]), ThreadInfo(tid=int(path[4]), state="D", wchan=wchan, name=st.comm))
    return {pid: list(threads.values()) for pid, threads in out.items()}


def parse_fds(text: str) -> dict[int, tuple[str, ...]]:
    """NUL-terminated "/proc/PID/fd TARGET" -> {pid: device files held}."""
    out: dict[int, set[str]] = {}
    for rec in _records(text):
        where, sep, target = rec.partition(" ")
        path = where.split("/")
        if not sep or not target or len(path) != 4 or path[0] != "" or path[1] != "proc" \
                or not (path[2].isascii() and path[2].isdecimal()) or path[3] != "fd":
            continue
        out.setdefault(int(path[2]), set()).add(target)
    return {pid: tuple(sorted(files)) for pid, files in out.items()}


def parse_pidns(text: str) -> dict[int, str]:
    """Lines "/proc/PID/ns pid:[NNNN]" (find's %h %l) or "PID pid:[NNNN]" -> {pid: namespace};
    the first line of a PID wins."""
    out: dict[int, str] = {}
    for line in text.split("\n"):
        parts = line.split(" ")
        if len(parts) != 2 or not parts[1]:
            continue
        where = parts[0]
        if where.startswith("/proc/") and where.endswith("/ns"):
            where = where[6:-3]
        if where.isascii() and where.isdecimal() and len(where) <= 10:
            out.setdefault(int(where), parts[1])
    return out


def parse_exe(text: str) -> dict[int, str]:
    """NUL-terminated "/proc/PID TARGET" (find -printf '%h %l\\0' over /proc/PID/exe) -> {pid:
    executable}. An empty target (unreadable: another user's process, a kernel thread, a zombie)
    is no entry; the first record of a PID wins."""
    out: dict[int, str] = {}
    for rec in _records(text):
        where, sep, target = rec.partition(" ")
        path = where.split("/")
        if not sep or not target or len(path) != 3 or path[0] != "" or path[1] != "proc" \
                or not (path[2].isascii() and path[2].isdecimal() and len(path[2]) <= 10):
            continue
        out.setdefault(int(path[2]), target)
    return out


_MASK_MAX = 32          # hex digits: the kernel prints 16 (64 signals)


def parse_pending(text: str) -> dict[int, bool]:
    """grep -H lines "/proc/PID/status:SigPnd:\\tHEX" / "…:ShdPnd:\\tHEX" -> {pid: SIGKILL pending}.

    True when either mask has SIGKILL; False only when both were read without it; a PID with one
    clean mask (the other line cut off) or none readable is no entry (unknown)."""
    seen: dict[int, dict[str, bool]] = {}
    for line in text.split("\n"):
        path, sep, rest = line.partition(":")
        parts = path.split("/")
        if not sep or len(parts) != 4 or parts[0] != "" or parts[1] != "proc" or parts[3] != "status" \
                or not (parts[2].isascii() and parts[2].isdecimal() and len(parts[2]) <= 10):
            continue
        field, sep, value = rest.partition(":")
        value = value.strip()
        if not sep or field not in ("SigPnd", "ShdPnd") or not value or len(value) > _MASK_MAX \
                or not all(c in "0123456789abcdefABCDEF" for c in value):
            continue
        seen.setdefault(int(parts[2]), {}).setdefault(field, bool(int(value, 16) & SIGKILL_BIT))
    return {pid: any(masks.values()) for pid, masks in seen.items() if any(masks.values()) or len(masks) == 2}
