"""The postmortem says what a reader needs (issue 34, items 8-12): a short summary first; the
console's own findings at their worst with their evidence and how they changed; the node (GPU
model and count, driver, kernel) and the workload (owner, command, launcher, Slurm job); how the
incident was detected; the time held from the first reading that showed it held ("at least" when
it was held at the console's first look) and apart from the action that freed it; no raw record
in the body (it is folded at the end); no memory × time, no "console started watching" event;
an entry during a wait listed after the wait began.

Real incidents on the simulated seed, reset-required and mps nodes, driven headless through the
session on a FakeClock that also stamps the timeline (as tests/test_postmortem_publish.py does).
"""
from __future__ import annotations

import json
import re

from console.actions.ladder import top_step
from console.incident.export import as_markdown
from console.incident.timeline import parse_lines
from console.model import TimelineEntry
from tests.test_postmortem_publish import incident, reset_required, section
from tests.test_postmortem_publish import seed_incident as _seed_as_alice_took_it


def head(md: str) -> str:
    return md.split("\n## ", 1)[0]


def rows(md: str) -> dict[str, str]:
    return {ln.split("|")[1].strip(" *"): ln.split("|")[2].strip() for ln in head(md).splitlines()
            if ln.startswith("| **")}


def body(md: str) -> str:
    """Everything a reader sees unfolded: the document without the folded Record."""
    before, _, after = md.partition("## Record")
    return before + after.split("<details>", 1)[0]




async def seed_incident(tmp_path, monkeypatch):
    """The seed as tests/test_postmortem_publish.py drives it, started as the console starts."""
    return await _seed_as_alice_took_it(tmp_path, monkeypatch, started=True)


async def test_the_seed_postmortem_says_what_the_console_found_and_on_what(tmp_path, monkeypatch):
    entries = await seed_incident(tmp_path, monkeypatch)
    md = as_markdown(entries, incident_id="seed")
    found = section(md, "## What the console found")
    worst = found.split("- **critical zombie** on simnode02")[1].split("\n- ")[0]
    assert "8 \\<defunct> processes" in worst and "threads alive in D inside the driver (_nv043417rm)" in worst
    assert "  - evidence: " in worst and "threads_in_d 8" in worst and "parent 72169" in worst
    assert "- **high d-state** on simnode02" in found and "wchan _nv043417rm" in found
    changed = found.split("How they changed:")[1]
    assert "zombie (critical)" in changed and re.search(r"d-state, zombie gone|zombie, d-state gone", changed), changed
    # the timeline holds them: the first reading and each change carry the findings
    assert entries[0].findings is not None and any(e.text.startswith("findings on simnode02: ") for e in entries)


async def test_the_seed_postmortem_names_the_node_the_workload_and_how_it_was_found(tmp_path, monkeypatch):
    md = as_markdown(await seed_incident(tmp_path, monkeypatch), incident_id="seed")
    node = section(md, "## The node and the workload")
    assert "simnode02: 8 × NVIDIA RTX PRO 6000 Blackwell Server Edition, driver 580.95.05, kernel 6.8.0-87-generic" \
        in node
    assert "8 processes of user root: `sglang::scheduler_TP0`" in node
    assert "started by PID 72169 (root) `python3 -m sglang.launch_server --model-path moonshotai/Kimi-K2.5" in node
    assert "no Slurm job" in node
    r = rows(md)
    assert r["Detected"] == "a person: alice@bastion started the console on simnode02"
    assert r["First seen held"] == "T+0:00, already held at the console's first reading of the node"
    assert r["Demo"].startswith("yes")


async def test_the_seed_time_to_free_counts_from_the_first_held_reading_and_apart_from_the_action(tmp_path,
                                                                                                  monkeypatch):
    md = as_markdown(await seed_incident(tmp_path, monkeypatch), incident_id="seed")
    free = rows(md)["Time to free"]
    assert free.startswith("at least ") and "from the first reading that showed it held" in free
    assert re.search(r"; 1 min 3\d s from the action that freed it$", free), free
    assert "from the first entry" not in md


async def test_the_seed_summary_comes_first_and_the_body_has_no_raw_record(tmp_path, monkeypatch):
    md = as_markdown(await seed_incident(tmp_path, monkeypatch), incident_id="seed")
    summary = md.split("\n\n")[1]
    assert md.index(summary) < md.index("| **Nodes**")
    assert summary.startswith("594.6 GiB on GPUs 0-7 on simnode02 stayed held by root's python3 -m "
                              "sglang.launch_server: the console found 8 \\<defunct> processes")
    assert "SIGKILL 8 processes (#" in summary and "after SIGTERM 5 processes had freed nothing" in summary
    assert "To change: The workers ignored SIGTERM" in summary
    assert len(re.findall(r"[.!?](?:\s|$)", summary)) <= 5        # a few sentences, not a report
    visible = body(md)
    assert "### #" not in visible and "::gi-check::" not in visible, "the record is folded, not in the body"
    record = md.split("## Record", 1)[1]
    assert record.lstrip().startswith("<details><summary>Every entry as it was written")
    assert record.rstrip().endswith("</details>") and record.count("### #") > 10


async def test_the_seed_timeline_has_no_noise(tmp_path, monkeypatch):
    md = as_markdown(await seed_incident(tmp_path, monkeypatch), incident_id="seed")
    story = section(md, "## Timeline")
    assert "console started watching" not in story
    assert "targets 5 still running" not in story and "5 targets still running" in story
    assert "MiB·h" not in md and "Memory × time" not in md


async def test_the_reset_required_postmortem_says_the_xid_and_the_recovery_action(tmp_path, monkeypatch):
    md = as_markdown(await reset_required(tmp_path, monkeypatch, kernel_log=False), incident_id="reset")
    found = section(md, "## What the console found")
    assert "- **critical recovery-action** on demo (T+0:00, #1): GPU 3: the driver's recovery action is GPU Reset" \
        in found
    assert "- **critical xid** on demo (T+0:00, #1): Xid 119 (GSP RPC timeout)" in found
    assert "- **high ghost-memory** on demo" in found
    assert "blockers-off (low) new" in found.split("How they changed:")[1]
    node = section(md, "## The node and the workload")
    assert "demo: 8 × NVIDIA RTX PRO 6000 Blackwell Server Edition, driver 580.95.05, kernel 6.8.0-87-generic" in node
    assert "no process of a job held a GPU" in node
    r = rows(md)
    assert r["First seen held"].startswith("T+0:00, already held")
    assert r["Time to free"].startswith("at least 1 min 10 s held") and "at once after the action" in r["Time to free"]
    summary = md.split("\n\n")[1]
    assert summary.startswith("60.0 GiB on GPU 3 on demo stayed held: the console found GPU 3: the driver's "
                              "recovery action is GPU Reset")
    assert "Reset GPU 3 (#" in summary and "freed it at once" in summary and "had freed nothing" not in summary
    assert "### #" not in body(md)


async def test_the_mps_postmortem_names_the_server_its_client_and_what_is_still_held(tmp_path, monkeypatch):
    clock, src, tl, s, snap = await incident(tmp_path, monkeypatch, "demo", "mps", "carol@bastion")
    clock.advance(10)
    step = await s.step("demo", top_step(snap.findings), wait_default=5)
    result = await s.run_check(src, step.check[0], snap, **step.check[1])
    s.incident.record_check(result)
    plan, _why = s.after_check("demo", step, result)
    clock.advance(10)
    out = await s.execute(plan)
    if out.watch is not None:
        out.watch.cancel()
    await s.poll_all()
    await s.stop("console stopped")
    md = as_markdown(tl.refresh(), incident_id="mps")
    tl.close()
    found = section(md, "## What the console found")
    assert "- **info mps-server** on demo (T+0:00, #1): the MPS server (PID 4188) holds 59.0 GiB on GPU 0" in found
    node = section(md, "## The node and the workload")
    assert "kernel 6.8.0-87-generic" in node and "2 processes of user root: `nvidia-cuda-mps-server`, " \
                                                 "`python3 -m vllm.entrypoints.openai.api_server" in node
    r = rows(md)
    assert r["Detected"].startswith("a person: carol@bastion")
    assert r["First seen held"].startswith("T+0:00") and r["Time to free"].startswith("not freed")
    summary = md.split("\n\n")[1]
    assert "the console found the MPS server (PID 4188) holds 59.0 GiB on GPU 0" in summary
    assert "freed 41.0 GiB; 18.0 GiB on GPU 0 on demo is still held." in summary
    assert "### #" not in body(md)


# ---------------------------------------------------------------- files of the previous version

OLD_FILE = [
    {"ts": "2026-12-02T10:00:00Z", "seq": 1, "by": "root@vm", "kind": "note", "node": None,
     "text": "gate: gpu07: GPU 0 holds 74.3 GiB"},
    {"ts": "2026-12-02T10:00:01Z", "seq": 2, "by": "root@vm", "kind": "note", "node": "gpu07",
     "text": "finding critical zombie: 1 <defunct> process still holds 74.3 GiB — next: wait"},
    {"ts": "2026-12-02T10:00:30Z", "seq": 3, "by": "root@vm", "kind": "action", "node": "gpu07",
     "text": "SIGKILL 1 process", "command": "kill -s KILL 4242", "gpu_memory_before": {"0": 76109}},
    {"ts": "2026-12-02T10:01:00Z", "seq": 4, "by": "root@vm", "kind": "observation", "node": "gpu07",
     "text": "SIGKILL 1 process: freed", "action": 3, "outcome": True, "rc": 0,
     "gpu_memory_before": {"0": 76109}, "gpu_memory_after": {"0": 4}, "freed_mib": 76105, "seconds_to_free": 30.0},
]


def test_a_file_of_the_previous_version_exports_with_what_it_holds():
    entries, warnings = parse_lines("\n".join(json.dumps(x) for x in OLD_FILE).encode(), "old.jsonl")
    assert not warnings and len(entries) == 4
    md = as_markdown(entries, incident_id="old")
    r = rows(md)
    assert r["Detected"].startswith("the gate (`gpu-incident gate`") and "gpu07: GPU 0 holds 74.3 GiB" in r["Detected"]
    assert "Demo" not in r
    assert "gpu07: not recorded (the timeline was written before" in section(md, "## The node and the workload")
    assert "- **critical zombie** on gpu07 (T+0:01, #2): 1 \\<defunct> process still holds 74.3 GiB" in md
    # first held at the SIGKILL's "before" (T+0:30; nothing read before it), back at T+1:00
    assert r["First seen held"] == "T+0:30, already held at the console's first reading of the node"
    assert r["Time to free"] == ("at least 30 s held, from the first reading that showed it held (it was held "
                                 "before the console looked); 30 s from the action that freed it")


def test_an_entry_during_a_wait_is_listed_after_the_wait_began():
    """A wait is written when it ends; what was written while it ran comes after its start."""
    def e(seq, ts, kind, text, **kw):
        return TimelineEntry(ts=f"2026-12-02T10:{ts}Z", seq=seq, by="root@vm", kind=kind, node="gpu07", text=text,
                             **kw)
    out = "::t=0::\n0, 76109 MiB\n::t=60::\n0, 4 MiB"
    entries = [e(1, "00:00", "observation", "first reading", gpu_memory_before={"0": 76109}),
               e(2, "00:30", "observation", "findings on gpu07: zombie (critical) new", findings=[]),
               e(3, "01:00", "check", "wait-and-reread: memory came back ~60 s in: 74.3 GiB freed", output=out,
                 command="nvidia-smi --query-gpu=index,memory.used --format=csv,noheader", rc=0)]
    story = section(as_markdown(entries, incident_id="w"), "## Timeline")
    assert story.index("**wait**") < story.index("findings on gpu07"), story


async def test_a_gate_s_incident_says_it_was_the_gate_and_names_the_node_and_workload(tmp_path):
    from console.clock import FakeClock
    from console.incident.timeline import load, open_incident
    from console.session import gate
    from console.sources.sim import SimSource
    _nodes, ident = await gate.run([SimSource(name="gpu07", scenario="graceful", clock=FakeClock())], wait_s=0,
                                   open_incident=lambda: open_incident(tmp_path), directory=tmp_path)
    md = as_markdown(load(tmp_path / f"{ident}.jsonl")[0], incident_id=ident)
    r = rows(md)
    assert r["Detected"].startswith("the gate (`gpu-incident gate`, a Prolog/Epilog check) found the node not clean: "
                                    "gpu07: GPUs 0-1 hold 138.7 GiB"), r["Detected"]
    node = section(md, "## The node and the workload")
    assert "gpu07: 8 × NVIDIA RTX PRO 6000" in node and "kernel 6.8.0-87-generic (a simulated demo node)" in node
    assert "workload: 2 processes of user mlops: `sglang::scheduler_TP0`, `sglang::scheduler_TP1`; started by " \
           "PID 65102 (mlops)" in node, node
    assert r["What was stuck"] == "138.7 GiB on GPUs 0-1 on gpu07"
    assert md.split("\n\n")[1].startswith("138.7 GiB on GPUs 0-1 on gpu07 stayed held by mlops's python3 -m "
                                           "sglang.launch_server")
    assert "- **" in section(md, "## What the console found")
