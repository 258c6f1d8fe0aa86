"""Hypothesis fuzz of the evidence sections' parsers (probe.py: exe, pend, pci; the stat record's
CPU times): any text gives values, never an exception, and nothing a process controls speaks for
another PID.
"""
from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from console.model import PciGpu
from console.sources import parse
from console.sources.parse_proc import parse_exe, parse_pending, parse_stat, parse_stat_line
from tests.fuzzing import examples

fuzz = examples(250)

pid = st.integers(1, 4_194_304).map(str)
junk = st.text(max_size=16)
hexmask = st.one_of(st.sampled_from(["0000000000000000", "0000000000000100", "fffffffffffffeff", "100", ""]),
                    st.text(alphabet="0123456789abcdefABCDEFxg -", max_size=40))

exe_record = st.one_of(
    st.builds(lambda p, t: f"/proc/{p} {t}\0", pid, st.text(max_size=40)),
    st.builds(lambda t: f"{t}\0", junk),
    junk,
)
pend_line = st.one_of(
    st.builds(lambda p, f, m: f"/proc/{p}/status:{f}:\t{m}\n", pid,
              st.sampled_from(["SigPnd", "ShdPnd", "SigBlk", "Name", "sigpnd", ""]), hexmask),
    st.builds(lambda t: f"{t}\n", junk),
)
octet = st.one_of(st.sampled_from(["ff", "de", "10", "FF", "0", "fff", "zz"]), st.text(max_size=3))
pci_line = st.one_of(
    st.builds(lambda b, os: f"{b} {' '.join(os)}\n",
              st.sampled_from(["0000:18:00.0", "0000:2a:00.0", "00000000:3B:00.0", "18:00.0", "x", ""]),
              st.lists(octet, max_size=6)),
    st.builds(lambda t: f"{t}\n", junk),
)
pci_text = st.builds(lambda head, lines: head + "".join(lines),
                     st.sampled_from(["gpus\n", "none\n", "", "gpus", "GPUS\n"]), st.lists(pci_line, max_size=10))


@fuzz
@given(st.lists(exe_record, max_size=12).map("".join))
def test_exe_records_give_one_executable_per_pid_from_the_path_alone(text):
    out = parse_exe(text)
    for p, exe in out.items():
        assert isinstance(p, int) and 0 < p < 10 ** 10 and isinstance(exe, str) and exe
        # the PID is the one of the record's path: the first record of it
        assert f"/proc/{p} {exe}\0" in text


def test_an_executable_whose_path_holds_a_newline_and_a_fake_record_stays_its_own():
    text = "/proc/10 /tmp/a\n/proc/11 /usr/bin/forged\0/proc/11 /usr/bin/python3.10\0/proc/12 \0"
    assert parse_exe(text) == {10: "/tmp/a\n/proc/11 /usr/bin/forged", 11: "/usr/bin/python3.10"}


@fuzz
@given(st.lists(pend_line, max_size=12).map("".join))
def test_pending_masks_never_raise_and_say_true_only_for_sigkill(text):
    out = parse_pending(text)
    for p, pending in out.items():
        assert isinstance(p, int) and isinstance(pending, bool)
        if pending:
            assert any(line.startswith(f"/proc/{p}/status:") for line in text.split("\n"))


def test_sigkill_is_bit_8_of_either_mask_and_one_clean_mask_alone_is_unknown():
    text = ("/proc/5/status:SigPnd:\t0000000000000000\n/proc/5/status:ShdPnd:\t0000000000000100\n"
            "/proc/6/status:SigPnd:\t0000000000000100\n"
            "/proc/7/status:SigPnd:\t0000000000000000\n/proc/7/status:ShdPnd:\t00000000000000ff\n"
            "/proc/8/status:SigPnd:\t0000000000000000\n"
            "/proc/9/status:Name:\tSigPnd:\t0000000000000100\n")
    assert parse_pending(text) == {5: True, 6: True, 7: False}


@fuzz
@given(pci_text)
def test_pci_section_never_raises_and_reads_only_bus_ids(text):
    out = parse.parse_pci(text)
    if not text.startswith("gpus"):
        assert out is None or text.split("\n", 1)[0].strip() == "gpus"
    for g in out or ():
        assert isinstance(g, PciGpu) and g.present in (True, False, None)
        assert g.bus_id.count(":") == 2 and "." in g.bus_id
    assert out is None or len({g.bus_id for g in out}) == len(out)


def test_pci_section_present_gone_unreadable_and_absent():
    text = "gpus\n0000:18:00.0  de 10 b5 2b\n0000:2a:00.0  ff ff ff ff\n0000:3b:00.0 \nnot-a-bus de 10\n"
    assert parse.parse_pci(text) == (PciGpu("0000:18:00.0", True), PciGpu("0000:2a:00.0", False),
                                     PciGpu("0000:3b:00.0", None))
    assert parse.parse_pci("gpus\n") == ()
    assert parse.parse_pci("none\n") is None and parse.parse_pci("") is None


@fuzz
@given(st.integers(0, 2 ** 70), st.integers(0, 2 ** 70), st.sampled_from(["", "-"]))
def test_stat_cpu_times_are_ticks_or_none(utime, stime, sign):
    fields = ["S", "1", "1", "1", "0", "-1", "4194560", "0", "0", "0", "0", f"{sign}{utime}", str(stime),
              "0", "0", "20", "0", "1", "0", "5000", "1000", "10"]
    record = "42 (w) " + " ".join(fields)
    for st_line in (parse_stat_line(record), parse_stat(record + "\n")[42]):
        assert st_line is not None
        if sign or utime > 10 ** 40:
            assert st_line.utime is None and st_line.cpu_ticks is None
        else:
            assert st_line.utime == utime and st_line.cpu_ticks == (utime + stime if stime <= 10 ** 40 else None)
