"""The incremental reader behind `gpu-incident follow` (and the loader of `replay`)."""
import os

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.fuzzing import examples
from console.incident import timeline
from console.model import TimelineEntry
from console.incident.timeline import entry_to_json
from console.incident.tail import TimelineTail, read_all


def line(seq: int, text: str = "", **fields) -> bytes:
    entry = TimelineEntry(ts=f"2026-11-29T11:00:{seq % 60:02d}.000Z", seq=seq, by="alice@bastion",
                          kind=fields.pop("kind", "note"), text=text or f"entry {seq}", **fields)
    return (entry_to_json(entry) + "\n").encode()


def write(path, data: bytes, mode: str = "ab") -> None:
    with open(path, mode) as fh:
        fh.write(data)


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def monotonic(self) -> float:
        return self.now


def test_partial_line_stays_pending_until_its_newline(tmp_path):
    path = tmp_path / "inc.jsonl"
    first_line, second_line = line(1, "memory needs time"), line(2, "second")
    whole = first_line + second_line
    cut = len(first_line) + 10
    write(path, whole[:cut])                     # line 1 and the start of line 2
    tail = TimelineTail(path)
    first = tail.poll()
    assert [e.seq for e in first.entries] == [1] and not first.warnings
    assert tail.pending_bytes == 10
    assert tail.poll().entries == []             # nothing new, still pending, no warning
    write(path, whole[cut:-1])                   # all but the newline
    assert tail.poll().entries == [] and tail.pending_bytes == len(second_line) - 1
    write(path, b"\n")
    got = tail.poll()
    assert [(e.seq, e.text) for e in got.entries] == [(2, "second")] and tail.pending_bytes == 0


def test_torn_line_warns_once_after_a_quiet_while_and_is_skipped_when_sealed(tmp_path):
    path = tmp_path / "inc.jsonl"
    write(path, line(1) + line(2)[:15])          # the writer crashed mid-line
    clock = Clock()
    tail = TimelineTail(path, torn_after=5.0, clock=clock)
    assert [e.seq for e in tail.poll().entries] == [1]
    clock.now = 4.0
    assert tail.poll().warnings == []
    clock.now = 6.0
    warned = tail.poll().warnings
    assert len(warned) == 1 and "incomplete" in warned[0] and "torn" in warned[0]
    clock.now = 60.0
    assert tail.poll().warnings == []            # said once
    # the console restarts on the same incident: Timeline seals the torn line and goes on
    tl = timeline.Timeline(path, by="bob@gpu07")
    tl.append("note", "console restarted")
    got = tail.poll()
    assert got.warnings == ["inc.jsonl: unreadable line 2 skipped"]
    assert [(e.seq, e.text) for e in got.entries] == [(2, "console restarted")]
    tl.close()


def test_garbage_lines_become_warnings_and_reading_goes_on(tmp_path):
    path = tmp_path / "inc.jsonl"
    write(path, line(1) + b"not json at all\n" + b"[1, 2]\n" + b"\xff\xfe\x00\n" + b"\n"
          + b'{"seq": 9}\n' + b"[" * 100_000 + b"\n" + line(2))
    got = TimelineTail(path).poll()
    assert [e.seq for e in got.entries] == [1, 2]
    assert got.warnings == [f"inc.jsonl: unreadable line {n} skipped" for n in (2, 3, 4, 6, 7)]


def test_truncation_is_noticed_and_reading_restarts(tmp_path):
    path = tmp_path / "inc.jsonl"
    write(path, line(1) + line(2) + line(3))
    tail = TimelineTail(path)
    assert len(tail.poll().entries) == 3
    write(path, line(4), mode="wb")              # `> file` then one more entry
    got = tail.poll()
    assert got.reset and "truncated" in got.notice and [e.seq for e in got.entries] == [4]
    assert not tail.poll().reset                 # said once


def test_rewrite_in_place_to_a_longer_file_is_noticed(tmp_path):
    path = tmp_path / "inc.jsonl"
    write(path, line(1, "a"))
    tail = TimelineTail(path)
    tail.poll()
    with open(path, "r+b") as fh:               # same inode, longer, different beginning
        fh.write(line(7, "bb") + line(8))
    got = tail.poll()
    assert got.reset and "truncated or rewritten" in got.notice and [e.seq for e in got.entries] == [7, 8]


def test_deleted_file_is_reported_once_then_picked_up_again(tmp_path):
    path = tmp_path / "inc.jsonl"
    write(path, line(1))
    tail = TimelineTail(path)
    tail.poll()
    os.unlink(path)
    gone = tail.poll()
    assert gone.missing and "deleted" in gone.notice and not gone.entries
    again = tail.poll()
    assert again.missing and again.notice is None
    write(path, line(1) + line(2))
    back = tail.poll()
    assert "is back" in back.notice and [e.seq for e in back.entries] == [1, 2]


def test_replaced_file_is_read_from_its_start(tmp_path):
    path = tmp_path / "inc.jsonl"
    write(path, line(1) + line(2))
    tail = TimelineTail(path)
    tail.poll()
    os.rename(path, tmp_path / "old.jsonl")
    write(path, line(1, "new incident"))
    got = tail.poll()
    assert got.reset and "replaced" in got.notice and [e.text for e in got.entries] == ["new incident"]


def test_fsynced_appends_of_a_live_timeline_are_seen(incident_dir):
    tl = timeline.open_incident(incident_dir, "live", by="alice@bastion")
    tail = TimelineTail(tl.path)
    assert tail.poll().entries == []
    h = tl.append("hypothesis", "a zombie keeps the memory", node="gpu07")
    assert tail.poll().entries == [h]
    more = [tl.append("check", f"look {i}", node="gpu07", hypothesis=h.seq, command="ps -eo pid,stat",
                      rc=0, output="72170 Z") for i in range(3)]
    assert tail.poll().entries == more
    tl.close()


def test_an_endless_line_is_skipped_and_the_next_one_read(tmp_path):
    path = tmp_path / "inc.jsonl"
    write(path, line(1) + b"x" * 5000)
    tail = TimelineTail(path, max_line=1000, read_limit=1024)
    seen, warnings = [], []
    for _ in range(10):
        got = tail.poll()
        seen += got.entries
        warnings += got.warnings
    assert [e.seq for e in seen] == [1] and warnings == ["inc.jsonl: line 2 longer than 1000 bytes skipped"]
    assert tail.pending_bytes == 0
    write(path, b"yyy\n" + line(3))
    assert [e.seq for e in tail.poll().entries] == [3]


def test_a_directory_or_missing_path_never_raises(tmp_path):
    got = TimelineTail(tmp_path).poll()
    assert got.missing and "not a regular file" in got.notice
    got = TimelineTail(tmp_path / "nope.jsonl").poll()
    assert got.missing and "does not exist" in got.notice


def test_read_all_skips_a_torn_last_line_and_keeps_everything_before(tmp_path):
    path = tmp_path / "inc.jsonl"
    write(path, line(1) + line(2) + line(3)[:20])
    entries, warnings = read_all(path)
    assert [e.seq for e in entries] == [1, 2] and warnings == ["inc.jsonl: torn last line skipped"]
    write(path, line(1) + line(2)[:-1], mode="wb")   # complete object, no final newline: kept
    entries, warnings = read_all(path)
    assert [e.seq for e in entries] == [1, 2] and warnings == []


def test_read_all_refuses_what_is_not_a_readable_file(tmp_path):
    with pytest.raises(FileNotFoundError, match="no such timeline file"):
        read_all(tmp_path / "missing.jsonl")
    with pytest.raises(ValueError, match="is a directory"):
        read_all(tmp_path)


@examples(60)
@given(st.lists(st.integers(min_value=1, max_value=40), max_size=12), st.integers(1, 64))
def test_any_split_of_a_file_gives_what_load_gives(tmp_path_factory, cuts, limit):
    """However the writes and reads are split, the tail sees exactly the loader's entries."""
    data = line(1, "[bold]x[/]") + b"garbage\n" + line(2, "\u00e9\u4e2d") + line(3)
    path = tmp_path_factory.mktemp("split") / "inc.jsonl"
    path.write_bytes(b"")
    tail = TimelineTail(path, read_limit=limit)
    seen, warnings, pos = [], [], 0
    for cut in cuts + [len(data)]:
        write(path, data[pos:pos + cut])
        pos = min(len(data), pos + cut)
        while True:
            got = tail.poll()
            seen += got.entries
            warnings += got.warnings
            if not got.more:
                break
    assert seen == timeline.load(path)[0]
    assert warnings == ["inc.jsonl: unreadable line 2 skipped"]


@examples(100)
@given(st.lists(st.binary(max_size=80), max_size=8))
def test_arbitrary_bytes_never_raise(tmp_path_factory, chunks):
    path = tmp_path_factory.mktemp("fuzz") / "inc.jsonl"
    path.write_bytes(b"")
    tail = TimelineTail(path, read_limit=17, max_line=50)
    for chunk in chunks:
        write(path, chunk)
        for _ in range(8):
            got = tail.poll()
            assert all(isinstance(e, TimelineEntry) for e in got.entries)
            assert all(isinstance(w, str) and "\n" not in w for w in got.warnings)
            if not got.more:
                break
    assert all(isinstance(w, str) for w in tail.finish().warnings)
