"""A stand-in for the ``pynvml`` module (nvidia-ml-py) with scripted GPUs.

It raises the real pynvml exception classes (``pynvml.NVMLError(code)`` returns
the subclass, e.g. ``NVMLError_GpuIsLost``) and exposes the real constants, so
the code under test cannot tell it from a driver — only the driver is simulated.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass, field
from types import SimpleNamespace

import pynvml as _real

MIB = 1024 * 1024


def nvml_error(code: int) -> Exception:
    return _real.NVMLError(code)


@dataclass
class FakeMig:
    profile: str
    uuid: str
    gpu_name: str
    gpu_instance: int = 0
    compute_instance: int = 0
    used_mib: int = 0
    total_mib: int = 19968


@dataclass
class FakeGpu:
    index: int
    bus_id: str
    used_mib: int = 0
    total_mib: int = 97887
    reserved_mib: int = 512
    uuid: str = ""
    name: str = "NVIDIA RTX PRO 6000 Blackwell Workstation Edition"
    util: int = 0
    persistence: int = 1
    mig: int | None = None                  # None: MIG not supported; 0/1 current mode
    mig_slots: list[FakeMig | None] = field(default_factory=list)
    # (pid, bytes) or, on a MIG device, (pid, bytes, GPU instance id, compute instance id)
    compute: list[tuple] = field(default_factory=list)
    graphics: list[tuple] = field(default_factory=list)
    errors: dict[str, int] = field(default_factory=dict)  # call name -> NVML error code
    # NVML_FI_DEV_GET_GPU_RECOVERY_ACTION: the value (0 NONE … 7 SYSTEM_REBOOT), or None where the
    # driver does not support the field (its value comes back with NVML_ERROR_NOT_SUPPORTED)
    recovery: int | None = None
    # nvmlDeviceGetRemappedRows: (corrRows, uncRows, isPending, failureOccurred), or None where the
    # GPU has no row remapping (NotSupported: before Ampere)
    remapped: tuple[int, int, int, int] | None = None
    # nvmlDeviceGetRetiredPagesPendingStatus: NVML_FEATURE_ENABLED (1) / DISABLED (0), or None where
    # the GPU retires no pages (NotSupported: Ampere and later)
    pages_pending: int | None = None
    # the health calls a GPU answers, by NVML function name (nvmlDeviceGetTemperature,
    # nvmlDeviceGetMaxPcieLinkWidth, ...); one not here is NotSupported
    health: dict[str, object] = field(default_factory=dict)
    # nvmlDeviceGetProcessUtilization: (pid, timeStamp µs, smUtil) samples; the call returns those
    # newer than its lastSeenTimeStamp, NOT_FOUND when there are none; None: NotSupported
    samples: list[tuple[int, int, int]] | None = field(default_factory=list)

    def __post_init__(self) -> None:
        self.uuid = self.uuid or f"GPU-{self.index:08x}-0000-0000-0000-000000000000"


class FakeNvml:
    """Module-like object: pass it as ``LocalSource(nvml_module=...)``."""

    def __init__(self, gpus: list[FakeGpu] | None = None, *, init_error: int | None = None,
                 driver: str = "570.86.15", v2_missing: bool = False,
                 system_errors: dict[str, int] | None = None, field_values: bool = True) -> None:
        """``field_values=False``: a pynvml older than the recovery-action field (no
        nvmlDeviceGetFieldValues call, no NVML_FI_DEV_GET_GPU_RECOVERY_ACTION constant)."""
        for name in dir(_real):
            if name.startswith(("NVML_", "NVMLError")) or name == "nvmlMemory_v2":
                setattr(self, name, getattr(_real, name))
        if not field_values:
            del self.NVML_FI_DEV_GET_GPU_RECOVERY_ACTION
            self.nvmlDeviceGetFieldValues = None
        self.gpus = list(gpus or [])
        self.init_error = init_error
        self.driver = driver
        self.v2_missing = v2_missing
        self.system_errors = dict(system_errors or {})
        self.hang: dict[str, threading.Event] = {}    # call name -> blocks until set
        self.process_names: dict[int, str | None] = {}  # pid -> name (None: NOT_FOUND)
        self.calls: list[str] = []
        self.since: list[tuple[int, int]] = []    # (GPU index, lastSeenTimeStamp) per process-utilisation call
        self.raised: list[tuple[int | None, str, int]] = []   # (GPU index, call, code)
        self.initialized = 0
        self.shutdowns = 0
        self._lock = threading.Lock()

    # -- plumbing
    def _enter(self, call: str, gpu: FakeGpu | None = None) -> None:
        with self._lock:
            self.calls.append(call)
        ev = self.hang.get(call)
        if ev is not None:
            ev.wait(30)
        code = (gpu.errors if gpu is not None else self.system_errors).get(call)
        if code is not None:
            with self._lock:
                self.raised.append((gpu.index if gpu is not None else None, call, code))
            raise nvml_error(code)

    def count(self, call: str) -> int:
        with self._lock:
            return self.calls.count(call)

    # -- system
    def nvmlInit(self) -> None:
        self._enter("nvmlInit")
        if self.init_error is not None:
            raise nvml_error(self.init_error)
        self.initialized += 1

    def nvmlShutdown(self) -> None:
        self._enter("nvmlShutdown")
        self.shutdowns += 1

    def nvmlSystemGetDriverVersion(self) -> str:
        self._enter("nvmlSystemGetDriverVersion")
        return self.driver

    def nvmlSystemGetProcessName(self, pid: int) -> str:
        """Like the driver: argv[0] of a process it can see, NOT_FOUND for one it cannot
        (a host PID seen from a container); ``process_names`` overrides per PID."""
        self._enter("nvmlSystemGetProcessName")
        if pid in self.process_names:
            name = self.process_names[pid]
            if name is None:
                raise nvml_error(_real.NVML_ERROR_NOT_FOUND)
            return name
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as fh:
                argv0 = fh.read().split(b"\0", 1)[0].decode(errors="replace")
        except OSError:
            raise nvml_error(_real.NVML_ERROR_NOT_FOUND) from None
        if not argv0:
            raise nvml_error(_real.NVML_ERROR_NOT_FOUND)
        return argv0

    def nvmlDeviceGetCount(self) -> int:
        self._enter("nvmlDeviceGetCount")
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> FakeGpu:
        gpu = self.gpus[index]
        self._enter("nvmlDeviceGetHandleByIndex", gpu)
        return gpu

    # -- per device
    def nvmlDeviceGetUUID(self, h):
        if isinstance(h, FakeMig):
            return h.uuid
        self._enter("nvmlDeviceGetUUID", h)
        return h.uuid

    def nvmlDeviceGetName(self, h):
        if isinstance(h, FakeMig):
            return f"{h.gpu_name} MIG {h.profile}"
        self._enter("nvmlDeviceGetName", h)
        return h.name

    def nvmlDeviceGetPciInfo(self, h):
        self._enter("nvmlDeviceGetPciInfo", h)
        return SimpleNamespace(busId=h.bus_id.encode(), busIdLegacy=h.bus_id[4:].encode())

    def nvmlDeviceGetMemoryInfo(self, h, version=None):
        if isinstance(h, FakeMig):      # a MIG device's own memory (version 1 struct)
            return SimpleNamespace(total=h.total_mib * MIB, used=h.used_mib * MIB,
                                   free=(h.total_mib - h.used_mib) * MIB)
        self._enter("nvmlDeviceGetMemoryInfo", h)
        if version is not None:
            if self.v2_missing:
                raise nvml_error(_real.NVML_ERROR_FUNCTION_NOT_FOUND)
            return SimpleNamespace(version=version, total=h.total_mib * MIB,
                                   reserved=h.reserved_mib * MIB, used=h.used_mib * MIB,
                                   free=(h.total_mib - h.used_mib - h.reserved_mib) * MIB)
        return SimpleNamespace(total=h.total_mib * MIB, used=(h.used_mib + h.reserved_mib) * MIB,
                               free=(h.total_mib - h.used_mib - h.reserved_mib) * MIB)

    def nvmlDeviceGetUtilizationRates(self, h):
        self._enter("nvmlDeviceGetUtilizationRates", h)
        return SimpleNamespace(gpu=h.util, memory=0)

    def nvmlDeviceGetPersistenceMode(self, h):
        self._enter("nvmlDeviceGetPersistenceMode", h)
        return h.persistence

    def nvmlDeviceGetMigMode(self, h):
        self._enter("nvmlDeviceGetMigMode", h)
        if h.mig is None:
            raise nvml_error(_real.NVML_ERROR_NOT_SUPPORTED)
        return [h.mig, h.mig]

    def nvmlDeviceGetMaxMigDeviceCount(self, h):
        self._enter("nvmlDeviceGetMaxMigDeviceCount", h)
        return len(h.mig_slots)

    def nvmlDeviceGetMigDeviceHandleByIndex(self, h, index):
        self._enter("nvmlDeviceGetMigDeviceHandleByIndex", h)
        slot = h.mig_slots[index]
        if slot is None:
            raise nvml_error(_real.NVML_ERROR_NOT_FOUND)
        return slot

    def nvmlDeviceGetGpuInstanceId(self, h):
        return h.gpu_instance

    def nvmlDeviceGetComputeInstanceId(self, h):
        return h.compute_instance

    def nvmlDeviceGetFieldValues(self, h, field_ids):
        """Like the driver: the call succeeds; each value carries its own return code."""
        self._enter("nvmlDeviceGetFieldValues", h)
        out = []
        for fid in field_ids:
            v = _real.c_nvmlFieldValue_t()
            v.fieldId = fid
            if fid == _real.NVML_FI_DEV_GET_GPU_RECOVERY_ACTION and h.recovery is not None:
                v.nvmlReturn = _real.NVML_SUCCESS
                v.valueType = _real.NVML_VALUE_TYPE_UNSIGNED_INT
                v.value.uiVal = h.recovery
            else:
                v.nvmlReturn = _real.NVML_ERROR_NOT_SUPPORTED
            out.append(v)
        return out

    def nvmlDeviceGetRemappedRows(self, h):
        self._enter("nvmlDeviceGetRemappedRows", h)
        if h.remapped is None:
            raise nvml_error(_real.NVML_ERROR_NOT_SUPPORTED)
        return tuple(h.remapped)

    def nvmlDeviceGetRetiredPagesPendingStatus(self, h):
        self._enter("nvmlDeviceGetRetiredPagesPendingStatus", h)
        if h.pages_pending is None:
            raise nvml_error(_real.NVML_ERROR_NOT_SUPPORTED)
        return h.pages_pending

    def _health(self, call: str, h):
        self._enter(call, h)
        if call not in h.health:
            raise nvml_error(_real.NVML_ERROR_NOT_SUPPORTED)
        return h.health[call]

    def nvmlDeviceGetTemperature(self, h, sensor):
        return self._health("nvmlDeviceGetTemperature", h)

    def nvmlDeviceGetTemperatureThreshold(self, h, threshold):
        assert threshold == _real.NVML_TEMPERATURE_THRESHOLD_SLOWDOWN
        return self._health("nvmlDeviceGetTemperatureThreshold", h)

    def nvmlDeviceGetPowerUsage(self, h):
        return self._health("nvmlDeviceGetPowerUsage", h)

    def nvmlDeviceGetCurrPcieLinkWidth(self, h):
        return self._health("nvmlDeviceGetCurrPcieLinkWidth", h)

    def nvmlDeviceGetMaxPcieLinkWidth(self, h):
        return self._health("nvmlDeviceGetMaxPcieLinkWidth", h)

    def nvmlDeviceGetCurrPcieLinkGeneration(self, h):
        return self._health("nvmlDeviceGetCurrPcieLinkGeneration", h)

    def nvmlDeviceGetMaxPcieLinkGeneration(self, h):
        return self._health("nvmlDeviceGetMaxPcieLinkGeneration", h)

    def nvmlDeviceGetProcessUtilization(self, h, last_seen):
        """Like the driver: the samples newer than ``last_seen`` (what ``since`` records), one
        c_nvmlProcessUtilizationSample_t each; NOT_FOUND when there is none."""
        self._enter("nvmlDeviceGetProcessUtilization", h)
        self.since.append((h.index, last_seen))
        if h.samples is None:
            raise nvml_error(_real.NVML_ERROR_NOT_SUPPORTED)
        out = []
        for pid, stamp, sm in h.samples:
            if stamp > last_seen:
                v = _real.c_nvmlProcessUtilizationSample_t()
                v.pid, v.timeStamp, v.smUtil, v.memUtil, v.encUtil, v.decUtil = pid, stamp, sm, 0, 0, 0
                out.append(v)
        if not out:
            raise nvml_error(_real.NVML_ERROR_NOT_FOUND)
        return out

    def _plist(self, entries):
        return [SimpleNamespace(pid=e[0], usedGpuMemory=e[1],
                                gpuInstanceId=e[2] if len(e) > 2 else 0xFFFFFFFF,
                                computeInstanceId=e[3] if len(e) > 3 else 0xFFFFFFFF) for e in entries]

    def nvmlDeviceGetComputeRunningProcesses(self, h):
        self._enter("nvmlDeviceGetComputeRunningProcesses", h)
        return self._plist(h.compute)

    def nvmlDeviceGetGraphicsRunningProcesses(self, h):
        self._enter("nvmlDeviceGetGraphicsRunningProcesses", h)
        return self._plist(h.graphics)


def eight_gpus(used_mib: int = 76109) -> list[FakeGpu]:
    """The seed's node: 8 GPUs each still holding ~76 GB."""
    return [FakeGpu(index=i, bus_id=f"00000000:{0x18 + i:02X}:00.0", used_mib=used_mib)
            for i in range(8)]
