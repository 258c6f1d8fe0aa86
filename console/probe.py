"""The node probe and its wire format: one POSIX-shell script read in one round trip.

The lowest layer beside console/model.py: the sources build and parse it, the simulator
(console/sim/) answers it, and neither imports the other for it.

Used by the SSH source (fed to a long-lived remote ``sh``) and by the
simulator (whose fake shell answers exactly these command lines with the real
output formats). Needs only sh, coreutils, procps ``ps``, GNU find, grep and
nvidia-smi on the node; no Python.

Output layout: for every section, a line ``<MARK> begin NAME``, the command's
output (stdout and stderr together unless the command discards stderr), then
``<MARK> end NAME RC``. ``MARK`` is ``::gi-<nonce>::`` so a process named
like a marker cannot forge a section. Sections:

meta     ``date +%s.%N`` / ``getconf CLK_TCK`` / ``btime N`` from /proc/stat /
         hostname / ``id -u`` / own pid namespace (readlink /proc/self/ns/pid) /
         ``$$`` of the probe shell (its ancestors are the console's session)
gpu      nvidia-smi --query-gpu=GPU_FIELDS --format=csv,noheader,nounits
apps     nvidia-smi --query-compute-apps=APP_FIELDS --format=csv,noheader,nounits
list     nvidia-smi -L (MIG devices are indented lines "  MIG 1g.12gb Device 0: (UUID: MIG-…)")
stat     cat /proc/[0-9]*/stat  (pid (comm) state ppid … field 20 num_threads, field 22 starttime)
ps       ps -eo pid=,user:32=,args=
dstate   one line per thread in D: "/proc/PID/task/TID WCHAN STAT-LINE" (WCHAN "-" if unreadable)
fds      "/proc/PID/fd /dev/nvidiaN" per open device handle (find -lname GLOB -printf '%h %l\\n')
pidns    "PID pid:[NNNN]" for every PID with a device handle
xid      dmesg lines with "NVRM: Xid" (last 50), or dmesg's own error text
driver   driver version: cat /proc/driver/nvidia/version (first line) or nothing
"""
from __future__ import annotations

import secrets
import shlex

GPU_FIELDS = ("index,uuid,name,pci.bus_id,memory.used,memory.total,utilization.gpu,"
              "persistence_mode,mig.mode.current")
APP_FIELDS = "pid,gpu_uuid,used_memory,process_name"   # name last: names contain commas
NVSMI_TIMEOUT_S = 5
DEFAULT_DEVICE_GLOB = "/dev/nvidia*"
DEFAULT_PROBE_TIMEOUT_S = 10.0     # the client's deadline for one whole probe
DEFAULT_COMMAND_TIMEOUT_S = 30.0   # and for one command (checks, actions)

QUERY_GPU = f"nvidia-smi --query-gpu={GPU_FIELDS} --format=csv,noheader,nounits"
QUERY_APPS = f"nvidia-smi --query-compute-apps={APP_FIELDS} --format=csv,noheader,nounits"
LIST_GPUS = "nvidia-smi -L"
# Seed check: "sleep 5; nvidia-smi --query-gpu=index,memory.used --format=csv,noheader"
QUERY_MEMORY = "nvidia-smi --query-gpu=index,memory.used --format=csv,noheader"

META = ("date +%s.%N; getconf CLK_TCK; grep btime /proc/stat; cat /proc/sys/kernel/hostname; "
        "id -u; readlink /proc/self/ns/pid; echo $$")
STAT = "cat /proc/[0-9]*/stat 2>/dev/null"
PS = f"timeout {NVSMI_TIMEOUT_S} ps -eo pid=,user:32=,args="
DSTATE = ("grep -ls ') D ' /proc/[0-9]*/task/[0-9]*/stat | while read -r f; do d=${f%/stat}; "
          "w=$(cat $d/wchan 2>/dev/null); printf '%s %s %s\\n' \"$d\" \"${w:--}\" \"$(cat $f 2>/dev/null)\"; done")
XID = "dmesg 2>&1 | grep -E 'NVRM: Xid|dmesg:' | tail -n 50"
DRIVER = "head -n 1 /proc/driver/nvidia/version 2>/dev/null"


def fds_command(device_glob: str = DEFAULT_DEVICE_GLOB) -> str:
    return (f"find /proc/[0-9]*/fd -lname {shlex.quote(device_glob)} "
            "-printf '%h %l\\n' 2>/dev/null")


def pidns_command(device_glob: str = DEFAULT_DEVICE_GLOB) -> str:
    return (f"for p in $({fds_command(device_glob)} | cut -d/ -f3 | sort -u); do "
            "echo \"$p $(readlink /proc/$p/ns/pid 2>/dev/null)\"; done")


def timed(command: str) -> str:
    """Bound a driver call on the node itself (the client has its own deadline)."""
    return f"timeout {NVSMI_TIMEOUT_S} {command}"


def sections(device_glob: str = DEFAULT_DEVICE_GLOB) -> list[tuple[str, str]]:
    """(name, command line) in probe order."""
    return [
        ("meta", META),
        ("gpu", timed(QUERY_GPU) + " 2>&1"),
        ("apps", timed(QUERY_APPS) + " 2>&1"),
        ("list", timed(LIST_GPUS) + " 2>&1"),
        ("stat", STAT),
        ("ps", PS + " 2>/dev/null"),
        ("dstate", DSTATE),
        ("fds", fds_command(device_glob)),
        ("pidns", pidns_command(device_glob)),
        ("xid", XID),
        ("driver", DRIVER),
    ]


def new_mark() -> str:
    return f"::gi-{secrets.token_hex(6)}::"


def build_script(mark: str, device_glob: str = DEFAULT_DEVICE_GLOB) -> str:
    """The whole probe as shell text; every section is one line."""
    lines = []
    for name, cmd in sections(device_glob):
        lines.append(f"echo '{mark} begin {name}'; {cmd}; echo \"{mark} end {name} $?\"")
    return "\n".join(lines) + "\n"


def split_sections(text: str, mark: str) -> dict[str, tuple[int | None, str]]:
    """Cut probe output into {name: (rc, body)}; a section cut short has rc None."""
    out: dict[str, tuple[int | None, str]] = {}
    current: str | None = None
    body: list[str] = []
    for line in text.splitlines():
        if line.startswith(mark + " "):
            words = line[len(mark) + 1:].split()
            if len(words) >= 2 and words[0] == "begin":
                if current is not None:
                    out[current] = (None, "\n".join(body))
                current, body = words[1], []
                continue
            if len(words) >= 2 and words[0] == "end" and current == words[1]:
                rc: int | None
                try:
                    rc = int(words[2]) if len(words) > 2 else None
                except ValueError:
                    rc = None
                out[current] = (rc, "\n".join(body))
                current, body = None, []
                continue
        if current is not None:
            body.append(line)
    if current is not None:
        out[current] = (None, "\n".join(body))
    return out


def stat_starttime_command(pid: int) -> str:
    """Prints field 22 (starttime, clock ticks after boot) of /proc/PID/stat."""
    return f"sed 's/.*) //' /proc/{int(pid)}/stat | cut -d' ' -f20"


def guarded_kill_command(pid: int, signame: str, start_ticks: int | None) -> str:
    """`kill -s SIG PID`, refused when /proc/PID/stat no longer shows the same start time."""
    pid = int(pid)
    sig = signame.upper().removeprefix("SIG")
    if not sig.isalnum():
        raise ValueError(f"bad signal name {signame!r}")
    kill = f"kill -s {sig} {pid}"
    if start_ticks is None:
        return kill
    return (f"s=$({stat_starttime_command(pid)} 2>/dev/null); "
            f"if [ \"$s\" = {int(start_ticks)} ]; then {kill}; "
            f"else echo 'refused: PID {pid} is no longer the same process (start time changed)' >&2; exit 3; fi")
