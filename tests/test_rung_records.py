"""Every action is a record with one home (console/rungs.py): no code outside it branches on a
rung's id or keeps a table keyed by rung ids, so adding an action touches its record, its
planning family, its tests and docs — not a dozen files that each knew a little of it."""
from __future__ import annotations

import re
from pathlib import Path

from console import rungs

CONSOLE = Path(__file__).resolve().parent.parent / "console"
IDS = "|".join(re.escape(i) for i in rungs.BY_ID)
#: `rung == "reset"`, `plan.rung in ("sigterm", …)`, `action_rung(e) != "drain"`, `.then == …`
BRANCH = re.compile(rf'''\b\w*(rung|then)\w*(\([^)]*\))?\s*(==|!=|\bin\b|\bnot in\b)\s*\(?[^#\n]*["']({IDS})["']''')
#: a dict keyed by rung ids: {{"sigterm": …, "sigkill": …}}
TABLE = re.compile(rf'''\{{\s*["']({IDS})["']\s*:[^}}\n]*["']({IDS})["']\s*:''')


def offending(text: str) -> list[str]:
    return [line.strip() for line in text.splitlines() if BRANCH.search(line) or TABLE.search(line)]


def test_no_branch_on_a_rung_id_and_no_table_keyed_by_rung_outside_the_records():
    found = {}
    for path in sorted(CONSOLE.rglob("*.py")):
        if path.name == "rungs.py":
            continue
        bad = offending(path.read_text())
        if bad:
            found[str(path.relative_to(CONSOLE))] = bad
    assert not found, found


def test_the_check_catches_what_it_is_for():
    assert offending('    if plan.rung == "reset" and ok:')
    assert offending('        if rung in ("sigterm", "sigkill"):')
    assert offending('    x = action_rung(e) not in ("drain", "resume")')
    assert offending('LETTER = {"sigterm": "t", "sigkill": "k"}')
    assert not offending('    if ev.action == "reset":')        # the driver's recovery action, not a rung
    assert not offending('    r = rungs.of(plan.rung)')


def test_every_record_is_whole():
    letters = [r.letter for r in rungs.ALL if r.check is None]
    assert len(set(letters)) == len(letters), "two actions, one letter on the memory chart"
    for r in rungs.ALL:
        assert r.after and r.plans and r.deadline_s >= 0
        assert (r.check is None) or not r.signal, f"{r.id}: a check sends no signal"
        assert r.then is None or rungs.known(r.then), f"{r.id}: then names an unknown rung"
    assert rungs.proposable()[0] == "wait", "gentlest first"
    assert rungs.of("a-rung-from-a-later-version") is rungs.CUSTOM


def test_a_hypothesis_s_words_name_their_rungs():
    assert rungs.named_in("SIGKILL of the schedulers frees GPUs 0-7") == {"sigkill", "kill-holders"}
    assert rungs.named_in("the workers exit on SIGTERM") == {"sigterm"}
    assert rungs.named_in("GPU 3 needs a reset") == {"reset"}
    assert rungs.named_in("the memory comes back by itself") == set()
