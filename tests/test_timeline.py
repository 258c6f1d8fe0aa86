import json
import os
import stat

import pytest

from console.incident import timeline


def test_entries_are_on_disk_with_private_modes(incident_dir):
    tl = timeline.open_incident(incident_dir, by="alice@bastion")
    e1 = tl.append("hypothesis", "memory needs more time to be released", node="demo")
    e2 = tl.append("check", "wait-and-reread", node="demo", hypothesis=e1.seq,
                   command="sleep 5; nvidia-smi --query-gpu=index,memory.used --format=csv,noheader",
                   rc=0, output="0, 76109 MiB", gpu_memory_before={"0": 76109},
                   gpu_memory_after={"0": 76109})
    tl.append("verdict", "memory unchanged after 5 s", node="demo", hypothesis=e1.seq, verdict="refuted")
    # another reader sees every line without the writer closing the file
    lines = tl.path.read_text().splitlines()
    assert [json.loads(x)["seq"] for x in lines] == [1, 2, 3]
    first = json.loads(lines[1])
    assert first["by"] == "alice@bastion" and first["hypothesis"] == 1 and first["kind"] == "check"
    assert e2.gpu_memory_after == {"0": 76109}
    assert stat.S_IMODE(os.stat(tl.path).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(incident_dir).st_mode) == 0o700
    tl.close()


def test_existing_open_dir_is_used_with_a_warning(tmp_path):
    d = tmp_path / "shared"
    d.mkdir(mode=0o755)
    os.chmod(d, 0o755)
    tl = timeline.open_incident(d)
    assert any("readable by others" in w for w in tl.warnings)
    assert stat.S_IMODE(os.stat(d).st_mode) == 0o755   # used as it is
    tl.close()


def test_torn_last_line_is_skipped_and_nothing_before_is_lost(incident_dir):
    tl = timeline.open_incident(incident_dir, "inc1")
    for i in range(3):
        tl.append("note", f"note {i}")
    tl.close()
    with open(tl.path, "ab") as fh:
        fh.write(b'{"ts": "2026-11-29T11:00:00Z", "seq": 4, "by": "x", "ki')   # crash mid-write
    entries, warnings = timeline.load(tl.path)
    assert [e.text for e in entries] == ["note 0", "note 1", "note 2"]
    assert warnings == ["inc1.jsonl: torn last line skipped"]
    # continuing the incident appends after the torn line, with the next seq
    tl2 = timeline.open_incident(incident_dir, "inc1")
    tl2.append("note", "after crash")
    tl2.close()
    entries, warnings = timeline.load(tl.path)
    assert [e.seq for e in entries] == [1, 2, 3, 4]
    assert entries[-1].text == "after crash"
    assert warnings == ["inc1.jsonl: unreadable line 4 skipped"]


def test_bad_kind_and_verdict_are_refused(incident_dir):
    with timeline.open_incident(incident_dir) as tl:
        with pytest.raises(ValueError):
            tl.append("rumour", "x")
        with pytest.raises(ValueError):
            tl.append("verdict", "x", verdict="maybe")
        assert tl.entries == []


def test_list_resolve_and_markdown_export(incident_dir):
    from console.incident import export
    with timeline.open_incident(incident_dir, "20261129-a") as tl:
        h = tl.append("hypothesis", "SIGKILL was enough", node="demo")
        tl.append("action", "SIGKILL 9 processes", node="demo", command="kill -s KILL 72170 72171",
                  rc=0, freed_mib=0, gpu_memory_before={"0": 76109}, gpu_memory_after={"0": 76109})
        tl.append("verdict", "", node="demo", hypothesis=h.seq, verdict="refuted")
    rows = timeline.list_incidents(incident_dir)
    assert [r[0] for r in rows] == ["20261129-a"] and rows[0][2] == 3
    path = timeline.resolve("20261129-a", incident_dir)
    entries, _ = timeline.load(path)
    md = export.as_markdown(entries, incident_id="20261129-a")
    assert "# Incident 20261129-a" in md
    assert "$ kill -s KILL 72170 72171" in md
    assert "SIGKILL was enough — **refuted**" in md
    with pytest.raises(FileNotFoundError):
        timeline.resolve("nope", incident_dir)


def test_a_failed_write_leaves_no_fragment_and_no_gap(incident_dir, monkeypatch):
    tl = timeline.open_incident(incident_dir, "full")
    tl.append("note", "before the disk filled")
    real_write = os.write
    calls = {"n": 0}

    def half_then_enospc(fd, data):
        calls["n"] += 1
        if calls["n"] == 1:
            return real_write(fd, bytes(data[: len(data) // 2]))   # a short write…
        raise OSError(28, "No space left on device")               # …then the disk is full
    monkeypatch.setattr(os, "write", half_then_enospc)
    with pytest.raises(OSError):
        tl.append("note", "lost to a full disk")
    monkeypatch.setattr(os, "write", real_write)
    tl.append("note", "after space was freed")
    tl.close()
    entries, warnings = timeline.load(tl.path)
    assert [(e.seq, e.text) for e in entries] == [(1, "before the disk filled"), (2, "after space was freed")]
    assert warnings == []


def test_lines_with_wrong_types_are_skipped_not_fatal(incident_dir):
    path = incident_dir / "x.jsonl"
    incident_dir.mkdir(mode=0o700)
    path.write_text('{"ts":"t","seq":1,"by":"a","kind":null}\n'
                    '{"ts":"t","seq":2,"by":"a","kind":"note","seconds_to_free":"3"}\n'
                    '{"ts":"t","seq":3,"by":"a","kind":"note","text":"fine"}\n')
    entries, warnings = timeline.load(path)
    assert [e.seq for e in entries] == [3]
    assert warnings == ["x.jsonl: unreadable line 1 skipped", "x.jsonl: unreadable line 2 skipped"]


def test_exports_never_pass_escape_sequences_and_keep_fences_intact(incident_dir):
    from console.incident import export
    with timeline.open_incident(incident_dir, "esc") as tl:
        tl.append("check", "evil \x1b]0;pwned\x07 name", node="n\x1b[31m",
                  command="printf '\x1b[2J'", rc=0, output="```\nnot the end of the block\n```")
    entries, _ = timeline.load(tl.path)
    for text in (export.as_text(entries), export.as_markdown(entries, incident_id="esc")):
        assert "\x1b" not in text and "\x07" not in text
        assert "\\x1b]0;pwned\\x07" in text
    md = export.as_markdown(entries, incident_id="esc")
    assert "````\n$ printf" in md and md.count("````") == 2


# ---------------------------------------------------------------- several writers on one incident

def test_two_consoles_on_one_incident_keep_seqs_unique_and_in_file_order(incident_dir):
    alice = timeline.open_incident(incident_dir, "pair", by="alice@bastion")
    bob = timeline.open_incident(incident_dir, "pair", by="bob@gpu07")        # both read the empty file
    mine = {"alice": [], "bob": []}
    for i in range(4):
        mine["alice"].append(alice.append("note", f"alice {i}"))
        mine["bob"].append(bob.append("note", f"bob {i}"))
    entries, warnings = timeline.load(alice.path)
    assert [e.seq for e in entries] == list(range(1, 9)) and not warnings
    on_disk = {e.text: e for e in entries}
    for who, returned in mine.items():
        assert [on_disk[e.text] for e in returned] == returned    # each writer's entries are the file's
    # each console's view includes the other's entries, in file order (its export shows both)
    assert [e.text for e in alice.refresh()] == [e.text for e in entries]
    assert [e.text for e in bob.entries] == [e.text for e in entries]
    alice.close()
    bob.close()


def test_a_line_torn_by_a_crashed_writer_is_sealed_by_the_next_append(incident_dir):
    tl = timeline.open_incident(incident_dir, "crash")
    tl.append("note", "before")
    with open(tl.path, "ab") as other:               # another console died mid-line
        other.write(b'{"ts": "2026-11-29T11:00:00Z", "seq": 2, "by": "x", "ki')
    after = tl.append("note", "after the other console died")
    tl.close()
    entries, warnings = timeline.load(tl.path)
    assert [(e.seq, e.text) for e in entries] == [(1, "before"), (2, "after the other console died")]
    assert after.seq == 2 and warnings == ["crash.jsonl: unreadable line 2 skipped"]
    assert any("torn last line skipped" in w for w in tl.warnings)


WRITER = """
import json, sys, time
from pathlib import Path
from console.incident.timeline import Timeline
path, who, count = sys.argv[1:]
tl = Timeline(Path(path), by=who)
print("ready", flush=True)
sys.stdin.readline()                       # both start appending at once
seqs = []
for i in range(int(count)):
    seqs.append(tl.append("note", f"{who} {i}").seq)
    time.sleep(0.0005)                     # an operator's next key, very fast
print(json.dumps(seqs))
"""


def test_two_processes_appending_at_once_never_share_a_seq(incident_dir):
    import subprocess
    import sys
    path = timeline.open_incident(incident_dir, "race").path
    children = {who: subprocess.Popen([sys.executable, "-c", WRITER, str(path), who, "200"],
                                      stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
                for who in ("alice", "bob")}
    try:
        for child in children.values():                 # both have read the (empty) file
            assert child.stdout.readline() == "ready\n"
        for child in children.values():
            child.stdin.write("go\n")
            child.stdin.flush()
        returned = {who: json.loads(child.communicate(timeout=120)[0]) for who, child in children.items()}
    finally:
        for child in children.values():
            if child.poll() is None:
                child.kill()
                child.wait()
    entries, warnings = timeline.load(path)
    assert [e.seq for e in entries] == list(range(1, 401)) and not warnings
    for who, seqs in returned.items():
        assert seqs == [e.seq for e in entries if e.text.startswith(who + " ")]


def test_show_and_export_put_an_action_and_its_outcome_in_one_block(incident_dir):
    from console.incident import export
    with timeline.open_incident(incident_dir, "merge") as tl:
        a = tl.append("action", "SIGTERM 1 process", node="demo", command="kill -s TERM 65102",
                      gpu_memory_before={"0": 69000}, targets=[{"pid": 65102, "start_ticks": 9, "create_time": None,
                                                                "name": "python3"}])
        tl.append("observation", "SIGTERM 1 process: sent to 1 of 1; GPU 0 freed 67.4 GiB in 3 s", node="demo",
                  action=a.seq, outcome=True, rc=0, output="sent SIGTERM to 1 of 1",
                  gpu_memory_before={"0": 69000}, gpu_memory_after={"0": 4}, freed_mib=68996, seconds_to_free=3.0)
        tl.append("observation", "GPU 0 still at 4 MiB 30 s after SIGTERM", node="demo", action=a.seq)
    entries, _ = timeline.load(tl.path)
    assert entries[0].targets == [{"pid": 65102, "start_ticks": 9, "create_time": None, "name": "python3"}]
    assert entries[1].outcome is True and entries[2].outcome is None
    md = export.as_markdown(entries, incident_id="merge")
    assert [line for line in md.splitlines() if line.startswith("### ")] == [
        f"### #1 action — {entries[0].ts} — demo ({entries[0].by})",
        f"### #3 observation — {entries[2].ts} — demo ({entries[2].by})"]
    block = md.split("### #1 ")[1].split("### #3")[0]
    assert "- targets: 65102 (python3)" in block and "$ kill -s TERM 65102\nsent SIGTERM to 1 of 1" in block
    assert "exit status 0" in block and f"Outcome (#2, {entries[1].ts}): SIGTERM 1 process: sent" in block
    assert "- before: GPU0 69000 MiB" in block and "- after: GPU0 4 MiB" in block
    assert "- freed: 67.4 GiB in 3.0 s" in block
    text = export.as_text(entries)
    assert [line.split()[0] for line in text.splitlines() if line.startswith("#")] == ["#1", "#3"]
    assert "outcome #2" in text and "(rc 0): SIGTERM 1 process: sent to 1 of 1" in text
    assert "freed 67.4 GiB in 3.0 s" in text
