"""The node probe and its wire format: one POSIX-shell script read in one round trip.

The lowest layer beside console/model.py: the sources build and parse it, the simulator
(console/sim/) answers it, and neither imports the other for it.

Used by the SSH source (fed to a long-lived remote ``sh``) and by the
simulator (whose fake shell answers exactly these command lines with the real
output formats). Needs only sh, coreutils, GNU find and grep, awk and nvidia-smi on the
node; no Python.

Output layout: for every section, a line ``<MARK> begin NAME``, the command's
output (stdout and stderr together unless the command discards stderr), then
``<MARK> end NAME RC``. ``MARK`` is ``::gi-<nonce>::``, a fresh random nonce per probe that
no process on the node can know, so nothing a process prints can forge a section; a marker
is found wherever it starts (a NUL-framed body does not end with a newline).

The process sections come first: a hung driver cannot starve them. The driver sections
share one budget: once an nvidia-smi call timed out (rc 124), the later ones are skipped
(their body is SKIPPED, their rc 124), so a wedged driver costs one NVSMI_TIMEOUT_S, not three.

Two speeds (Scope): every probe reads in full what decides the verdict, the *watched* PIDs
(the driver's, the device holders, their ancestors and descendants, zombies, processes with a
thread in D: the client chooses them, sources/watch.py) and whatever is new since the shell's
last listing; a *whole* probe also reads every process's stat record and every fd (the client
asks for one every so often, and on demand). What a process shows between whole probes is
what its last read said; a PID that left the listing is gone, one that came back is new.

Framing no process can forge: what a user controls (comm, command line, link target) is
NUL-terminated and named by the tool that read it (grep -H, find %h), or in /proc/PID/stat,
whose records a stream parser reads by the kernel's own rule (see sources/parse_proc.py). Sections:

meta     ``date +%s.%N`` / ``getconf CLK_TCK`` / ``btime N`` from /proc/stat /
         hostname / ``id -u`` / own pid namespace (readlink /proc/self/ns/pid) /
         ``$$`` of the probe shell (its ancestors are the console's session)
pids     the probe's scope (Scope: shell variables, see below), then "last N" (the PID the kernel
         allocated last, from /proc/loadavg), "wrapped" when that went down since this shell's
         last probe (the PID counter wrapped, or root chose a PID: every PID may be another
         process now, so all count as new), and the names of /proc's PID directories on one line.
         The shell keeps that listing (LIST): the PIDs not in its last one are this probe's new
         PIDs (NEW, worked out by one awk; none when the listing is unchanged, no awk then). A
         light probe on a node where no task ended since the last listing says "counted" and
         lists nothing: the kernel's task count and last PID say what began, and the shell looks
         at those PIDs alone (probe_scope.LISTING_COMMAND)
stat     /proc/PID/stat of the watched PIDs and the new ones (a *whole* probe: of every PID),
         records concatenated (pid (comm) state ppid … field 20 num_threads, field 22 starttime);
         comm may hold newlines and parentheses
args     "/proc/PID/cmdline:ARG\\0" per argument (grep -z: an argument is a NUL-free record whose
         origin grep names; at most ARGS_PER_PROCESS arguments of ARG_MAX_BYTES each), for the
         new PIDs and those the console asks (Scope.args)
uids     "/proc/PID/status:Uid:\\tREAL\\tEFFECTIVE…" for the same PIDs (status escapes the name it
         shows: one line is one field)
users    ``getent passwd UID…``: the names of user IDs the console has not named yet (left out
         when there are none)
dstate   per thread in D: "/proc/PID/task/TID WCHAN STAT-RECORD" NUL-terminated (WCHAN "-"
         if unreadable), over the threads of the PIDs in Scope.threads (or of every process:
         Scope.threads None, a shell's first probe)
fds      "/proc/PID/fd TARGET" NUL-terminated, per open handle whose link matches the
         device glob (find -lname GLOB -printf '%h %l\\0'); TARGET may hold newlines; over the
         watched and new PIDs' fds (a whole probe: every process's)
pidns    "/proc/PID/ns pid:[NNNN]" for every PID with a device handle (PIDs from find's %h
         only, kept from the fds section's walk: one walk of /proc/*/fd per probe; one find
         reads every holder's link); the PIDs stay in the shell variable HOLDERS for the cgroup
         section
cgroup   "/proc/PID/cgroup:LINE" (one grep -H) of every device holder and of the PIDs the
         driver listed in the previous probe (the client names them: cgroup_command); those PIDs,
         each once, stay in the shell variable GPU_PIDS (gi_G) for the exe and pend sections
exe      "/proc/PID TARGET" NUL-terminated (find -printf '%h %l\\0' over /proc/PID/exe: the PID from
         the path the shell gave, the target any byte but NUL; empty where unreadable) of the GPU
         holders (GPU_PIDS): one find, O(holders)
pend     "/proc/PID/status:SigPnd:\\tHEX" and "…:ShdPnd:\\tHEX" (one grep -H -m 2; status escapes the
         name it shows, so a line is one field) of the GPU holders and of the PIDs with a thread
         in D that this probe's dstate section found (DSTATE_PIDS, gi_D): bit 8 is SIGKILL
sys      "modeset Y|N|" (/sys/module/nvidia_drm/parameters/modeset; empty: nvidia_drm not
         loaded) and "nvswitch" followed by the /dev/nvidia-nvswitchN device files
pci      "gpus" when /proc/driver/nvidia/gpus exists (else "none"), then per directory there (named
         by the GPU's bus id) "BUS XX XX XX XX": the first four bytes of its PCI config space
         (/sys/bus/pci/devices/BUS/config, od -An -tx1 -N4; "ff ff ff ff": fallen off the bus;
         nothing: unreadable). One od per GPU, asked every PCI_EVERY polls (STICKY). Both trees
         are read under ``$GI_NODE_ROOT`` (NODE_ROOT_ENV: unset on a node, a fake tree in tests)
gpu      nvidia-smi --query-gpu=GPU_FIELDS[,gpu_recovery_action] --format=csv,noheader,nounits:
         the recovery action is asked for only where the driver may know it (gpu_call)
apps     nvidia-smi --query-compute-apps=APP_FIELDS --format=csv,noheader,nounits
list     nvidia-smi -L (MIG devices are indented lines "  MIG 1g.12gb Device 0: (UUID: MIG-…)")
remap    nvidia-smi -q -d ROW_REMAPPER,PAGE_RETIREMENT: each GPU's row remapping and pages pending
         retirement (remap_call: asked only when this probe's driver calls answered, and without
         ROW_REMAPPER where nvidia-smi rejects it); on an NVSwitch system then "fabric:" and
         each GPU's "bus id, fabric.state, fabric.status" (QUERY_FABRIC)
pmon     nvidia-smi pmon -c 1 -s u: each process's SM utilisation per GPU (pmon_call: as remap,
         asked only when this probe's driver calls answered; console/sources/parse_pmon.py)
xid      dmesg lines with "NVRM: Xid", a GPU's firmware boot failure, a GPU fallen off the bus
         (one line or the three of the probe-time form), "GPU is lost" or an NVRM assertion
         returning NV_ERR_RESET_REQUIRED (KERNEL_LINES_ERE; last KERNEL_LINES_KEPT), or dmesg's own error text
driver   driver version: cat /proc/driver/nvidia/version (first line) or nothing

Bounds: the node cuts each argument (probe_scope.ARG_MAX_BYTES); the reader caps each section and the
whole probe (ProbeLimits, DEFAULT_LIMITS) and the deadline covers reading and parsing.
"""
from __future__ import annotations

import secrets
import shlex
from dataclasses import dataclass

from console import probe_loop
from console.probe_scope import (ARGS_SCOPED, DSTATE_PIDS, DSTATE_SCOPED, STAT_SCOPED, UIDS_SCOPED, Scope, fd_dirs,
                                 pids_command, users_command)

GPU_FIELDS = ("index,uuid,name,pci.bus_id,memory.used,memory.total,utilization.gpu,"
              "persistence_mode,mig.mode.current")
#: newer nvidia-smi prints the GPU's recovery action ("None", "Reset", ...) for this query field; an
#: older one rejects the whole query ('Field "gpu_recovery_action" is not a valid field to query.',
#: exit 2)
RECOVERY_FIELD = "gpu_recovery_action"
#: NVML has the recovery action (NVML_FI_DEV_GET_GPU_RECOVERY_ACTION) from R565: no older
#: nvidia-smi knows the field, so the probe never asks an older driver for it
RECOVERY_MIN_DRIVER = 565
#: the kernel module's version line (/proc/driver/nvidia/version) of a driver older than
#: RECOVERY_MIN_DRIVER: "NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.104.05  Sat Aug ..."
#: (patterns for the shell's ``case`` and for fnmatch alike)
OLD_DRIVER_PATTERNS = ("*  [1-4][0-9][0-9].*", "*  5[0-5][0-9].*", "*  56[0-4].*")
DRIVER_VERSION_FILE = "/proc/driver/nvidia/version"
DRM_MODESET_FILE = "/sys/module/nvidia_drm/parameters/modeset"
NVSWITCH_GLOB = "/dev/nvidia-nvswitch[0-9]*"
#: the most PIDs of the previous probe's driver list whose cgroup the next probe reads
MAX_CGROUP_PIDS = 256
APP_FIELDS = "pid,gpu_uuid,used_memory,process_name"   # name last: names contain commas
NVSMI_TIMEOUT_S = 5
DEFAULT_DEVICE_GLOB = "/dev/nvidia*"
DEFAULT_PROBE_TIMEOUT_S = 10.0     # the client's deadline for one whole probe: read and parse
DEFAULT_COMMAND_TIMEOUT_S = 30.0   # and for one command (checks, actions)
MIB = 1 << 20


@dataclass(frozen=True)
class ProbeLimits:
    """What one probe may send back. A node over a cap gets the error "too much output"."""
    section_bytes: int = 32 * MIB
    probe_bytes: int = 64 * MIB

    def __post_init__(self) -> None:
        if not (0 < self.section_bytes <= self.probe_bytes):
            raise ValueError(f"probe limits: need 0 < section_bytes <= probe_bytes "
                             f"(got {self.section_bytes}, {self.probe_bytes})")


DEFAULT_LIMITS = ProbeLimits()

#: each GPU's health beside its memory, after the fields above (and after RECOVERY_FIELD where it
#: is asked): fields every nvidia-smi of the last decade knows; the parser tells the layouts apart
#: by their column count (9 or 10 without them, 17 or 18 with them; 15 or 16: the six before the
#: link's maximum, as earlier consoles asked)
HEALTH_FIELDS = ("temperature.gpu,power.draw,clocks.sm,pcie.link.gen.current,pcie.link.width.current,"
                 "ecc.errors.uncorrected.volatile.total,pcie.link.gen.max,pcie.link.width.max")
GPU_QUERY_FIELDS = f"{GPU_FIELDS},{HEALTH_FIELDS}"
GPU_QUERY_FIELDS_RECOVERY = f"{GPU_FIELDS},{RECOVERY_FIELD},{HEALTH_FIELDS}"
QUERY_GPU = f"nvidia-smi --query-gpu={GPU_QUERY_FIELDS} --format=csv,noheader,nounits"
QUERY_GPU_RECOVERY = f"nvidia-smi --query-gpu={GPU_QUERY_FIELDS_RECOVERY} --format=csv,noheader,nounits"
QUERY_APPS = f"nvidia-smi --query-compute-apps={APP_FIELDS} --format=csv,noheader,nounits"
LIST_GPUS = "nvidia-smi -L"
# Seed check: "sleep 5; nvidia-smi --query-gpu=index,memory.used --format=csv,noheader"
QUERY_MEMORY = "nvidia-smi --query-gpu=index,memory.used --format=csv,noheader"

META = ("date +%s.%N; getconf CLK_TCK; grep btime /proc/stat; cat /proc/sys/kernel/hostname; "
        "id -u; readlink /proc/self/ns/pid; echo $$")
STAT = "cat /proc/[0-9]*/stat 2>/dev/null"
DSTATE = ("grep -ls ') D ' /proc/[0-9]*/task/[0-9]*/stat | while read -r f; do d=${f%/stat}; "
          "w=; read -r w 2>/dev/null < $d/wchan; "
          "printf '%s %s %s\\0' \"$d\" \"${w:--}\" \"$(cat $f 2>/dev/null)\"; done")
#: what the kernel driver prints, with no Xid, when a GPU's firmware cannot boot (GSP): the WPR2
#: region a previous boot left up, then the adapter's init failing for the GPU's bus, retried
#: over and over (open-gpu-kernel-modules #1230; #1259 after a tensor-parallel job with --ipc
#: host). The GPU drops out of nvidia-smi's list; only a reboot (or a power cycle) clears it
#: (console/diagnosis/xid.py firmware_failures).
WPR2_UP = "_kgspBootGspRm: unexpected WPR2 already up"
INIT_FAILED = "RmInitAdapter failed!"
#: a GPU gone from the bus, with no Xid: at probe time the driver prints it over three lines
#: ("NVRM: The NVIDIA GPU 0000:b3:00.0" / "NVRM: (PCI ID: 10de:26b5) installed in this system has" /
#: "NVRM: fallen off the bus and is not responding to commands."), later on one ("NVRM: GPU
#: 0000:06:00.0: GPU has fallen off the bus."); all three lines are kept, so the bus named first
#: reaches diagnosis (console/diagnosis/xid.py fallen_off_bus)
FALLEN_GPU = "NVRM: The NVIDIA GPU"
FALLEN_PCI = "installed in this system has"
FALLEN_OFF = "fallen off the bus"
#: the driver's word for a GPU it can no longer reach, and an RM assertion that the GPU needs a
#: reset ("NVRM: nvAssertOkFailedNoLog: Assertion failed: Reset required [NV_ERR_RESET_REQUIRED] …")
GPU_LOST = "GPU is lost"
RESET_REQUIRED = "NV_ERR_RESET_REQUIRED"
#: the kernel's hung-task report (a task in D past hung_task_timeout_secs): its first line, the task
#: line, and the frames of its call trace in the NVIDIA modules ("os_acquire_rwlock_read+0x35/0x50
#: [nvidia]"): a task blocked inside the driver holds every GPU call behind it (console/diagnosis/
#: xid.py hung_tasks; leptonai/gpud#117, NVIDIA/nvidia-persistenced#15)
HUNG_TASK = "blocked for more than"
HUNG_STATE = " state:D "
NV_FRAME = "nvidia]"
NV_UVM_FRAME = "nvidia_uvm]"
#: the kernel-log lines the probe keeps: Xid lines and the ones above (literal text: no ERE
#: metacharacter in any, a lone "]" being literal outside a bracket, so one alternation of them is
#: the probe's grep -E pattern)
KERNEL_MARKS = ("NVRM: Xid", WPR2_UP, INIT_FAILED, FALLEN_GPU, FALLEN_PCI, FALLEN_OFF, GPU_LOST, RESET_REQUIRED,
                HUNG_TASK, HUNG_STATE, NV_FRAME, NV_UVM_FRAME)
KERNEL_LINES_ERE = "|".join(KERNEL_MARKS)


def kernel_line(line: str) -> bool:
    """A kernel-log line the console keeps (KERNEL_MARKS): an Xid, a firmware boot failure, a GPU
    fallen off the bus (each line of the three-line form), a lost GPU, a reset the driver requires."""
    return isinstance(line, str) and any(mark in line for mark in KERNEL_MARKS)


#: the kernel lines kept: the newest (a flood of one Xid must not push a hung-task report out)
KERNEL_LINES_KEPT = 120
XID = f"dmesg 2>&1 | grep -E '{KERNEL_LINES_ERE}|dmesg:' | tail -n {KERNEL_LINES_KEPT}"
DRIVER = f"head -n 1 {DRIVER_VERSION_FILE} 2>/dev/null"
SYS = f"echo \"modeset $(cat {DRM_MODESET_FILE} 2>/dev/null)\"; echo nvswitch {NVSWITCH_GLOB}"

#: the probe shell's variable holding the exit status of the last driver call
NV_RC = "gi_nv"
#: the probe shell's variable that is "0" once its nvidia-smi rejected RECOVERY_FIELD (the shell
#: is long-lived: later probes do not ask again)
RF = "gi_rf"
#: the probe shell's variable holding the PIDs with a device handle (set by the pidns section)
HOLDERS = "gi_h"
#: the body of a driver section skipped because an earlier call of this probe timed out
SKIPPED = "skipped: an earlier nvidia-smi call of this probe timed out"
#: each GPU's row remapping (Ampere and later) and page retirement (older GPUs): a pending remap or
#: retirement waits for a GPU reset, a failed remap means the GPU should be replaced. Not a
#: --query-gpu field: an older nvidia-smi rejects the whole query for one field it does not know
#: (console/sources/parse_repair.py reads the answer)
QUERY_REPAIR = "nvidia-smi -q -d ROW_REMAPPER,PAGE_RETIREMENT"
#: what an nvidia-smi that rejects ROW_REMAPPER (exit 2: older than row remapping) is asked instead
QUERY_RETIRED = "nvidia-smi -q -d PAGE_RETIREMENT"
#: on an NVSwitch system (its control file there) the same section asks each GPU's NVLink fabric
#: registration as well, after this line: "Completed"/"Success" once the fabric manager has set
#: the GPU up ("Not Started", "In Progress", or a status such as "Insufficient Resources": CUDA
#: work on it fails or hangs). The fields are known to newer nvidia-smi only: an older one's
#: refusal reads as unknown.
FABRIC_MARK = "fabric:"
QUERY_FABRIC = "nvidia-smi --query-gpu=pci.bus_id,fabric.state,fabric.status --format=csv,noheader"
NVSWITCH_CTL = "/dev/nvidia-nvswitchctl"
#: the body of the remap section when this probe's driver calls failed (nothing asked)
REMAP_SKIPPED = "skipped: the driver did not answer the calls before it"
#: each process's SM utilisation: one sample of ``nvidia-smi pmon`` (console/sources/parse_pmon.py).
#: Asked every PMON_EVERY polls, only while the driver lists a process (console/sources/shell.py),
#: and only when this probe's driver calls answered (pmon_call)
QUERY_PMON = "nvidia-smi pmon -c 1 -s u"
#: driver sections, in order; the first always runs (and resets NV_RC), the others are skipped
#: once one has timed out
DRIVER_SECTIONS = {"gpu": QUERY_GPU, "apps": QUERY_APPS, "list": LIST_GPUS, "remap": QUERY_REPAIR,
                   "pmon": QUERY_PMON}


#: the shell variable the fds section leaves the holders' ``/proc/PID/fd`` paths in (pidns reads it)
HOLDER_DIRS = "gi_d"


def fds_command(device_glob: str = DEFAULT_DEVICE_GLOB) -> str:
    """``/proc/PID/fd TARGET`` NUL-terminated: a link target may hold any byte but NUL. The same
    walk of every process's fds also leaves each match's ``/proc/PID/fd`` in HOLDER_DIRS (find
    writes the records to the output through fd 4 and the paths to the captured fd 3), so
    pidns needs no second walk."""
    walk = (f"[ $# -eq 0 ] || find \"$@\" -lname {shlex.quote(device_glob)} -printf '%h %l\\0' "
            f"-fprintf /dev/fd/3 '%h\\n' 3>&1 1>&4 2>/dev/null")
    return f"{fd_dirs()}; {{ {HOLDER_DIRS}=$({walk}); }} 4>&1"


def pidns_command(device_glob: str = DEFAULT_DEVICE_GLOB) -> str:
    """The PIDs come from the fds section's walk (HOLDER_DIRS: find's ``%h``, ``/proc/PID/fd``)
    alone, never from a link target; each once (a process holds many device files), in the
    order find met them, cut down to the PID by the shell itself; they stay in HOLDERS for the
    cgroup section. (The ``:`` names the glob that walk used; it does nothing.)"""
    return (f": -lname {shlex.quote(device_glob)} ; s=' '; {HOLDERS}=; set --; for d in ${HOLDER_DIRS}; do "
            "p=${d#/proc/}; p=${p%/fd}; case \"$s\" in *\" $p \"*) continue;; esac; s=\"$s$p \"; "
            f"{HOLDERS}=\"${HOLDERS} $p\"; set -- \"$@\" /proc/$p/ns/pid; done; "
            "[ $# -eq 0 ] || find \"$@\" -maxdepth 0 -printf '%h %l\\n' 2>/dev/null")


#: the probe shell's variable holding the GPU holders of this probe: the device holders (HOLDERS)
#: and the PIDs the driver listed in the previous probe, each once (set by the cgroup section)
GPU_PIDS = "gi_G"
CGROUP_HEAD = f"s=' '; set --; for p in ${HOLDERS}"
CGROUP_TAIL = ("; do case \"$s\" in *\" $p \"*) continue;; esac; s=\"$s$p \"; set -- \"$@\" /proc/$p/cgroup; done; "
               f"{GPU_PIDS}=$s; [ $# -eq 0 ] || grep -Hs '' \"$@\" </dev/null")


def cgroup_command(pids: tuple[int, ...] | list[int] = ()) -> str:
    """/proc/PID/cgroup of the device holders (HOLDERS) and of ``pids`` (the driver's list of the
    previous probe: a process the driver lists may hold no device file, a zombie for one), as
    lines grep names the file of, each PID once (the shell itself drops a repeat: no ``sort``
    process); one grep for all of them. No new find over /proc: the holders come from pidns."""
    extra = sorted({int(p) for p in pids if 0 < int(p) < 1 << 31})[:MAX_CGROUP_PIDS]
    return CGROUP_HEAD + "".join(f" {p}" for p in extra) + CGROUP_TAIL


def cgroup_pids(command: str) -> list[int] | None:
    """The extra PIDs of a cgroup_command line, or None when the line is not one."""
    if not (command.startswith(CGROUP_HEAD) and command.endswith(CGROUP_TAIL)):
        return None
    words = command[len(CGROUP_HEAD):len(command) - len(CGROUP_TAIL)].split()
    if not all(w.isascii() and w.isdecimal() for w in words):
        return None
    return [int(w) for w in words]


#: the executables of the GPU holders: one find over their /proc/PID/exe links, NUL-terminated
#: records (a path may hold newlines), the PID from the path the shell gave it
EXE = (f"set --; for p in ${GPU_PIDS}; do set -- \"$@\" /proc/$p/exe; done; "
       "[ $# -eq 0 ] || find \"$@\" -maxdepth 0 -printf '%h %l\\0' 2>/dev/null")
#: the signals pending (SigPnd: the main thread's, ShdPnd: the process's) of the GPU holders and of
#: the processes with a thread in D this probe found (DSTATE_PIDS), each once: one grep
PENDING = (f"s=' '; set --; for p in ${GPU_PIDS} ${DSTATE_PIDS}; do case \"$s\" in *\" $p \"*) continue;; esac; "
           "s=\"$s$p \"; set -- \"$@\" /proc/$p/status; done; "
           "[ $# -eq 0 ] || grep -Hs -m 2 -E '^(SigPnd|ShdPnd):' \"$@\" </dev/null")
#: SIGKILL (signal 9) is bit 8 of a pending mask
SIGKILL_BIT = 1 << 8

#: the environment variable that roots the pci section's trees: unset (or empty) on a real node;
#: the tests point it at a fake /proc/driver/nvidia/gpus and /sys/bus/pci/devices
NODE_ROOT_ENV = "GI_NODE_ROOT"
NVIDIA_GPUS_DIR = "/proc/driver/nvidia/gpus"
PCI_DEVICES_DIR = "/sys/bus/pci/devices"
#: the first line of the pci section when the kernel module's GPU directory exists, or does not
PCI_PRESENT, PCI_ABSENT = "gpus", "none"
PCI = (f"gi_r=${{{NODE_ROOT_ENV}}}; if [ -d \"$gi_r{NVIDIA_GPUS_DIR}\" ]; then echo {PCI_PRESENT}; "
       f"for g in \"$gi_r\"{NVIDIA_GPUS_DIR}/*; do [ -e \"$g\" ] || continue; b=${{g##*/}}; "
       f"echo \"$b $(od -An -tx1 -N4 \"$gi_r{PCI_DEVICES_DIR}/$b/config\" 2>/dev/null)\"; done; "
       f"else echo {PCI_ABSENT}; fi")


def timed(command: str) -> str:
    """Bound a driver call on the node itself (the client has its own deadline)."""
    return f"timeout {NVSMI_TIMEOUT_S} {command}"


def old_driver(version_line: str) -> bool:
    """Is this /proc/driver/nvidia/version line a driver older than RECOVERY_MIN_DRIVER? (What
    gpu_call's ``case`` decides on the node, for the simulator and the tests.)"""
    import fnmatch
    return any(fnmatch.fnmatchcase(version_line, p) for p in OLD_DRIVER_PATTERNS)


def _old_driver_case() -> str:
    """OLD_DRIVER_PATTERNS as one ``case`` pattern of the shell (spaces escaped)."""
    return "|".join(p.replace(" ", "\\ ") for p in OLD_DRIVER_PATTERNS)


def gpu_call() -> str:
    """The gpu section: the GPU query, with RECOVERY_FIELD where the driver may know it.

    No extra nvidia-smi call on an old driver: the kernel module's version (a file, no driver
    call) says whether to ask for the field at all. A driver from RECOVERY_MIN_DRIVER on whose
    nvidia-smi still rejects the field (exit 2) is asked again without it in the same section,
    and the shell remembers (RF), so that costs one call once per probe shell. An unreadable
    version file (a container without /proc/driver/nvidia) counts as new."""
    old = _old_driver_case()
    plain = f"{timed(QUERY_GPU)} 2>&1; {NV_RC}=$?"
    return (f"case \"${{{RF}:-1}}$(head -n 1 {DRIVER_VERSION_FILE} 2>/dev/null)\" in 0*|{old}) {plain};; "
            f"*) {timed(QUERY_GPU_RECOVERY)} 2>&1; {NV_RC}=$?; "
            f"if [ \"${NV_RC}\" = 2 ]; then {RF}=0; {plain}; fi;; esac")


def remap_call() -> str:
    """The remap section: asked only when the driver answered this probe so far (NV_RC 0: a
    failing or hung driver costs no extra call; the section then says so and keeps NV_RC); an
    nvidia-smi that rejects ROW_REMAPPER (exit 2) is asked for the page retirement alone."""
    retired = f"{timed(QUERY_RETIRED)} 2>&1; {NV_RC}=$?"
    fabric = f"if [ -e {NVSWITCH_CTL} ]; then echo '{FABRIC_MARK}'; {timed(QUERY_FABRIC)} 2>&1; fi"
    return (f"if [ \"${NV_RC}\" = 0 ]; then {timed(QUERY_REPAIR)} 2>&1; {NV_RC}=$?; "
            f"if [ \"${NV_RC}\" = 2 ]; then {retired}; fi; {fabric}; else echo '{REMAP_SKIPPED}'; fi")


def pmon_call() -> str:
    """The pmon section: asked only when the driver answered this probe so far (NV_RC 0), as
    the remap section; the section then says it was skipped and keeps NV_RC."""
    return (f"if [ \"${NV_RC}\" = 0 ]; then {timed(QUERY_PMON)} 2>&1; {NV_RC}=$?; "
            f"else echo '{REMAP_SKIPPED}'; fi")


def driver_call(name: str) -> str:
    """A driver section's command line: runs the call under ``timeout`` and keeps its status
    in NV_RC; every driver section after the first is skipped once that status is 124."""
    if name == "gpu":
        return gpu_call()
    if name == "remap":
        return remap_call()
    if name == "pmon":
        return pmon_call()
    run = f"{timed(DRIVER_SECTIONS[name])} 2>&1; {NV_RC}=$?"
    if name == next(iter(DRIVER_SECTIONS)):
        return run
    return f"if [ \"${NV_RC}\" = 124 ]; then echo '{SKIPPED}'; else {run}; fi"


def loop_command() -> str:
    """The loop section (console/probe_loop.py): it also resets NV_RC, as the first driver call
    does (the GPU query is not asked while the loops answer)."""
    return f"{NV_RC}=0; " + probe_loop.start_command(
        GPU_QUERY_FIELDS, GPU_QUERY_FIELDS_RECOVERY, APP_FIELDS, RF, DRIVER_VERSION_FILE, _old_driver_case())


def sections(device_glob: str = DEFAULT_DEVICE_GLOB,
             cgroup_pids: tuple[int, ...] | list[int] = (), scope: Scope | None = None,
             users: tuple[int, ...] | list[int] = (), *, loop: bool = False,
             per_poll: bool = True) -> list[tuple[str, str]]:
    """(name, command line) in probe order: the processes first, then the driver.
    ``cgroup_pids``: the PIDs the driver listed in the previous probe (cgroup_command);
    ``scope``: what of the process table this probe reads (probe_scope.Scope; None is a shell's
    first probe: everything, and every user named); ``users``: user IDs to name (no users
    section when none, but in a first probe); ``loop``: the loop-mode sections
    (console/probe_loop.py); ``per_poll``: the per-poll GPU and compute-apps queries (left out
    while the loops answer)."""
    # the loop section before the process sections an SSH probe gathers into one write
    # (COALESCE_OPEN): the loops it starts must not inherit the gathering's saved stdout
    looped = [("loopg", probe_loop.READ_GPU), ("loopa", probe_loop.READ_APPS)] if loop else []
    return [
        ("meta", META),
        ("pids", pids_command(scope if scope is not None else Scope())),
        *((("loop", loop_command()),) if loop else ()),
        ("stat", STAT_SCOPED),
        ("dstate", DSTATE_SCOPED),
        ("fds", fds_command(device_glob)),
        ("pidns", pidns_command(device_glob)),
        ("cgroup", cgroup_command(cgroup_pids)),
        ("exe", EXE),
        ("pend", PENDING),
        ("sys", SYS),
        ("pci", PCI),
        *looped,
        # the command lines and users after the sections an SSH probe gathers into one write
        # (COALESCE_OPEN): reading a command line (or a directory service) can hang, and what
        # was gathered before it is written by then
        # (users first: uids, always there, ends the probe where every later section is left out)
        *((("users", users_command(users)),) if users or scope is None else ()),
        ("args", ARGS_SCOPED),
        ("uids", UIDS_SCOPED),
        *((name, driver_call(name)) for name in DRIVER_SECTIONS if per_poll or name not in ("gpu", "apps")),
        ("xid", XID),
        ("driver", DRIVER),
    ]


#: sections a probe may leave out when the console already has their answer (console/sources/
#: shell.py decides, parse.parse_probe keeps the last answer):
#: - ``meta`` while the same long-lived shell answers (its PID, the boot time, clock ticks, host
#:   name, user and PID namespace do not change while it lives);
#: - ``driver`` and ``sys`` for DRIVER_EVERY polls (the version, DRM modeset and the NVSwitch
#:   device files change only with a driver reload);
#: - ``list`` while no GPU is in MIG mode (``nvidia-smi -L`` adds only MIG devices to what the
#:   GPU query says): on a GPU node that is one nvidia-smi call (one NVML initialisation) in three;
#: - ``xid`` for XID_EVERY polls (dmesg reads the whole kernel ring buffer: an Xid shows at most
#:   XID_EVERY polls late);
#: - ``remap`` for REMAP_EVERY polls (one more nvidia-smi call, one NVML initialisation: a remap
#:   becomes pending after an uncorrectable error and waits for a reset, so a minute late is soon
#:   enough);
#: - ``pmon`` for PMON_EVERY polls, and not at all while the driver lists no process (one more
#:   nvidia-smi start, one NVML initialisation, and pmon's own sampling: a process's SM share is
#:   at most PMON_EVERY polls old); where pmon is not supported, every PMON_UNSUPPORTED_EVERY;
#: - ``pci`` for PCI_EVERY polls (one ``od`` per GPU), and at the next poll whenever the driver's
#:   answer looked wrong (an error, a lost GPU, another GPU count than the kernel module's)
STICKY = ("meta", "driver", "sys", "list", "xid", "remap", "pmon", "pci")
DRIVER_EVERY = 60
XID_EVERY = 5
REMAP_EVERY = 60
PMON_EVERY = 30
PMON_UNSUPPORTED_EVERY = 300
PCI_EVERY = 5
#: a watched process's command line and user are read again every so many polls (a process that
#: renames itself without changing its comm shows the new line that late)
ARGS_EVERY = 10


#: the process sections' output gathered into one write (COALESCE_OPEN .. COALESCE_CLOSE, a
#: kept shell's probe only): each command of a probe writes its own output, and the node's sshd
#: sends what it read as soon as it read it, so a probe came back in as many SSH packets as it
#: had gaps between commands (~10-30), each of which costs the console a wakeup, a decrypt and
#: asyncssh's packet path. The sections run in the probe shell itself (their variables stay);
#: only their stdout goes into a pipe that one ``dd`` reads whole and writes at once when the
#: shell closes it (from stat to the first of COALESCE_UNTIL: dd starts after the pids section's
#: listing, as every other command of the probe, so a light probe's count of tasks still holds;
#: the command lines, users and nvidia-smi calls, which may hang, and what follows them write as
#: before). The pipe is the shell's own: a here-document (a pipe in dash and in bash from 5.1;
#: an older bash would make a temporary file of it, so there nothing is gathered) opened again
#: for writing through /dev/fd. Where any step fails the output goes to stdout as before.
COALESCE_FROM = "stat"
#: the first of these ends the gathering: the reads that can hang (a command line, a user) and
#: the nvidia-smi calls write as they come
COALESCE_UNTIL = frozenset({"args", "uids", "users", *DRIVER_SECTIONS})
COALESCE_BLOCK = "1M"
#: whether the node's dd reads whole blocks (GNU's iflag=fullblock; a dd without it would end at
#: its first short read and leave the shell writing into a pipe nobody reads): asked once a shell
_DD_CHECK = ("[ -n \"${gi_ddok-}\" ] || { dd if=/dev/null of=/dev/null bs=1 count=0 iflag=fullblock "
             "</dev/null >/dev/null 2>&1 && gi_ddok=1 || gi_ddok=0; }; ")
COALESCE_OPEN = (_DD_CHECK + "gi_dd=; case \"$gi_ddok${BASH_VERSION-}\" in 1|15.[1-9]*|15.[1-9][0-9]*|1[6-9].*) "
                 "{ command exec 6<<'gi_E'\n\ngi_E\n} 2>/dev/null && { command exec 9>/dev/fd/6; } 2>/dev/null && "
                 f"{{ dd bs={COALESCE_BLOCK} iflag=fullblock <&6 6<&- 9>&- 2>/dev/null & gi_dd=$!; }}; "
                 "exec 6<&-; [ -n \"$gi_dd\" ] && exec 5>&1 1>&9; exec 9>&-;; esac")
COALESCE_CLOSE = "[ -n \"$gi_dd\" ] && { exec 1>&5 5>&-; wait \"$gi_dd\"; }"
_COALESCE_LINES = frozenset(line for line in f"{COALESCE_OPEN}\n{COALESCE_CLOSE}".split("\n") if line.strip())


def coalesce_line(line: str) -> bool:
    """Is ``line`` one of the lines that gather the output (COALESCE_OPEN, COALESCE_CLOSE)? They
    change only how the output is written: the simulator's shell skips them."""
    return line in _COALESCE_LINES


def build_script(mark: str, device_glob: str = DEFAULT_DEVICE_GLOB,
                 cgroup_pids: tuple[int, ...] | list[int] = (),
                 skip: frozenset[str] | set[str] = frozenset(), scope: Scope | None = None,
                 users: tuple[int, ...] | list[int] = (), loop: bool = False, per_poll: bool = True,
                 coalesce: bool = False) -> str:
    """The whole probe as shell text, every section one line; ``cgroup_pids``: see
    cgroup_command; ``skip``: sections of STICKY left out; ``scope``, ``users``, ``loop``,
    ``per_poll``: see sections; ``coalesce``: the process sections' output in one write
    (COALESCE_OPEN)."""
    lines = []
    gathering = False
    for name, cmd in sections(device_glob, cgroup_pids, scope, users, loop=loop, per_poll=per_poll):
        if name in skip:
            continue
        if coalesce and name == COALESCE_FROM:
            lines.append(COALESCE_OPEN + "\n")
            gathering = True
        elif gathering and name in COALESCE_UNTIL:
            lines.append(COALESCE_CLOSE + "\n")
            gathering = False
        lines.append(section_line(mark, name, cmd) + "\n")
    if gathering:
        lines.append(COALESCE_CLOSE + "\n")
    return "".join(lines)


def last_section(device_glob: str = DEFAULT_DEVICE_GLOB, skip: frozenset[str] | set[str] = frozenset(),
                 *, loop: bool = False, per_poll: bool = True) -> str:
    """The name of the probe's last section (its end marker ends the probe's output)."""
    return [name for name, _ in sections(device_glob, loop=loop, per_poll=per_poll) if name not in skip][-1]


def new_mark() -> str:
    return f"::gi-{secrets.token_hex(6)}::"


def section_line(mark: str, name: str, command: str) -> str:
    """One section as one shell line; a driver section reports NV_RC, the others ``$?``."""
    rc = f"${NV_RC}" if name in DRIVER_SECTIONS else "$?"
    return f"echo '{mark} begin {name}'; {command}; echo \"{mark} end {name} {rc}\""


def section_command(line: str, mark: str, name: str) -> str | None:
    """The command of a ``section_line(mark, name, command)`` line, or None when the line is
    not one (the simulator reads probe lines back with it)."""
    head, tail = section_line(mark, name, "\0").split("\0")
    if len(line) >= len(head) + len(tail) and line.startswith(head) and line.endswith(tail):
        return line[len(head):len(line) - len(tail)]
    return None


_HEADER_MAX = 64     # "<MARK> end NAME RC" after the mark: a longer header is not one


def split_sections(text: str, mark: str) -> dict[str, tuple[int | None, str]]:
    """Cut probe output into {name: (rc, body)}; a section cut short has rc None.

    Markers are found wherever they start (after a newline, a NUL, or glued to output that
    did not end its last line); a body is the exact text between its markers (a complete
    stat or ps section ends with its newline, a cut one wherever it was cut). The first
    section of a name wins: a repeated name is ignored."""
    out: dict[str, tuple[int | None, str]] = {}
    current: str | None = None
    body_at = 0
    at = text.find(mark)
    while at >= 0:
        nl = text.find("\n", at, at + len(mark) + _HEADER_MAX)
        words = text[at + len(mark):nl].split() if nl >= 0 else []
        nxt = nl + 1 if nl >= 0 else at + len(mark)
        if len(words) == 2 and words[0] == "begin":
            if current is not None:
                out.setdefault(current, (None, text[body_at:at]))
            current, body_at = words[1], nxt
        elif len(words) in (2, 3) and words[0] == "end" and current == words[1]:
            rc_text = words[2] if len(words) == 3 else ""
            rc = int(rc_text) if rc_text.lstrip("-").isdecimal() and len(rc_text) < 6 else None
            out.setdefault(current, (rc, text[body_at:at]))
            current = None
        at = text.find(mark, nxt)
    if current is not None:
        out.setdefault(current, (None, text[body_at:]))
    return out


def _starttime_into(pid: int) -> str:
    """Sets ``s`` to field 22 (starttime) of /proc/PID/stat by the kernel's rule: the fields
    after the last ") " of the record (a comm may hold spaces, parentheses and newlines)."""
    return (f"s=\"$(cat /proc/{int(pid)}/stat 2>/dev/null)\"; "
            "s=\"$(printf '%s\\n' \"${s##*) }\" | cut -d' ' -f20)\"")


def stat_starttime_command(pid: int) -> str:
    """Prints field 22 (starttime, clock ticks after boot) of /proc/PID/stat."""
    return f"{_starttime_into(pid)}; echo \"$s\""


def guarded_kill_command(pid: int, signame: str, start_ticks: int | None) -> str:
    """`kill -s SIG PID`, refused when /proc/PID/stat no longer shows the same start time."""
    pid = int(pid)
    sig = signame.upper().removeprefix("SIG")
    if not sig.isalnum():
        raise ValueError(f"bad signal name {signame!r}")
    kill = f"kill -s {sig} {pid}"
    if start_ticks is None:
        return kill
    return (f"{_starttime_into(pid)}; "
            f"if [ \"$s\" = {int(start_ticks)} ]; then {kill}; "
            f"else echo 'refused: PID {pid} is no longer the same process (start time changed)' >&2; exit 3; fi")
