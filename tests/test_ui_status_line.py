"""The status line's text, built without an App (console/ui/status_line.py)."""
from __future__ import annotations

import dataclasses

from console.model import NodeSnapshot
from console.ui.status_line import StatusFacts, status_text, with_mode_and_incident


def _snap(name: str, **kw) -> NodeSnapshot:
    return dataclasses.replace(NodeSnapshot(name=name, taken_at=0.0), **kw)


def test_one_node_says_what_it_holds_its_first_warning_and_where_the_rest_are():
    snap = _snap("gpu[bold]01", warnings=("dmesg not permitted " + "x" * 80, "second"))
    line = status_text(StatusFacts(nodes=["gpu[bold]01"], snapshots={snap.name: snap}, viewing=snap.name,
                                   multi_node=False, stale_s=None, proc_filter="py", tagged=2)).plain
    assert line.startswith("gpu[bold]01  0 GPUs")                 # the name as the node gave it
    assert "⚠ dmesg not permitted" in line and "(m: 2 whole)" in line
    assert "filter: py" in line and "2 tagged" in line


def test_several_nodes_count_the_failing_and_the_connecting_and_say_a_stale_one():
    failing = _snap("b", error="connection refused")
    facts = StatusFacts(nodes=["a", "b", "c"], snapshots={"a": _snap("a"), "b": failing}, viewing="a",
                        multi_node=True, stale_s=45.2)
    line = status_text(facts).plain
    assert line.startswith("3 nodes  1 failing  1 connecting  · viewing a ⚠ last reading 45 s ago")
    stuck = status_text(dataclasses.replace(facts, multi_node=False)).plain
    assert "the poll stopped returning" in stuck


def test_the_incident_id_stays_at_the_right_edge_and_the_line_is_cut_before_it():
    line = status_text(StatusFacts(nodes=["n"], snapshots={}, viewing="n" * 30, multi_node=False, stale_s=None,
                                   proc_filter="f" * 30, tagged=3))
    out = with_mode_and_incident(line, "READ-ONLY: destructive actions refused", "2026-12-02-seed", 80)
    assert out.cell_len == 78 and out.plain.endswith("2026-12-02-seed")
    assert "…" in out.plain                                       # cut, the ID whole
    roomy = with_mode_and_incident(status_text(StatusFacts(nodes=["n"], snapshots={}, viewing="n", multi_node=False,
                                                           stale_s=None)), "", "x1", 80)
    assert roomy.plain.endswith("incident x1") and roomy.cell_len == 78
