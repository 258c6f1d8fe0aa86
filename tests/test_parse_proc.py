"""The process sections' parsers (console/sources/parse_proc.py): framing no process can forge.

Properties (hypothesis): any comm a task can have (15 characters, newlines and parentheses
included) reads back exactly from the concatenated /proc/*/stat stream; no text makes a
parser raise or yield two entries for one PID. Parse time of a big probe is printed (run
with -s), never asserted: that one is marked heavy (about 2 s).
"""
from __future__ import annotations

import time

import pytest
from hypothesis import given
from hypothesis import strategies as st

from console import probe
from console.bench.synth import big_probe_text
from console.sources import parse
from console.sources.parse_proc import parse_dstate, parse_fds, parse_pidns, parse_ps, parse_stat
from tests.fuzzing import examples

MARK = "::gi-proc::"


def record(pid: int, comm: str, state: str = "S", ppid: int = 1, threads: int = 1, ticks: int = 500) -> str:
    """A /proc/PID/stat record with the 52 fields of a current kernel."""
    rest = " ".join(["0"] * 30)
    return (f"{pid} ({comm}) {state} {ppid} {pid} {pid} 0 -1 4194560 0 0 0 0 0 0 0 0 20 0 {threads} 0 "
            f"{ticks} 1000 10 18446744073709551615 {rest}\n")


# what a task may put in its comm: any character but NUL, shaped like the records around it
comm_chars = st.one_of(st.sampled_from(list("\n()  0123456789SDZRx-:/\t\r\x1c\x85\u2028é")),
                       st.characters(blacklist_characters="\0", blacklist_categories=("Cs",)))
comms = st.lists(comm_chars, max_size=15).map("".join)
stat_entries = st.lists(st.tuples(st.integers(1, 4_194_304), comms, st.sampled_from("RSDZTIX"),
                                  st.integers(0, 4_194_304), st.integers(1, 500), st.integers(0, 10**12)),
                        max_size=12, unique_by=lambda e: e[0])


@examples(250)
@given(stat_entries)
def test_every_comm_reads_back_exactly_from_the_stream(entries):
    text = "".join(record(pid, comm, state, ppid, threads, ticks)
                   for pid, comm, state, ppid, threads, ticks in entries)
    got = parse_stat(text)
    assert {pid: (s.comm, s.state, s.ppid, s.num_threads, s.start_ticks) for pid, s in got.items()} == {
        pid: (comm, state, ppid, threads, ticks) for pid, comm, state, ppid, threads, ticks in entries}


def test_kernel_thread_names_longer_than_15_characters_read_back():
    names = ["kworker/u16:2-events_unbound", "irq/127-nvidia", "kworker/0:1H-kblockd", "x" * 63]
    text = "".join(record(10 + i, name) for i, name in enumerate(names))
    assert [s.comm for s in parse_stat(text).values()] == names


def test_a_comm_naming_another_pid_is_its_own_record_wherever_the_victim_is():
    victim = record(4242, "sleep", ticks=777)
    for forger_pid in (100, 9999):          # listed before and after the victim
        forger = record(forger_pid, "a\n4242 (fake", ticks=888)
        for text in (forger + victim, victim + forger):
            got = parse_stat(text)
            assert (got[4242].comm, got[4242].start_ticks) == ("sleep", 777)
            assert (got[forger_pid].comm, got[forger_pid].start_ticks) == ("a\n4242 (fake", 888)


def test_output_cut_mid_record_keeps_the_whole_records():
    text = record(1, "init") + record(2, "kthreadd")
    got = parse_stat(text[:-40])
    assert list(got) == [1]


def test_ps_lines_split_only_at_newlines_and_a_pid_twice_is_dropped():
    text = ("  100 root     python3 -c x\x85 200 root fake\n"
            "  300 alice    a\u2028b\n"
            "  400 root     one\n"
            "  400 root     two\n"
            "  500 bob\n")
    assert parse_ps(text) == {100: ("root", "python3 -c x\x85 200 root fake"), 300: ("alice", "a\u2028b"),
                              500: ("bob", "")}


def test_fd_and_dstate_records_are_nul_terminated_and_a_cut_record_is_not_one():
    fds = "/proc/7/fd /tmp/x/nvidia\n/proc/1/fd /dev/nvidia0\0/proc/8/fd /dev/nvidia1\0/proc/9/fd /dev/nv"
    assert parse_fds(fds) == {7: ("/tmp/x/nvidia\n/proc/1/fd /dev/nvidia0",), 8: ("/dev/nvidia1",)}
    d = record(77, "cuda\n78 (x", "D").rstrip("\n")
    dstate = f"/proc/76/task/77 uvm_va_space_destroy {d}\0/proc/76/task/77 - {d}\0"
    got = parse_dstate(dstate)
    assert list(got) == [76] and [(t.tid, t.wchan, t.name) for t in got[76]] == [
        (77, "uvm_va_space_destroy", "cuda\n78 (x")]
    assert parse_pidns("7 pid:[1]\n7 pid:[2]\nx y\n") == {7: "pid:[1]"}


# ---------------------------------------------------------------- fuzz: never raises, one entry per PID

fragment = st.one_of(
    st.sampled_from(["\n", "\0", " ", "(", ")", ") S ", " (", "1", "42", "-1", "/proc/42/fd", "/proc/42/task/43",
                     "/dev/nvidia0", "pid:[4026531836]", "root", MARK, " begin stat\n", " end stat 0\n",
                     " begin ps\n", " begin fds\n", " begin dstate\n", "9" * 50, "\u00b2", "\u2028"]),
    comms.map(lambda c: record(42, c)),
    st.text(max_size=10),
)
node_text = st.lists(fragment, max_size=40).map("".join)


@examples(250)
@given(node_text)
def test_process_parsers_never_raise(text):
    for pid, s in parse_stat(text).items():
        assert pid == s.pid and isinstance(s.ppid, int)
    parse_ps(text)
    parse_ps(text, user=False)
    for pid, threads in parse_dstate(text).items():
        assert len({t.tid for t in threads}) == len(threads)
    parse_fds(text)
    parse_pidns(text)


@examples(250)
@given(st.dictionaries(st.sampled_from(["stat", "ps", "dstate", "fds", "pidns"]), node_text))
def test_a_probe_never_lists_a_pid_twice(bodies):
    text = "".join(f"{MARK} begin {name}\n{body}{MARK} end {name} 0\n" for name, body in bodies.items())
    snap = parse._parse_probe("n", text, MARK, 1.0, None)
    pids = [p.pid for p in snap.processes]
    assert len(pids) == len(set(pids))


@pytest.mark.heavy
def test_parse_time_of_a_big_probe_is_printed():
    mark = probe.new_mark()
    for n in (2000, 32000):
        text = big_probe_text(mark, processes=n)
        t0 = time.perf_counter()
        snap = parse.parse_probe("big", text, mark, taken_at=0.0)
        ms = (time.perf_counter() - t0) * 1000
        assert snap.error is None and len(snap.processes) == n
        print(f"parse_probe: {n} processes, {len(text) / 2**20:.1f} MiB: {ms:.0f} ms")
