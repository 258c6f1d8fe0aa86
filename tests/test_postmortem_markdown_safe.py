"""A GPU user cannot put a live link, an image or HTML into the published postmortem through a
process name, a command line or an output outside a fence (issue 31 item 13). Rendered with a
real CommonMark renderer with GitHub's linkify on (markdown-it-py, as a viewer would)."""
from __future__ import annotations

from markdown_it import MarkdownIt

from console.incident.export import as_markdown
from console.incident.timeline import Timeline, load
from console.textsafe import markdown_text

HOSTILE = ("[urgent: click](https://evil.example/x) ![i](https://evil.example/p.png) <img src=x onerror=alert(1)> "
           "www.evil.example <https://evil.example> **bold** `code` \\[esc]")


def render(md: str) -> str:
    return MarkdownIt("commonmark", {"linkify": True, "html": True}).enable(["table", "linkify"]).render(md)


def test_hostile_names_render_as_their_own_words_and_nothing_else(tmp_path):
    tl = Timeline(tmp_path / "x.jsonl", by="ops@console")
    tl.append("observation", f"first reading of gpu07: GPU 0 holds 70.0 GiB; {HOSTILE}", node="gpu07")
    h = tl.append("hypothesis", f"{HOSTILE} holds GPU 0", node="gpu07")
    tl.append("action", f"SIGTERM 1 process ({HOSTILE})", node="gpu07", hypothesis=h.seq,
              command="kill -s TERM 4242")
    tl.append("note", f"# {HOSTILE}", node="gpu07")
    tl.close()
    html = render(as_markdown(load(tmp_path / "x.jsonl")[0], incident_id="x"))
    assert "evil.example" in html                         # the words are there ...
    assert "<a " not in html and "<img" not in html       # ... and link or load nothing
    assert "<strong>bold" not in html and "<code>code" not in html
    assert "<h1># " not in html and "<h1>[urgent" not in html


def test_markdown_text_keeps_ordinary_words_readable():
    assert markdown_text("sglang::scheduler_TP3 holds GPUs 0-7 (PID 72170)") == \
        "sglang::scheduler_TP3 holds GPUs 0-7 (PID 72170)"
    assert render(markdown_text(HOSTILE)).count("<a ") == 0


def test_hostile_words_in_the_findings_facts_and_workload_link_nothing(tmp_path):
    """What the session records of a node (console/session/node_record.py): a finding's summary
    and evidence, the GPU model, the holders' owner and commands, the launcher's command."""
    tl = Timeline(tmp_path / "y.jsonl", by=f"ops@{HOSTILE}")
    tl.append("note", f"gate: gpu07: {HOSTILE}")
    tl.append("observation", "first reading of gpu07: GPU 0 holds 70.0 GiB", node="gpu07",
              gpu_memory_before={"0": 71680},
              facts={"driver": HOSTILE, "kernel": HOSTILE, "gpus": [{"model": HOSTILE, "count": 1}]},
              workload=[{"user": HOSTILE, "job": HOSTILE, "container": HOSTILE, "commands": [HOSTILE],
                         "pids": 1, "parent": {"pid": 1, "user": HOSTILE, "command": HOSTILE}}],
              findings=[{"kind": "zombie", "severity": "critical", "summary": f"1 {HOSTILE} still holds 70.0 GiB",
                         "pids": [4242], "npids": 1, "gpus": [0], "evidence": {"wchan": HOSTILE, "names": [HOSTILE]}}])
    tl.close()
    md = as_markdown(load(tmp_path / "y.jsonl")[0], incident_id="y")
    assert "## What the console found" in md and "## The node and the workload" in md
    html = render(md)
    assert "evil.example" in html
    assert "<a " not in html and "<img" not in html and "<strong>bold" not in html
