"""The fleet parser (console/sources/prometheus/parse.py): Prometheus API answers -> nodes.

Pure and fuzzed: whatever the answer holds, the parser returns data or raises ApiError (one
printable line), never anything else."""
import json

import pytest
from hypothesis import given, strategies as st

from console.sources.prometheus.parse import LABEL_MAX, ApiError, build_nodes, parse_vector
from console.sources.prometheus.queries import FREE, USED, UTIL, XID, parse_window, round_queries
from tests.fuzzing import examples


def answer(samples, status="success", **extra):
    return json.dumps({"status": status, "data": {"resultType": "vector", "result": [
        {"metric": m, "value": [1796069514.905, v]} for m, v in samples]}, **extra})


def gpu(metric, host="gpu01", index="0", uuid="GPU-a", **more):
    return {"__name__": metric, "Hostname": host, "gpu": index, "UUID": uuid, **more}


def nodes_from(values, info=(), idle=(), xid=()):
    """build_nodes with the samples of several metrics sorted into its arguments by __name__."""
    by = {m: [(lab, v) for lab, v in values if lab.get("__name__") == m] for m in (USED, FREE, UTIL, XID)}
    return build_nodes(by[USED], by[FREE], by[UTIL], info, idle, [*by[XID], *xid])


def test_values_become_numbers_and_non_finite_ones_none():
    samples, warnings = parse_vector(answer([
        (gpu(USED), "76109"), (gpu(FREE), "NaN"), (gpu(UTIL), "+Inf"), (gpu(XID), "-Inf"),
        (gpu(USED, index="1", uuid="GPU-b"), "1e3"), (gpu(UTIL, index="1", uuid="GPU-b"), "not a number")]))
    assert [v for _, v in samples] == [76109.0, None, None, None, 1000.0, None]
    assert warnings == []


def test_prometheus_error_text_is_one_printable_line():
    body = json.dumps({"status": "error", "errorType": "bad_data",
                       "error": "parse error:\n\x1b[31mred\x1b[0m [markup] \"quoted\""})
    with pytest.raises(ApiError) as exc:
        parse_vector(body)
    text = str(exc.value)
    assert text.startswith("Prometheus error: bad_data: parse error:")
    assert "\n" not in text and "\x1b" not in text and "\\x1b" in text


@pytest.mark.parametrize("body, words", [
    (b"<html>proxy login</html>", "not JSON"),
    (b"[1, 2]", "not a Prometheus API object"),
    (json.dumps({"status": "success", "data": {"resultType": "matrix", "result": []}}), "result type matrix"),
    (b"\xff\xfe garbage", "not JSON"),
])
def test_answers_that_are_not_a_vector_are_one_line(body, words):
    with pytest.raises(ApiError, match=words):
        parse_vector(body)


def test_warnings_are_kept_printable():
    _samples, warnings = parse_vector(answer([], warnings=["partial\nresponse", 5]))
    assert warnings == ["partial response"]


def test_one_gpu_scraped_by_two_jobs_counts_once():
    values = []
    for job in ("dcgm", "dcgm-dup"):
        for metric, v in ((USED, 70000), (FREE, 27000), (UTIL, 0), (XID, 0)):
            values.append(({**gpu(metric), "job": job, "instance": f"{job}:9400"}, float(v)))
    nodes, warnings = nodes_from(values)
    assert len(nodes) == 1 and len(nodes[0].gpus) == 1
    g = nodes[0].gpus[0]
    assert (g.memory_used_mib, g.memory_total_mib, g.utilization_pct) == (70000, 97000, 0)
    assert warnings == []


def test_no_job_or_instance_label_needed_and_nodes_sorted():
    values = [(gpu(USED, host=h, index=str(i), uuid=f"GPU-{h}{i}"), 5.0) for h in ("b2", "a1") for i in (1, 0)]
    values += [(gpu(FREE, host=h, index=str(i), uuid=f"GPU-{h}{i}"), 5.0) for h in ("b2", "a1") for i in (1, 0)]
    nodes, _ = nodes_from(values)
    assert [n.hostname for n in nodes] == ["a1", "b2"]
    assert [g.index for g in nodes[0].gpus] == [0, 1]


def test_mig_instances_add_up_to_their_gpu():
    values = [(gpu(USED, GPU_I_ID="8"), 6.0), (gpu(USED, GPU_I_ID="9"), 4384.0),
              (gpu(FREE, GPU_I_ID="8"), 4000.0), (gpu(FREE, GPU_I_ID="9"), 15000.0),
              (gpu(UTIL, GPU_I_ID="8"), 0.0), (gpu(UTIL, GPU_I_ID="9"), 40.0)]
    (node,), _ = nodes_from(values)
    (g,) = node.gpus
    assert g.memory_used_mib == 4390 and g.memory_total_mib == 4390 + 19000 and g.utilization_pct == 40


def test_fb_used_without_fb_free_leaves_the_total_unknown():
    (node,), warnings = nodes_from([(gpu(USED), 1000.0)])
    assert node.gpus[0].memory_used_mib == 1000 and node.gpus[0].memory_total_mib is None
    assert any("FB_FREE" in w for w in warnings)


def test_series_without_hostname_are_left_out_and_counted():
    nodes, warnings = nodes_from([({"__name__": USED, "gpu": "0"}, 1.0), (gpu(USED), 2.0)])
    assert [n.hostname for n in nodes] == ["gpu01"]
    assert "1 series without a Hostname label left out" in warnings


def test_info_idle_and_xid_answers_land_on_their_gpu():
    values = [(gpu(USED), 71000.0), (gpu(FREE), 26000.0), (gpu(UTIL), 0.0), (gpu(XID), 0.0)]
    info = [({"Hostname": "gpu01", "gpu": "0", "UUID": "GPU-a", "modelName": "NVIDIA H100 80GB HBM3",
              "namespace": "ml", "pod": "train-0"}, 1.0)]
    idle = [({"Hostname": "gpu01", "gpu": "0"}, 70900.0),
            ({"Hostname": "elsewhere", "gpu": "0"}, 1.0)]       # no values: ignored
    xid = [({"Hostname": "gpu01", "gpu": "0"}, 79.0)]
    (node,), _ = nodes_from(values, info, idle, xid)
    g = node.gpus[0]
    assert (g.model, g.pod, g.idle_held_mib, g.last_xid) == ("NVIDIA H100 80GB HBM3", "ml/train-0", 70900, 79)


def test_hostile_label_values_are_kept_as_data_and_cut():
    host = 'evil"\n[bold red]x[/]\x1b]0;pwn\x07' + "y" * 1000
    (node,), _ = nodes_from([(gpu(USED, host=host), 1.0)])
    assert node.hostname == host[:LABEL_MAX]          # cut; the UI renders it literally, never interpreted


def test_round_queries_assume_no_job_or_instance():
    for q in round_queries(5).values():
        assert "job" not in q and "instance" not in q
    assert "5000ms" in round_queries(5)["idle"]


def test_a_failed_xid_query_leaves_xid_unknown_and_a_quiet_one_says_none():
    (node,), _ = build_nodes([(gpu(USED), 1.0)], xid=None)
    assert node.gpus[0].last_xid is None
    (node,), _ = build_nodes([(gpu(USED), 1.0)], xid=[])
    assert node.gpus[0].last_xid == 0


def test_mig_and_whole_gpu_answers_for_one_gpu_merge():
    (node,), _ = build_nodes([(gpu(USED), 5.0), (gpu(USED, GPU_I_ID="1"), 7.0), (gpu(USED), 6.0)])
    assert node.gpus[0].memory_used_mib == 13


@pytest.mark.parametrize("text, seconds", [("10m", 600), ("5s", 5), ("1.5h", 5400), ("600", 600), ("1d", 86400)])
def test_window_words(text, seconds):
    assert parse_window(text) == seconds


@pytest.mark.parametrize("text", ["", "5x", "-5s", "0s", "8d", "nan", "1e9"])
def test_bad_windows_are_one_line(text):
    with pytest.raises(ValueError) as exc:
        parse_window(text)
    assert "\n" not in str(exc.value)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(max_size=20),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=10), children, max_size=4),
    max_leaves=30)


@examples(200)
@given(json_values)
def test_any_json_is_data_or_one_line(doc):
    try:
        samples, warnings = parse_vector(json.dumps(doc))
    except ApiError as exc:
        assert "\n" not in str(exc)
    else:
        assert isinstance(samples, list) and all(isinstance(w, str) for w in warnings)


label_text = st.text(max_size=12) | st.sampled_from(["", "0", "1", "7", "GPU-a", "gpu01", "NaN"])
series = st.tuples(
    st.dictionaries(st.sampled_from(["__name__", "Hostname", "gpu", "UUID", "GPU_I_ID", "modelName", "pod",
                                     "namespace", "job"]),
                    label_text | st.sampled_from([USED, FREE, UTIL, XID]), max_size=8),
    st.none() | st.floats(allow_nan=False, allow_infinity=False))


@examples(200)
@given(st.lists(series, max_size=30), st.lists(series, max_size=5), st.lists(series, max_size=5),
       st.lists(series, max_size=5))
def test_any_samples_build_nodes_without_crashing(values, info, idle, xid):
    nodes, warnings = nodes_from(values, info, idle, xid)
    hosts = [n.hostname for n in nodes]
    assert hosts == sorted(hosts) and len(set(hosts)) == len(hosts) and all(hosts)
    for n in nodes:
        assert len(n.gpus) >= 1
        for g in n.gpus:
            assert g.last_xid is None or g.last_xid >= 0
    assert all("\n" not in w for w in warnings)


def test_idle_ends_with_this_rounds_memory_or_use_whatever_an_earlier_idle_answer_said():
    """An idle answer may be a round old (the window queries are asked every tenth of the
    window): memory back under the floor, or any use now, ends "idle" at once."""
    idle = [({"Hostname": h, "gpu": "0"}, 70900.0) for h in ("held", "freed", "busy")]
    values = [(gpu(USED, "held"), 70000.0), (gpu(UTIL, "held"), 0.0),
              (gpu(USED, "freed"), 300.0), (gpu(UTIL, "freed"), 0.0),
              (gpu(USED, "busy"), 70900.0), (gpu(UTIL, "busy"), 35.0)]
    nodes, _ = nodes_from(values, idle=idle)
    held = {n.hostname: n.gpus[0].idle_held_mib for n in nodes}
    assert held == {"held": 70000, "freed": None, "busy": None}


def test_the_total_answer_gives_the_memory_total_without_fb_free():
    values = [(gpu(USED), 71000.0), (gpu(UTIL), 0.0)]
    total = [({"Hostname": "gpu01", "gpu": "0"}, 97887.0)]
    by = {m: [(lab, v) for lab, v in values if lab.get("__name__") == m] for m in (USED, UTIL)}
    (node,), warnings = build_nodes(by[USED], (), by[UTIL], total=total)
    assert node.gpus[0].memory_total_mib == 97887 and not warnings
    (node,), warnings = build_nodes(by[USED], (), by[UTIL])
    assert node.gpus[0].memory_total_mib is None and "total is unknown" in warnings[0]
