"""Targets on the command line: destinations, Slurm hostlists, nodes files, source kinds."""
from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.fuzzing import examples
from console.sources.ssh.options import SshOptions, format_destination, parse_destination
from console.sources.targets import MAX_TARGETS, expand_targets, make_source


@pytest.mark.parametrize("text, expected", [
    ("gpu01", (None, "gpu01", None)),
    ("root@gpu01", ("root", "gpu01", None)),
    ("root@gpu01:2222", ("root", "gpu01", 2222)),
    ("10.1.230.174", (None, "10.1.230.174", None)),
    ("[::1]:22", (None, "::1", 22)),
    ("ops@[fe80::1]", ("ops", "fe80::1", None)),
    ("::1", (None, "::1", None)),
    ("ssh://ops@gpu7:2200", ("ops", "gpu7", 2200)),
    ("first.last@corp@gpu01", ("first.last@corp", "gpu01", None)),
])
def test_parse_destination(text, expected):
    assert parse_destination(text) == expected


@pytest.mark.parametrize("text, words", [
    ("", "empty"), ("gpu 01", "spaces"), ("gpu01:0", "port"), ("gpu01:65536", "port"),
    ("gpu01:ssh", "port"), ("@gpu01", "user"), ("[::1", "]"), ("[::1]x", "after"), ("root@", "no host"),
])
def test_bad_destination_says_what_is_wrong(text, words):
    with pytest.raises(ValueError) as err:
        parse_destination(text)
    assert words in str(err.value) and "\n" not in str(err.value)


def test_hostlists_keep_user_and_port_and_order():
    assert expand_targets(["gpu[01-03]"]) == ["gpu01", "gpu02", "gpu03"]
    assert expand_targets(["ops@gpu[09-10]:2222", "demo", "local"]) == [
        "ops@gpu09:2222", "ops@gpu10:2222", "demo", "local"]
    assert expand_targets(["gpu[1-2],login1"]) == ["gpu1", "gpu2", "login1"]
    assert expand_targets(["demo:slow-teardown", "[::1]:22", "root@127.0.0.1:2222"]) == [
        "demo:slow-teardown", "[::1]:22", "root@127.0.0.1:2222"]


def test_duplicates_are_dropped_and_nothing_means_local():
    assert expand_targets(["gpu[01-02]", "gpu02", "gpu01"]) == ["gpu01", "gpu02"]
    assert expand_targets([]) == ["local"]


def test_nodes_file_with_comments(tmp_path):
    f = tmp_path / "nodes"
    f.write_text("# rack 4\ngpu[01-02]   # the H200s\n\n  root@gpu10:2222\nlogin1 login2\n")
    assert expand_targets(["first"], str(f)) == ["first", "gpu01", "gpu02", "root@gpu10:2222",
                                                 "login1", "login2"]


@pytest.mark.parametrize("targets, words", [
    (["gpu[01-"], "gpu[01-"), (["gpu01-]"], "gpu01-]"), (["gpu[05-01]"], "gpu[05-01]"),
    ([f"gpu[1-{MAX_TARGETS + 1}]"], "at most"), (["gpu01:http"], "port"),
])
def test_bad_hostlist_is_one_clear_line(targets, words):
    with pytest.raises(ValueError) as err:
        expand_targets(targets)
    assert words in str(err.value) and "\n" not in str(err.value)


def test_missing_or_empty_nodes_file(tmp_path):
    with pytest.raises(ValueError, match="cannot read nodes file .*nope: No such file"):
        expand_targets([], str(tmp_path / "nope"))
    (tmp_path / "empty").write_text("# nothing here\n\n")
    with pytest.raises(ValueError, match="lists no targets"):
        expand_targets([], str(tmp_path / "empty"))


@examples(300)
@given(st.lists(st.text(alphabet="ab01[]-,:@.# \t\n:", max_size=14), max_size=4))
def test_any_target_text_expands_or_fails_cleanly(words):
    try:
        out = expand_targets(words)
    except ValueError as exc:
        assert str(exc) and "\n" not in str(exc)
    else:
        assert out and all(isinstance(t, str) and t for t in out)


@given(st.sampled_from([None, "root", "first.last"]),
       st.sampled_from(["gpu01", "10.0.0.7", "::1", "fe80::1:2"]),
       st.one_of(st.none(), st.integers(1, 65535)))
def test_format_destination_round_trips(user, host, port):
    assert parse_destination(format_destination(user, host, port)) == (user, host, port)


def test_ssh_options_take_one_identity_or_many():
    assert SshOptions(identity="k").identity == ("k",)
    assert SshOptions(identity=["a", "b"]).identity == ("a", "b")
    with pytest.raises(ValueError):
        SshOptions(max_channels=0)


def test_make_source_picks_the_kind():
    src = make_source("ops@gpu07:2222", ssh=SshOptions(), device_glob="/dev/nvidia*", probe_timeout=4)
    assert (src.kind, src.name, src.probe_timeout) == ("ssh", "ops@gpu07:2222", 4)
    assert (src.user, src.host, src.port) == ("ops", "gpu07", 2222)
    local = make_source("local", ssh=SshOptions(), device_glob="/tmp/fake-nvidia*", probe_timeout=4)
    assert local.kind == "local" and local.name == "local"
    with pytest.raises(ValueError, match="port"):
        make_source("gpu07:http", ssh=SshOptions(), device_glob="/dev/nvidia*", probe_timeout=4)


def test_make_source_demo_scenarios():
    pytest.importorskip("console.sources.sim")
    demo = make_source("demo", ssh=SshOptions(), device_glob="/dev/nvidia*", probe_timeout=4)
    assert demo.kind == "sim" and demo.name == "demo"
    named = make_source("demo:slow-teardown", ssh=SshOptions(), device_glob="/dev/nvidia*", probe_timeout=4)
    assert named.name == "demo:slow-teardown"
    with pytest.raises(ValueError, match="no-such-scenario"):
        make_source("demo:no-such-scenario", ssh=SshOptions(), device_glob="/dev/nvidia*", probe_timeout=4)


def test_a_huge_hostlist_is_refused_before_it_is_built():
    """Forty ranges of 100,000 names (526 MB and 5 s before exit 2, before): refused at once."""
    import time
    from console.sources.targets import MAX_TARGETS, expand_targets
    words = [f"r{i}n[1-100000]" for i in range(40)]
    t0 = time.process_time()
    with pytest.raises(ValueError, match=f"expands to more than {MAX_TARGETS} nodes"):
        expand_targets(words)
    with pytest.raises(ValueError, match=f"at most {MAX_TARGETS}"):
        expand_targets([",".join(f"r{i}n[1-4000]" for i in range(40))])
    assert expand_targets(["gpu[01-03]"]) == ["gpu01", "gpu02", "gpu03"]
    assert time.process_time() - t0 < 60          # a bound for a hang, not a timing goal
