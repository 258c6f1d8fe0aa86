"""The live state beside an incident (console/incident/mirror.py): what the driving console
writes for a follower, how it is written (atomically, 0600, never through a link) and read."""
from __future__ import annotations

import dataclasses
import json
import os
import time

import pytest

from console.clock import FakeClock
from console.incident import timeline
from console.incident.mirror import (PROCESS_LIMIT, StateFeed, parse_state, read_state, snapshot_from_data,
                                     snapshot_to_data, state_path)
from console.incident.safefiles import UnsafeFile
from console.model import ActionRecord, NodeSnapshot, Proc
from console.monitor import diagnosed
from console.output.memory_series import MemoryTrail
from console.sources.sim import SimSource


async def seed_snapshot() -> NodeSnapshot:
    return diagnosed(await SimSource(name="demo", scenario="seed", clock=FakeClock()).poll())


async def test_a_snapshot_goes_through_the_state_file_and_comes_back_the_same(tmp_path):
    snap = await seed_snapshot()
    back = snapshot_from_data(snapshot_to_data(snap))
    assert back.gpus == snap.gpus and back.findings == snap.findings and back.own_pids == snap.own_pids
    mirrored = {p.pid for p in back.processes}
    assert {p.pid for p in snap.processes if p.is_gpu_holder} <= mirrored      # every holder, whole
    assert all(snap.proc(p.pid) == p for p in back.processes)
    assert 72169 in mirrored and 1 in mirrored            # their ancestors (the tree is drawn from them)
    assert snapshot_to_data(snap)["hidden_processes"] == len(snap.processes) - len(mirrored)


def test_a_huge_node_is_bounded():
    procs = tuple(Proc(pid=i, ppid=1, state="Z" if i % 2 else "S", user="u", name="p", cmdline="p")
                  for i in range(2, 100_002))
    data = snapshot_to_data(NodeSnapshot(name="big", taken_at=1.0, processes=procs))
    assert len(data["processes"]) <= PROCESS_LIMIT and data["hidden_processes"] >= 100_000 - PROCESS_LIMIT


async def test_the_feed_writes_0600_atomically_and_the_follower_reads_it(tmp_path):
    with timeline.open_incident(tmp_path, "pair") as tl:
        path = state_path(tl.path)
        assert path == tmp_path / "pair.state.json"
        feed = StateFeed(path, incident_id="pair", by="alice@bastion", interval=1.0)
        snap = await seed_snapshot()
        trail = MemoryTrail()
        trail.add(snap)
        feed.update(snap, viewing="demo")
        assert feed.due()
        feed.write(feed.document({"demo": trail.as_data()}, [ActionRecord("sigkill", 5.0, "demo", (72230,), (0,))],
                                 activity=["demo: wait-and-reread: 15 of 86 s"]))
        assert oct(os.stat(path).st_mode & 0o777) == "0o600" and not feed.due()
        assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []   # no temp left
        state = read_state(path)
        assert state.incident == "pair" and state.by == "alice@bastion" and state.viewing == "demo"
        assert state.node("demo").gpus == snap.gpus and state.running and not state.stale(state.written_at + 1)
        assert state.actions[0].rung == "sigkill" and state.activity == ("demo: wait-and-reread: 15 of 86 s",)
        assert state.memory["demo"]["points"][0][1]["0"] == 76109
        feed.write(feed.document({}, [], running=False))
        assert read_state(path).stale()                  # stopped: the follower says so


def test_a_state_file_that_is_a_link_or_not_a_state_is_refused(tmp_path):
    target = tmp_path / "elsewhere.json"
    target.write_text("{}")
    link = tmp_path / "x.state.json"
    link.symlink_to(target)
    with pytest.raises(UnsafeFile, match="symbolic link"):
        read_state(link)
    with pytest.raises(FileNotFoundError):
        read_state(tmp_path / "none.state.json")
    for junk in (b"not json", b"[]", b'{"version": 9}', b'{"version": 1, "nodes": [{"name": 3}]}'):
        with pytest.raises(ValueError):
            parse_state(junk)


def test_the_feed_replaces_a_link_planted_at_the_state_file_never_writes_through_it(tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("untouched")
    path = tmp_path / "pair.state.json"
    path.symlink_to(victim)
    feed = StateFeed(path, incident_id="pair", by="a", interval=1.0)
    feed.write(feed.document({}, []))
    assert victim.read_text() == "untouched" and not path.is_symlink()


async def test_the_feed_carries_each_polls_time_and_every_change(tmp_path):
    """A node whose poll changed nothing but its time is written with the new time; one whose
    process changed, with the change (the feed reuses the JSON of an unchanged node)."""
    import dataclasses
    snap = await seed_snapshot()
    feed = StateFeed(tmp_path / "x.state.json", incident_id="x", by="me", interval=1.0)
    feed.update(snap)
    first = feed.document({}, [])["nodes"][0]
    later = dataclasses.replace(snap, taken_at=snap.taken_at + 5, probe_ms=42.0)
    feed.update(later)
    again = feed.document({}, [])["nodes"][0]
    assert (again["taken_at"], again["probe_ms"]) == (later.taken_at, 42.0)
    assert again["processes"] == first["processes"] and first["taken_at"] == snap.taken_at
    holder = next(p for p in snap.processes if p.is_gpu_holder)
    renamed = tuple(dataclasses.replace(p, state="Z") if p is holder else p for p in snap.processes)
    feed.update(dataclasses.replace(later, processes=renamed))
    changed = feed.document({}, [])["nodes"][0]
    assert next(p for p in changed["processes"] if p["pid"] == holder.pid)["state"] == "Z"
    feed.update(dataclasses.replace(later, error="probe timed out after 10 s"))
    assert feed.document({}, [])["nodes"][0]["error"] == "probe timed out after 10 s"


def test_the_state_is_encoded_node_by_node_into_one_json_document():
    import json
    from console.incident.mirror import encode_state
    doc = {"version": 1, "activity": ['"nodes":[] ]}'], "nodes": [{"name": "a\n[b]"}, {"name": "nodes"}],
           "memory": {"nodes": {}}}
    assert json.loads(encode_state(doc)) == doc
    assert json.loads(encode_state({"nodes": []})) == {"nodes": []}


def test_a_follower_asks_by_touching_a_file_that_goes_stale_and_a_planted_link_is_never_touched(tmp_path):
    from console.incident.mirror import FOLLOWER_FRESH_S, ask_for_state, followed, want_path
    want = want_path(tmp_path / "pair.jsonl")
    assert want == tmp_path / "pair.state.want" and not followed(want)
    ask_for_state(want)
    assert followed(want) and oct(os.stat(want).st_mode & 0o777) == "0o600"
    assert not followed(want, now=time.time() + FOLLOWER_FRESH_S + 5), "a follower gone quiet is gone"
    want.unlink()
    target = tmp_path / "elsewhere"
    target.write_text("keep")
    os.utime(target, (1, 1))
    want.symlink_to(target)
    with pytest.raises(OSError):
        ask_for_state(want)
    assert not followed(want), "a link is no follower"
    assert target.read_text() == "keep" and target.stat().st_mtime == 1


async def test_valid_json_of_the_wrong_types_is_one_line_or_none_never_a_crash(tmp_path):
    """`follow --live` on a state whose values have the wrong types: a field that may be null
    becomes null, anything else refuses the document with one line (it crashed with a traceback)."""
    import json as _json
    snap = await seed_snapshot()
    good = _json.loads(encode_state_doc(snap))
    bad_memory = _json.loads(_json.dumps(good))
    bad_memory["nodes"][0]["gpus"][0]["memory_used_mib"] = "abc"
    state = parse_state(_json.dumps(bad_memory).encode())
    assert state.nodes[0].gpus[0].memory_used_mib is None           # may be null: null
    for mutate in (lambda d: d["actions"].append({"rung": "sigkill", "ts": "nan"}),
                   lambda d: d["nodes"][0]["findings"][0].__setitem__("summary", None),
                   lambda d: d["nodes"][0]["processes"][0].pop("pid"),
                   lambda d: d["nodes"][0]["processes"][0].__setitem__("pid", "72169"),
                   lambda d: d.__setitem__("written_at", "nan")):
        doc = _json.loads(_json.dumps(good))
        mutate(doc)
        with pytest.raises(ValueError) as exc:
            parse_state(_json.dumps(doc).encode())
        assert str(exc.value).startswith("the live state is malformed") and "\n" not in str(exc.value)


def encode_state_doc(snap) -> str:
    from console.incident.mirror import StateFeed
    import tempfile
    feed = StateFeed(tempfile.mktemp(suffix=".state.json"), incident_id="x", by="a@b", interval=1.0)
    feed.update(snap, snap.name)
    return json.dumps(feed.document({}, [], running=True))


async def test_two_driving_consoles_write_a_state_each_and_the_follower_sees_both(tmp_path):
    """Two consoles on one incident (alice's on gpu02, bob's on gpu04) no longer overwrite one
    state file: each writes its own, and the follower's read merges them."""
    from console.incident.mirror import StateFeed, read_states, state_path
    snap = await seed_snapshot()
    incident = tmp_path / "pair.jsonl"
    for who, node, pid in (("alice@bastion", "gpu02", "1111"), ("bob@laptop", "gpu04", "2222")):
        feed = StateFeed(state_path(incident, driver=pid), incident_id="pair", by=who, interval=1.0)
        feed.update(dataclasses.replace(snap, name=node), node)
        feed.write(feed.document({}, [], running=True))
    assert state_path(incident, driver="1111").name == "pair.state.1111.json"
    merged = read_states(state_path(incident))
    assert sorted(n.name for n in merged.nodes) == ["gpu02", "gpu04"]
    assert set(merged.by.split(", ")) == {"alice@bastion", "bob@laptop"}
    with pytest.raises(FileNotFoundError):
        read_states(state_path(tmp_path / "nobody.jsonl"))
