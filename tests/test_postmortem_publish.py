"""The postmortem a team would publish (issue 20, item 10): headline, impact, the timeline of
hypotheses, checks and actions with what each rested on, the verdicts with their reasons, the
action items, then the whole record (dumps folded, never dropped); the chart legible for 8 GPUs.

Real incidents on the simulated nodes, driven headless through the session, on a FakeClock that
also stamps the timeline (the operator's pauses between steps are clock advances): the seed
(SIGTERM ignored, SIGKILL, the long wait, memory back) and reset-required (B, R, the restore)."""
from __future__ import annotations

import re
import xml.etree.ElementTree as ET

import pytest

from console.actions.plan import plan_restore
from console.clock import FakeClock
from console.incident import consoles
from console.incident import timeline as timeline_mod
from console.incident.export import as_markdown
from console.incident.timeline import Timeline
from console.model import TimelineEntry
from console.output.memory_series import Mark, MemorySeries
from console.output.memory_svg import CHAR_W, memory_svg
from console.session import Session
from console.sources.sim import SimSource
from console.ui.postmortem import timeline_series

SVG = "{http://www.w3.org/2000/svg}"
SECTIONS = ("| **Nodes**", "## Impact", "## Timeline", "## Verdicts", "## Action items", "## Record")


async def incident(tmp_path, monkeypatch, node: str, scenario: str, by: str):
    """A headless session on one simulated node whose clock also stamps the timeline; after its
    first reading: (clock, source, timeline, session, snapshot)."""
    clock = FakeClock()
    monkeypatch.setattr(timeline_mod, "now_iso", lambda: timeline_mod.iso_at(clock.now()))
    src = SimSource(name=node, scenario=scenario, clock=clock)
    tl = Timeline(tmp_path / f"{scenario}.jsonl", by=by)
    s = Session([src], timeline=tl, clock=clock)
    snap, = await s.poll_all()
    return clock, src, tl, s, snap


async def seed_incident(tmp_path, monkeypatch, *, started=False) -> list[TimelineEntry]:
    """The seed as alice took it: SIGTERM ignored, SIGKILL, the long wait, memory back; the
    entries once the console stopped. ``started``: the console's start note comes first, as a
    console writes it."""
    clock, src, tl, s, snap = await incident(tmp_path, monkeypatch, "simnode02", "seed", "alice@bastion")
    log = s.incident
    if started:
        log.note(None, consoles.CONSOLE_STARTED + "simnode02", console={"pid": 1, "host": "h"})
    clock.advance(20)
    log.hypothesis("simnode02", "the schedulers exit on SIGTERM and free GPUs 0-7")
    clock.advance(10)
    log.record_check(await s.run_check(src, "holders", snap))
    clock.advance(15)
    scheds = [p.pid for p in snap.processes if p.name.startswith("sglang::schedul")]
    await s.execute(await s.plan("simnode02", "sigterm", pids=[72169] + scheds[:4]))
    clock.advance(10)
    log.verdict("simnode02", log.suggest_verdict()[0])
    clock.advance(20)
    log.hypothesis("simnode02", "SIGKILL of the schedulers frees GPUs 0-7, given time")
    clock.advance(10)
    await s.execute(await s.plan("simnode02", "sigkill", pids=scheds))
    log.record_check(await s.run_check(src, "states", await s.monitors[0].poll_once(), pids=scheds[:2]))
    log.record_check(await s.run_check(src, "wait-and-reread", await s.monitors[0].poll_once(), seconds=120))
    await s.poll_all()                          # the console polls all along: it reads the memory back too
    clock.advance(15)
    log.verdict("simnode02", log.suggest_verdict()[0])
    clock.advance(5)
    await s.stop("console stopped")
    entries = tl.refresh()
    tl.close()
    return entries


@pytest.fixture
async def seed(tmp_path, monkeypatch):
    return await seed_incident(tmp_path, monkeypatch)


async def reset_required(tmp_path, monkeypatch, *, kernel_log: bool):
    clock, src, tl, s, snap = await incident(tmp_path, monkeypatch, "demo", "reset-required", "bob@bastion")
    log = s.incident
    clock.advance(30)
    log.hypothesis("demo", "GPU 3 needs a reset: no process holds its memory")
    if kernel_log:
        clock.advance(10)
        log.record_check(await s.run_check(src, "kernel-log", snap))
    for rung in ("clear-blockers", "reset"):
        clock.advance(20)
        await s.execute(await s.plan("demo", rung, gpus=[3]))
    clock.advance(15)
    log.verdict("demo", log.suggest_verdict()[0])
    clock.advance(40)
    snap, = await s.poll_all()
    off = next(f for f in snap.findings if f.kind == "blockers-off")
    await s.execute(plan_restore(snap, off.evidence["commands"], off.gpus))
    clock.advance(10)
    await s.stop("console stopped")
    entries = tl.refresh()
    tl.close()
    return entries


def section(md: str, name: str) -> str:
    return md.split(name, 1)[1].split("\n## ", 1)[0]


def record_block(md: str, seq: int) -> str:
    return section(md, "## Record").split(f"### #{seq} ", 1)[1].split("\n### ", 1)[0]


# ---------------------------------------------------------------- the document

async def test_the_sections_come_in_the_order_a_team_reads_them(seed):
    md = as_markdown(seed, incident_id="seed")
    assert [md.index(s) for s in SECTIONS] == sorted(md.index(s) for s in SECTIONS)
    assert md.count("### #") == len({e.seq for e in seed}) - sum(1 for e in seed if e.outcome)
    assert "### " not in md.split("## Record")[0], "entry headings only in the record"


async def test_the_wait_reads_as_a_table_folded_never_as_frames(seed):
    md = as_markdown(seed, incident_id="seed")
    assert "::t=" not in md
    wait = next(e for e in seed if e.text.startswith("wait-and-reread"))
    block = record_block(md, wait.seq)
    assert "<details><summary>reads (16 lines)</summary>" in block
    assert "     0 s  GPU0 76109 MiB, GPUs 1-6 76113 MiB each, GPU7 76069 MiB" in block
    assert "    81 s  GPUs 0-7 4 MiB each" in block
    assert len(block.splitlines()) < 40, "126 lines of one read per GPU were folded into one line per read"


async def test_the_before_and_after_appear_once_per_action_grouped(seed):
    md = as_markdown(seed, incident_id="seed")
    actions = [e for e in seed if e.kind == "action"]
    assert md.count("- before: ") == len(actions) == 2
    assert md.count("- before: GPU0 76109 MiB, GPUs 1-6 76113 MiB each, GPU7 76069 MiB") == 2
    later = next(e for e in seed if e.kind == "observation" and not e.outcome and e.action == actions[0].seq)
    assert "- before" not in record_block(md, later.seq) and "- after" not in record_block(md, later.seq)
    freeing = next(e for e in seed if e.kind == "observation" and e.action == actions[1].seq and e.freed_mib)
    assert "- after: GPUs 0-7 4 MiB each" in record_block(md, freeing.seq)


async def test_an_outcome_does_not_repeat_its_action_s_title(seed):
    md = as_markdown(seed, incident_id="seed")
    assert not re.search(r"(SIG\w+ \d+ processes)( on \S+)?: \1", md.split("## Record")[0])
    head = md.split("## Impact")[0]
    assert "| **Resolution** | #9 SIGKILL 8 processes on simnode02: 594.6 GiB freed on GPUs 0-7, 1 min 33 s after " \
           "it was sent |" in head
    assert "  - outcome (T+1:00, #6): sent to 5 of 5; after 15 s nothing freed on GPUs 0-7" in md


async def test_impact_of_the_seed_counts_from_the_first_reading_to_the_wait_s_read(seed):
    impact = section(as_markdown(seed, incident_id="seed"), "## Impact")
    # first reading at T+0:00; the wait began at T+1:52 and read the memory back 81 s in: T+3:13
    assert "| simnode02 | GPUs 0-7 | 74.3 GiB each | T+0:00 | T+3:13 | 3 min 13 s | 0.05 each |" in impact
    assert "| **Total** | 8 GPUs | 594.6 GiB | | | 3 min 13 s | 0.43 |" in impact
    assert "MiB·h" not in impact and "GiB·h" not in impact, "memory × time beside GPU-hours is noise"


async def test_each_action_says_what_it_rested_on_and_each_verdict_why(seed):
    md = as_markdown(seed, incident_id="seed")
    story = section(md, "## Timeline")
    assert "**action: SIGTERM 5 processes** on simnode02, for H1 (#4, by alice@bastion): " \
           "`kill -s TERM 72169 72230 72294 72358 72422`\n  - rested on: check #3 holders: 9 processes hold" in story
    assert "**action: SIGKILL 8 processes**" in story and "  - rested on: verdict #7: H1 refuted" in story
    verdicts = section(md, "## Verdicts")
    assert "- H1 the schedulers exit on SIGTERM and free GPUs 0-7 — **refuted** (#7, alice@bastion)\n" \
           "  - the evidence: action #4 (SIGTERM 5 processes) freed 0 MiB on GPUs 0-7 after its verification " \
           "window" in verdicts
    assert "  - the evidence: check #14 (the wait): memory came back ~81 s in" in verdicts


async def test_the_action_items_come_from_what_happened(seed):
    items = section(as_markdown(seed, incident_id="seed"), "## Action items")
    assert "1. The workers ignored SIGTERM: 5 still running 15 s after it (#4). Give them a SIGTERM handler" in items
    assert "2. Memory came back only 1 min 33 s after SIGKILL 8 processes (#9) on simnode02; threads were in D " \
           "inside the driver meanwhile (at _nv043417rm, check #13). The drain or epilog window must be at least " \
           "that: wait 120 s (`gpu-incident gate --wait 120`)" in items


async def test_the_reset_rests_on_its_xids_and_b_s_commands_are_shown_once(tmp_path, monkeypatch):
    entries = await reset_required(tmp_path, monkeypatch, kernel_log=True)
    md = as_markdown(entries, incident_id="reset")
    reset = next(e for e in entries if e.kind == "action" and e.text == "Reset GPU 3")
    story = section(md, "## Timeline")
    assert "  - rested on: Xid 119 (GSP RPC timeout) ×2 on PCI 0000:41:00: The GPU System Processor firmware " \
           "stopped answering the driver" in story.split("**action: Reset GPU 3**")[1]
    assert "  - rested on: Xid 154 (recovery action: GPU Reset Required) on PCI 0000:41:00" in story
    items = section(md, "## Action items")
    assert f"Reset GPU 3 was needed to free the memory (#{reset.seq}): watch for Xid 119, 154 in the kernel log" in items
    b_seq, restore = (next(e.seq for e in entries if e.kind == "action" and e.text.startswith(title))
                      for title in ("Clear the reset blockers", "Restore what B stopped"))
    assert f"B stopped nvidia-persistenced and persistence mode on GPU 3 on demo for the reset (#{b_seq}): the " \
           f"restore ran (#{restore}: done; back on after 0 s)." in items
    b = record_block(md, b_seq)
    assert b.count("systemctl stop nvidia-persistenced") == 1 and b.count("nvidia-smi -pm 0 -i 3") == 1
    impact = section(md, "## Impact")
    assert "| demo | GPU 3 | 60.0 GiB | T+0:00 | T+1:20 | 1 min 20 s | 0.02 |" in impact
    assert [m.letter for m in timeline_series(entries)["demo"].marks] == ["B", "R", "b"], "the restore is b, not $"


async def test_a_reset_with_no_kernel_log_check_still_rests_on_the_findings_noted_before_it(tmp_path, monkeypatch):
    """The session notes the findings behind a reset (Session._note_grounds) before its action."""
    md = as_markdown(await reset_required(tmp_path, monkeypatch, kernel_log=False), incident_id="reset")
    assert "no Xid recorded before it" not in md
    rested = [ln for ln in section(md, "## Timeline").splitlines() if "rested on:" in ln and "recovery-action" in ln]
    assert rested and "GPU Reset (Xid 154 logged)" in rested[0], section(md, "## Timeline")


def test_a_reset_with_no_xid_in_the_timeline_says_so():
    reset = TimelineEntry(ts="2026-12-02T10:01:00Z", seq=2, by="root@vm", kind="action", node="gpu07",
                          text="Reset GPU 3", command="nvidia-smi -r -i 3")
    first = TimelineEntry(ts="2026-12-02T10:00:00Z", seq=1, by="root@vm", kind="observation", node="gpu07",
                          text="first reading")
    from console.incident.grounds import grounds
    assert any(line.startswith("no Xid recorded before it") for line in grounds([first, reset], reset))


def entry(seq, ts, kind, text, **fields):
    return TimelineEntry(ts=f"2026-12-02T10:{ts}Z", seq=seq, by="root@vm", kind=kind, node="gpu07", text=text,
                         **fields)


def test_impact_numbers_for_a_known_timeline():
    held = {"0": 76109, "1": 76109, "2": 30720, "3": 4}
    entries = [
        entry(1, "00:00", "observation", "first reading", gpu_memory_before=held),
        entry(2, "00:30", "action", "SIGKILL 2 processes", command="kill -s KILL 1 2", gpu_memory_before=held),
        entry(3, "00:40", "observation", "SIGKILL 2 processes: nothing freed", action=2, outcome=True, rc=0,
              gpu_memory_before=held, gpu_memory_after=held, freed_mib=0),
        # written at 10:04:00, says the memory came back 150 s after the SIGKILL: at 10:03:00
        entry(4, "04:00", "observation", "GPUs 0-1 freed 148.6 GiB 150 s after SIGKILL", action=2,
              gpu_memory_before=held, gpu_memory_after={"0": 4, "1": 4, "2": 30720, "3": 4}, seconds_to_free=150.0),
        entry(5, "06:00", "note", "console stopped"),
    ]
    impact = section(as_markdown(entries, incident_id="known"), "## Impact")
    assert "| gpu07 | GPUs 0-1 | 74.3 GiB each | T+0:00 | T+3:00 | 3 min | 0.05 each |" in impact
    assert "| gpu07 | GPU 2 | 30.0 GiB | T+0:00 | T+6:00 (still held at the last entry) | 6 min | 0.10 |" in impact
    assert "| **Total** | 3 GPUs | 178.7 GiB | | | 6 min | 0.20 |" in impact
    assert "Jobs affected: not recorded" in impact


def test_b_says_whether_what_it_stopped_came_back():
    held, free = {"3": 61440}, {"3": 4}
    base = [entry(1, "00:00", "action", "Clear the reset blockers: persistence mode on GPU 3", gpu_memory_before=held),
            entry(2, "00:20", "action", "Reset GPU 3", command="nvidia-smi -r -i 3", gpu_memory_before=held),
            entry(3, "00:21", "observation", "Reset GPU 3: done", action=2, outcome=True, rc=0,
                  gpu_memory_before=held, gpu_memory_after=free, freed_mib=61436, seconds_to_free=1.0)]
    declined = base + [entry(4, "01:00", "note", "declined restore: the node goes to RMA")]
    items = section(as_markdown(declined, incident_id="b"), "## Action items")
    assert "B stopped persistence mode on GPU 3 on gpu07 for the reset (#1): the restore was declined (#4: declined " \
           "restore: the node goes to RMA)." in items
    items = section(as_markdown(base, incident_id="b"), "## Action items")
    assert "(#1): nothing restored it: restore it (x) or say why not" in items


def test_the_record_keeps_every_read_even_the_odd_ones():
    out = "::t=0::\n0, 76109 MiB\n1, 76109 MiB\n::t=5::\nUnable to determine the device handle for GPU 1\n" \
          "0, 76109 MiB\n::t=10::\n0, 4 MiB\n1, 4 MiB\n[…cut]"
    wait = entry(1, "00:10", "check", "wait-and-reread: memory came back ~10 s in: 148.6 GiB freed", rc=0,
                 command="nvidia-smi --query-gpu=index,memory.used --format=csv,noheader", output=out)
    md = as_markdown([wait], incident_id="odd")
    assert "     5 s  GPU0 76109 MiB; Unable to determine the device handle for GPU 1" in md
    assert "    10 s  GPUs 0-1 4 MiB each\n[…cut]" in md and "::t=" not in md


# ---------------------------------------------------------------- the chart

def labels(root):
    out = []
    for t in root.iter(f"{SVG}text"):
        if t.get("class") == "mark-label":
            x, y = float(t.get("x")), float(t.get("y"))
            out.append((x, x + len(t.text) * CHAR_W, y, t.text))
    return out


def assert_legible(root):
    """No two labels overlap; no mark's line crosses a label."""
    found = labels(root)
    for i, (a0, a1, ay, at) in enumerate(found):
        for b0, b1, by, bt in found[i + 1:]:
            assert ay != by or a1 <= b0 or b1 <= a0, (at, bt)
    for line in root.iter(f"{SVG}line"):
        if line.get("class") != "mark":
            continue
        x, y1, y2 = float(line.get("x1")), float(line.get("y1")), float(line.get("y2"))
        for a0, a1, ay, text in found:
            assert not (y1 < ay - 1 < y2 and a0 <= x <= a1), (x, text)


async def test_the_seed_chart_draws_eight_equal_gpus_as_one_labelled_line_and_marks_the_wait(seed):
    series = timeline_series(seed)["simnode02"]
    root = ET.fromstring(memory_svg([("simnode02", series)]))
    lines = root.findall(f".//{SVG}polyline")
    assert [p.find(f"{SVG}title").text for p in lines] == ["GPUs 0-7"]
    assert "GPUs 0-7" in [t.text for t in root.iter(f"{SVG}text") if t.get("class") == "legend"]
    marks = [line for line in root.iter(f"{SVG}line") if line.get("class") == "mark"]
    sent = [e for e in seed if e.kind == "action"]
    assert len(marks) == len(sent) + 1                          # every action, and the wait
    assert [t[3][0] for t in labels(root)] == ["t", "k", "w"]
    wait = [r for r in root.iter(f"{SVG}rect") if r.get("class") == "wait"]
    assert len(wait) == 1 and float(wait[0].get("width")) > 100      # shaded for its 81 s
    assert_legible(root)


def test_crowded_marks_get_rows_of_their_own_and_the_last_one_fits():
    points = ((0.0, {0: 76109, 1: 4}), (300.0, {0: 76109, 1: 4}))
    marks = tuple(Mark(float(t), rung, f"{rung.upper()} a long title for action number {i}")
                  for i, (t, rung) in enumerate([(10, "sigterm"), (12, "sigkill"), (13, "kill-holders"),
                                                 (40, "clear-blockers"), (41, "reset"), (150, "restore"),
                                                 (298, "reset"), (300, "restore")]))
    wait = Mark(60.0, "wait", "wait: memory came back ~81 s in", end=141.0)
    root = ET.fromstring(memory_svg([("n", MemorySeries(points=points, marks=(*marks, wait)))]))
    found = labels(root)
    assert len(found) == 9 and len({y for *_, y, _ in found}) > 1
    assert all(x1 <= 960 for _, x1, _, _ in found), "every label inside the picture"
    assert "R RESET a long title for action number 6 (T+4:58)" in [text for *_, text in found], \
        "at the right edge a label goes left of its line"
    last = [t for t in root.iter(f"{SVG}text") if t.get("class") == "mark-label"][-1]
    assert last.text == "b RESTORE… (T+5:00)", "no room left or right: cut, letter and time whole"
    assert last.find(f"{SVG}title").text == "b RESTORE a long title for action number 7 (T+5:00)"
    assert_legible(root)


def test_the_timeline_view_shows_a_waits_reads_as_lines_not_framing():
    """replay, follow and timeline show render an entry with ui/timeline_render.detail: a wait's
    reads one line each there too (it showed the raw ::t=S:: frames)."""
    from console.ui.timeline_render import detail
    out = "::t=0::\n0, 76109 MiB\n1, 76109 MiB\n::t=5::\n0, 4 MiB\n1, 4 MiB\n"
    wait = entry(1, "00:10", "check", "wait-and-reread: memory came back ~5 s in: 148.6 GiB freed", rc=0,
                 command="nvidia-smi --query-gpu=index,memory.used --format=csv,noheader", output=out)
    shown = detail([wait], 0, 1).plain
    assert "::t=" not in shown and "     5 s  GPUs 0-1 4 MiB each" in shown, shown


def test_replay_shows_the_gpus_at_each_step():
    """timeline_render.detail (replay, follow): each node's GPU memory as the entries up to the
    step last read it — held before the action, back after its outcome."""
    from console.ui.timeline_render import detail
    held = {str(g): 76109 for g in range(8)}
    back = {str(g): 4 for g in range(8)}
    entries = [entry(1, "00:00", "observation", "first reading", gpu_memory_before=held),
               entry(2, "00:30", "action", "SIGKILL 9 processes", command="kill -s KILL 1", gpu_memory_before=held),
               entry(3, "02:00", "observation", "freed", action=2, outcome=True, rc=0, gpu_memory_before=held,
                     gpu_memory_after=back, freed_mib=608868, seconds_to_free=90.0)]
    at_action = detail(entries, 1, 2).plain
    assert "GPU memory as of this step" in at_action and "gpu07: GPUs 0-7 76109 MiB each (#2)" in at_action
    after = detail(entries, 2, 3).plain
    assert "gpu07: GPUs 0-7 4 MiB each (#3)" in after, after


# ---------------------------------------------------------------- any file exports

import json  # noqa: E402

from hypothesis import given  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from console.incident.timeline import parse_lines  # noqa: E402
from tests.fuzzing import examples  # noqa: E402

_memory = st.dictionaries(st.sampled_from(["0", "1", "7", "x", ""]), st.none() | st.integers(-5, 200_000), max_size=3)
_output = st.lists(st.sampled_from(["::t=0::", "::t=5::", "::t=x::", "0, 76109 MiB", "1, 4 MiB", "[…cut]",
                                    "Unable to determine the device handle for GPU 1", "garbage"]),
                   max_size=6).map("\n".join)
_line = st.fixed_dictionaries(
    {"ts": st.sampled_from(["2026-12-02T10:00:00Z", "2026-12-02T10:01:30.5Z", "yesterday", ""]),
     "seq": st.integers(-2, 6), "by": st.just("x"),
     "kind": st.sampled_from(["hypothesis", "verdict", "action", "observation", "check", "note", "x"])},
    optional={"node": st.none() | st.sampled_from(["gpu07", ""]),
              "text": st.sampled_from(["wait-and-reread: memory came back", "SIGKILL 8 processes", "Reset GPU 3",
                                       "finding critical xid: Xid 79", "kernel-log: 2 Xids", "declined restore: x", ""]),
              "hypothesis": st.none() | st.integers(-1, 6), "action": st.none() | st.integers(-1, 6),
              "command": st.none() | st.sampled_from(["kill -s KILL 1", "nvidia-smi -r -i 3", "$ echo"]),
              "rc": st.none() | st.integers(-1, 255), "output": st.none() | _output,
              "gpu_memory_before": st.none() | _memory, "gpu_memory_after": st.none() | _memory,
              "freed_mib": st.none() | st.integers(-10, 700_000),
              "seconds_to_free": st.none() | st.floats(allow_nan=True, allow_infinity=True),
              "verdict": st.none() | st.sampled_from(["confirmed", "refuted", "inconclusive", "?"]),
              "outcome": st.none() | st.booleans(),
              "targets": st.none() | st.lists(st.dictionaries(st.sampled_from(["pid", "name"]),
                                                              st.integers() | st.text(max_size=4), max_size=2), max_size=2)})


@examples(100)
@given(st.lists(_line, max_size=6))
def test_any_timeline_a_file_holds_exports_without_error(lines):
    """Whatever parseable lines a (hand-edited, corrupted) file holds — the loader keeps those
    whose fields have their types — the postmortem (readings, impact, narrative, lessons, chart
    series) is written, never an exception."""
    entries, _warnings = parse_lines("\n".join(json.dumps(x) for x in lines).encode(), "odd.jsonl")
    assert as_markdown(entries, incident_id="odd") is not None
