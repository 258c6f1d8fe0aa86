"""Hypothesis fuzz of the parsers the real-output corpus brought in: any text gives values, never an
exception; mutated real lines still give well-formed values."""
from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from tests.fuzzing import examples
from tests.real_fixtures import load, names
from console.actions.reset_output import ResetOutcome, parse_reset_output, reset_outcome_line
from console.checks.parse import parse_kernel_log
from console.diagnosis.xid import fallen_off_bus, firmware_failures, recovery_action
from console.sources.parse import parse_gpu_query, unreachable_gpus
from console.sources.parse_pmon import parse_pmon
from console.sources.parse_repair import parse_memory_repair

REAL_LINES = sorted({ln for n in names() for ln in load(n).body.splitlines()})
fragment = st.one_of(st.sampled_from(REAL_LINES), st.sampled_from(["\n", ":", " ", ".", "GPU ", "0000:", "\x00"]),
                     st.text(max_size=16))
node_text = st.lists(fragment, max_size=30).map("".join)
rcs = st.one_of(st.none(), st.integers(min_value=-300, max_value=300))
fuzz = examples(250)


@fuzz
@given(node_text, rcs)
def test_reset_output_never_raises_and_names_buses_it_saw(text, rc):
    outs = parse_reset_output(text, rc)
    assert all(isinstance(o, ResetOutcome) for o in outs)
    assert all(o.bus_id is None or o.bus_id in text for o in outs)
    assert all(o.reset or o.reason for o in outs)
    assert isinstance(reset_outcome_line(outs, rc), str)


@fuzz
@given(node_text)
def test_unreachable_and_fallen_off_never_raise(text):
    for bus, why in unreachable_gpus(text):
        assert bus in text and "\n" not in why
    assert all(bus in text for bus in fallen_off_bus(text))
    gp = parse_gpu_query(text, None)
    assert gp.error is None or "\n" not in gp.error
    assert isinstance(parse_kernel_log(text)["fallen_off_bus"], list)
    for fail in firmware_failures(text.splitlines()):
        assert (fail.bus is None or fail.bus in text) and all(ln in text for ln in fail.lines)
    for bus, repair in parse_memory_repair(text).items():
        assert (bus is None or bus in text) and repair.remap_pending in (None, True, False)
    pmon = parse_pmon(text)             # real lines (the pmon refusal among them), mutated
    assert all(str(pid) in text and all(v is None or 0 <= v <= 100 for v in per.values())
               for pid, per in pmon.sm.items())


@fuzz
@given(st.text(max_size=40))
def test_recovery_action_words_always_map_to_an_action(words):
    action, severity = recovery_action(words)
    assert action in ("none", "app", "reset", "drain", "reboot") and severity in ("info", "high", "critical")
