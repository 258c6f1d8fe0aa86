"""The signal menu's rung (console/actions/plan.py "signal"): any signal of ladder.SIGNALS,
planned with the exact `kill -s SIG PIDS` line, guarded against PID reuse like t and k, and
recorded before it is sent."""
from __future__ import annotations

import dataclasses
import subprocess

import pytest

from console.actions.ladder import SIGNALS, signal_name
from console.actions.plan import plan_action
from console.actions.run import execute
from console.clock import FakeClock
from console.incident.timeline import Timeline
from console.monitor import diagnosed
from console.sim.state import ALIVE
from console.sources.local.source import LocalSource
from console.sources.sim import SimSource
from fake_pynvml import FakeNvml, eight_gpus


@pytest.fixture
def timeline(tmp_path):
    tl = Timeline(tmp_path / "incident.jsonl", by="ops@console")
    yield tl
    tl.close()


async def seed():
    clock = FakeClock()
    source = SimSource(scenario="seed", clock=clock)
    return source, clock, diagnosed(await source.poll())


async def test_a_chosen_signal_is_planned_with_its_exact_line():
    _, _, snap = await seed()
    plan = plan_action(snap, "signal", pids=(72230, 72294), signal="SIGUSR1")
    assert plan.rung == "signal" and plan.signal == "USR1"
    assert plan.commands == ("kill -s USR1 72230 72294",) and plan.title == "SIGUSR1 2 processes"
    assert [t.pid for t in plan.targets] == [72230, 72294] and all(t.start_ticks for t in plan.targets)
    # TERM and KILL from the menu are the ladder's own rungs (what diagnosis knows them as)
    assert plan_action(snap, "signal", pids=(72230,), signal="TERM").rung == "sigterm"
    assert plan_action(snap, "signal", pids=(72230,), signal="KILL").commands == ("kill -s KILL 72230",)
    # the protected are refused whatever the signal
    plan = plan_action(snap, "signal", pids=(1, 72230), signal="STOP")
    assert plan.commands == ("kill -s STOP 72230",) and any("PID 1" in r for r in plan.refusals)


def test_only_the_menus_signals_are_accepted():
    assert SIGNALS[0] == "TERM" and "KILL" in SIGNALS
    assert signal_name("hup") == "HUP" and signal_name("SIGCONT") == "CONT"
    for bad in ("", "9", "HUP; reboot", "SEGV"):
        with pytest.raises(ValueError, match="is not offered"):
            signal_name(bad)


async def test_the_chosen_signal_is_recorded_first_and_refused_for_a_reused_pid(timeline):
    source, clock, snap = await seed()
    plan = plan_action(snap, "signal", pids=(72742, 72230), signal="STOP")     # detokenizer, TP0
    node = source.node
    clock.advance(30)                                   # the detokenizer exits; a new one gets its PID
    node.procs.pop(72742)
    node.add_proc(pid=72742, ppid=1, comm="bash", args="-bash", user="alice", uid=1002)
    out = await execute(plan, source, timeline=timeline, clock=clock, verify_window_s=0, deadline_s=0)
    action = next(e for e in timeline.entries if e.kind == "action")
    assert action.command == "kill -s STOP 72742 72230" and action.seq < out.outcome_entry.seq
    assert out.signalled == (72230,) and "kill -s STOP 72742: refused" in out.outcome_entry.output
    assert node.procs[72742].phase == ALIVE and not node.procs[72742].stopped
    assert node.procs[72230].stopped                    # SIGSTOP reached the one that was still itself


@pytest.fixture
def sleeper():
    child = subprocess.Popen(["sleep", "60"])
    yield child
    if child.poll() is None:
        child.kill()
    child.wait()


async def test_a_real_process_gets_the_chosen_signal_and_only_with_its_start_time(sleeper, timeline):
    source = LocalSource("local", nvml_module=FakeNvml(eight_gpus()[:1]), dmesg_command=("true",))
    try:
        snap = await source.poll()
        plan = plan_action(snap, "signal", pids=(sleeper.pid,), signal="USR1")
        assert plan.commands == (f"kill -s USR1 {sleeper.pid}",)
        stale = dataclasses.replace(plan, targets=(dataclasses.replace(
            plan.targets[0], create_time=plan.targets[0].create_time - 5),))
        clock = FakeClock()
        out = await execute(stale, source, timeline=timeline, clock=clock, verify_window_s=0, deadline_s=0)
        assert out.rc == 3 and out.signalled == () and sleeper.poll() is None
        out = await execute(plan, source, timeline=timeline, clock=clock, verify_window_s=5)
        assert out.rc == 0 and out.signalled == (sleeper.pid,)
        assert sleeper.wait(5) == -10                   # SIGUSR1's default: the process ends
    finally:
        await source.close()
