"""Every time-to-free the console measured, kept beside the incidents and read back as
"memory usually comes back within N s here"."""
from __future__ import annotations

import json

import pytest

from console.incident import freetimes
from console.incident.safefiles import UnsafeFile


def test_measurements_are_kept_and_read_back_as_the_90th_percentile(tmp_path):
    for s in (20, 22, 24, 26, 90):
        freetimes.record(tmp_path, "gpu07", "sigkill", s)
    freetimes.record(tmp_path, "gpu07", "job", 3)
    items = freetimes.load(tmp_path)
    assert len(items) == 6 and items[0]["node"] == "gpu07" and items[0]["after"] == "sigkill"
    p90, n = freetimes.usually(items, "sigkill", "gpu07")
    assert n == 5 and 26 <= p90 <= 90
    assert freetimes.said(items, "sigkill", "gpu07").startswith("memory usually comes back within ")
    assert freetimes.said(items, "sigkill", "gpu07").endswith("here (after SIGKILL, 5 times)")
    assert freetimes.usually(items, "job") is None, "fewer than three: nothing said"


def test_a_node_with_too_few_of_its_own_is_told_the_clusters_figure(tmp_path):
    for node in ("gpu01", "gpu02", "gpu03"):
        freetimes.record(tmp_path, node, "job", 4)
    freetimes.record(tmp_path, "gpu09", "job", 100)
    items = freetimes.load(tmp_path)
    assert freetimes.usually(items, "job", "gpu09")[1] == 4          # every node's four
    for _ in range(3):
        freetimes.record(tmp_path, "gpu09", "job", 100)
    assert freetimes.usually(freetimes.load(tmp_path), "job", "gpu09") == (100.0, 4)   # its own, now


def test_garbage_lines_a_link_or_no_directory_never_raise(tmp_path):
    freetimes.record(None, "gpu07", "job", 3)                         # no incident dir: nothing kept
    freetimes.record(tmp_path, "gpu07", "job", float("nan"))
    freetimes.record(tmp_path, "gpu07", "job", -1)
    assert freetimes.load(tmp_path) == []
    path = freetimes.path_in(tmp_path)
    path.write_text('not json\n{"seconds": "x", "after": "job"}\n' + json.dumps(
        {"node": "g", "after": "job", "seconds": 5, "at": 1}) + "\n")
    assert [i["seconds"] for i in freetimes.load(tmp_path)] == [5]
    path.unlink()
    victim = tmp_path / "victim"
    victim.write_text("keep\n")
    path.symlink_to(victim)
    freetimes.record(tmp_path, "gpu07", "job", 3)                     # never through a planted link
    assert victim.read_text() == "keep\n" and freetimes.load(tmp_path) == []
    with pytest.raises(UnsafeFile):
        from console.incident.safefiles import read_own_file
        read_own_file(path, 1000)


def test_the_store_is_no_incident_in_timeline_list(tmp_path):
    from console.incident.timeline import list_incidents, open_incident
    tl = open_incident(tmp_path, "real-one")
    tl.close()
    freetimes.record(tmp_path, "gpu07", "job", 3)
    assert [ident for ident, *_ in list_incidents(tmp_path)] == ["real-one"]
