"""Hypotheses, checks and verdicts in the timeline, as the console's h/w/c/v keys record them."""
import pytest

from console.incident import timeline
from console.checks.registry import CheckResult
from console.incident.log import IncidentLog


def reread(freed: bool) -> CheckResult:
    before = {"0": 76109, "1": 76113}
    after = {"0": 4, "1": 76113} if freed else dict(before)
    return CheckResult(name="wait-and-reread", node="demo",
                       command="nvidia-smi --query-gpu=index,memory.used --format=csv,noheader; sleep 5; "
                               "echo ::after::; nvidia-smi --query-gpu=index,memory.used --format=csv,noheader",
                       rc=0, summary="memory came back" if freed else "no memory came back in 5 s",
                       data={"before": before, "after": after,
                             "freed_total_mib": 76105 if freed else 0}, raw="0, 76109 MiB")


@pytest.mark.parametrize("freed, verdict", [(False, "refuted"), (True, "confirmed")])
def test_patience_hypothesis_is_judged_by_the_wait(incident_dir, freed, verdict):
    log = IncidentLog(timeline.open_incident(incident_dir, "p"))
    h = log.hypothesis("demo", "the memory just needs more time to be released")
    entry = log.record_check(reread(freed))
    assert entry.hypothesis == h.seq and entry.gpu_memory_before == {"0": 76109, "1": 76113}
    assert log.suggest_verdict()[0] == verdict
    v = log.verdict("demo", verdict)
    assert v.hypothesis == h.seq and log.open_hypothesis() is None


def test_other_hypotheses_stay_inconclusive_until_the_person_says(incident_dir):
    log = IncidentLog(timeline.open_incident(incident_dir, "o"))
    assert log.suggest_verdict() == ("inconclusive", "no open hypothesis")
    with pytest.raises(ValueError):
        log.verdict("demo", "confirmed")
    log.hypothesis("demo", "flashinfer is incompatible with SM120 MLA")
    assert log.suggest_verdict()[0] == "inconclusive"
    log.record_check(reread(False))
    assert log.suggest_verdict()[0] == "inconclusive"


def test_an_open_hypothesis_survives_a_restart_of_the_console(incident_dir):
    tl = timeline.open_incident(incident_dir, "r")
    IncidentLog(tl).hypothesis("demo", "pinned buffers need time")
    tl.close()
    again = IncidentLog(timeline.open_incident(incident_dir, "r"))     # gpu-incident --incident r
    assert again.open_hypothesis().text == "pinned buffers need time"


def test_a_full_disk_is_reported_not_raised(incident_dir, monkeypatch):
    import os
    errors = []
    log = IncidentLog(timeline.open_incident(incident_dir, "f"), on_error=errors.append)

    def full(fd, data):
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(os, "write", full)
    assert log.note("demo", "written to a full disk") is None
    assert errors == ["timeline write failed (No space left on device): note not recorded"]
