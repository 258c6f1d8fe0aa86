"""The postmortem a person reads after the incident: a headline first, summaries before dumps,
dumps folded, a command shown once, hypotheses numbered H1, H2, and the memory chart beside it.

The incident is a real one on the simulated seed node: a hypothesis, SIGKILL (nothing in its
window, everything at +91 s), the holders and states checks (twice), a verdict."""
from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest

from console.actions.plan import plan_action
from console.actions.run import execute
from console.checks.registry import run_check
from console.clock import FakeClock
from console.incident import timeline
from console.incident.export import as_markdown, as_text
from console.incident.log import IncidentLog
from console.incident.summary import summarize
from console.monitor import NodeMonitor, diagnosed
from console.output.memory_series import MemorySeries, MemoryTrail, Mark, columns, spark
from console.output.memory_svg import memory_svg
from console.sources.sim import SimSource

SCHEDULERS = (72230, 72294, 72358, 72422, 72486, 72550, 72614, 72678)


@pytest.fixture
async def seed_incident(tmp_path):
    tl = timeline.open_incident(tmp_path, "seed-pm", by="alice@bastion")
    log = IncidentLog(tl)
    clock = FakeClock()
    source = SimSource(name="demo", scenario="seed", clock=clock)
    monitor = NodeMonitor(source)
    snap = diagnosed(await source.poll())
    tl.append("note", "console started watching demo")
    log.hypothesis("demo", "a useless first guess: the port is taken")
    log.verdict("demo", "refuted")
    h = log.hypothesis("demo", "SIGKILL of the schedulers frees GPUs 0-7, given time")
    for _ in range(2):                          # the same long command twice: shown once
        log.record_check(await run_check(source, "holders", snap))
    out = await execute(plan_action(snap, "sigkill", pids=SCHEDULERS), source, timeline=tl, clock=clock,
                        monitor=monitor, hypothesis=h.seq)
    log.record_check(await run_check(source, "states", await source.poll(), pids=SCHEDULERS[:2]))
    await out.watch.wait()
    log.verdict("demo", "confirmed")
    tl.append("note", "console stopped")
    yield tl
    tl.close()


async def test_the_postmortem_opens_with_a_headline(seed_incident):
    entries = seed_incident.refresh()
    md = as_markdown(entries, incident_id="seed-pm", chart="seed-pm.memory.svg")
    head = md.split("## Impact")[0]
    rows = {line.split("|")[1].strip(" *"): line.split("|")[2].strip() for line in head.splitlines()
            if line.startswith("| **")}
    assert rows["Nodes"] == "demo" and rows["State"] == "resolved" and rows["Demo"].startswith("yes")
    assert rows["What was stuck"] == "594.6 GiB on GPUs 0-7 on demo"
    assert rows["Root cause"] == "H2 confirmed: SIGKILL of the schedulers frees GPUs 0-7, given time"
    assert rows["Resolution"].startswith("#") and "SIGKILL 8 processes on demo: 594.6 GiB freed on GPUs 0-7, 1 min 3" \
        in rows["Resolution"]
    assert rows["Time to free"].startswith("at least 1 min 3") and "from the action that freed it" in rows["Time to free"]
    assert rows["Who acted"] == "alice@bastion: 1 action"
    assert "![GPU memory over the incident, actions marked](seed-pm.memory.svg)" in head
    assert md.index("| **Nodes**") < md.index("## Impact") < md.index("## Timeline") < md.index("## Verdicts")
    s = summarize(entries, "seed-pm")
    assert 90 <= s.after_action_s <= 92


async def test_summaries_come_before_dumps_and_dumps_are_folded(seed_incident):
    md = as_markdown(seed_incident.refresh(), incident_id="seed-pm")
    assert "- H1 a useless first guess: the port is taken — **refuted**" in md
    assert "- H2 SIGKILL of the schedulers frees GPUs 0-7, given time — **confirmed**" in md
    holders = md.split("## Record")[1].split("holders: 9 processes hold")[1].split("### ")[0]
    # the digest: one line per holder, before the output, which is folded
    assert "- PID 72422 root: sglang::scheduler_TP3 holds nvidia0-7, nvidia-uvm, nvidiactl, listed by the " \
           "driver on GPU 3" in holders
    assert holders.index("- PID 1563") < holders.index("<details><summary>output (")
    assert "\\x0a" not in md
    assert md.count("echo '::gi-check:: begin pids'") == 1 and "`$` the same command as #" in md
    states = md.split("## Record")[1].split("states: ")[1].split("### ")[0]
    assert "- PID 72230 sglang::schedul: Z, 2 threads (1 Z, 1 D); in D: 72293 " in states
    assert "_nv043417rm" in states.split("<details>")[0]           # the D threads' wchan, before the dump


async def test_timeline_show_lists_a_multi_line_command_as_lines_and_numbers_hypotheses(seed_incident):
    text = as_text(seed_incident.refresh())
    assert "\\x0a" not in text and "      H2: SIGKILL of the schedulers" in text
    assert "        echo '::gi-check:: begin fds'" in text and "for H2" in text


def test_memory_columns_and_sparks_are_on_a_fixed_scale():
    series = MemorySeries(points=((0.0, {0: 76109, 1: 4}), (60.0, {0: 76109, 1: 4}), (91.0, {0: 4, 1: 4})),
                          totals={0: 97887, 1: 97887}, marks=(Mark(10.0, "sigkill"),))
    per, marks = columns(series, 10)
    assert spark(per[0], series.scale(0)) == "▆▆▆▆▆▆▆▆▆▁"      # stuck all along, then free: a fall at the end
    assert spark(per[1], series.scale(1)) == "▁" * 10           # a free GPU is a baseline, not a gap
    assert [m[0].letter if m else "" for m in marks] == ["", "k"] + [""] * 8


def test_the_chart_marks_actions_and_escapes_what_it_is_given():
    trail = MemoryTrail()
    from console.model import Gpu, NodeSnapshot
    for t, used in ((0.0, 76109), (30.0, 76109), (95.0, 4)):
        trail.add(NodeSnapshot(name="gpu<07>&", taken_at=t, gpus=(
            Gpu(index=0, uuid="u", name="n", bus_id="b", memory_used_mib=used, memory_total_mib=97887),)))
    series = MemorySeries(points=tuple(trail.points), totals=trail.totals,
                          marks=(Mark(4.0, "sigkill", "SIGKILL 8 <processes>"),))
    svg = memory_svg([("gpu<07>&", series)], title="Incident x")
    root = ET.fromstring(svg)                                     # well-formed: names are escaped
    ns = "{http://www.w3.org/2000/svg}"
    assert len(root.findall(f".//{ns}polyline")) == 1
    texts = [t.text for t in root.iter(f"{ns}text")]
    assert "gpu<07>&: GPU memory used" in texts and "k SIGKILL 8 <processes> (T+0:04)" in texts
    assert any(line.get("class") == "mark" for line in root.iter(f"{ns}line"))


async def test_the_e_key_writes_the_postmortem_and_its_chart_beside_it(incident_dir):
    pytest.importorskip("textual")
    from console.ui.app import IncidentApp
    tl = timeline.open_incident(incident_dir, "e-key")
    source = SimSource(name="demo", scenario="graceful", clock=FakeClock())
    app = IncidentApp([source], timeline=tl, autostart=False)
    async with app.run_test(size=(120, 36)) as pilot:
        for _ in range(3):
            await app.monitors[0].poll_once()
            await pilot.pause()
        snap = app.snapshots["demo"]
        out = await execute(plan_action(snap, "sigterm", pids=[65102]), source, timeline=tl, monitor=app.monitors[0])
        await app.monitors[0].poll_once()
        for _ in range(500):                      # redraws are batched: wait for the frame (bounded)
            if "t" in str(app.query_one("#gpu-chart").render()):
                break
            await pilot.pause(0.02)
        assert "t" in str(app.query_one("#gpu-chart").render())          # the SIGTERM marked on the sparkline
        await app._flush_feed(force=True)
        await pilot.press("e")
        await pilot.pause()
    tl.close()
    md = (incident_dir / "e-key.md").read_text()
    svg = incident_dir / "e-key.memory.svg"
    assert "![GPU memory over the incident, actions marked](e-key.memory.svg)" in md
    assert oct(svg.stat().st_mode & 0o777) == "0o600"
    root = ET.fromstring(svg.read_text())
    texts = [t.text or "" for t in root.iter("{http://www.w3.org/2000/svg}text")]
    assert any(t.startswith("t SIGTERM 1 process") for t in texts) and "demo: GPU memory used" in texts
    assert out.outcome_entry.freed_mib > 0


def test_export_to_a_file_writes_the_chart_beside_it_from_the_timeline_alone(tmp_path):
    import subprocess
    import sys
    with timeline.open_incident(tmp_path, "cli-pm") as tl:
        tl.append("action", "SIGKILL 1 process", node="gpu07", command="kill -s KILL 72169",
                  gpu_memory_before={"0": 76109})
        tl.append("observation", "GPU 0 freed 74.3 GiB in 26 s", node="gpu07", action=1, outcome=True, rc=0,
                  gpu_memory_before={"0": 76109}, gpu_memory_after={"0": 310}, freed_mib=75799, seconds_to_free=26.4)
    out = tmp_path / "report.md"
    r = subprocess.run([sys.executable, "-m", "console", "timeline", "export", "cli-pm", "--incident-dir",
                        str(tmp_path), "-o", str(out)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert "wrote" in r.stderr and (tmp_path / "report.memory.svg").exists()
    assert "](report.memory.svg)" in out.read_text()
    root = ET.fromstring((tmp_path / "report.memory.svg").read_text())
    assert root.findall(".//{http://www.w3.org/2000/svg}polyline")


def test_every_action_has_its_own_letter_on_the_memory_chart():
    from console import rungs as records
    from console.output.memory_series import Mark
    rungs = [*records.actions(), *records.ids(plans="slurm")]
    letters = [Mark(0.0, r).letter for r in rungs]
    assert "*" not in letters, dict(zip(rungs, letters))
    assert len(set(letters)) == len(letters), "two actions, one letter"
    assert (records.BY_ID["drain"].letter, records.BY_ID["resume"].letter) == ("D", "U"), "the keys that send them"
