"""Suggested verdicts weigh actions: an action with memory before and after is evidence.

Real actions on simulated nodes (FakeClock), recorded by the action layer as the console
records them; the suggestion is what the `v` modal preselects.
"""
from __future__ import annotations

import pytest

from console.actions.plan import plan_action
from console.actions.run import execute
from console.clock import FakeClock
from console.incident import timeline
from console.incident.log import IncidentLog
from console.incident.verdicts import gpus_named, rungs_named
from console.monitor import diagnosed
from console.sources.sim import SimSource


@pytest.fixture
def log(tmp_path):
    tl = timeline.open_incident(tmp_path, "v", by="ops@console")
    yield IncidentLog(tl)
    tl.close()


async def act(log: IncidentLog, scenario: str, rung: str, pids=(), gpus=()):
    clock = FakeClock()
    source = SimSource(scenario=scenario, clock=clock)
    snap = diagnosed(await source.poll())
    plan = plan_action(snap, rung, pids=pids, gpus=gpus)
    hyp = log.open_hypothesis()
    out = await execute(plan, source, timeline=log.timeline, clock=clock, hypothesis=hyp.seq if hyp else None)
    return out


async def test_sigterm_that_freed_nothing_refutes_the_hypothesis_that_named_it(log):
    """demo:slow-teardown: the ranks ignore SIGTERM; after the grace window nothing came back."""
    log.hypothesis("demo", "SIGTERM to torchrun frees GPUs 0-3")
    out = await act(log, "slow-teardown", "sigterm", pids=[51830])
    assert out.outcome_entry.freed_mib == 0
    verdict, why = log.suggest_verdict()
    assert verdict == "refuted", why
    assert f"action #{out.entry.seq}" in why and "freed 0 MiB on GPUs 0-3" in why


async def test_sigterm_that_freed_the_memory_confirms_it(log):
    log.hypothesis("demo", "a clean SIGTERM of the launcher frees GPUs 0-1")
    out = await act(log, "graceful", "sigterm", pids=[65102])
    assert out.outcome_entry.freed_mib > 138 * 1024
    verdict, why = log.suggest_verdict()
    assert verdict == "confirmed", why
    assert "freed 138.7 GiB on GPUs 0-1" in why and f"action #{out.entry.seq}" in why


async def test_memory_freed_after_the_window_by_a_later_observation_confirms(log):
    """The seed: nothing in SIGKILL's 10 s window, everything at +91 s (a watch observation)."""
    log.hypothesis("demo", "SIGKILL of the schedulers frees GPUs 0-7, given time")
    out = await act(log, "seed", "sigkill", pids=[72230, 72294, 72358, 72422, 72486, 72550, 72614, 72678])
    assert out.outcome_entry.freed_mib == 0
    assert log.suggest_verdict()[0] == "refuted"            # only the window so far
    await out.watch.wait()
    verdict, why = log.suggest_verdict()
    assert verdict == "confirmed", why and "594.6 GiB" in why


async def test_an_action_on_other_gpus_or_still_verifying_is_inconclusive_with_why(log):
    log.hypothesis("demo", "resetting GPU 3 frees it")
    await act(log, "graceful", "sigterm", pids=[65102])
    verdict, why = log.suggest_verdict()
    assert verdict == "inconclusive" and "reset" in why and "no such action" in why


def test_no_evidence_says_so(log):
    log.hypothesis("demo", "flashinfer is incompatible with SM120 MLA")
    assert log.suggest_verdict() == ("inconclusive", "no check was run and no action taken for it yet")


@pytest.mark.parametrize("text, gpus", [("SIGTERM to torchrun frees GPUs 0-3", {0, 1, 2, 3}),
                                        ("GPU 3 needs a reset", {3}),
                                        ("GPUs 0, 2 and 5 hold it", {0, 2, 5}),
                                        ("the driver is wedged", set())])
def test_gpus_named(text, gpus):
    assert gpus_named(text) == gpus


def test_rung_words():
    assert rungs_named("SIGTERM to torchrun") == {"sigterm"}
    assert rungs_named("kill -9 the workers") == {"sigkill", "kill-holders"}
    assert rungs_named("persistenced blocks the reset") == {"clear-blockers", "reset"}
    assert rungs_named("threads stuck in the driver") == set()


async def test_an_action_that_read_none_of_the_named_gpus_is_inconclusive(log):
    log.hypothesis("demo", "the launcher's children hold GPU 5 too")
    await act(log, "graceful", "sigterm", pids=[65102])
    verdict, why = log.suggest_verdict()
    assert verdict == "inconclusive" and "GPU 5" in why
