"""LocalSource against a scripted NVML (real pynvml error classes and constants)."""
from __future__ import annotations

import asyncio
import os
import threading

import pynvml
import pytest
from hypothesis import given, strategies as st

from tests.fuzzing import examples
from console.sources.local import nvml as nvml_layer
from console.sources.local.source import LocalSource
from console.model import GPU_RECOVERY_ACTIONS
from fake_pynvml import MIB, FakeMig, FakeNvml, eight_gpus, nvml_error


def source(fake, **kw) -> LocalSource:
    kw.setdefault("dmesg_command", ("true",))
    return LocalSource("local", nvml_module=fake, **kw)


def test_error_helper_returns_the_real_subclass():
    assert isinstance(nvml_error(pynvml.NVML_ERROR_GPU_IS_LOST), pynvml.NVMLError_GpuIsLost)


async def test_eight_busy_gpus_with_driver_processes_mapped_onto_procs():
    gpus = eight_gpus()
    me = os.getpid()
    gpus[0].compute = [(me, 75800 * MIB)]
    gpus[3].compute = [(me, 100 * MIB)]
    snap = await source(FakeNvml(gpus)).poll()
    assert snap.error is None
    assert [g.index for g in snap.gpus] == list(range(8))
    g0 = snap.gpu(0)
    assert (g0.memory_used_mib, g0.memory_total_mib, g0.memory_reserved_mib) == (76109, 97887, 512)
    assert g0.bus_id == "00000000:18:00.0" and g0.persistence_mode is True
    assert g0.utilization_pct == 0 and g0.mig_mode is None
    assert snap.driver_version == "570.86.15"
    me_proc = snap.proc(me)
    assert dict(me_proc.gpu_memory_mib) == {"0": 75800, "3": 100}
    assert me_proc.pid_ns and me_proc.pid_ns.startswith("pid:[")
    assert {(d.pid, d.gpu_index, d.used_memory_mib) for d in snap.driver_processes} == {
        (me, 0, 75800), (me, 3, 100)}
    # the driver names it by argv[0], as NVML does: it is this very process
    assert all(d.local for d in snap.driver_processes)


async def test_memory_v1_fallback_has_no_reserved():
    snap = await source(FakeNvml(eight_gpus(), v2_missing=True)).poll()
    assert snap.error is None
    g = snap.gpu(0)
    assert g.memory_reserved_mib is None
    assert g.memory_used_mib == 76109 + 512    # v1 "used" includes the reserved part


async def test_library_not_found_still_lists_processes():
    fake = FakeNvml(init_error=pynvml.NVML_ERROR_LIBRARY_NOT_FOUND)
    src = source(fake)
    snap = await src.poll()
    assert snap.error == "NVML: shared library not found — no NVIDIA driver on this machine"
    assert snap.gpus == ()
    assert snap.proc(os.getpid()) is not None
    # retried on the next poll: a driver installed later is picked up
    await src.poll()
    assert fake.count("nvmlInit") == 2


@pytest.mark.parametrize("code, words", [
    (pynvml.NVML_ERROR_DRIVER_NOT_LOADED, "driver not loaded"),
    (pynvml.NVML_ERROR_LIB_RM_VERSION_MISMATCH, "mismatch"),
])
async def test_init_failures_name_their_cause(code, words):
    snap = await source(FakeNvml(init_error=code)).poll()
    assert words in snap.error.lower()
    assert "driver" in snap.error.lower()
    assert len(snap.processes) > 3


async def test_no_devices():
    snap = await source(FakeNvml([])).poll()
    assert "no devices" in snap.error
    assert snap.processes


async def test_lost_gpu_is_absent_and_named_by_bus_id():
    gpus = eight_gpus()
    gpus[2].errors["nvmlDeviceGetMemoryInfo"] = pynvml.NVML_ERROR_GPU_IS_LOST
    snap = await source(FakeNvml(gpus)).poll()
    assert snap.error is None
    assert [g.index for g in snap.gpus] == [0, 1, 3, 4, 5, 6, 7]
    assert snap.lost_gpus == ("00000000:1A:00.0",)
    assert any("lost" in w and "00000000:1A:00.0" in w for w in snap.warnings)


async def test_lost_gpu_without_a_handle_is_named_by_index():
    gpus = eight_gpus()
    gpus[5].errors["nvmlDeviceGetHandleByIndex"] = pynvml.NVML_ERROR_GPU_IS_LOST
    snap = await source(FakeNvml(gpus)).poll()
    assert snap.lost_gpus == ("5",)
    assert snap.gpu(5) is None and snap.gpu(6) is not None


async def test_not_supported_fields_are_none_without_warnings():
    gpus = eight_gpus()[:1]
    gpus[0].errors.update({"nvmlDeviceGetUtilizationRates": pynvml.NVML_ERROR_NOT_SUPPORTED,
                           "nvmlDeviceGetPersistenceMode": pynvml.NVML_ERROR_NOT_SUPPORTED})
    snap = await source(FakeNvml(gpus)).poll()
    g = snap.gpu(0)
    assert g.utilization_pct is None and g.persistence_mode is None
    assert g.memory_used_mib == 76109
    assert snap.warnings == ()


async def test_no_permission_is_none_and_one_warning():
    gpus = eight_gpus()[:2]
    for g in gpus:
        g.errors["nvmlDeviceGetPersistenceMode"] = pynvml.NVML_ERROR_NO_PERMISSION
    snap = await source(FakeNvml(gpus)).poll()
    assert [g.persistence_mode for g in snap.gpus] == [None, None]
    perm = [w for w in snap.warnings if "permission" in w]
    assert len(perm) == 1 and "persistence mode" in perm[0] and "GPU 0, GPU 1" in perm[0]


async def test_process_memory_unsupported_is_none_but_still_a_holder():
    gpus = eight_gpus()[:1]
    me = os.getpid()
    gpus[0].compute = [(me, None)]
    gpus[0].graphics = [(me, None)]          # C+G: listed twice, counted once
    snap = await source(FakeNvml(gpus)).poll()
    assert dict(snap.proc(me).gpu_memory_mib) == {"0": None}
    assert snap.proc(me).is_gpu_holder
    assert [(d.pid, d.used_memory_mib) for d in snap.driver_processes] == [(me, None)]


async def test_foreign_pid_from_driver_is_kept_in_driver_processes():
    gpus = eight_gpus()[:1]
    gpus[0].compute = [(4_000_000, 2048 * MIB)]       # beyond pid_max: not in our /proc
    snap = await source(FakeNvml(gpus)).poll()
    assert snap.proc(4_000_000) is None
    assert [(d.pid, d.used_memory_mib) for d in snap.driver_processes] == [(4_000_000, 2048)]


async def test_mig_enabled_lists_instances_not_plain_gpus():
    gpus = eight_gpus()[:2]
    gpus[1].mig = pynvml.NVML_DEVICE_MIG_ENABLE
    gpus[1].errors["nvmlDeviceGetUtilizationRates"] = pynvml.NVML_ERROR_NOT_SUPPORTED
    gpus[1].mig_slots = [FakeMig("3g.48gb", "MIG-aaaa", gpus[1].name), None,
                         FakeMig("1g.12gb", "MIG-bbbb", gpus[1].name)]
    gpus[0].mig = pynvml.NVML_DEVICE_MIG_DISABLE
    snap = await source(FakeNvml(gpus)).poll()
    assert len(snap.gpus) == 2
    g0, g1 = snap.gpus
    assert g0.mig_mode is False and g0.mig_instances == ()
    assert g1.mig_mode is True and g1.utilization_pct is None
    assert [(m.gpu_index, m.profile, m.uuid, m.device_index) for m in g1.mig_instances] == [
        (1, "3g.48gb", "MIG-aaaa", 0), (1, "1g.12gb", "MIG-bbbb", 2)]


async def test_mig_instances_carry_their_memory_and_processes_their_instance():
    """NVML gives each MIG device's memory and each process's GPU / compute instance."""
    me = os.getpid()
    gpus = eight_gpus(used_mib=24205)[:2]
    gpus[1].mig = pynvml.NVML_DEVICE_MIG_ENABLE
    gpus[1].mig_slots = [FakeMig("3g.40gb", "MIG-aaaa", gpus[1].name, gpu_instance=3, used_mib=14366),
                         FakeMig("1g.10gb", "MIG-bbbb", gpus[1].name, gpu_instance=5, used_mib=9826)]
    gpus[1].compute = [(me, 14195 * MIB, 3, 0)]
    gpus[0].compute = [(me, 100 * MIB)]
    snap = await source(FakeNvml(gpus)).poll()
    g1 = snap.gpu(1)
    assert [(m.profile, m.gpu_instance_id, m.compute_instance_id, m.memory_used_mib, m.memory_total_mib)
            for m in g1.mig_instances] == [("3g.40gb", 3, 0, 14366, 19968), ("1g.10gb", 5, 0, 9826, 19968)]
    on = {d.gpu_index: d for d in snap.driver_processes}
    assert (on[1].gpu_instance_id, on[1].compute_instance_id) == (3, 0)
    assert g1.mig_instance(3, 0).uuid == "MIG-aaaa"
    assert (on[0].gpu_instance_id, on[0].compute_instance_id) == (None, None)   # no MIG: no instance
    # kill paths target the PID as usual: the memory is credited to the process on its GPU
    assert dict(snap.proc(me).gpu_memory_mib) == {"0": 100, "1": 14195}


@pytest.mark.parametrize("value, token", [(0, "none"), (1, "gpu_reset"), (2, "node_reboot"), (3, "drain_p2p"),
                                          (4, "drain_and_reset"), (5, "recover_imex_domain"), (6, "bus_reset"),
                                          (7, "system_reboot"), (9, "recovery action 9")])
async def test_recovery_action_field_is_read_into_the_gpu(value, token):
    gpus = eight_gpus()[:2]
    gpus[1].recovery = value
    snap = await source(FakeNvml(gpus)).poll()
    assert snap.gpu(1).recovery_action == token
    assert snap.gpu(0).recovery_action is None           # not supported there: unknown, not an error
    assert not snap.warnings and snap.error is None


async def test_recovery_action_unknown_without_the_field_in_pynvml_or_the_driver():
    gpus = eight_gpus()[:1]
    gpus[0].recovery = 1
    old_pynvml = FakeNvml(gpus, field_values=False)
    snap = await source(old_pynvml).poll()
    assert snap.error is None and not snap.warnings and snap.gpu(0).recovery_action is None
    assert old_pynvml.count("nvmlDeviceGetFieldValues") == 0
    gpus[0].errors["nvmlDeviceGetFieldValues"] = pynvml.NVML_ERROR_FUNCTION_NOT_FOUND   # an old driver
    snap = await source(FakeNvml(gpus)).poll()
    assert snap.error is None and not snap.warnings and snap.gpu(0).recovery_action is None
    gpus[0].errors["nvmlDeviceGetFieldValues"] = pynvml.NVML_ERROR_GPU_IS_LOST
    snap = await source(FakeNvml(gpus)).poll()
    assert snap.lost_gpus == ("00000000:18:00.0",)


async def test_hung_nvml_times_out_and_is_not_called_again_while_stuck():
    fake = FakeNvml(eight_gpus())
    release = threading.Event()
    fake.hang["nvmlDeviceGetMemoryInfo"] = release
    src = source(fake, nvml_timeout=0.3)
    try:
        snap = await src.poll()
        assert snap.error == "NVML call timed out after 0.3s"
        assert snap.processes                           # /proc still answers
        reads = fake.count("nvmlDeviceGetMemoryInfo")
        snap2 = await src.poll()
        assert "timed out" in snap2.error and "still hung" in snap2.error
        assert fake.count("nvmlDeviceGetMemoryInfo") == reads   # no new call piled up
        assert fake.count("nvmlDeviceGetCount") == 1
    finally:
        release.set()
    # once the driver answers again, polls recover
    del fake.hang["nvmlDeviceGetMemoryInfo"]
    for _ in range(50):
        if src._nvml_worker.hung_for is None:
            break
        await asyncio.sleep(0.02)
    snap3 = await src.poll()
    assert snap3.error is None and len(snap3.gpus) == 8


async def test_hung_init_times_out_too():
    fake = FakeNvml(eight_gpus())
    release = threading.Event()
    fake.hang["nvmlInit"] = release
    src = source(fake, nvml_timeout=0.2)
    try:
        snap = await src.poll()
        assert "timed out" in snap.error
    finally:
        release.set()


async def test_close_shuts_nvml_down_and_next_poll_reopens():
    fake = FakeNvml(eight_gpus()[:1])
    src = source(fake)
    await src.poll()
    await src.poll()
    assert fake.initialized == 1                 # init once, not per poll
    await src.close()
    assert fake.shutdowns == 1
    src.nvml_paused = True
    snap = await src.poll()
    assert fake.initialized == 1 and snap.gpus == ()
    assert any("reset" in w for w in snap.warnings)
    src.nvml_paused = False
    snap = await src.poll()
    assert fake.initialized == 2 and len(snap.gpus) == 1


async def test_driver_unloaded_between_polls_reinitializes():
    fake = FakeNvml(eight_gpus()[:1])
    src = source(fake)
    assert (await src.poll()).error is None
    fake.system_errors["nvmlDeviceGetCount"] = pynvml.NVML_ERROR_DRIVER_NOT_LOADED
    snap = await src.poll()
    assert "driver not loaded" in snap.error.lower()
    del fake.system_errors["nvmlDeviceGetCount"]
    assert (await src.poll()).error is None
    assert fake.initialized == 2


def test_read_nvml_never_raises_on_odd_errors():
    gpus = eight_gpus()[:2]
    gpus[0].errors["nvmlDeviceGetUUID"] = pynvml.NVML_ERROR_UNKNOWN
    gpus[1].errors["nvmlDeviceGetComputeRunningProcesses"] = pynvml.NVML_ERROR_UNKNOWN
    reading = nvml_layer.read_nvml(FakeNvml(gpus))
    assert reading.error is None
    assert [g.index for g in reading.gpus] == [1]
    assert any("GPU 0" in w for w in reading.warnings)
    assert any("compute processes" in w for w in reading.warnings)


async def test_real_pynvml_without_a_driver():
    """This machine has no NVIDIA driver: the real module must say so and /proc still answers."""
    src = LocalSource("local", dmesg_command=("true",))
    snap = await src.poll()
    if snap.gpus:
        pytest.skip("an NVIDIA driver is present here")
    assert snap.error == "NVML: shared library not found — no NVIDIA driver on this machine"
    assert snap.proc(os.getpid()) is not None
    assert os.getpid() in snap.own_pids
    await src.close()


async def test_concurrent_polls_share_one_nvml_reading():
    fake = FakeNvml(eight_gpus())
    release = threading.Event()
    fake.hang["nvmlDeviceGetCount"] = release
    src = source(fake, nvml_timeout=2.0)
    first = asyncio.ensure_future(src.poll())
    second = asyncio.ensure_future(src.poll())
    await asyncio.sleep(0.1)
    release.set()
    a, b = await asyncio.gather(first, second)
    assert a.error is None and b.error is None
    assert len(a.gpus) == len(b.gpus) == 8
    assert fake.count("nvmlDeviceGetCount") == 1


async def test_concurrent_polls_during_a_hang_start_one_call_only():
    fake = FakeNvml(eight_gpus())
    release = threading.Event()
    fake.hang["nvmlDeviceGetCount"] = release
    src = source(fake, nvml_timeout=0.2)
    try:
        snaps = await asyncio.gather(src.poll(), src.poll(), src.poll())
        assert all("timed out" in s.error for s in snaps)
        assert fake.count("nvmlDeviceGetCount") == 1
    finally:
        release.set()


ERROR_CODES = [pynvml.NVML_ERROR_GPU_IS_LOST, pynvml.NVML_ERROR_NOT_SUPPORTED,
               pynvml.NVML_ERROR_NO_PERMISSION, pynvml.NVML_ERROR_UNKNOWN,
               pynvml.NVML_ERROR_NOT_FOUND, pynvml.NVML_ERROR_DRIVER_NOT_LOADED,
               pynvml.NVML_ERROR_FUNCTION_NOT_FOUND, pynvml.NVML_ERROR_TIMEOUT]
DEVICE_CALLS = ["nvmlDeviceGetHandleByIndex", "nvmlDeviceGetUUID", "nvmlDeviceGetName",
                "nvmlDeviceGetPciInfo", "nvmlDeviceGetMemoryInfo",
                "nvmlDeviceGetUtilizationRates", "nvmlDeviceGetPersistenceMode",
                "nvmlDeviceGetMigMode", "nvmlDeviceGetMaxMigDeviceCount",
                "nvmlDeviceGetMigDeviceHandleByIndex", "nvmlDeviceGetComputeRunningProcesses",
                "nvmlDeviceGetGraphicsRunningProcesses", "nvmlDeviceGetFieldValues"]


@examples(150)
@given(st.lists(st.dictionaries(st.sampled_from(DEVICE_CALLS), st.sampled_from(ERROR_CODES),
                                max_size=4), min_size=1, max_size=4),
       st.booleans())
def test_read_nvml_survives_any_mix_of_device_errors(errors, mig):
    gpus = eight_gpus()[:len(errors)]
    for g, errs in zip(gpus, errors):
        g.errors.update(errs)
        g.compute = [(4242, 10 * MIB)]
        g.recovery = g.index % 5
        if mig:
            g.mig = pynvml.NVML_DEVICE_MIG_ENABLE
            g.mig_slots = [FakeMig("1g.12gb", f"MIG-{g.index}", g.name)]
    fake = FakeNvml(gpus)
    reading = nvml_layer.read_nvml(fake)
    lost = {i for i, _call, code in fake.raised if code == pynvml.NVML_ERROR_GPU_IS_LOST}
    seen = {g.index for g in reading.gpus}
    if reading.error is None:
        assert not (seen & lost)                          # a lost GPU is never shown
        assert len(reading.lost_gpus) == len(lost)           # every lost GPU is reported
        for g in reading.gpus:
            assert g.mig_mode in (None, True, False)
            assert g.memory_used_mib in (None, 76109)     # never a made-up 0
            assert g.recovery_action in (None, *GPU_RECOVERY_ACTIONS[:5])
    else:
        assert "driver" in reading.error.lower()


async def test_a_host_pid_that_collides_with_a_local_process_is_not_credited():
    """In a container the driver lists host PIDs; one may be a local, innocent process."""
    import subprocess
    innocent = subprocess.Popen(["sleep", "60"])
    try:
        gpus = eight_gpus()
        gpus[0].compute = [(innocent.pid, 75800 * MIB)]
        fake = FakeNvml(gpus)
        fake.process_names[innocent.pid] = None          # the driver cannot name a foreign PID
        snap = await source(fake).poll()
        proc = snap.proc(innocent.pid)
        assert proc is not None and dict(proc.gpu_memory_mib) == {}
        assert [d.local for d in snap.driver_processes if d.pid == innocent.pid] == [False]
        from console.diagnosis import diagnose
        from console.actions.ladder import commands_for
        from console.diagnosis.who import holder_pids
        findings = diagnose(snap)
        assert any(f.kind == "foreign-pid" and innocent.pid in f.pids for f in findings)
        assert innocent.pid not in holder_pids(snap)
        for f in findings:
            for rung in ("sigterm", "sigkill", "kill-holders"):
                assert all(str(innocent.pid) not in c.split() for c in commands_for(rung, snap, gpus=(0,)))
    finally:
        innocent.kill()
        innocent.wait()
