"""The watch's causes from the reading's own evidence (issue 31 items 1 and 8): a reading that
reached the node and found its driver hung, unloaded or mismatched is a cause (only a transport
failure says nothing); a reading that contradicts a timed cause (busy again) restarts its timer."""
from __future__ import annotations

import dataclasses

import pytest

from console.monitor import diagnosed
from tests.test_watch import incidents, reading, watcher


@pytest.mark.parametrize("error, kind", [
    ("nvidia-smi timed out after 5 s (probe deadline)", "probe-hung"),
    ("Failed to initialize NVML: Driver/library version mismatch", "driver-error"),
    ("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver", "driver-error"),
])
async def test_a_hung_unloaded_or_mismatched_driver_opens_an_incident(tmp_path, error, kind):
    w, session, source, lines, told, clock = watcher(tmp_path, scenario="graceful")
    snap = await reading(source)
    broken = diagnosed(dataclasses.replace(snap, error=error, gpus=(), driver_processes=(), findings=()))
    assert any(f.kind == kind for f in broken.findings), [(f.kind, f.severity) for f in broken.findings]
    await w.update(broken)
    assert len(incidents(tmp_path)) == 1 and len(told) == 1, lines
    assert kind in {c["kind"] for c in told[0]["causes"]}
    await session.stop()
    await w.stop()


async def test_a_node_the_transport_cannot_reach_says_nothing_and_clears_nothing(tmp_path):
    w, session, source, lines, told, clock = watcher(tmp_path, clear_after=5)
    held = await reading(source)
    await w.update(held)
    assert len(told) == 1
    gone = diagnosed(dataclasses.replace(held, error="unreachable: connection refused", gpus=(), processes=(),
                                         driver_processes=(), findings=()))
    for _ in range(3):
        clock.t += 10
        await w.update(gone)
    assert len(told) == 1 and w.open_causes(), "the cause stays open while the node cannot be read"
    await session.stop()
    await w.stop()


async def test_a_gpu_busy_half_the_time_is_never_paged_as_idle(tmp_path):
    w, session, source, lines, told, clock = watcher(tmp_path, scenario="seed", idle_after=30)
    idle = await reading(source)
    busy = dataclasses.replace(idle, gpus=tuple(dataclasses.replace(g, utilization_pct=60) for g in idle.gpus))
    for snap in (idle, busy) * 5:                  # 50 s, busy every other reading
        await w.update(snap)
        clock.t += 5
    assert incidents(tmp_path) == [] and told == []
    for _ in range(7):                             # then idle for 30 s and more: now it is a cause
        await w.update(idle)
        clock.t += 5
    assert len(told) == 1 and told[0]["causes"][0]["kind"] == "idle-memory"
    await session.stop()
    await w.stop()
