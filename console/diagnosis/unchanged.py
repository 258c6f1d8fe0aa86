"""Whether diagnosis would read two polls of a node alike: then they get the same findings but
for the passing of time (how long a zombie has lasted, a streak that crosses a threshold). The
engine re-diagnoses a node whose input has not changed only every so often (console/monitor.py),
so a fleet of quiet nodes does not cost a diagnosis per poll.

Left out, because diagnosis does not read them or they change every poll without meaning
anything: the poll's time and duration, GPU utilisation, thread counts, the difference
between running and sleeping (R, S, I: diagnosis tells Z, D, T and X apart from the rest),
a process's CPU time (a busy job's rises every poll; the rate diagnosis reads from the history
is read again at the next diagnosis, at most REDIAGNOSE_S later), and the processes of the
console's own session on the node (the probe's commands have new PIDs every poll). Read: a
holder's executable and a pending SIGKILL, the GPUs on the PCI bus, whether the driver's
process list answered, the boot time. Cheap when the parser reused the unchanged processes'
objects (one identity test each).
"""
from __future__ import annotations

import itertools
import operator

from console.model import Gpu, NodeSnapshot, Proc

#: leader states diagnosis does not tell apart
_RUNNABLE = {"R": "-", "S": "-", "I": "-"}


def _proc_alike(a: Proc, b: Proc) -> bool:
    return a is b or (
        a.pid == b.pid and a.ppid == b.ppid and _RUNNABLE.get(a.state, a.state) == _RUNNABLE.get(b.state, b.state)
        and a.user == b.user and a.name == b.name and a.cmdline == b.cmdline and a.create_time == b.create_time
        and a.start_ticks == b.start_ticks and a.gpu_memory_mib == b.gpu_memory_mib
        and a.device_files == b.device_files and a.d_threads == b.d_threads and a.pid_ns == b.pid_ns
        and a.exe == b.exe and a.sigkill_pending == b.sigkill_pending)


def _gpu_alike(a: Gpu, b: Gpu) -> bool:
    return a is b or (
        a.index == b.index and a.uuid == b.uuid and a.name == b.name and a.bus_id == b.bus_id
        and a.memory_used_mib == b.memory_used_mib and a.memory_total_mib == b.memory_total_mib
        and a.memory_reserved_mib == b.memory_reserved_mib and a.persistence_mode == b.persistence_mode
        and a.mig_mode == b.mig_mode and a.mig_instances == b.mig_instances)


def _theirs(snap: NodeSnapshot) -> list[Proc]:
    own = snap.own_pids
    return [p for p in snap.processes if p.pid not in own] if own else list(snap.processes)


def alike(a: NodeSnapshot, b: NodeSnapshot) -> bool:
    """Diagnosis reads ``a`` as it reads ``b`` (but for the time each was taken)."""
    if (a.name != b.name or a.error != b.error or a.warnings != b.warnings or a.hostname != b.hostname
            or a.driver_version != b.driver_version or a.lost_gpus != b.lost_gpus
            or a.kernel_log != b.kernel_log or a.driver_processes != b.driver_processes
            or bool(a.own_pids) != bool(b.own_pids) or len(a.gpus) != len(b.gpus)
            or a.pci_gpus != b.pci_gpus or a.driver_list_ok != b.driver_list_ok or a.boot_time != b.boot_time):
        return False
    if not all(_gpu_alike(x, y) for x, y in zip(a.gpus, b.gpus)):
        return False
    if a.processes is b.processes:
        return True
    if len(a.processes) == len(b.processes) and a.own_pids == b.own_pids:
        # the same table but for a few processes (found in C): only those are compared
        own = set(a.own_pids)
        return all(x.pid == y.pid and (x.pid in own or _proc_alike(x, y))
                   for x, y in itertools.compress(zip(a.processes, b.processes),
                                                  map(operator.is_not, a.processes, b.processes)))
    mine, theirs = _theirs(a), _theirs(b)
    return len(mine) == len(theirs) and all(_proc_alike(x, y) for x, y in zip(mine, theirs))
