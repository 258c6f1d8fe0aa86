"""The Xid table follows NVIDIA's Xid catalogue (its "Resolution Bucket (Immediate Action)" column),
and Xid 154 follows the recovery action its line names; the diagnosis turns both into next steps."""
from __future__ import annotations

import pytest

from console.diagnosis import diagnose, xid
from console.diagnosis.xid import CATALOG_URL, XIDS, parse_xid_line, recovery_action
from test_diagnose_builders import snap


def test_the_table_cites_the_catalogue():
    assert CATALOG_URL == "https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html"
    assert CATALOG_URL in xid.__doc__
    assert all(info.catalog for info in XIDS.values())


@pytest.mark.parametrize("codes, action, bucket", [
    ((79,), "reboot", "RESTART_BM"),
    ((62, 64, 95, 119, 120, 143), "reset", "RESET_GPU"),
    ((13, 31, 94), "app", "RESTART_APP"),
    ((43, 63, 92), "none", "IGNORE"),
    ((48,), "reset", "WORKFLOW_XID_48"),
    ((74,), "reset", "WORKFLOW_NVLINK_ERR"),
    ((154,), "reset", "XID_154_EVAL"),
])
def test_catalogue_buckets(codes, action, bucket):
    for code in codes:
        assert (XIDS[code].action, XIDS[code].catalog) == (action, bucket), code


def test_workflows_say_what_to_check_before_the_reset():
    assert "ROW_REMAPPER" in XIDS[48].workflow and "ECC" in XIDS[48].workflow and "drain" in XIDS[48].workflow
    assert "nvidia-smi nvlink" in XIDS[74].workflow and "drain" in XIDS[74].workflow
    assert XIDS[145].workflow == XIDS[74].workflow


@pytest.mark.parametrize("words, action", [
    ("None", "none"), ("GPU Reset Required", "reset"), ("Node Reboot Required", "reboot"),
    ("Drain P2P", "drain"), ("Drain and Reset", "reset"), ("PF FLR", "reset"), ("OS Reboot", "reboot"),
    ("Recover IMEX Domain", "none"), ("Bus Reset", "reboot"), ("System Reboot", "reboot"),
    ("Some Future Reboot", "reboot"), ("drain  p2p", "drain"), ("", "reset"),
])
def test_xid_154_recovery_action_words(words, action):
    assert recovery_action(words)[0] == action


def line(code: int, text: str) -> str:
    return f"[ 100.0] NVRM: Xid (PCI:0000:18:00): {code}, {text}"


def xid_finding(kernel_line: str):
    (f,) = [f for f in diagnose(snap([], used=(4,) * 8, driver=(), kernel_log=(kernel_line,))) if f.kind == "xid"]
    return f


def test_xid_94_is_the_applications_to_restart_not_a_reset():
    f = xid_finding(line(94, "pid=7, name=python3, Contained: SM (0x1). RST: No, D-RST: No"))
    assert f.rung is None and f.next_step.startswith("Restart the application (PID 7)")


def test_xid_43_is_nothing_to_do():
    f = xid_finding(line(43, "pid=1045242, name=pt_main_thread, Ch 00000008"))
    assert f.rung is None and f.next_step.startswith("Nothing to do") and f.evidence["catalog"] == "IGNORE"


def test_xid_48_resets_then_checks_ecc_and_row_remapping():
    f = xid_finding(line(48, "pid=72170, name=python3, An uncorrectable double bit error"))
    assert f.rung == "reset" and "nvidia-smi -q -d ECC,ROW_REMAPPER" in f.next_step


def test_xid_74_resets_after_checking_nvlink():
    f = xid_finding(line(74, "pid=1, name=x, NVLink: fatal error detected on link 3"))
    assert f.rung == "reset" and "nvidia-smi nvlink -s" in f.next_step


def test_xid_154_drain_p2p_drains_without_a_reset():
    f = xid_finding(line(154, "GPU recovery action changed from 0x0 (None) to 0x3 (Drain P2P)"))
    assert f.rung is None and f.severity == "high"
    assert f.next_step.startswith("Drain peer-to-peer traffic to GPU 0")


def test_xid_154_drain_and_reset_drains_first():
    f = xid_finding(line(154, "GPU recovery action changed from 0x0 (None) to 0x4 (Drain and Reset)"))
    assert f.rung == "reset" and "Drain first" in f.next_step


def test_xid_154_newer_wordings_pf_flr_and_os_reboot():
    flr = xid_finding(line(154, "GPU recovery action changed from 0x0 (None) to 0x1 (PF FLR)"))
    assert flr.rung == "reset" and flr.severity == "critical"
    reboot = xid_finding(line(154, "GPU recovery action changed from 0x0 (None) to 0x2 (OS Reboot)"))
    assert reboot.rung == "reboot" and reboot.severity == "critical"


def test_contact_support_bucket_says_so():
    f = xid_finding(line(61, "pid=1, name=x, PMU breakpoint"))
    assert f.rung is None and "NVIDIA support" in f.next_step


def test_unknown_xid_points_at_the_catalogue():
    ev = parse_xid_line(line(177, "something new"))
    assert ev is not None and ev.action == "none" and CATALOG_URL in ev.info.meaning
