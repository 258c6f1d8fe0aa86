"""Acceptance on the simulated scenarios: the tell-tale findings at the start, and a scripted run
that keeps applying the top finding's rung until the node's memory is back."""
from __future__ import annotations

from dataclasses import replace

import pytest

from console.actions.plan import plan_action
from console.actions.run import execute
from console.checks.registry import run_check
from console.diagnosis import diagnose
from console.actions.ladder import commands_for, step_args, top_step
from console.rungs import proposable as _proposable

RUNGS = _proposable()
from console.monitor import NodeMonitor
from console.clock import FakeClock
from console.sim.scenarios import scenario_names
from console.sources.sim import SimSource
from tests.sim_fixtures import take_step

SCENARIOS = ("seed", "slow-teardown", "renamed-workers", "hidden-holders", "container", "reset-required", "graceful")


def test_every_simulated_scenario_is_covered():
    assert set(SCENARIOS) <= set(scenario_names())


async def start(scenario: str):
    clock = FakeClock()
    src = SimSource(name="demo", scenario=scenario, clock=clock)
    return clock, src


async def poll(src: SimSource, clock: FakeClock):
    # the probe stamps snapshots with the console's wall clock; the scenario runs on the fake one
    return replace(await src.poll(), taken_at=clock.now())


@pytest.mark.parametrize("scenario, kinds", [
    ("renamed-workers", {"orphan"}),
    ("hidden-holders", {"hidden-holder"}),     # the memory no listed process accounts for is theirs: one finding
    ("container", {"foreign-pid"}),
    ("reset-required", {"reset-blocker", "xid", "recovery-action"}),
])
async def test_tell_tale_findings_at_the_start(scenario, kinds):
    clock, src = await start(scenario)
    snap = await poll(src, clock)
    assert snap.error is None, snap.error
    fs = diagnose(snap)
    assert kinds <= {f.kind for f in fs}, [(f.kind, f.summary) for f in fs]
    for f in fs:
        assert f.next_step and f.summary
    if scenario == "reset-required":
        xids = {f.evidence["xid"]: f for f in fs if f.kind == "xid"}
        assert 119 in xids and 154 not in xids    # the driver's current recovery action says it
        (rec,) = [f for f in fs if f.kind == "recovery-action"]
        assert "recovery action is GPU Reset" in rec.summary and rec.gpus == (3,) and rec.severity == "critical"
        assert "GPU Reset Required" in rec.evidence["xid_154"]
        blocker = next(f for f in fs if f.kind == "reset-blocker")
        assert blocker.severity == "high" and "nvidia-persistenced" in blocker.summary
        assert fs[0].rung == "clear-blockers"
    if scenario == "renamed-workers":
        orphan = next(f for f in fs if f.kind == "orphan")
        assert "VLLM::Worker_TP0" in orphan.summary and orphan.rung == "sigterm"
    if scenario == "container":
        foreign = next(f for f in fs if f.kind == "foreign-pid")
        # the host-side holders are named once, by the foreign PIDs' finding (not again as holding nothing)
        assert not [f for f in fs if f.kind == "hidden-holder" and set(f.pids) & {23, 24}], fs
        assert foreign.rung == "sigterm" and commands_for("sigterm", snap, *step_args(foreign)) == [
            "kill -s TERM 23 24"]
    if scenario == "hidden-holders":
        hidden = next(f for f in fs if f.kind == "hidden-holder")
        assert hidden.severity == "high" and hidden.rung == "sigterm" and len(hidden.pids) == 8
        assert "ghost-memory" not in {f.kind for f in fs} and hidden.evidence["ghost_mib"] > 200 * 1024


@pytest.mark.parametrize("scenario", SCENARIOS)
async def test_following_the_advice_frees_the_memory_within_the_shortest_path_plus_one(scenario):
    """The console's own loop: the monitor polls and diagnoses (with the actions it was told of),
    the top finding's step is taken the way `x` takes it (console/actions/step.py), Confirm
    answered yes, until the node's memory is back."""
    clock, src = await start(scenario)
    node = src.node
    monitor = NodeMonitor(src, interval=3600)
    budget = len(node.ground_truth.shortest_path) + 1
    taken = []
    while not node.memory_freed():
        assert len(taken) < budget, f"{scenario}: not freed after {taken} (truth {node.ground_truth.shortest_path})"
        snap = await monitor.poll_once()
        top = top_step(snap.findings)
        if top is None:
            # nothing stuck: x names the running job and leaves it; the operator stops it with t
            job = next((f for f in snap.findings if f.kind == "holder" and f.rung is None), None)
            assert job is not None, [(f.kind, f.summary) for f in snap.findings]
            assert job.next_step.startswith(("Nothing stuck", "A normal job")) and "`t`" in job.next_step
            top = replace(job, rung="sigterm")
        assert top.rung in RUNGS
        pids, gpus = step_args(top)
        assert 1 not in pids and not set(pids) & set(snap.own_pids)
        done = await take_step(src, snap, top, monitor)
        if top.rung == "wait":
            assert done.rc == 0, done
        else:
            assert done.status in ("settled", "unsettled"), (done.status, done.text)
            assert not done.plan.refusals, done.plan.refusals
            assert monitor.actions[-1].rung == top.rung
        taken.append(top.rung)
    assert node.memory_freed()
    if scenario in ("seed", "slow-teardown"):
        # the memory comes back by waiting out the driver's teardown, never by escalating past SIGKILL
        assert taken[-1] == "wait" and "reset" not in taken and "reboot" not in taken


async def test_seed_wait_and_reread_shows_nothing_came_back():
    clock, src = await start("seed")
    r = await run_check(src, "wait-and-reread", seconds=5)
    assert r.rc == 0
    assert r.data["before"] == r.data["after"]
    assert r.data["before"]["0"] == 76109 and r.data["before"]["7"] == 76069
    assert r.summary.startswith("no memory came back within 5 s: GPUs 0-7 still hold")
    assert clock.now() - 1764410000.0 == pytest.approx(5.0)


async def test_seed_server_never_listened_on_8000():
    clock, src = await start("seed")
    r = await run_check(src, "port", port=8000)
    assert r.summary == "nothing listens on TCP port 8000"


async def test_checks_on_the_simulated_node_after_sigkill():
    clock, src = await start("seed")
    snap = await poll(src, clock)
    workers = [p.pid for p in snap.processes if p.cmdline.startswith("sglang::scheduler_TP")]
    assert len(workers) == 8
    plan = plan_action(snap, "sigkill", pids=workers)
    await execute(plan, src, verify_window_s=0, deadline_s=0)
    r = await run_check(src, "states", pids=workers[:2])
    first = r.data["processes"][str(workers[0])]
    assert first["state"] == "Z" and first["d_threads"] and first["d_threads"][0]["wchan"]
    assert "in D at" in r.summary
    r = await run_check(src, "holders")
    assert r.data["driver"] and not r.data["foreign"]
    stuck = first["d_threads"][0]
    r = await run_check(src, "stack", pid=workers[0], tid=stuck["tid"])
    assert r.data["wchan"] == stuck["wchan"] and r.data["frames"][0]["function"] == stuck["wchan"]
    assert r.data["frames"][0]["module"] == "nvidia" and r.data["py_spy"] is None


async def test_reset_required_checks_name_the_cause():
    clock, src = await start("reset-required")
    snap = await poll(src, clock)
    r = await run_check(src, "kernel-log", snap)
    assert {x["xid"] for x in r.data["xids"]} >= {119, 154}
    assert "GPU Reset Required" in r.summary and "GPU 3" in r.summary
    r = await run_check(src, "blockers")
    assert "nvidia-persistenced" in r.summary and r.data["persistence_on"] == list(range(8))


async def test_container_checks_find_foreign_pids_and_a_closed_kernel_log():
    clock, src = await start("container")
    r = await run_check(src, "holders")
    assert r.data["foreign"] and set(r.data["hidden"]) >= {23, 24}
    r = await run_check(src, "kernel-log")
    assert r.data["permission_denied"] and r.summary.startswith("dmesg not permitted")
