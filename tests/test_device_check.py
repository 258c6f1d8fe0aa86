"""scripts/device-check: the prepared run for a machine with an NVIDIA GPU. Here (no GPU) it
must say so and run nothing; and what it would run on a GPU machine only reads."""
from __future__ import annotations

import importlib.machinery
import importlib.util
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "device-check"


def load():
    loader = importlib.machinery.SourceFileLoader("device_check", str(SCRIPT))
    spec = importlib.util.spec_from_loader("device_check", loader)
    mod = importlib.util.module_from_spec(spec)
    loader.exec_module(mod)
    return mod


def test_without_a_gpu_it_says_so_and_writes_nothing(tmp_path):
    out = tmp_path / "out"
    env = {"PATH": "/usr/bin:/bin"}           # no nvidia-smi on this PATH
    r = subprocess.run([sys.executable, str(SCRIPT), "--out", str(out)], capture_output=True, text=True,
                       env=env, timeout=120)
    assert r.returncode == 3, r.stdout + r.stderr
    assert "no NVIDIA GPU here" in r.stdout and "nothing was run" in r.stdout
    assert not out.exists()


def test_every_command_it_runs_only_reads():
    mod = load()
    for argv in mod.RAW_COMMANDS.values():
        line = " ".join(argv)
        assert argv[0] == "nvidia-smi"
        # (after the pmon subcommand, -c is its sample count, not the compute mode)
        banned = ("-r", "--gpu-reset", "-pm", "--persistence-mode", "-lgc", "-pl", "-e", "-mig")
        for word in banned + (() if argv[1:2] == ["pmon"] else ("-c",)):
            assert word not in argv, line
        if argv[1:2] == ["pmon"]:
            assert argv == ["nvidia-smi", "pmon", "-c", "1", "-s", "u"], line
    text = SCRIPT.read_text()
    assert "modprobe" not in text.split('"""', 2)[2]     # no driver reload anywhere below the docstring
