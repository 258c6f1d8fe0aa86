"""What diagnosis reads of a snapshot, as one comparable value: two polls with equal keys
get the same findings but for the passing of time (how long a zombie has lasted, a streak
that crosses a threshold). The engine re-diagnoses a node whose key has not changed only
every so often (console/monitor.py), so a fleet of quiet nodes does not cost a diagnosis per
poll.

Left out, because diagnosis does not read them or they change every poll without meaning
anything: the poll's time and duration, GPU utilisation, thread counts, the difference
between running and sleeping (R, S, I: diagnosis tells Z, D, T and X apart from the rest),
and the processes of the console's own session on the node (the probe's commands have new
PIDs every poll).
"""
from __future__ import annotations

from console.model import NodeSnapshot

#: leader states diagnosis does not tell apart
_RUNNABLE = {"R": "-", "S": "-", "I": "-"}


def input_key(snap: NodeSnapshot) -> tuple:
    own = set(snap.own_pids)
    procs = tuple(
        (p.pid, p.ppid, _RUNNABLE.get(p.state, p.state), p.user, p.name, p.cmdline, p.create_time,
         p.start_ticks, tuple(sorted(p.gpu_memory_mib.items())), p.device_files, p.d_threads, p.pid_ns)
        for p in snap.processes if p.pid not in own)
    gpus = tuple((g.index, g.uuid, g.name, g.bus_id, g.memory_used_mib, g.memory_total_mib,
                  g.memory_reserved_mib, g.persistence_mode, g.mig_mode, g.mig_instances) for g in snap.gpus)
    return (snap.name, snap.error, snap.warnings, gpus, procs, snap.driver_processes, snap.lost_gpus,
            snap.kernel_log, snap.hostname, snap.driver_version, len(snap.own_pids) > 0)
