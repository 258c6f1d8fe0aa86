"""NVML access layer for the local source.

Two parts:

* ``read_nvml(nv)`` — one blocking reading of every GPU through a pynvml-like
  module ``nv`` (the real ``pynvml`` from nvidia-ml-py, or a test double that
  raises the real pynvml exception classes). It never raises: NVML failures
  become ``NvmlReading.error`` (node-level) or ``warnings`` / ``None`` fields
  (per GPU or per field).
* ``DeadlineWorker`` — one dedicated daemon thread that runs those readings with a
  deadline. A call that hangs (a wedged GPU leaves NVML callers stuck in the
  kernel) is reported as "timed out"; while it is still stuck no further call
  is started, so hung threads never pile up.

Errors are told apart by their NVML error code (``exc.value``), so this works
with any module exposing the ``NVML_ERROR_*`` constants.
"""
from __future__ import annotations

import asyncio
import concurrent.futures
import queue
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from console.model import GPU_RECOVERY_ACTIONS, DriverProc, Gpu, MemoryRepair, MigInstance

MIB = 1024 * 1024
#: NVML's "no such id" for a process's GPU / compute instance (not on a MIG device)
NO_INSTANCE = 0xFFFFFFFF

LIBRARY_NOT_FOUND = "NVML: shared library not found — no NVIDIA driver on this machine"
DRIVER_NOT_LOADED = "NVIDIA driver not loaded"
VERSION_MISMATCH = "NVML: driver/library version mismatch — reload the driver or reboot"
NO_DEVICES = "no devices: NVML found no NVIDIA GPU"
NO_PYNVML = "NVML: the pynvml module (nvidia-ml-py) is not installed; no driver data"

# Fallback codes (the values NVML defines), used when ``nv`` lacks a constant.
_CODES = {
    "NVML_ERROR_UNINITIALIZED": 1,
    "NVML_ERROR_NOT_SUPPORTED": 3,
    "NVML_ERROR_NO_PERMISSION": 4,
    "NVML_ERROR_NOT_FOUND": 6,
    "NVML_ERROR_DRIVER_NOT_LOADED": 9,
    "NVML_ERROR_LIBRARY_NOT_FOUND": 12,
    "NVML_ERROR_FUNCTION_NOT_FOUND": 13,
    "NVML_ERROR_GPU_IS_LOST": 15,
    "NVML_ERROR_LIB_RM_VERSION_MISMATCH": 18,
}


@dataclass(frozen=True)
class NvmlReading:
    """What one NVML pass found. ``error`` set means the driver gave nothing usable."""
    error: str | None = None
    gpus: tuple[Gpu, ...] = ()
    driver_processes: tuple[DriverProc, ...] = ()
    lost_gpus: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()
    driver_version: str | None = None
    #: each process's SM utilisation per GPU ({pid: {GPU index: %}}, nvmlDeviceGetProcessUtilization):
    #: only processes NVML sampled since the last reading; none where not supported
    process_sm: Mapping[int, Mapping[int, int | None]] = field(default_factory=dict)
    #: did the process calls answer (nvmlDeviceGetComputeRunningProcesses on every GPU read)?
    #: False when one failed or a GPU was lost (its processes unknown, as nvidia-smi's
    #: --query-compute-apps then fails); None when not asked (no GPU read, NVML released)
    driver_list_ok: bool | None = None


#: how far back the first reading of a GPU's process samples looks (µs in NVML's clock, the CPU's)
SM_FIRST_WINDOW_S = 2.0


@dataclass
class SmSampling:
    """What one NVML session remembers between readings of process samples: the newest sample's
    timestamp per GPU (the next reading asks for newer ones only) and the GPUs that do not
    support them (never asked again, never a warning)."""
    last_seen: dict[int, int] = field(default_factory=dict)
    unsupported: set[int] = field(default_factory=set)


def _code(nv: Any, name: str) -> int:
    return getattr(nv, name, _CODES[name])


def _err_value(exc: BaseException) -> int | None:
    value = getattr(exc, "value", None)
    return value if isinstance(value, int) else None


def _is(nv: Any, exc: BaseException, name: str) -> bool:
    return _err_value(exc) == _code(nv, name)


def _text(value: Any) -> str:
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return str(value)


def _mib(value: Any) -> int | None:
    if value is None:
        return None
    try:
        return int(value) // MIB
    except (TypeError, ValueError):
        return None


def init_error_text(nv: Any, exc: BaseException) -> str:
    """One human line for a failure of nvmlInit (or of a whole reading)."""
    if _is(nv, exc, "NVML_ERROR_LIBRARY_NOT_FOUND"):
        return LIBRARY_NOT_FOUND
    if _is(nv, exc, "NVML_ERROR_DRIVER_NOT_LOADED"):
        return DRIVER_NOT_LOADED
    if _is(nv, exc, "NVML_ERROR_LIB_RM_VERSION_MISMATCH"):
        return VERSION_MISMATCH
    if _is(nv, exc, "NVML_ERROR_NO_PERMISSION"):
        return "NVML: insufficient permissions to talk to the NVIDIA driver"
    if type(exc).__name__ == "NVMLLibraryMismatchError":
        return f"NVML: pynvml/driver library version mismatch ({exc})"
    return f"NVML error from the NVIDIA driver: {exc or type(exc).__name__}"


class _GpuLost(Exception):
    pass


class _Reader:
    """State of one reading: collects warnings, turns field errors into None."""

    def __init__(self, nv: Any) -> None:
        self.nv = nv
        self.warnings: list[str] = []
        self._denied: dict[str, list[str]] = {}
        self._failed: dict[str, list[str]] = {}

    def field(self, index: int, what: str, fn: Callable[[], Any]) -> Any:
        """Value of one optional field: NotSupported → None, NoPermission → None + warning,
        GpuIsLost → the whole GPU is lost."""
        try:
            return fn()
        except Exception as exc:  # noqa: BLE001 — every NVML failure becomes data
            self.absorb(index, what, exc)
            return None

    def absorb(self, index: int, what: str, exc: BaseException) -> None:
        """Record a failed field read (raises _GpuLost for a lost GPU)."""
        nv = self.nv
        if _is(nv, exc, "NVML_ERROR_GPU_IS_LOST"):
            raise _GpuLost() from exc
        if _is(nv, exc, "NVML_ERROR_NOT_SUPPORTED"):
            return
        where = "the system" if index < 0 else f"GPU {index}"
        if _is(nv, exc, "NVML_ERROR_NO_PERMISSION"):
            self._denied.setdefault(what, []).append(where)
            return
        self._failed.setdefault(what, []).append(f"{where}: {exc or type(exc).__name__}")

    def finish_warnings(self) -> None:
        for what, wheres in self._denied.items():
            self.warnings.append(f"NVML: insufficient permissions to read {what} "
                                 f"({', '.join(wheres)})")
        for what, errs in self._failed.items():
            self.warnings.append(f"NVML: could not read {what}: " + "; ".join(errs))


def _memory(nv: Any, handle: Any) -> tuple[int | None, int | None, int | None]:
    """(used, total, reserved) in MiB; memory v2 where the driver has it."""
    v2 = getattr(nv, "nvmlMemory_v2", None)
    if v2 is not None:
        try:
            m = nv.nvmlDeviceGetMemoryInfo(handle, version=v2)
        except TypeError:       # an old pynvml without the version argument
            m = None
        except Exception as exc:  # noqa: BLE001
            if not (_is(nv, exc, "NVML_ERROR_FUNCTION_NOT_FOUND")
                    or _is(nv, exc, "NVML_ERROR_NOT_SUPPORTED")
                    or type(exc).__name__ == "NVMLLibraryMismatchError"):
                raise
            m = None
        if m is not None:
            return (_mib(getattr(m, "used", None)), _mib(getattr(m, "total", None)),
                    _mib(getattr(m, "reserved", None)))
    m = nv.nvmlDeviceGetMemoryInfo(handle)
    return _mib(getattr(m, "used", None)), _mib(getattr(m, "total", None)), None


def _mig_profile(nv: Any, mig_handle: Any, mig_name: str | None) -> str:
    # Driver names MIG devices like "NVIDIA A100-SXM4-40GB MIG 1g.5gb".
    if mig_name and " MIG " in f" {mig_name} ":
        tail = mig_name.split("MIG", 1)[1].strip()
        if tail:
            return tail.split()[0]
    try:
        a = nv.nvmlDeviceGetAttributes(mig_handle)
        gb = round(int(a.memorySizeMB) / 1024)
        return f"{int(a.gpuInstanceSliceCount)}g.{gb}gb"
    except Exception:  # noqa: BLE001
        return "?"


def _instance_id(value: Any) -> int | None:
    try:
        v = int(value)
    except (TypeError, ValueError):
        return None
    return None if v < 0 or v >= NO_INSTANCE else v


def _mig_instances(r: _Reader, index: int, handle: Any) -> tuple[MigInstance, ...]:
    nv = r.nv
    count = r.field(index, "MIG device count", lambda: nv.nvmlDeviceGetMaxMigDeviceCount(handle))
    out: list[MigInstance] = []
    for slot in range(int(count or 0)):
        try:
            mh = nv.nvmlDeviceGetMigDeviceHandleByIndex(handle, slot)
        except Exception as exc:  # noqa: BLE001
            if _is(nv, exc, "NVML_ERROR_GPU_IS_LOST"):
                raise _GpuLost() from exc
            continue            # NOT_FOUND: an empty slot
        uuid = r.field(index, "MIG device UUID", lambda: _text(nv.nvmlDeviceGetUUID(mh)))
        name = r.field(index, "MIG device name", lambda: _text(nv.nvmlDeviceGetName(mh)))
        gi = r.field(index, "MIG GPU instance id", lambda: nv.nvmlDeviceGetGpuInstanceId(mh))
        ci = r.field(index, "MIG compute instance id", lambda: nv.nvmlDeviceGetComputeInstanceId(mh))
        mem = r.field(index, "MIG device memory", lambda: nv.nvmlDeviceGetMemoryInfo(mh))
        out.append(MigInstance(gpu_index=index, profile=_mig_profile(nv, mh, name),
                               uuid=uuid or "", device_index=slot, gpu_instance_id=_instance_id(gi),
                               compute_instance_id=_instance_id(ci),
                               memory_used_mib=_mib(getattr(mem, "used", None)),
                               memory_total_mib=_mib(getattr(mem, "total", None))))
    return tuple(out)


def _field_value(v: Any) -> int | None:
    """The integer in one nvmlFieldValue_t, by its value type; None for a double or garbage."""
    kinds = {1: "uiVal", 2: "ulVal", 3: "ullVal", 4: "sllVal", 5: "siVal", 6: "usVal"}
    name = kinds.get(getattr(v, "valueType", 1))
    try:
        return int(getattr(v.value, name)) if name else None
    except (AttributeError, TypeError, ValueError):
        return None


def _recovery(r: _Reader, index: int, handle: Any) -> str | None:
    """The GPU's recovery action (NVML_FI_DEV_GET_GPU_RECOVERY_ACTION, R565 on): one of
    GPU_RECOVERY_ACTIONS. None, and no warning, where it cannot be known: a pynvml without the
    constant or the call, a driver that does not support the field (its value's own return code)."""
    nv = r.nv
    fn = getattr(nv, "nvmlDeviceGetFieldValues", None)
    field = getattr(nv, "NVML_FI_DEV_GET_GPU_RECOVERY_ACTION", None)
    if fn is None or field is None:
        return None
    try:
        values = fn(handle, [field])
        v = values[0]
    except Exception as exc:  # noqa: BLE001
        if _is(nv, exc, "NVML_ERROR_GPU_IS_LOST"):
            raise _GpuLost() from exc
        return None     # an old driver: not supported, invalid argument, function not found
    if getattr(v, "nvmlReturn", 0) != 0:
        if getattr(v, "nvmlReturn", 0) == _code(nv, "NVML_ERROR_GPU_IS_LOST"):
            raise _GpuLost()
        return None
    value = _field_value(v)
    if value is None:
        return None
    return GPU_RECOVERY_ACTIONS[value] if 0 <= value < len(GPU_RECOVERY_ACTIONS) else f"recovery action {value}"


def _optional(r: _Reader, index: int, what: str, name: str, handle: Any, *args: Any) -> Any:
    """``nv.<name>(handle, *args)``, or None where it cannot be known: a pynvml without the call, a
    driver without the function, a GPU without the feature (NotSupported); other failures are
    the reader's (a warning; a lost GPU is lost)."""
    fn = getattr(r.nv, name, None)
    if fn is None:
        return None
    try:
        return fn(handle, *args)
    except Exception as exc:  # noqa: BLE001 - every NVML failure becomes data
        if _is(r.nv, exc, "NVML_ERROR_FUNCTION_NOT_FOUND"):
            return None
        r.absorb(index, what, exc)
        return None


def _memory_repair(r: _Reader, index: int, handle: Any) -> MemoryRepair | None:
    """Row remapping (nvmlDeviceGetRemappedRows: corrRows, uncRows, isPending, failureOccurred;
    Ampere and later) and pages pending retirement (nvmlDeviceGetRetiredPagesPendingStatus;
    before Ampere); None where the driver tells neither."""
    rows = _optional(r, index, "row remapping", "nvmlDeviceGetRemappedRows", handle)
    pages = _optional(r, index, "retired pages", "nvmlDeviceGetRetiredPagesPendingStatus", handle)
    try:
        corr, unc, pending, failure = (int(v) for v in rows) if rows is not None else (None,) * 4
    except (TypeError, ValueError):
        corr = unc = pending = failure = None
    enabled = getattr(r.nv, "NVML_FEATURE_ENABLED", 1)
    repair = MemoryRepair(remap_pending=None if pending is None else bool(pending),
                          remap_failure=None if failure is None else bool(failure),
                          rows_uncorrectable=unc, rows_correctable=corr,
                          pages_pending=None if pages is None else pages == enabled)
    return None if repair == MemoryRepair() else repair


def _health(r: _Reader, index: int, handle: Any) -> dict[str, Any]:
    """Temperature, power, SM clock, PCIe link and volatile uncorrected ECC errors (what the SSH
    probe's HEALTH_FIELDS read); each None where it cannot be known (_optional)."""
    nv = r.nv

    def call(what: str, name: str, *args: Any) -> Any:
        return _optional(r, index, what, name, handle, *args)

    def num(value: Any) -> int | None:
        return value if isinstance(value, int) and not isinstance(value, bool) else None
    milliwatts = num(call("power", "nvmlDeviceGetPowerUsage"))
    return {"temperature_c": num(call("temperature", "nvmlDeviceGetTemperature",
                                      getattr(nv, "NVML_TEMPERATURE_GPU", 0))),
            "power_w": None if milliwatts is None else round(milliwatts / 1000, 2),
            "clock_sm_mhz": num(call("clocks", "nvmlDeviceGetClockInfo", getattr(nv, "NVML_CLOCK_SM", 1))),
            "pcie_gen": num(call("PCIe link", "nvmlDeviceGetCurrPcieLinkGeneration")),
            "pcie_width": num(call("PCIe link", "nvmlDeviceGetCurrPcieLinkWidth")),
            "pcie_gen_max": num(call("PCIe link", "nvmlDeviceGetMaxPcieLinkGeneration")),
            "pcie_width_max": num(call("PCIe link", "nvmlDeviceGetMaxPcieLinkWidth")),
            "temperature_slowdown_c": num(call("temperature", "nvmlDeviceGetTemperatureThreshold",
                                               getattr(nv, "NVML_TEMPERATURE_THRESHOLD_SLOWDOWN", 1))),
            "ecc_uncorrected": num(call("ECC errors", "nvmlDeviceGetTotalEccErrors",
                                        getattr(nv, "NVML_MEMORY_ERROR_TYPE_UNCORRECTED", 1),
                                        getattr(nv, "NVML_VOLATILE_ECC", 0)))}


def _procs(r: _Reader, index: int, uuid: str, handle: Any,
           names: dict[int, str]) -> tuple[list[DriverProc], bool | None]:
    """The GPU's processes, and whether its compute-process call answered (None: not asked, a
    pynvml without it)."""
    nv = r.nv
    seen: dict[int, int | None] = {}
    instance: dict[int, tuple[int | None, int | None]] = {}
    order: list[int] = []
    answered: bool | None = None
    for what, fn_name in (("compute processes", "nvmlDeviceGetComputeRunningProcesses"),
                          ("graphics processes", "nvmlDeviceGetGraphicsRunningProcesses")):
        fn = getattr(nv, fn_name, None)
        if fn is None:
            continue

        def call(fn=fn) -> Any:
            try:
                return fn(handle)
            except Exception:
                if what == "compute processes":
                    nonlocal answered
                    answered = False
                raise
        plist = r.field(index, what, call) or []
        if what == "compute processes" and answered is None:
            answered = True
        for p in plist:
            pid = int(getattr(p, "pid", 0) or 0)
            if pid <= 0:
                continue
            mem = _mib(getattr(p, "usedGpuMemory", None))
            gi = _instance_id(getattr(p, "gpuInstanceId", None))
            if gi is not None:
                instance.setdefault(pid, (gi, _instance_id(getattr(p, "computeInstanceId", None))))
            if pid not in seen:
                order.append(pid)
                seen[pid] = mem
            elif mem is not None and (seen[pid] is None or mem > seen[pid]):
                seen[pid] = mem     # compute+graphics: same memory listed twice, keep one
    out = []
    for pid in order:
        if pid not in names:
            try:
                names[pid] = _text(nv.nvmlSystemGetProcessName(pid))
            except Exception:  # noqa: BLE001
                names[pid] = ""
        gi, ci = instance.get(pid, (None, None))
        out.append(DriverProc(pid=pid, gpu_index=index, gpu_uuid=uuid,
                              used_memory_mib=seen[pid], name=names[pid],
                              gpu_instance_id=gi, compute_instance_id=ci))
    return out, answered


def _process_sm(nv: Any, index: int, handle: Any, state: SmSampling) -> dict[int, int | None]:
    """{pid: SM %} of the processes NVML sampled on this GPU since the last reading (the newest
    sample of each). NVML returns a sample only for a process that was busy in the period and
    NOT_FOUND when none was: a process without one is not reported (None), never 0. Not
    supported (or a driver or pynvml without the call) -> {} now and for this GPU from then on;
    any other error -> {} with no warning (a per-process figure is not worth a line a poll); a
    lost GPU is lost."""
    fn = getattr(nv, "nvmlDeviceGetProcessUtilization", None)
    if fn is None or index in state.unsupported:
        return {}
    since = state.last_seen.get(index)
    if since is None:
        since = max(0, int((time.time() - SM_FIRST_WINDOW_S) * 1_000_000))
    try:
        samples = fn(handle, since) or ()
    except Exception as exc:  # noqa: BLE001 - every NVML failure becomes data
        if _is(nv, exc, "NVML_ERROR_GPU_IS_LOST"):
            raise _GpuLost() from exc
        if _is(nv, exc, "NVML_ERROR_NOT_SUPPORTED") or _is(nv, exc, "NVML_ERROR_FUNCTION_NOT_FOUND"):
            state.unsupported.add(index)
        return {}
    newest: dict[int, tuple[int, int | None]] = {}
    try:
        for sample in samples:
            pid, stamp, sm = (getattr(sample, name, None) for name in ("pid", "timeStamp", "smUtil"))
            if not (isinstance(pid, int) and pid > 0 and isinstance(stamp, int)):
                continue
            value = sm if isinstance(sm, int) and not isinstance(sm, bool) and 0 <= sm <= 100 else None
            if pid not in newest or stamp >= newest[pid][0]:
                newest[pid] = (stamp, value)
    except TypeError:             # not a list of samples: nothing
        return {}
    if newest:
        state.last_seen[index] = max(since, *(stamp for stamp, _ in newest.values()))
    return {pid: value for pid, (_stamp, value) in newest.items()}


def _bus_id(nv: Any, handle: Any, *, strict: bool = False) -> str | None:
    """PCI bus id, or None; ``strict``: a lost GPU raises _GpuLost."""
    try:
        pci = nv.nvmlDeviceGetPciInfo(handle)
    except Exception as exc:  # noqa: BLE001
        if strict and _is(nv, exc, "NVML_ERROR_GPU_IS_LOST"):
            raise _GpuLost() from exc
        return None
    bus = getattr(pci, "busId", None) or getattr(pci, "busIdLegacy", None)
    return _text(bus) if bus else None


def read_nvml(nv: Any, sampling: SmSampling | None = None) -> NvmlReading:
    """One pass over every GPU. Assumes nvmlInit succeeded; never raises. ``sampling``: what the
    session remembers of process samples (a fresh one when None)."""
    try:
        return _read(nv, sampling if sampling is not None else SmSampling())
    except Exception as exc:  # noqa: BLE001
        return NvmlReading(error=init_error_text(nv, exc))


def _read(nv: Any, sampling: SmSampling) -> NvmlReading:
    r = _Reader(nv)
    driver = r.field(-1, "driver version", lambda: _text(nv.nvmlSystemGetDriverVersion()))
    count = int(nv.nvmlDeviceGetCount())
    if count == 0:
        return NvmlReading(error=NO_DEVICES, driver_version=driver)
    gpus: list[Gpu] = []
    lost: list[str] = []
    dprocs: list[DriverProc] = []
    names: dict[int, str] = {}
    process_sm: dict[int, dict[int, int | None]] = {}
    answers: list[bool | None] = []      # per GPU: did its process calls answer
    enabled = getattr(nv, "NVML_DEVICE_MIG_ENABLE", 1)
    for index in range(count):
        handle = None
        try:
            handle = nv.nvmlDeviceGetHandleByIndex(index)
            uuid = _text(nv.nvmlDeviceGetUUID(handle))
            name = r.field(index, "name", lambda: _text(nv.nvmlDeviceGetName(handle))) or ""
            bus = _bus_id(nv, handle, strict=True)
            try:
                used, total, reserved = _memory(nv, handle)
            except Exception as exc:  # noqa: BLE001
                used = total = reserved = None
                r.absorb(index, "memory", exc)
            util = r.field(index, "utilization", lambda: nv.nvmlDeviceGetUtilizationRates(handle))
            pm = r.field(index, "persistence mode", lambda: nv.nvmlDeviceGetPersistenceMode(handle))
            mig = r.field(index, "MIG mode", lambda: nv.nvmlDeviceGetMigMode(handle))
            mig_on = None if mig is None else (list(mig)[0] == enabled)
            instances = _mig_instances(r, index, handle) if mig_on else ()
            recovery = _recovery(r, index, handle)
            repair = _memory_repair(r, index, handle)
            health = _health(r, index, handle)
            procs, answered = _procs(r, index, uuid, handle, names)
            answers.append(answered)
            # asked only while the GPU has a process (no process: no SM share to read)
            sm = _process_sm(nv, index, handle, sampling) if procs else {}
        except Exception as exc:  # noqa: BLE001 — _GpuLost or a lost GPU at handle/uuid time
            cause = exc.__cause__ if isinstance(exc, _GpuLost) else exc
            if isinstance(exc, _GpuLost) or _is(nv, cause, "NVML_ERROR_GPU_IS_LOST"):
                answers.append(False)          # its processes are unknown
                where = (_bus_id(nv, handle) if handle is not None else None) or str(index)
                lost.append(where)
                r.warnings.append(f"GPU {where} (index {index}) is lost: NVML says "
                                  f"\"{cause}\"; reboot the system to recover it")
                continue
            answers.append(False)              # a GPU not read: who holds its memory is unknown
            if _is(nv, exc, "NVML_ERROR_NO_PERMISSION"):
                r.warnings.append(f"NVML: insufficient permissions to read GPU {index}")
                continue
            if _is(nv, exc, "NVML_ERROR_UNINITIALIZED") or _is(nv, exc, "NVML_ERROR_DRIVER_NOT_LOADED") \
                    or _is(nv, exc, "NVML_ERROR_LIB_RM_VERSION_MISMATCH"):
                raise
            r.warnings.append(f"NVML: could not read GPU {index}: {exc or type(exc).__name__}")
            continue
        gpus.append(Gpu(index=index, uuid=uuid, name=name, bus_id=bus or "",
                        memory_used_mib=used, memory_total_mib=total,
                        utilization_pct=None if util is None else int(getattr(util, "gpu", util)),
                        memory_reserved_mib=reserved,
                        persistence_mode=None if pm is None else bool(pm),
                        mig_mode=mig_on, mig_instances=instances, recovery_action=recovery,
                        memory_repair=repair, **health))
        dprocs.extend(procs)
        for pid, value in sm.items():
            process_sm.setdefault(pid, {})[index] = value
    r.finish_warnings()
    asked = [a for a in answers if a is not None]
    return NvmlReading(gpus=tuple(gpus), driver_processes=tuple(dprocs), lost_gpus=tuple(lost),
                       warnings=tuple(r.warnings), driver_version=driver, process_sm=process_sm,
                       driver_list_ok=all(asked) if asked else None)


def load_pynvml() -> Any | None:
    """The real pynvml module (nvidia-ml-py), or None when it is not installed."""
    try:
        import pynvml  # type: ignore[import-not-found]
    except Exception:  # noqa: BLE001
        return None
    return pynvml


class NvmlSession:
    """nvmlInit once, read on every poll, nvmlShutdown on close. Blocking; worker-thread only."""

    def __init__(self, nv: Any | None) -> None:
        self.nv = nv
        self.initialized = False
        self.sampling = SmSampling()

    def read(self) -> NvmlReading:
        nv = self.nv
        if nv is None:
            return NvmlReading(error=NO_PYNVML)
        if not self.initialized:
            try:
                nv.nvmlInit()
            except Exception as exc:  # noqa: BLE001
                return NvmlReading(error=init_error_text(nv, exc))
            self.initialized = True
        reading = read_nvml(nv, self.sampling)
        if reading.error is not None and reading.error != NO_DEVICES:
            # driver unloaded / reloaded under us: start over next time
            self.shutdown()
        return reading

    def shutdown(self) -> None:
        if not self.initialized:
            return
        self.initialized = False
        self.sampling = SmSampling()        # a reloaded driver may support what this one did not
        try:
            self.nv.nvmlShutdown()
        except Exception:  # noqa: BLE001
            pass


class CallTimeout(Exception):
    """The call did not return in time (or an earlier one is still stuck)."""


class DeadlineWorker:
    """One dedicated daemon thread that runs blocking calls with deadlines.

    Used for every NVML call (and for the /proc scan, whose reads of a process
    with a wedged memory map can block too). Rules:

    * a call that outlives its deadline raises CallTimeout("... timed out after Ns");
    * while such a call is still stuck, ``call`` starts nothing new and raises at
      once ("... still hung"), so stuck threads never pile up;
    * a second caller arriving while a call is in flight (within its deadline)
      waits for it and shares its result when it asked for the same function.

    Daemon, not a ThreadPoolExecutor: the interpreter joins executor threads at
    exit, and a thread stuck inside the driver would then keep the console
    from ever quitting.
    """

    def __init__(self, label: str = "NVML call") -> None:
        self.label = label
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._busy: concurrent.futures.Future | None = None
        self._busy_fn: Callable[[], Any] | None = None
        self._busy_since = 0.0
        self._busy_timeout = 0.0
        self._overdue: concurrent.futures.Future | None = None
        self._lock = threading.Lock()

    @staticmethod
    def _loop(jobs: queue.SimpleQueue) -> None:
        while True:
            item = jobs.get()
            if item is None:
                return
            fn, fut = item
            if not fut.set_running_or_notify_cancel():
                continue
            try:
                fut.set_result(fn())
            except BaseException as exc:  # noqa: BLE001
                fut.set_exception(exc)

    @property
    def hung_for(self) -> float | None:
        """Seconds the stuck call has been running, when one outlived its deadline; else None."""
        with self._lock:
            if self._overdue is None or self._overdue.done():
                return None
            return time.monotonic() - self._busy_since

    async def call(self, fn: Callable[[], Any], timeout: float) -> Any:
        """Run fn in the worker thread; CallTimeout if it (or a stuck predecessor) is late."""
        while True:
            with self._lock:
                busy = self._busy
                if busy is None or busy.done():
                    if self._thread is None or not self._thread.is_alive():
                        self._queue = queue.SimpleQueue()
                        self._thread = threading.Thread(target=self._loop, args=(self._queue,),
                                                        name=self.label, daemon=True)
                        self._thread.start()
                    fut: concurrent.futures.Future = concurrent.futures.Future()
                    self._busy, self._busy_fn = fut, fn
                    self._busy_since, self._busy_timeout = time.monotonic(), timeout
                    self._queue.put((fn, fut))
                    break
                same = self._busy_fn == fn
                overdue = self._overdue is busy
                stuck = time.monotonic() - self._busy_since
                busy_timeout = self._busy_timeout
            if overdue:
                raise CallTimeout(f"{self.label} timed out after {busy_timeout:g}s and is still "
                                  f"hung ({stuck:.0f}s so far); no new call started")
            try:
                result = await self._wait(busy, timeout)
            except CallTimeout:
                raise
            except Exception:  # noqa: BLE001 — someone else's call failed
                if same:
                    raise
                continue
            if same:
                return result
        return await self._wait(fut, timeout)

    async def _wait(self, fut: concurrent.futures.Future, timeout: float) -> Any:
        loop = asyncio.get_running_loop()
        waiter = loop.create_future()

        def _copy(done: concurrent.futures.Future) -> None:
            def _set() -> None:
                if waiter.done():
                    return
                if done.exception() is not None:
                    waiter.set_exception(done.exception())
                else:
                    waiter.set_result(done.result())
            try:
                loop.call_soon_threadsafe(_set)
            except RuntimeError:        # the loop is gone (the call finished after quitting)
                pass

        fut.add_done_callback(_copy)
        try:
            return await asyncio.wait_for(waiter, timeout)
        except (asyncio.TimeoutError, TimeoutError):
            with self._lock:
                if not fut.done():
                    self._overdue = fut
            if fut.done():              # finished in the very last instant
                return fut.result()
            raise CallTimeout(f"{self.label} timed out after {timeout:g}s") from None

    def stop(self) -> None:
        """Let the thread end once it is idle (a stuck one stays stuck; it is a daemon)."""
        with self._lock:
            if self._thread is not None:
                self._queue.put(None)
                self._thread = None
