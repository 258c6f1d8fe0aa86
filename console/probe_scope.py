"""What one probe reads of the process table: its Scope, and the process sections' commands.

The probe's two speeds (see probe.py). A *light* probe reads the watched PIDs (stat and fds),
the threads of the PIDs in ``threads``, and whatever the node's listing shows as new since its
last probe; a *whole* probe reads every stat record and every fd as well. The scope travels as
shell variables set at the start of the pids section (``scope_of`` reads them back, for the
simulator), so every other section's command line is the same from probe to probe.

Costs measured on the 2-core machine class at 2,067 processes / 11,000 threads (per run, CPU):
listing /proc's names ~3 ms; every stat record 27 ms (grep; cat pays twice that); every fd
(~10,000) 75 ms; every thread's stat 150 ms (~9 µs a thread); ``ps`` 91 ms even with ``-p``
(procps reads every process to start). So ps is never run by the probe: the command line and
the user come from /proc/PID/cmdline and status, for new PIDs only. Measured again on
2026-12-02 (a slower day; 2,065 processes, ~6,000 fds, 12,000 threads; the kernel's time is most
of each): listing /proc 6-8 ms, every stat record 45-57 ms, every fd 90-100 ms, 800 threads'
stat 19-26 ms. So a light probe on a quiet node does not list /proc either (LISTING_COMMAND:
the kernel's counts), and a whole probe reads the stat records and fds of the listing it just
made instead of listing /proc twice more.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

#: the probe shell's variables: the scope (set by the pids section) ...
WATCHED = "gi_W"      # PIDs whose stat and fds every probe reads
THREADS = "gi_T"      # PIDs whose threads every probe reads ("all": every process's)
ARGS = "gi_A"         # PIDs whose command line and user this probe reads (besides the new ones)
FDS = "gi_H"          # PIDs whose fds every probe walks (the GPU's own: holders, the driver's, Z, D)
ACK = "gi_K"          # the generation of the listing the console holds (empty: none)
GEN = "gi_g"          # the generation of the listing this shell last sent whole
MODE = "gi_k"         # "whole": every stat record and every fd; "light"
#: ... and what the shell keeps from probe to probe, or works out for the others
LISTING = "gi_p"      # the names of /proc's PID directories at this shell's last probe
LAST_PID = "gi_lp"    # /proc/sys/kernel/ns_last_pid then
NEW = "gi_n"          # PIDs in this listing and not in the last one
#: a command line is read in at most this many arguments of at most ARG_MAX_BYTES each (a
#: process chooses its own: a flood of long ones must not flood the probe)
ARGS_PER_PROCESS = 32
ARG_MAX_BYTES = 512
#: the most PIDs a scope names in each list (a node whose watched set is bigger gets the rest
#: from its whole probes)
MAX_SCOPE_PIDS = 1024
LAST_PID_FILE = "/proc/sys/kernel/ns_last_pid"
#: getent may wait on a directory service (LDAP, sssd)
USERS_TIMEOUT_S = 5

_NEW_AWK = 'NR==1{for(i=1;i<=NF;i++)s[$i]=1;next}{for(i=1;i<=NF;i++)if(!($i in s))printf "%s ",$i}'


@dataclass(frozen=True)
class Scope:
    """What a probe reads of the process table. The default is a shell's first probe: whole,
    every thread, and (the shell's listing being empty) every PID new."""
    whole: bool = True
    watched: tuple[int, ...] = ()
    #: PIDs whose threads are read; None: every process's threads
    threads: tuple[int, ...] | None = None
    args: tuple[int, ...] = ()
    #: PIDs whose fds every probe walks: the GPU's own processes (a family member that comes to
    #: hold a device file does so at its birth, inheriting it, and is new then; or later, and
    #: the next whole probe finds it)
    fds: tuple[int, ...] = ()
    #: the generation of the PID listing the console holds: the node answers "same" instead of
    #: the listing when its own is that one and has not changed (None: send it)
    ack: int | None = None

    def __post_init__(self) -> None:
        for name in ("watched", "threads", "args", "fds"):
            pids = getattr(self, name)
            if pids is not None:
                object.__setattr__(self, name, _pids(pids))


def _pids(pids) -> tuple[int, ...]:
    return tuple(sorted({int(p) for p in pids if 0 < int(p) < 1 << 31}))[:MAX_SCOPE_PIDS]


def _words(pids: tuple[int, ...]) -> str:
    return " ".join(str(p) for p in pids)


#: the path lists the scope line derives from its PID lists, each (variable, PIDs, leaf): the
#: sections use them as they are (word splitting, and a task glob's expansion), so no shell loop
#: and no process builds them on the node
_PATH_VARS = (("gi_Ws", "watched", "stat"), ("gi_Wf", "fds", "fd"), ("gi_As", "args", "stat"),
              ("gi_Ac", "args", "cmdline"), ("gi_Au", "args", "status"), ("gi_Tt", "threads", "task/[0-9]*/stat"))


def scope_line(scope: Scope) -> str:
    """The variable assignments that open the pids section: the PID lists, the mode, and the
    paths derived from them."""
    threads = "all" if scope.threads is None else _words(scope.threads)
    head = (f"{WATCHED}='{_words(scope.watched)}'; {THREADS}='{threads}'; {ARGS}='{_words(scope.args)}'; "
            f"{FDS}='{_words(scope.fds)}'; {ACK}='{'' if scope.ack is None else int(scope.ack)}'; "
            f"{MODE}={'whole' if scope.whole else 'light'}; ")
    paths = "".join(f"{var}='{' '.join(f'/proc/{p}/{leaf}' for p in (getattr(scope, name) or ()))}'; "
                    for var, name, leaf in _PATH_VARS)
    return head + paths


_SCOPE_RE = re.compile(rf"^{WATCHED}='([0-9 ]*)'; {THREADS}='(all|[0-9 ]*)'; {ARGS}='([0-9 ]*)'; "
                       rf"{FDS}='([0-9 ]*)'; {ACK}='([0-9]*)'; {MODE}=(whole|light); ")


def scope_of(command: str) -> tuple[Scope, str] | None:
    """The Scope a pids section's command sets, and the rest of the command; None when it does
    not start with a scope line."""
    m = _SCOPE_RE.match(command)
    if m is None:
        return None

    def nums(text: str) -> tuple[int, ...]:
        return tuple(int(w) for w in text.split())
    threads = None if m.group(2) == "all" else nums(m.group(2))
    ack = int(m.group(5)) if m.group(5) and len(m.group(5)) <= 18 else None
    scope = Scope(whole=m.group(6) == "whole", watched=nums(m.group(1)), threads=threads, args=nums(m.group(3)),
                  fds=nums(m.group(4)), ack=ack)
    line = scope_line(scope)
    if not command.startswith(line):
        return None
    return scope, command[len(line):]


#: the kernel's own counts, read by the shell itself (no process): /proc/loadavg's fourth field
#: ends with the number of tasks (threads, kernel threads included), its fifth is the PID it
#: allocated last (the same as ns_last_pid, which the shell's byte-at-a-time ``read`` cannot read)
LOADAVG_FILE = "/proc/loadavg"
#: the tasks there were when the shell's listing was last known exact
TASKS = "gi_tp"
#: at most this many PIDs allocated since the last probe are looked at one by one; more: the listing
COUNT_MAX_PIDS = 256
#: the word the pids section says when its listing came from the kernel's counts, not a glob
COUNTED = "counted"

#: the listing, after the scope: the kernel's last PID and task count; "wrapped" when the PID
#: went down (every PID counts as new then); then the PID directories' names.
#:
#: A light probe first asks the kernel's counts (console/probe_scope.py, docs/performance.md):
#: PIDs are handed out in increasing order, so every task that began since the last listing has
#: a PID after that listing's last one, and is looked at by number (``[ -e /proc/N ]``: a thread
#: too); when the tasks alive among those, added to the tasks of the last listing, make the
#: task count now, no task ended, so the listing is the last one and the new PIDs are those of
#: them that lead their thread group (Tgid in /proc/N/status). The counts are read again after
#: the look (a task that began or ended meanwhile, one that ended before it was looked at: the
#: listing). Otherwise (a task ended, the PID went down, more than COUNT_MAX_PIDS began, a whole
#: probe, the shell's first) the shell lists /proc with its own glob (no process) and one ``awk``
#: names the PIDs not in the last listing (only when it changed). The names follow "gen N", or
#: "same" when they are what the console holds (its ACK is this shell's GEN and nothing changed:
#: ~14 KB a poll less on a real-size node).


def _read_counts(tasks: str, last: str) -> str:
    """Read /proc/loadavg's "running/tasks" into ``tasks`` and its last PID into ``last``."""
    return f"read -r gi_x gi_x gi_x {tasks} {last} gi_x 2>/dev/null <{LOADAVG_FILE}"


_COUNTS = (
    f"gi_t=; gi_l=; {_read_counts('gi_t', 'gi_l')}; gi_t=${{gi_t#*/}}; "
    f"case \"$gi_l\" in ''|*[!0-9]*) gi_l=$(cat {LAST_PID_FILE} 2>/dev/null);; esac; "
    "case \"$gi_t\" in *[!0-9]*) gi_t=;; esac; ")
_BY_COUNTS = (
    f"gi_c=; gi_m=; if [ \"${MODE}\" = light ] && [ -n \"${LISTING}\" ] && [ -n \"$gi_t\" ] && "
    f"[ -n \"${TASKS}\" ] && [ \"$gi_l\" -le $((${LAST_PID} + {COUNT_MAX_PIDS})) ] 2>/dev/null; then "
    f"gi_a=0; gi_i=${LAST_PID}; while [ $gi_i -lt $gi_l ]; do gi_i=$((gi_i+1)); "
    "[ -e /proc/$gi_i ] && gi_a=$((gi_a+1)); done; "
    f"if [ $((${TASKS} + gi_a)) -eq \"$gi_t\" ] && {_read_counts('gi_y', 'gi_z')} "
    f"&& [ \"${{gi_y#*/}} $gi_z\" = \"$gi_t $gi_l\" ]; then gi_i=${LAST_PID}; while [ $gi_i -lt $gi_l ]; do "
    "gi_i=$((gi_i+1)); gi_y=; while read -r gi_x gi_y; do [ \"$gi_x\" = Tgid: ] && break; gi_y=; "
    "done 2>/dev/null </proc/$gi_i/status; [ \"$gi_y\" = \"$gi_i\" ] && gi_m=\"$gi_m $gi_i\"; done; "
    f"gi_c=\"${LISTING}$gi_m\"; echo {COUNTED}; fi; fi; ")
LISTING_COMMAND = (
    _COUNTS +
    f"if [ \"${{gi_l:-0}}\" -lt \"${{{LAST_PID}:-0}}\" ] 2>/dev/null; then {LISTING}=; echo wrapped; fi; "
    "echo \"last $gi_l\"; " + _BY_COUNTS +
    f"if [ -n \"$gi_c\" ]; then {NEW}=$gi_m; gi_s=; [ -n \"$gi_m\" ] || gi_s=1; else "
    "set --; if cd /proc 2>/dev/null; then set -- [0-9]*; cd \"$OLDPWD\" 2>/dev/null; fi; gi_c=\"$*\"; "
    f"if [ \"$gi_c\" = \"${LISTING}\" ]; then {NEW}=; gi_s=1; "
    f"else {NEW}=$(printf '%s\\n%s\\n' \"${LISTING}\" \"$gi_c\" | awk '{_NEW_AWK}'); gi_s=; fi; fi; "
    f"{LAST_PID}=$gi_l; {TASKS}=$gi_t; "
    f"if [ -n \"$gi_s\" ] && [ -n \"${GEN}\" ] && [ \"${ACK}\" = \"${GEN}\" ]; then echo same; "
    f"else {GEN}=$((${{{GEN}:-0}}+1)); echo \"gen ${GEN}\"; echo \"$gi_c\"; fi; {LISTING}=$gi_c")


def pids_command(scope: Scope) -> str:
    return scope_line(scope) + LISTING_COMMAND


def _with_new(leaf: str) -> str:
    """Append /proc/PID/LEAF of each new PID (one printf, in a subshell, only when there are)."""
    return f"[ -z \"${NEW}\" ] || set -- \"$@\" $(printf '/proc/%s/{leaf} ' ${NEW})"


def _listed(leaf: str) -> str:
    """``set --`` to /proc/PID/LEAF of every PID of the listing the pids section just made (one
    printf in a subshell: a glob of /proc/[0-9]*/LEAF would list /proc again, ~8 ms of the
    kernel's time at 2,000 processes, twice a whole probe)."""
    return f"set -- $(printf '/proc/%s/{leaf} ' ${LISTING})"


_NONE_OR = "[ $# -eq 0 ] || "
#: stat records of the watched and new PIDs; every PID's in a whole probe (grep, not cat:
#: coreutils cat costs twice as much a file on /proc)
STAT_SCOPED = (f"case ${MODE} in whole) {_listed('stat')};; *) set -- $gi_Ws $gi_As; {_with_new('stat')};; esac; "
               f"{_NONE_OR}grep -ahs '' \"$@\" </dev/null")
ARGS_SCOPED = (f"set -- $gi_Ac; {_with_new('cmdline')}; "
               f"{_NONE_OR}LC_ALL=C grep -azHos -m {ARGS_PER_PROCESS} '^.\\{{0,{ARG_MAX_BYTES}\\}}' \"$@\" </dev/null")
UIDS_SCOPED = f"set -- $gi_Au; {_with_new('status')}; {_NONE_OR}grep -Hs -m 1 '^Uid:' \"$@\" </dev/null"
#: the probe shell's variable the dstate section leaves the PIDs of its threads in D in (a PID once
#: per thread; the pend section reads their pending signals)
DSTATE_PIDS = "gi_D"
#: threads in D among the scope's: one grep names them (a task's stat path holds no space), the loop
#: runs in the probe shell itself (no pipe, so DSTATE_PIDS outlives it)
DSTATE_SCOPED = (f"case ${THREADS} in all) set -- /proc/[0-9]*/task/[0-9]*/stat;; *) set -- $gi_Tt;; esac; "
                 f"{DSTATE_PIDS}=; {_NONE_OR}for f in $(grep -ls ') D ' \"$@\" </dev/null); do d=${{f%/stat}}; "
                 "w=; read -r w 2>/dev/null < $d/wchan; "
                 "printf '%s %s %s\\0' \"$d\" \"${w:--}\" \"$(cat $f 2>/dev/null)\"; "
                 f"p=${{d#/proc/}}; {DSTATE_PIDS}=\"${DSTATE_PIDS} ${{p%%/*}}\"; done")


def fd_dirs() -> str:
    """``set --`` to the fd directories the fds section walks."""
    return f"case ${MODE} in whole) {_listed('fd')};; *) set -- $gi_Wf; {_with_new('fd')};; esac"


#: a shell's first probe names every user the node enumerates (its local ones, as a rule), at
#: most this many; a user it did not is named by a later probe
MAX_USERS_LISTED = 4096


def users_command(uids: tuple[int, ...] | list[int] = ()) -> str:
    """The names of ``uids`` (NSS included: getent); no uids: every user getent enumerates."""
    head = f"timeout {USERS_TIMEOUT_S} getent passwd"
    if not uids:
        return f"{head} | head -n {MAX_USERS_LISTED}"
    return f"{head} " + " ".join(str(int(u)) for u in sorted(set(uids)) if 0 <= int(u) < 1 << 32)


def users_uids(command: str) -> list[int] | None:
    """The user IDs a users_command line asks for ([] for the enumeration), or None when the
    line is not one."""
    if command == users_command():
        return []
    head = f"timeout {USERS_TIMEOUT_S} getent passwd "
    if not command.startswith(head):
        return None
    words = command[len(head):].split()
    if not words or not all(w.isascii() and w.isdecimal() for w in words):
        return None
    return [int(w) for w in words]
