"""nvidia-smi in loop mode: NVML starts once per probe shell, not twice per poll.

On a GPU node every nvidia-smi start initialises NVML (tens of milliseconds of CPU with
persistence mode on, over half a second of system time without it), and a poll made two: the
GPU query and the compute-apps query. So the long-lived probe shell keeps one loop of each,
``nvidia-smi --query-…=timestamp,… -lms LOOP_MS``, writing to files in a private directory
(mktemp -d: 0700), and every probe sends back only what they wrote since the last (``head -c``
of a descriptor the shell keeps open on each file: its offset is where the last probe stopped).
The console frames the samples by their timestamps (console/sources/parse_loop.py).

What keeps them from outliving the console (netdata's loop-mode nvidia-smi was left running,
holding the device files: netdata #7143): each runs under ``timeout LOOP_RENEW_S`` (the probe
starts a new one when it ends, so the files stay small too), and the shell kills them when it
exits (a trap on EXIT, HUP, PIPE and TERM: the SSH session closing ends the shell, or its
next write); a shell killed outright (SIGKILL: no trap runs) still takes them along, for each
loop runs as ``setpriv --pdeathsig TERM timeout … setpriv --pdeathsig TERM nvidia-smi …`` where
util-linux has setpriv (the kernel sends TERM when the parent dies: an orphaned test loop once
ran on after its shell and its ``timeout`` were gone), and under a second ``timeout`` of its
own (LOOP_OWN_S: the parent-death signal is set after the fork, so it can miss); each file is
capped (``ulimit -f``: an nvidia-smi that floods its output is stopped at LOOP_FILE_BLOCKS, a
test's flood once filled 80 GB of /tmp in 40 s before this cap). They are the
console's own processes on the node (children of its probe shell: ssh/session.py counts them
among its own), never shown as holders, never signalled by an action; before ``R``, ``B``,
``F`` and reboot the console stops them (said in Confirm, console/session/core.py) and does not
start them again until the action is over.

Sections (after the process sections, like the driver's: a hung driver cannot starve those):

loop    "running G A" (the loops' PIDs, ``timeout``'s), or "died G A" (one ended: its files
        removed; an nvidia-smi that rejects the recovery action field makes the next one leave
        it out) then "started G A" (new ones), or "failed" (no private directory)
loopg   what the GPU loop wrote since the last probe: "TIMESTAMP, " + the GPU query's fields
loopa   the same for the compute-apps loop (it writes nothing while no process runs: the GPU
        loop's timestamps say when that "nothing" was sampled)
"""
from __future__ import annotations

#: the loops' sampling interval (the console's default poll interval)
LOOP_MS = 1000
#: each loop runs this long, then the next probe starts a new one (an NVML start per loop per
#: LOOP_RENEW_S: 2 starts in 300 polls at 1 Hz)
LOOP_RENEW_S = 300
#: the loop's own bound, under the outer one: the kernel's parent-death signal is set by setpriv
#: after the fork, so an outer ``timeout`` killed in between leaves the loop no signal to die by
#: (an orphaned test loop ran on for ten minutes, forking every 200 ms); this one still ends it
LOOP_OWN_S = LOOP_RENEW_S + 5
#: a loop's file grows to at most this many 512-byte blocks (``ulimit -f``; the shell's blocks
#: may be KiB: twice that): a wedged or hostile nvidia-smi that prints without end is stopped
#: there (SIGXFSZ), never fills the node's disk. Normal use over LOOP_RENEW_S: ~1 MB for 8 GPUs
#: (~4 MB of compute-apps lines for 64 processes)
LOOP_FILE_BLOCKS = 16384
#: what one probe sends back of a loop's file at most (the rest waits for the next probe)
READ_MAX = 256 * 1024
#: the probe shell's variables: the loops' PIDs, their directory, the GPU loop's fields
LOOP_GPU, LOOP_APPS, LOOP_DIR = "gi_Lg", "gi_La", "gi_Ld"
#: the probe shell's descriptors reading the loops' files
GPU_FD, APPS_FD = 7, 8
#: the sections, in probe order
SECTIONS = ("loop", "loopg", "loopa")
#: what a loop's file says when nvidia-smi rejected the recovery action field
NOT_A_FIELD = "not a valid field"


def query_gpu_loop(fields: str) -> str:
    return (f"nvidia-smi --query-gpu=timestamp,{fields} --format=csv,noheader,nounits -lms {LOOP_MS}")


def query_apps_loop(fields: str) -> str:
    return f"nvidia-smi --query-compute-apps=timestamp,{fields} --format=csv,noheader,nounits -lms {LOOP_MS}"


def start_command(gpu_fields: str, gpu_fields_recovery: str, apps_fields: str, rf_var: str,
                  version_file: str, old_driver_case: str) -> str:
    """The loop section: start the loops unless both run (see the module's doc)."""
    g, a, d = LOOP_GPU, LOOP_APPS, LOOP_DIR
    stop = f"kill \"${g}\" \"${a}\" 2>/dev/null; rm -rf \"${d}\""
    run = (f"(ulimit -f {LOOP_FILE_BLOCKS}; exec $gi_Lp timeout {LOOP_RENEW_S} $gi_Lp timeout {LOOP_OWN_S} "
           f"$gi_Lb {{q}}) "
           f"</dev/null >>\"${d}/{{f}}\" 2>&1 &")
    return (
        f"if [ -n \"${g}\" ] && kill -0 \"${g}\" 2>/dev/null && kill -0 \"${a}\" 2>/dev/null; then "
        f"echo \"running ${g} ${a}\"; else "
        f"if [ -n \"${g}\" ]; then echo \"died ${g} ${a}\"; "
        f"grep -qs '{NOT_A_FIELD}' \"${d}/g\" && {rf_var}=0; {stop}; exec {GPU_FD}<&- {APPS_FD}<&-; fi; "
        f"if {d}=$(mktemp -d \"${{TMPDIR:-/tmp}}/gpu-incident-smi.XXXXXX\"); then "
        f": >\"${d}/g\"; : >\"${d}/a\"; gi_Lb=; command -v stdbuf >/dev/null 2>&1 && gi_Lb='stdbuf -oL'; "
        f"gi_Lp=; command -v setpriv >/dev/null 2>&1 && gi_Lp='setpriv --pdeathsig TERM'; "
        f"case \"${{{rf_var}:-1}}$(head -n 1 {version_file} 2>/dev/null)\" in 0*|{old_driver_case}) "
        f"{run.format(q=query_gpu_loop(gpu_fields), f='g')} {g}=$!;; "
        f"*) {run.format(q=query_gpu_loop(gpu_fields_recovery), f='g')} {g}=$!;; esac; "
        f"{run.format(q=query_apps_loop(apps_fields), f='a')} {a}=$!; "
        f"exec {GPU_FD}<\"${d}/g\" {APPS_FD}<\"${d}/a\"; "
        f"gi_Lx() {{ {stop}; }}; trap gi_Lx EXIT; trap 'gi_Lx; exit 129' HUP; trap 'gi_Lx; exit 141' PIPE; "
        f"trap 'gi_Lx; exit 143' TERM; "
        f"echo \"started ${g} ${a}\"; else echo failed; fi; fi")


READ_GPU = f"head -c {READ_MAX} <&{GPU_FD} 2>/dev/null"
READ_APPS = f"head -c {READ_MAX} <&{APPS_FD} 2>/dev/null"


def guarded_stop_command(pid: int) -> str:
    """Stop a loop whose start time the console has not read: only while /proc/PID/cmdline is
    still one of its loops' (``timeout LOOP_RENEW_S … nvidia-smi --query-… -lms LOOP_MS``), so a
    PID reused since is never signalled."""
    pid = int(pid)
    signature = f"^timeout {LOOP_RENEW_S} .*nvidia-smi --query-.* -lms {LOOP_MS}"
    return (f"if tr '\\000' ' ' </proc/{pid}/cmdline 2>/dev/null | grep -q '{signature}'; then "
            f"kill -s TERM {pid}; else echo 'refused: PID {pid} is no longer an nvidia-smi loop of this console' >&2; "
            f"exit 3; fi")
