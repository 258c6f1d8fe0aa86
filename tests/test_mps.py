"""MPS (causes from the field, issue 22 item 4): the driver lists nvidia-cuda-mps-server in place of
its clients, and a signal to the server ends every client on the GPU. The console asks the
control daemon (get_server_list, get_client_list: a read-only check), ends the stuck client with
terminate_client (Confirm first, recorded, verified from the driver's list), and offers quit only
once terminate_client brought nothing back; the server is never a signal's target."""
from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given
from hypothesis import strategies as st

from console.actions import mps
from console.actions.ladder import top_step
from console.rungs import ids as rung_ids

SIGNAL_OF = [r for r in rung_ids() if r in ("sigterm", "sigkill", "kill-holders", "signal")]
from console.actions.run import execute
from console.actions.step import after_check, step_for
from console.checks.parse_mps import NO_DAEMON, parse_mps_check, parse_pid_lines
from console.checks.registry import render, run_check
from console.clock import FakeClock
from console.model import ActionRecord
from console.monitor import NodeMonitor
from console.sim.scenarios import MPS_CONTROL_PID, MPS_EXITED_PID, MPS_SERVER_PID, MPS_SERVING_MIB, MPS_SERVING_PID
from console.sources.sim import SimSource

ASK = ("echo ::servers::; echo get_server_list | timeout 10 nvidia-cuda-mps-control 2>&1; echo ::rc:: $?; "
       "echo ::clients::; echo get_client_list 4188 | timeout 10 nvidia-cuda-mps-control 2>&1; echo ::rc:: $?")


# ---------------------------------------------------------------- the parser (pure, fuzzed)

def test_the_documented_answers_one_pid_a_line():
    d = parse_mps_check("::servers::\n4188\n::rc:: 0\n::clients::\n52410\n52777\n::rc:: 0\n")
    assert d == {"servers": [4188], "clients": [52410, 52777], "daemon": True, "error": None,
                 "rc": {"servers": 0, "clients": 0}, "timed_out": False}
    empty = parse_mps_check("::servers::\n::rc:: 0\n::clients::\n::rc:: 0\n")
    assert empty["servers"] == [] and empty["clients"] == [] and empty["daemon"] is True


@pytest.mark.parametrize("where", ["stdout", "stderr"])
def test_no_daemon_is_read_on_either_stream(where):
    """Which stream the words come on is not documented: the check folds stderr into stdout."""
    d = parse_mps_check(f"::servers::\n{NO_DAEMON}\n::rc:: 1\n::clients::\n{NO_DAEMON}\n::rc:: 1\n")
    assert d["daemon"] is False and d["error"] == NO_DAEMON and d["servers"] == [] and d["clients"] == []


def test_a_question_that_timed_out_and_junk_lines():
    d = parse_mps_check("::servers::\n::rc:: 124\n")
    assert d["timed_out"] and d["daemon"] is None and "did not answer" in d["error"] and d["clients"] is None
    assert parse_pid_lines("  12\n0\n99999999\nx 12\n12\n") == ([12], ["0", "99999999", "x 12"])


@given(st.text(alphabet=st.sampled_from(list("0123456789 :\nsrvcliet\x00é-")), max_size=300))
def test_the_parser_never_raises_and_reads_only_pids(text):
    d = parse_mps_check(text)
    assert all(isinstance(p, int) and 0 < p <= 4_194_304 for p in d["servers"] + (d["clients"] or []))
    assert d["daemon"] in (True, False, None)
    parse_mps_check(text.replace("srv", "::servers::\n").replace("cli", "::clients::\n"))


def test_the_check_is_a_fixed_template_with_a_validated_pid():
    assert render("mps-clients", server=4188) == ASK
    for bad in ("4188; reboot", "-1", "0", "abc", None, True):
        with pytest.raises(ValueError):
            render("mps-clients", server=bad)


# ---------------------------------------------------------------- the simulator answers

async def _demo():
    clock = FakeClock()
    src = SimSource(name="demo", scenario="mps", clock=clock)
    return clock, src, NodeMonitor(src, interval=3600)


async def test_the_simulated_control_daemon_answers_and_says_when_it_is_gone():
    clock, src, _ = await _demo()
    r = await src.run("echo get_server_list | nvidia-cuda-mps-control", 10)
    assert (r.stdout, r.rc) == (f"{MPS_SERVER_PID}\n", 0)
    r = await src.run(f"echo get_client_list {MPS_SERVER_PID} | nvidia-cuda-mps-control", 10)
    assert r.stdout.split() == [str(MPS_SERVING_PID), str(MPS_EXITED_PID)]
    await src.run("echo quit | nvidia-cuda-mps-control", 10)
    r = await src.run("echo get_server_list | nvidia-cuda-mps-control", 10)
    assert r.rc == 1 and NO_DAEMON in r.stderr and r.stdout == ""
    snap = await src.poll()
    assert snap.gpu(0).memory_used_mib < 1024 and snap.proc(MPS_CONTROL_PID) is None


async def test_a_wedged_server_leaves_the_check_saying_so_and_no_plan():
    clock, src, monitor = await _demo()
    src.node.mps.hang = True
    snap = await monitor.poll_once()
    result = await run_check(src, "mps-clients", snap, server=MPS_SERVER_PID)
    assert "did not answer within 10 s" in result.summary
    plan, why = after_check(step_for(top_step(snap.findings), snap), snap, result.data)
    assert plan is None and "did not answer" in why


async def test_no_daemon_no_plan_and_the_words_say_where_to_look():
    clock, src, monitor = await _demo()
    src.node.procs[MPS_CONTROL_PID].phase = "gone"          # the daemon died; its server stays
    snap = await monitor.poll_once()
    result = await run_check(src, "mps-clients", snap, server=MPS_SERVER_PID)
    assert result.data["daemon"] is False and "CUDA_MPS_PIPE_DIRECTORY" in result.summary
    plan, why = after_check(step_for(top_step(snap.findings), snap), snap, result.data)
    assert plan is None and "CUDA_MPS_PIPE_DIRECTORY" in why


# ---------------------------------------------------------------- diagnosis and the ladder

async def test_demo_mps_the_next_step_asks_the_daemon_and_never_signals_the_server():
    clock, src, monitor = await _demo()
    snap = await monitor.poll_once()
    kinds = [f.kind for f in snap.findings]
    assert "hidden-holder" not in kinds and "holder" not in kinds    # the clients are the MPS finding's
    top = top_step(snap.findings)
    assert top.kind == "mps-server" and top.rung == "mps-clients" and top.pids == (MPS_SERVER_PID,)
    assert f"PID {MPS_SERVER_PID}" in top.summary and "59.0 GiB on GPU 0" in top.summary
    for f in snap.findings:
        if f.rung in SIGNAL_OF:
            assert MPS_SERVER_PID not in f.evidence.get("targets", f.pids)
    step = step_for(top, snap)
    assert step.check == ("mps-clients", {"server": MPS_SERVER_PID}) and step.then == "mps-terminate"


async def test_following_the_step_ends_the_exited_client_only_and_frees_its_memory(tmp_path):
    """The check names both clients; Confirm's plan ends the one gone from /proc (the daemon still
    counts it), recorded before it runs, verified from the driver's list: 41 GiB back, the
    inference server still running and still served."""
    from console.incident import timeline
    clock, src, monitor = await _demo()
    tl = timeline.open_incident(tmp_path, "mps")
    snap = await monitor.poll_once()
    step = step_for(top_step(snap.findings), snap)
    result = await run_check(src, *step.check[:1], snap, **step.check[1])
    assert result.summary == (f"get_server_list: {MPS_SERVER_PID}; server {MPS_SERVER_PID} serves 2 clients "
                              f"(PIDs {MPS_SERVING_PID}, {MPS_EXITED_PID})")
    plan, _ = after_check(step, snap, result.data)
    assert plan.rung == "mps-terminate" and plan.destructive
    assert plan.commands == (f"echo terminate_client {MPS_SERVER_PID} {MPS_EXITED_PID} | timeout 10 nvidia-cuda-mps-control",)
    assert [t.pid for t in plan.targets] == [MPS_EXITED_PID] and "still counted as a client" in plan.targets[0].why
    assert any(f"other client ({MPS_SERVING_PID}) go" in n for n in plan.notes)
    outcome = await execute(plan, src, monitor=monitor, timeline=tl)
    if outcome.watch is not None:
        outcome.watch.cancel()
    assert outcome.status == "settled" and outcome.freed_mib >= 41_000, outcome.text
    assert "GPU 0 freed 41.0 GiB" in outcome.text
    action = outcome.entry
    assert action.kind == "action" and action.command == plan.commands[0] and action.seq < outcome.outcome_entry.seq
    snap = await monitor.poll_once()
    assert snap.proc(MPS_SERVING_PID) is not None and snap.gpu(0).memory_used_mib > 18_000
    assert monitor.actions[-1].rung == "mps-terminate"
    tl.close()


def test_a_tagged_client_is_the_one_ended_and_a_running_one_only_when_tagged():
    import asyncio
    clock, src, monitor = asyncio.run(_demo())
    snap = asyncio.run(monitor.poll_once())
    both = [MPS_SERVING_PID, MPS_EXITED_PID]
    plan = mps.plan_terminate(snap, MPS_SERVER_PID, both, chosen=[MPS_SERVING_PID])
    assert [t.pid for t in plan.targets] == [MPS_SERVING_PID]
    plan = mps.plan_terminate(snap, MPS_SERVER_PID, both)
    assert [t.pid for t in plan.targets] == [MPS_EXITED_PID], "the one that looks stuck"
    # a client that runs is never ended unless chosen: x says so instead of opening Confirm
    plan, why = mps.plan_after_check(snap, MPS_SERVER_PID, {"servers": [MPS_SERVER_PID], "clients": [MPS_SERVING_PID]})
    assert plan is None and why.startswith("nothing stuck") and "tag it" in why
    plan, _ = mps.plan_after_check(snap, MPS_SERVER_PID, {"servers": [MPS_SERVER_PID], "clients": [MPS_SERVING_PID]},
                                   chosen=[MPS_SERVING_PID])
    assert [t.pid for t in plan.targets] == [MPS_SERVING_PID]
    every = [1, MPS_SERVER_PID, *snap.own_pids]
    plan = mps.plan_terminate(snap, MPS_SERVER_PID, every, chosen=every)
    assert not plan.commands and len(plan.refusals) == 2 + len(snap.own_pids)


async def test_x_in_demo_mps_ends_the_exited_client_then_says_nothing_is_stuck():
    """The scenario's end state: the exited client's 41 GiB back, the inference server sharing
    the GPU left running — x stops there instead of ending it (and never signals the server)."""
    from console.actions.ladder import no_step_words
    from console.session import Session
    from tests.timeline_recorder import take_x
    clock = FakeClock()
    src = SimSource(name="demo", scenario="mps", clock=clock)
    session = Session([src], clock=clock)
    taken, snap = await take_x(session, src, clock, record=False, max_steps=4)
    assert all(step.check is not None and step.check[0] == "mps-clients" for step, _ in taken), taken
    ended = [t.pid for _, plan in taken for t in plan.targets]
    top = top_step(snap.findings)
    assert ended == [MPS_EXITED_PID]
    assert top is None and snap.gpu(0).memory_used_mib == MPS_SERVING_MIB + 4
    words = no_step_words(snap)
    assert words.startswith("Nothing stuck: terminate_client") and str(MPS_SERVING_PID) in words, words
    assert snap.proc(MPS_SERVING_PID) is not None and snap.proc(MPS_SERVER_PID) is not None


async def test_quit_is_the_later_rung_only_once_terminate_client_brought_nothing_back():
    clock, src, monitor = await _demo()
    before = await monitor.poll_once()
    clock.advance(1)
    monitor.actions.append(ActionRecord(rung="mps-terminate", ts=clock.now(), node="demo", gpus=(0,)))
    clock.advance(12)
    snap = await monitor.poll_once()
    f = next(f for f in snap.findings if f.kind == "mps-server")
    assert f.rung == "mps-quit" and "brought nothing back" in f.next_step
    plan = step_for(f, snap).plan
    assert plan.commands == ("echo quit | timeout 10 nvidia-cuda-mps-control",)
    assert {t.pid for t in plan.targets} == {MPS_CONTROL_PID, MPS_SERVER_PID}
    assert any("every client" in n for n in plan.notes)
    outcome = await execute(plan, src, monitor=monitor)
    assert outcome.status == "settled" and src.node.memory_freed()
    assert before.gpu(0).memory_used_mib > 59_000
    quit_failed = dataclasses.replace(snap, taken_at=snap.taken_at + 30)
    from console.diagnosis import diagnose
    later = diagnose(quit_failed, [before, snap], [*monitor.actions[:-1],
                                                  ActionRecord(rung="mps-quit", ts=snap.taken_at, gpus=(0,))])
    f = next(f for f in later if f.kind == "mps-server")
    assert f.rung is None and "did not stop the MPS server" in f.next_step


# ---------------------------------------------------------------- what a person sees

async def test_x_in_demo_mps_lists_the_clients_then_confirm_shows_terminate_client(incident_dir):
    pytest.importorskip("textual")
    from console.incident import timeline
    from console.ui.app import IncidentApp
    from conftest import wait_for
    tl = timeline.open_incident(incident_dir, "mps-ui")
    app = IncidentApp([SimSource(name="demo", scenario="mps", clock=FakeClock())], timeline=tl, autostart=False)
    async with app.run_test(size=(80, 24)) as pilot:
        await app.monitors[0].poll_once()
        await wait_for(pilot, lambda: "demo" in app.snapshots)
        await pilot.press("x")
        await wait_for(pilot, lambda: type(app.screen).__name__ == "ConfirmScreen")
        text = app.screen.text
        assert f"$ echo terminate_client {MPS_SERVER_PID} {MPS_EXITED_PID} | timeout 10 nvidia-cuda-mps-control" in text
        assert "kill" not in text and f"serves 2 clients (PIDs {MPS_SERVING_PID}, {MPS_EXITED_PID})" in text
        assert [e.kind for e in tl.entries][-1] == "check"         # the listing is in the timeline first
        await pilot.press("y")
        await wait_for(pilot, lambda: any(e.outcome for e in tl.entries))
        outcome = next(e for e in tl.entries if e.outcome)
        assert "GPU 0 freed 41.0 GiB" in outcome.text
    tl.close()


async def test_read_only_lists_the_clients_and_says_terminate_client_would_be_refused(incident_dir):
    pytest.importorskip("textual")
    from console.incident import timeline
    from console.ui.app import IncidentApp
    from conftest import wait_for
    tl = timeline.open_incident(incident_dir, "mps-ro")
    source = SimSource(name="demo", scenario="mps", clock=FakeClock())
    app = IncidentApp([source], timeline=tl, autostart=False, read_only=True)
    async with app.run_test(size=(80, 24)) as pilot:
        await app.monitors[0].poll_once()
        await wait_for(pilot, lambda: "demo" in app.snapshots)
        await pilot.press("x")                  # the read-only check runs; its plan is not offered to run
        said = lambda: app.activity.latest.text if app.activity.latest else ""      # noqa: E731
        await wait_for(pilot, lambda: said().startswith("READ-ONLY: the next step would be refused"))
        assert "echo terminate_client" in said() and type(app.screen).__name__ != "ConfirmScreen"
        assert any(e.kind == "check" for e in tl.entries) and not any(e.kind == "action" for e in tl.entries)
    assert source.node.mps.clients[MPS_SERVER_PID].get(MPS_EXITED_PID)      # nothing was sent
    tl.close()
