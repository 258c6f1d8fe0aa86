"""The `snapshot --json` document (docs/snapshot-json.md is the contract: fields may be added, never renamed)."""
from __future__ import annotations

import dataclasses
import datetime as dt
from typing import Any, Sequence

from console.model import Finding, Gpu, NodeSnapshot, Proc


def iso_utc(epoch: float) -> str:
    return dt.datetime.fromtimestamp(epoch, dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def gpu_json(g: Gpu) -> dict[str, Any]:
    return {
        "index": g.index, "uuid": g.uuid, "name": g.name, "bus_id": g.bus_id,
        "memory_used_mib": g.memory_used_mib, "memory_total_mib": g.memory_total_mib,
        "utilization_pct": g.utilization_pct, "memory_reserved_mib": g.memory_reserved_mib,
        "persistence_mode": g.persistence_mode, "mig_mode": g.mig_mode,
        "mig_instances": [{"profile": m.profile, "uuid": m.uuid, "device_index": m.device_index,
                           "gpu_instance_id": m.gpu_instance_id, "compute_instance_id": m.compute_instance_id,
                           "memory_used_mib": m.memory_used_mib, "memory_total_mib": m.memory_total_mib}
                          for m in g.mig_instances],
        "recovery_action": g.recovery_action,
        # row remapping / page retirement (null: not read); each value null where not reported
        "memory_repair": None if g.memory_repair is None else dataclasses.asdict(g.memory_repair),
        # health beside memory (null where the driver does not report it)
        "temperature_c": g.temperature_c, "power_w": g.power_w, "clock_sm_mhz": g.clock_sm_mhz,
        "pcie_gen": g.pcie_gen, "pcie_width": g.pcie_width, "ecc_uncorrected": g.ecc_uncorrected,
        "pcie_gen_max": g.pcie_gen_max, "pcie_width_max": g.pcie_width_max,
        "temperature_slowdown_c": g.temperature_slowdown_c,
        # NVLink fabric registration (NVSwitch systems; null where not asked or not known)
        "fabric_state": g.fabric_state, "fabric_status": g.fabric_status,
    }


def cgroup_json(p: Proc) -> dict[str, Any]:
    """A process's container (null outside one) and systemd unit, from /proc/PID/cgroup."""
    cg = p.cgroup
    if cg is None:
        return {"container": None, "unit": None, "cgroup": None}
    container = ({"runtime": cg.runtime, "id": cg.container_id, "pod_uid": cg.pod_uid}
                 if cg.in_container else None)
    return {"container": container, "unit": cg.unit, "cgroup": cg.path}


def proc_json(p: Proc) -> dict[str, Any]:
    return {
        "pid": p.pid, "ppid": p.ppid, "state": p.state, "user": p.user, "name": p.name,
        "cmdline": p.cmdline, "gpu_memory_mib": dict(p.gpu_memory_mib),
        "holds_devices": p.holds_devices, "threads_in_d": p.threads_in_d,
        # SM utilisation the driver reports for it, the busiest of its GPUs (null: not reported)
        "gpu_sm_pct": p.gpu_sm_pct,
        "device_files": list(p.device_files), "create_time": p.create_time,
        "start_ticks": p.start_ticks, "num_threads": p.num_threads, "pid_ns": p.pid_ns,
        "d_threads": [{"tid": t.tid, "wchan": t.wchan} for t in p.d_threads],
        **cgroup_json(p),
        # CPU time used, in clock ticks (1/100 s): rising between two polls, the process computes
        "cpu_ticks": p.cpu_ticks,
        # the executable (GPU holders only; null where not read or unreadable), and whether a
        # SIGKILL is pending (GPU holders and processes with a thread in D; null where not read)
        "exe": p.exe, "sigkill_pending": p.sigkill_pending,
    }


def finding_json(f: Finding) -> dict[str, Any]:
    return {
        "kind": f.kind, "severity": f.severity, "pids": list(f.pids), "gpus": list(f.gpus),
        "summary": f.summary, "next_step": f.next_step, "reason": f.reason, "rung": f.rung,
        "evidence": _plain(f.evidence), "since": iso_utc(f.since) if f.since else None,
    }


def _plain(value: Any) -> Any:
    """Evidence as JSON-safe data (tuples -> lists, keys -> str)."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [_plain(v) for v in value]
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    return str(value)


def node_json(s: NodeSnapshot) -> dict[str, Any]:
    return {
        "name": s.name, "error": s.error, "warnings": list(s.warnings), "probe_ms": s.probe_ms,
        "hostname": s.hostname, "driver_version": s.driver_version,
        "drm_modeset": s.drm_modeset, "nvswitches": s.nvswitches,
        "taken_at": iso_utc(s.taken_at),
        "gpus": [gpu_json(g) for g in s.gpus],
        "lost_gpus": list(s.lost_gpus),
        "processes": [proc_json(p) for p in s.processes],
        "driver_processes": [{"pid": d.pid, "gpu_index": d.gpu_index, "gpu_uuid": d.gpu_uuid,
                              "used_memory_mib": d.used_memory_mib, "name": d.name,
                              "gpu_instance_id": d.gpu_instance_id,
                              "compute_instance_id": d.compute_instance_id}
                             for d in s.driver_processes],
        "kernel_log": list(s.kernel_log),
        "findings": [finding_json(f) for f in s.findings],
        # the GPUs the kernel module knows (/proc/driver/nvidia/gpus) and whether each answers on
        # the PCI bus (false: its config space reads all ones, fallen off; null: unreadable); null
        # when the directory could not be read
        "pci_gpus": None if s.pci_gpus is None else [{"bus_id": g.bus_id, "present": g.present}
                                                     for g in s.pci_gpus],
        # did the driver's process list answer (false: it failed; null: not asked)
        "driver_list_ok": s.driver_list_ok,
        # when the node booted, epoch seconds (kernel-log stamps count from it); null when not read
        "boot_time": s.boot_time,
    }


def snapshot_document(snaps: Sequence[NodeSnapshot], taken_at: float) -> dict[str, Any]:
    return {"taken_at": iso_utc(taken_at), "nodes": [node_json(s) for s in snaps]}
