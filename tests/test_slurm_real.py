"""Drain and resume against a real Slurm (tests/slurm_fixture.py: munged, slurmctld, slurmd on
127.0.0.1, one node called ``demo``), through the action layer and through the console's keys.

Heavy: starting Slurm takes a few seconds, each test a few more (budget: 2 minutes for the
module on a 2-core machine). Skipped, with the reason, where Slurm cannot start.
"""
from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from console.actions.ladder import top_step
from console.actions.plan import ActionPolicy
from console.actions.run import execute
from console.actions.slurm import SlurmActionSource, plan_drain, plan_resume, recovery
from console.clock import FakeClock
from console.incident.timeline import load, open_incident
from console.model import Finding
from console.monitor import NodeMonitor
from console.sources.sim import SimSource
from console.sources.slurm import SlurmClient
from console.sources.slurm_parse import parse_show_node
from tests.polling import eventually
from tests.sim_fixtures import take_step
from tests.slurm_fixture import slurm, slurm_node  # noqa: F401  (fixtures)

pytestmark = pytest.mark.heavy


@pytest.fixture
def timeline(tmp_path):
    tl = open_incident(tmp_path / "incidents", None)
    yield tl
    tl.close()


async def reset_required():
    """The simulated node that needs a GPU reset, named ``demo`` like the Slurm node."""
    clock = FakeClock()
    source = SimSource(name="demo", scenario="reset-required", clock=clock)
    monitor = NodeMonitor(source, interval=1.0)
    return source, clock, monitor, await monitor.poll_once()


def entries(tl):
    return load(tl.path)[0]


async def test_drain_then_reset_then_resume_the_whole_way_against_real_slurm(slurm_node, timeline):
    client = SlurmClient()
    source, clock, monitor, snap = await reset_required()
    reading = await client.read("demo", snap)
    assert reading.present and reading.node.state == "IDLE" and not reading.node.drained

    finding = top_step(snap.findings)
    assert finding.rung == "clear-blockers" and finding.severity == "critical"
    plan = plan_drain("demo", reading.slurm_name, timeline.incident_id, finding, where=client.where)
    reason = f"gpu-incident {timeline.incident_id}: {finding.kind}"
    assert plan.commands == (f'scontrol update NodeName=demo State=DRAIN Reason="{reason}"',)

    # before recovery, resume is not offered: nothing to run, nothing sent
    early = plan_resume("demo", "demo", snap, state=reading.node, incident_id=timeline.incident_id)
    assert not early.commands and "verified recovery" in early.refusals[0] and "GPU 3" in early.refusals[0]
    out = await execute(early, SlurmActionSource(client, "demo", "demo"), timeline=timeline)
    assert out.status == "refused"

    out = await execute(plan, SlurmActionSource(client, "demo", "demo"), timeline=timeline)
    assert out.status == "settled", out.text
    node = parse_show_node(slurm_node.node_line())
    assert node.drained and node.reason.startswith(reason + " [")     # Slurm adds [user@time]
    state, shown_reason = slurm_node.sinfo_state().split("|", 1)
    assert state in ("drained", "draining") and shown_reason == reason

    # the ladder on the (simulated) GPU node: clear the blockers, reset, verified
    for _ in range(6):
        snap = await monitor.poll_once()
        step = top_step(snap.findings)
        if step is None or recovery(snap) is None:
            break
        await take_step(source, snap, step, monitor=monitor)
        clock.advance(5)
    snap = await monitor.poll_once()
    assert recovery(snap) is None, recovery(snap)

    resume = plan_resume("demo", "demo", snap, state=(await client.read("demo", snap)).node,
                         incident_id=timeline.incident_id)
    assert resume.commands == ("scontrol update NodeName=demo State=RESUME",)
    out = await execute(resume, SlurmActionSource(client, "demo", "demo"), timeline=timeline)
    assert out.status == "settled", out.text
    slurm_node.wait_for(lambda: slurm_node.sinfo_state() == "idle|none", "idle after the resume")

    actions = [e for e in entries(timeline) if e.kind == "action"]
    assert [a.command for a in actions] == [plan.commands[0], resume.commands[0]]
    outcomes = {e.action: e for e in entries(timeline) if e.outcome}
    assert outcomes[actions[0].seq].rc == 0 and "IDLE+DRAIN" in outcomes[actions[0].seq].text
    assert outcomes[actions[1].seq].rc == 0


async def test_a_hostile_finding_cannot_reach_the_reason(slurm_node, timeline):
    client = SlurmClient()
    hostile = Finding(kind="zombie", severity="high", pids=(1,),
                      summary='x" State=RESUME Reason="$(reboot)`id`; scontrol update NodeName=other',
                      next_step="\x1b[2J; rm -rf /")
    plan = plan_drain("demo", "demo", timeline.incident_id, hostile)
    out = await execute(plan, SlurmActionSource(client, "demo", "demo"), timeline=timeline)
    assert out.status == "settled"
    assert slurm_node.sinfo_state() == f"drained|gpu-incident {timeline.incident_id}: zombie"
    # a kind outside the charset is refused before anything is sent
    forged = Finding(kind='zombie" State=RESUME', severity="high", summary="", next_step="")
    bad = plan_drain("demo", "demo", timeline.incident_id, forged)
    assert not bad.commands and "cannot go into a Slurm reason" in bad.refusals[0]
    assert (await execute(bad, SlurmActionSource(client, "demo", "demo"), timeline=timeline)).status == "refused"
    assert slurm_node.sinfo_state() == f"drained|gpu-incident {timeline.incident_id}: zombie"


async def test_read_only_refuses_and_dry_run_records_without_draining(slurm_node, timeline):
    client = SlurmClient()
    _, _, _, snap = await reset_required()
    plan = plan_drain("demo", "demo", timeline.incident_id, top_step(snap.findings))
    for policy, status in ((ActionPolicy(read_only=True), "refused"), (ActionPolicy(dry_run=True), "dry-run")):
        out = await execute(plan, SlurmActionSource(client, "demo", "demo"), policy=policy, timeline=timeline)
        assert out.status == status
    assert slurm_node.sinfo_state() == "idle|none"
    recorded = [e for e in entries(timeline) if e.kind == "action"]
    assert [e.command for e in recorded] == [plan.commands[0]] * 2
    assert recorded[0].text.startswith("[read-only] refused") and recorded[1].text.startswith("[dry-run]")


async def test_the_jobs_on_the_node_come_from_squeue_and_scontrol(slurm_node):
    """A real batch job on the node (as root: slurmd runs it here), listed with its user, name,
    state and elapsed time. Its name holds a newline and a whole forged squeue line: the
    forged job is checked with scontrol, unknown to Slurm, and not listed."""
    name = "train [b]x[/b]|70b\n4242|root|RUNNING|0:01|demo|forged"
    r = slurm_node.run("sbatch", "-w", "demo", "-J", name, "--wrap", "sleep 120", "-o", "/dev/null")
    assert r.returncode == 0, r.stderr
    job_id = r.stdout.split()[-1]
    client = SlurmClient()
    reading = None
    for _ in range(200):
        reading = await client.read("demo", None)
        if any(j.job_id == job_id and j.state == "RUNNING" for j in reading.jobs):
            break
        await asyncio.sleep(0.1)
    assert "4242|root" in slurm_node.run("squeue", "-w", "demo", "-h", "-o", "%A|%u|%T|%M|%N|%j").stdout
    [job] = reading.jobs                    # the forged 4242 is not among them
    assert (job.job_id, job.user, job.name, job.state) == (job_id, "root", name, "RUNNING")
    assert job.elapsed and job.nodes == "demo"
    slurm_node.run("scancel", job_id)


async def test_the_d_and_u_keys_go_through_confirm(slurm_node, timeline):
    from console.ui.app import IncidentApp
    from console.ui.confirm import ConfirmScreen
    client = SlurmClient()
    source = SimSource(name="demo", scenario="reset-required")
    app = IncidentApp([source], timeline=timeline, slurm=client)
    async with app.run_test(size=(100, 30)) as pilot:
        assert await eventually(lambda: app.slurm_line.reading() is not None and app.query_one("#slurm").display)
        assert "Slurm demo: IDLE" in str(app.query_one("#slurm").render())
        assert "not drained: D before the reset/reboot" in str(app.query_one("#slurm").render())
        await pilot.press("U")              # not recovered: nothing offered
        assert not isinstance(app.screen, ConfirmScreen)
        # x on the finding that leads to the reset (clear the blockers first): the drain comes first
        app.escalation.apply_finding(top_step(app.snapshots["demo"].findings))
        assert await eventually(lambda: isinstance(app.screen, ConfirmScreen))
        assert app.screen.plan.rung == "drain"
        await pilot.press("escape")
        assert await eventually(lambda: not isinstance(app.screen, ConfirmScreen))
        await pilot.press("D")
        assert await eventually(lambda: isinstance(app.screen, ConfirmScreen))
        text = app.screen.text
        assert "scontrol update NodeName=demo State=DRAIN Reason=\"gpu-incident " in text
        await pilot.press("y")
        assert await eventually(lambda: slurm_node.sinfo_state().startswith(("drained|", "draining|")))
        assert await eventually(lambda: (r := app.slurm_line.reading()) is not None and r.node.drained)
        await pilot.pause()
        assert "IDLE+DRAIN" in str(app.query_one("#slurm").render())
    kinds = [(e.kind, e.command) for e in entries(timeline) if e.kind == "action"]
    assert kinds and kinds[-1][1].startswith("scontrol update NodeName=demo State=DRAIN")


async def test_drain_and_resume_on_a_controller_host_over_ssh(slurm_node, timeline, ssh_keys, ssh_home,
                                                               tmp_path):
    """--slurm-controller: scontrol runs on another host over SSH (a real sshd on 127.0.0.1 whose
    sessions get SLURM_CONF through SetEnv), every word shlex-quoted; the reason arrives whole."""
    from console.bench.sshd import HostKey, LoopbackSshd
    from console.sources.ssh.options import SshOptions
    from tests.sshd_fixture import free_port
    port = free_port()
    server = LoopbackSshd(tmp_path / "ctl", HostKey(ssh_keys.host_key, ssh_keys.host_public,
                                                    ssh_keys.host_fingerprint),
                          Path(str(ssh_keys.client_key) + ".pub").read_text(), [port],
                          env={port: {"SLURM_CONF": str(slurm_node.conf), "PATH": "/usr/bin:/bin:/usr/sbin"}})
    server.start()
    try:
        options = SshOptions(known_hosts=str(server.write_known_hosts(tmp_path / "kh")),
                             identity=(str(ssh_keys.client_key),))
        client = SlurmClient(f"root@127.0.0.1:{port}", ssh_options=options)
        reading = await client.read("demo", None)
        assert reading.present and reading.where == f"controller root@127.0.0.1:{port}"
        _, _, _, snap = await reset_required()
        plan = plan_drain("demo", "demo", timeline.incident_id, top_step(snap.findings), where=client.where)
        assert f"controller root@127.0.0.1:{port}" in plan.notes[0]
        out = await execute(plan, SlurmActionSource(client, "demo", "demo"), timeline=timeline)
        assert out.status == "settled", out.text
        assert slurm_node.sinfo_state() == f"drained|gpu-incident {timeline.incident_id}: {top_step(snap.findings).kind}"
        await client.close()
    finally:
        server.stop()


def test_the_gate_drains_a_held_node_naming_its_incident_and_records_the_drain_first(slurm_node, tmp_path,
                                                                                      capsys):
    """`gpu-incident gate demo --drain`: the simulated node named like the Slurm node still holds
    its memory after the job: exit 1, the node DRAIN with the incident in its reason."""
    import json

    from console import cli
    from console.incident.timeline import resolve
    rc = cli.main(["gate", "demo", "--wait", "0", "--drain", "--json", "--incident-dir", str(tmp_path)])
    doc = json.loads(capsys.readouterr().out)
    assert rc == 1 and doc["clean"] is False
    slurm_node.wait_for(lambda: slurm_node.sinfo_state().startswith("drain"), "the drain")
    state = slurm_node.sinfo_state()
    assert f"gpu-incident {doc['incident']}: " in state, state
    assert "DRAIN" in doc["nodes"][0]["drained"] or "drain" in doc["nodes"][0]["drained"].lower()
    entries = load(resolve(doc["incident"], tmp_path))[0]
    action = next(e for e in entries if e.kind == "action")
    assert action.command.startswith("scontrol update NodeName=demo State=DRAIN")
    outcome = next(e for e in entries if e.kind == "observation" and e.action == action.seq)
    assert outcome.seq > action.seq and outcome.outcome
    assert [e.kind for e in entries].index("check") < entries.index(action), "evidence before the drain"
