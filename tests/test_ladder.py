"""The ladder: the exact commands each rung shows (carrying them out is tests/test_actions.py's:
the one executor, console/actions/run.py)."""
from __future__ import annotations

from dataclasses import replace

import pytest

from console.actions.ladder import commands_for, step_args, top_step
from console.rungs import actions, proposable

RUNGS, ACTION_RUNGS = proposable(), actions()
from console.diagnosis.who import holder_pids
from console.model import Finding, Proc
from test_diagnose_builders import CONSOLE_SHELL, WORKERS, seed_orphans, snap, worker

PERSISTENCED = Proc(pid=1400, ppid=1, state="S", user="nvidia-persistenced", name="nvidia-persiste",
                    cmdline="/usr/bin/nvidia-persistenced --user nvidia-persistenced",
                    device_files=("/dev/nvidia3", "/dev/nvidiactl"))
HOSTENGINE = Proc(pid=1500, ppid=1, state="S", user="root", name="nv-hostengine",
                  cmdline="/usr/bin/nv-hostengine -n --service-account nvidia-dcgm", device_files=("/dev/nvidiactl",))


def test_rungs_in_order():
    assert RUNGS == ("wait", "sigterm", "sigkill", "kill-holders", "clear-blockers", "reset", "reboot", "restore",
                     "mps-clients", "mps-quit")
    # signal: the F9 menu; mps-clients is a read-only check whose answer plans mps-terminate
    assert set(ACTION_RUNGS) == (set(RUNGS) - {"wait", "mps-clients"}) | {"reload-driver", "signal", "mps-terminate"}


def test_signal_rungs_render_explicit_pids():
    s = seed_orphans()
    assert commands_for("sigterm", s, pids=(72170, 72171)) == ["kill -s TERM 72170 72171"]
    assert commands_for("sigkill", s, pids=WORKERS) == ["kill -s KILL " + " ".join(map(str, WORKERS))]
    # no PIDs given: every signallable GPU holder
    assert commands_for("sigterm", s) == ["kill -s TERM " + " ".join(map(str, WORKERS))]


def test_kill_holders_lists_the_device_holders_of_the_gpu_never_fuser():
    hidden = Proc(pid=81234, ppid=1, state="S", user="alice", name="python3", cmdline="python3 eval.py",
                  device_files=("/dev/nvidia3", "/dev/nvidia-uvm"))
    s = snap([worker(i, ppid=1) for i in range(8)] + [hidden, PERSISTENCED])
    lines = commands_for("kill-holders", s, gpus=(3,))
    assert lines == ["kill -s KILL 72173 81234"]           # persistenced is clear-blockers' job
    assert holder_pids(s) == list(WORKERS) + [81234]
    for rung in RUNGS:
        for line in commands_for(rung, s):
            assert "fuser" not in line and "pkill" not in line and "killall" not in line


def test_protected_pids_are_dropped_from_every_signal_line():
    s = seed_orphans()
    for rung in ("sigterm", "sigkill", "kill-holders"):
        assert commands_for(rung, s, pids=(1, 2, CONSOLE_SHELL, 72170)) == [
            f"kill -s {'TERM' if rung == 'sigterm' else 'KILL'} 72170"]
        assert commands_for(rung, s, pids=(1, CONSOLE_SHELL)) == []


def test_clear_blockers_reset_reboot_wait():
    s = snap([PERSISTENCED, HOSTENGINE], persistence=True)
    assert commands_for("clear-blockers", s, gpus=(3,)) == [
        "systemctl stop nvidia-dcgm", "systemctl stop nvidia-persistenced", "nvidia-smi -pm 0 -i 3"]
    assert commands_for("clear-blockers", s)[-1] == "nvidia-smi -pm 0 -i 7"
    assert len(commands_for("clear-blockers", s)) == 2 + 8
    assert commands_for("reset", s, gpus=(3,)) == ["nvidia-smi -r -i 3"]
    assert commands_for("reset", s, gpus=(5, 3, 3)) == ["nvidia-smi -r -i 3", "nvidia-smi -r -i 5"]
    assert commands_for("reboot", s) == ["systemctl reboot"]
    assert commands_for("wait", s) == []
    with pytest.raises(ValueError):
        commands_for("nuke", s)


def test_step_args_and_top_step():
    f = Finding(kind="foreign-pid", severity="high", summary="s", next_step="n", pids=(41,), gpus=(0,),
                evidence={"targets": [88001]}, rung="kill-holders")
    assert step_args(f) == ((88001,), (0,))
    g = replace(f, rung="reset")
    assert step_args(g) == ((), (0,))
    none = replace(f, rung=None, severity="critical")
    assert top_step([none, f]) is f and top_step([none]) is None
