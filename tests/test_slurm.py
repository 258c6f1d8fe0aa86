"""Slurm without a running Slurm: the pure parsers on real captured output (tests/fixtures/slurm),
fuzzed; what the console sends (node name, reason, one argument); the drain/resume plans and
their policy; the [slurm] config; the Slurm line shown literally. The real drain and resume
are tests/test_slurm_real.py (heavy)."""
from __future__ import annotations

import os
import shlex
import shutil
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from console.actions.plan import ActionPolicy
from console.actions.run import execute
from console.actions.slurm import SlurmActionSource, drain_first, plan_drain, plan_resume, recovery
from console.config import load_config
from console.model import Finding, Gpu, NodeSnapshot
from console.sources import slurm_parse as sp
from console.sources.slurm import SlurmClient, SlurmReading
from tests.fuzzing import examples

FIXTURES = Path(__file__).parent / "fixtures" / "slurm"


def fixture(name: str) -> str:
    return (FIXTURES / name).read_text()


# ---------------------------------------------------------------- parsers on real output

def test_squeue_keeps_a_name_with_bars_and_a_forged_line_is_still_only_a_candidate():
    jobs = sp.parse_squeue(fixture("squeue-all-forged-name.txt"))
    assert [(j.job_id, j.state, j.nodes) for j in jobs] == [("2", "PENDING", None), ("1", "RUNNING", "demo"),
                                                            ("7", "RUNNING", "demo")]
    assert jobs[0].name == "train llama|70b" and jobs[1].name == "evil [b]x[/b]"
    # the forged "7" is a line inside job 1's name: scontrol does not know it, so it is dropped
    assert sp.confirmed(jobs[2], sp.parse_show_job(fixture("show-job-invalid.txt"), "7"), "demo") is None


def test_scontrol_show_job_reads_the_fields_slurm_writes():
    job = sp.parse_show_job(fixture("show-job-running.txt"), "1")
    assert (job.user, job.name, job.state, job.elapsed, job.nodes) == ("root", "train llama|70b", "RUNNING",
                                                                       "00:00:03", "demo")
    assert sp.confirmed(sp.SlurmJob("1"), job, "demo") == job
    assert sp.confirmed(sp.SlurmJob("1"), job, "gpu02") is None        # Slurm places it elsewhere
    assert sp.parse_show_job(fixture("show-job-running.txt"), "2") is None


def test_a_job_name_that_imitates_slurm_fields_is_ambiguous_never_read():
    job = sp.parse_show_job(fixture("show-job-forged-name.txt"), "2")
    assert job.ambiguous and job.user is None and job.state is None
    assert sp.confirmed(sp.SlurmJob("2", user="root"), job, "demo") == sp.SlurmJob("2", ambiguous=True)


def test_scontrol_show_node_states_and_reason():
    idle = sp.parse_show_node(fixture("show-node-idle.txt"))
    assert (idle.name, idle.state, idle.drained, idle.reason) == ("demo", "IDLE", False, None)
    draining = sp.parse_show_node(fixture("show-node-draining.txt"))
    assert draining.state == "ALLOCATED+DRAIN" and draining.drained
    drained = sp.parse_show_node(fixture("show-node-drained.txt"))
    assert drained.state == "IDLE+DRAIN" and drained.drained
    assert drained.reason.startswith("gpu-incident 20261130-201500-ab12: xid [root@")
    assert sp.parse_show_node(fixture("show-node-unknown.txt")) is None
    assert sp.parse_show_node("NodeName=n1 State=IDLE* Reason=x").state == "IDLE"     # * = not responding


@pytest.mark.parametrize("path, job", [
    # cgroup v2 (slurmstepd's own scope; with several slurmd per host it is prefixed with the node)
    ("/system.slice/slurmstepd.scope/job_1392969/step_0/user/task_0", "1392969"),
    ("/system.slice/gpu07_slurmstepd.scope/job_42/step_batch/user/task_special", "42"),
    ("/system.slice/slurmstepd.scope/job_42/step_extern/user", "42"),
    # cgroup v1
    ("/slurm/uid_2101171/job_280678/step_interactive/task_0", "280678"),
    ("/slurm_gpu07/uid_1000/job_9/step_0", "9"),
    # not a job step
    ("/system.slice/slurmstepd.scope/system", None),
    ("/user.slice/user-1000.slice/job_5", None),
    ("/docker/job_5", None),
    ("", None),
])
def test_job_of_cgroup(path, job):
    assert sp.job_of_cgroup(path) == job


@examples(300)
@given(st.text(alphabet=st.sampled_from("JobId=NameUser12|\n :()[]+DRAIN_slurmstepd.scope/job_uid"), max_size=400))
def test_parsers_never_raise_on_garbage(text):
    sp.parse_squeue(text)
    sp.parse_show_job(text, "1")
    sp.parse_show_node(text)
    sp.job_of_cgroup(text)
    assert len(sp.parse_squeue(text * 50)) <= sp.MAX_JOBS


@examples(200)
@given(st.text(max_size=80), st.text(max_size=40))
def test_the_reason_is_only_the_incident_and_the_kind_and_stays_one_argument(ident, kind):
    try:
        reason = sp.drain_reason(ident, kind)
    except ValueError:
        return
    assert reason == f"gpu-incident {ident}: {kind}"
    argv = sp.drain_argv("gpu01", reason)
    assert shlex.split(sp.shell_line(argv)) == list(argv)
    assert not set(reason) & set("\"'`$\\;&|<>(){}\n\r\t\x00")


@pytest.mark.parametrize("name", ["gpu01,gpu02", "gpu[01-02]", "a b", "-x", "", "n\n", "x" * 65, "a;reboot"])
def test_node_names_that_would_touch_other_nodes_are_refused(name):
    with pytest.raises(ValueError):
        sp.node_name(name)


def test_the_slurm_name_of_a_node():
    client = SlurmClient(node_names={"gpu01.example": "g01"})
    snap = NodeSnapshot(name="x", taken_at=0, hostname="gpu07.cluster.example")
    assert client.slurm_name("gpu01.example") == "g01"
    assert client.slurm_name("root@10.0.0.5:2222", snap) == "gpu07"
    assert client.slurm_name("root@gpu09.example:22") == "gpu09"
    assert client.slurm_name("demo") == "demo"
    hostile = NodeSnapshot(name="x", taken_at=0, hostname="gpu01,gpu02")
    assert client.slurm_name("gpu05", hostile) == "gpu05"     # a node's odd hostname is never sent
    # what the operator named comes before what the node says of itself (hostname: victim01)
    liar = NodeSnapshot(name="x", taken_at=0, hostname="victim01")
    assert client.slurm_name("root@gpu05.example:22", liar) == "gpu05"
    assert "calls itself victim01" in client.name_warning("root@gpu05.example:22", liar)
    assert client.name_warning("gpu01.example", liar) is None            # mapped: the mapping decides
    assert client.slurm_name("root@10.0.0.5:2222", snap) == "gpu07"     # an address: the node's own name


# ---------------------------------------------------------------- plans

def snap_with(used=(60000,), findings=()):
    gpus = tuple(Gpu(i, f"GPU-{i}", "H100", f"0:{i}", u, 81559) for i, u in enumerate(used))
    return NodeSnapshot(name="gpu01", taken_at=1.0, gpus=gpus, findings=tuple(findings))


XID = Finding(kind="xid", severity="critical", summary="Xid 79 on GPU 0", next_step="Reboot", rung="reboot")


def test_drain_shows_the_exact_command_with_the_reason_quoted_once():
    plan = plan_drain("gpu01", "gpu01", "20261130-101500-ab12", XID, where="controller slurmctl")
    assert plan.commands == ('scontrol update NodeName=gpu01 State=DRAIN '
                             'Reason="gpu-incident 20261130-101500-ab12: xid"',)
    assert plan.rung == "drain" and plan.destructive and "controller slurmctl" in plan.notes[0]


def test_a_hostile_finding_text_never_reaches_the_command():
    hostile = Finding(kind="zombie", severity="high", summary='"; reboot; echo "', next_step="$(id)`id`",
                      reason="x\nState=RESUME", evidence={"targets": [1]})
    plan = plan_drain("gpu01", "gpu01", "inc-1", hostile)
    assert plan.commands == ('scontrol update NodeName=gpu01 State=DRAIN Reason="gpu-incident inc-1: zombie"',)
    forged = plan_drain("gpu01", "gpu01", "inc-1", Finding(kind='x" State=RESUME', severity="high",
                                                          summary="", next_step=""))
    assert not forged.commands and "cannot go into a Slurm reason" in forged.refusals[0]
    assert not plan_drain("gpu01", "gpu01", "inc 1; reboot", XID).commands
    assert not plan_drain("gpu01", "gpu01", "inc-1", None).commands


def test_resume_only_after_a_verified_recovery_and_only_when_held_out():
    drained = sp.SlurmNode("gpu01", "IDLE+DRAIN", "gpu-incident i: xid [root@2026-12-01T10:00:00]")
    held = plan_resume("gpu01", "gpu01", snap_with((60000,)), state=drained, incident_id="i")
    assert not held.commands and "GPU 0 still holds" in held.refusals[0]
    high = plan_resume("gpu01", "gpu01", snap_with((4,), [XID]), state=drained, incident_id="i")
    assert not high.commands and "(xid)" in high.refusals[0]
    assert "did not answer" in recovery(NodeSnapshot(name="g", taken_at=0, error="unreachable: x"))
    ok = plan_resume("gpu01", "gpu01", snap_with((4,)), state=drained, incident_id="i")
    assert ok.commands == ("scontrol update NodeName=gpu01 State=RESUME",)
    idle = plan_resume("gpu01", "gpu01", snap_with((4,)), state=sp.SlurmNode("gpu01", "IDLE"), incident_id="i")
    assert not idle.commands and "nothing to resume" in idle.refusals[0]


@pytest.mark.parametrize("reason, incident", [("broken-psu [admin@2026-12-01T09:00:00]", "i"),
                                              ("gpu-incident other-incident: xid [root@2026-12-01T09:00:00]", "i"),
                                              ("gpu-incident i: xid", None), (None, "i")])
def test_resume_lifts_only_this_incidents_drain(reason, incident):
    """A node Slurm holds out for a broken PSU (an admin's drain), or for another incident, is
    not resumed here, whatever the GPUs say: the refusal shows the reason."""
    state = sp.SlurmNode("gpu01", "DOWN+DRAIN", reason)
    plan = plan_resume("gpu01", "gpu01", snap_with((4,)), state=state, incident_id=incident)
    assert not plan.commands and "not this incident's drain" in plan.refusals[0]
    if reason:
        assert reason.split(" [")[0] in plan.refusals[0]


def test_drain_is_asked_first_before_a_reset_or_reboot_on_an_undrained_node():
    idle, drained = sp.SlurmNode("g", "MIXED"), sp.SlurmNode("g", "MIXED+DRAIN")
    assert drain_first("reset", idle) and drain_first("reboot", idle)
    assert not drain_first("reset", drained) and not drain_first("sigterm", idle)
    assert not drain_first("reset", None)


async def test_read_only_refuses_and_dry_run_records_without_asking_slurm(tmp_path):
    from console.incident.timeline import load, open_incident
    tl = open_incident(tmp_path / "inc", None)
    client = SlurmClient(env={"PATH": str(tmp_path)})      # no scontrol here: running it would fail
    plan = plan_drain("gpu01", "gpu01", tl.incident_id, XID)
    for policy, status in ((ActionPolicy(read_only=True), "refused"), (ActionPolicy(dry_run=True), "dry-run")):
        out = await execute(plan, SlurmActionSource(client, "gpu01", "gpu01"), policy=policy, timeline=tl)
        assert out.status == status and not out.results
    entries = load(tl.path)[0]
    assert [e.command for e in entries] == [plan.commands[0]] * 2 and all(e.rc is None for e in entries)
    tl.close()


async def test_the_client_runs_only_slurm_commands_and_without_a_shell(tmp_path):
    client = SlurmClient(env={"PATH": str(tmp_path)})
    res = await client.run("rm -rf /tmp/x")
    assert res.rc == 2 and res.error.startswith("refused")
    res = await client.run("scontrol show node -o gpu01")
    assert res.rc is None and "scontrol" in res.error       # not found: said, never raised
    assert not await client.found()
    reading = await client.read("gpu01", None)
    assert reading == SlurmReading("gpu01", present=False)


# ---------------------------------------------------------------- config, CLI, UI

def test_slurm_config_table(tmp_path):
    good = tmp_path / "good.toml"
    good.write_text('[slurm]\ncontroller = "admin@ctl01"\nnodes = { "gpu01.example" = "gpu01" }\n')
    assert load_config(str(good)).slurm == {"controller": "admin@ctl01", "nodes": {"gpu01.example": "gpu01"}}
    for body, words in (('[slurm]\nnodes = { a = "g[1-2]" }\n', "[slurm] nodes.a"),
                        ('[slurm]\ncontroler = "x"\n', "unknown key(s) controler"),
                        ('[slurm]\nenabled = "yes"\n', "enabled must be true or false")):
        bad = tmp_path / "bad.toml"
        bad.write_text(body)
        with pytest.raises(ValueError, match=r"\[slurm\]") as err:
            load_config(str(bad))
        assert words in str(err.value)


def test_cli_slurm_flags():
    from console.cli import build_console_parser, main, make_slurm
    args = build_console_parser().parse_args(["demo", "--no-slurm"])
    assert make_slurm(args) is None
    args = build_console_parser().parse_args(["demo", "--slurm-controller", "admin@ctl01:2222"])
    client = make_slurm(args)
    assert client.controller == "admin@ctl01:2222" and client.where == "controller admin@ctl01:2222"
    assert main(["demo", "--slurm-controller", "a@"]) == 2


def test_the_slurm_line_shows_node_text_literally():
    from console.ui.slurm_line import slurm_text
    reading = SlurmReading("gpu01", present=True,
                           node=sp.SlurmNode("gpu01", "MIXED+DRAIN", "gpu-incident i: xid [root@t]"),
                           jobs=(sp.SlurmJob("12", "alice", "[b]x[/b]\x1b[2J\nforged", "RUNNING", "1:02:03"),
                                 sp.SlurmJob("13", ambiguous=True)),
                           gpu_jobs={"12": (4242, 4243)})
    text = slurm_text(reading).plain
    assert "Slurm gpu01: MIXED+DRAIN (gpu-incident i: xid [root@t])" in text
    assert "job 12 alice" in text and "[b]x[/b]" in text and "\x1b" not in text and "\n" not in text
    assert "RUNNING 1:02:03 (GPU PIDs 4242, 4243)" in text and "job 13 (scontrol's record repeats" in text
    advised = slurm_text(SlurmReading("g", present=True, node=sp.SlurmNode("g", "IDLE")), drain_advised=True)
    assert "not drained: D before the reset/reboot" in advised.plain


def test_gpu_processes_map_to_their_jobs_through_their_cgroups():
    from console.model import Proc
    from console.sources.cgroup import parse_cgroup
    from console.sources.slurm import gpu_jobs

    def proc(pid, cgroup, gpu=True):
        return Proc(pid=pid, ppid=1, state="S", user="alice", name="python3", cmdline="python3 train.py",
                    gpu_memory_mib={"0": 1000} if gpu else {}, cgroup=parse_cgroup(cgroup))
    snap = NodeSnapshot(name="gpu01", taken_at=0, processes=(
        proc(10, "0::/system.slice/slurmstepd.scope/job_77/step_0/user/task_0\n"),
        proc(11, "0::/system.slice/slurmstepd.scope/job_77/step_0/user/task_1\n"),
        proc(12, "10:devices:/slurm/uid_1000/job_78/step_batch/task_0\n4:memory:/slurm/uid_1000/job_78\n"),
        proc(13, "0::/system.slice/slurmstepd.scope/job_79/step_0\n", gpu=False),   # not a GPU holder
        proc(14, "0::/user.slice/user-1000.slice/session-3.scope\n")))
    assert gpu_jobs(snap) == {"77": (10, 11), "78": (12,)}


@pytest.mark.skipif(shutil.which("scontrol") is None, reason="scontrol not installed")
@pytest.mark.skipif(os.path.exists("/etc/slurm/slurm.conf") or os.path.exists("/etc/slurm-llnl/slurm.conf"),
                    reason="this machine has a Slurm configuration")
async def test_a_slurm_client_without_a_configuration_shows_nothing():
    """The real scontrol of a machine where Slurm is installed but not set up prints several
    error lines, the telling one last: no Slurm line, not an error row."""
    from console.sources.slurm import SlurmClient
    env = {k: v for k, v in os.environ.items() if k != "SLURM_CONF"}
    reading = await SlurmClient(env=env).read("gpu07", None)
    assert reading.present is False, reading


def test_the_slurm_name_of_this_machine_is_slurmds_then_its_host_name(monkeypatch):
    """`gate --drain` with no target (the documented Epilog) asked Slurm for a node named `local`
    (issue 31 item 6): a Prolog/Epilog has $SLURMD_NODENAME; elsewhere the short host name."""
    import socket
    client = SlurmClient()
    monkeypatch.setenv("SLURMD_NODENAME", "gpu17")
    assert client.slurm_name("local") == "gpu17"
    monkeypatch.delenv("SLURMD_NODENAME")
    monkeypatch.setattr(socket, "gethostname", lambda: "gpu18.cluster.example")
    assert client.slurm_name("local") == "gpu18"
    monkeypatch.setenv("SLURMD_NODENAME", "gpu01,gpu02")          # never a name that would touch others
    assert client.slurm_name("local") == "gpu18"
    assert SlurmClient(node_names={"local": "g20"}).slurm_name("local") == "g20"
