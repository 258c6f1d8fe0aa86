"""The config file and the flags that share its settings: every value type- and range-checked,
a bad one answered with exit 2 and ONE line naming the key and the file (no traceback, no
internal error, never a node that fails every poll or a console stuck "connecting…")."""
from __future__ import annotations

import subprocess

import pytest

from conftest import gpu_incident_cmd, run_cli
from console.config import load_config

BAD_DEFAULTS = [
    # (TOML line, the key the error names)
    ("incident_dir = 5", "incident_dir"),            # was: internal error, exit 70
    ('incident_dir = ""', "incident_dir"),
    ("incident_dir = [\"/tmp\"]", "incident_dir"),
    ('probe_timeout = "abc"', "probe_timeout"),      # was: "connecting…" forever
    ("probe_timeout = -5", "probe_timeout"),         # was: every poll fails
    ("probe_timeout = 0", "probe_timeout"),
    ("probe_timeout = inf", "probe_timeout"),
    ("probe_timeout = 601", "probe_timeout"),
    ("probe_timeout = true", "probe_timeout"),
    ("device_glob = 7", "device_glob"),              # was: every poll fails
    ('device_glob = "dev/nvidia*"', "device_glob"),
    ('device_glob = "/dev/nvidia*\\n/etc"', "device_glob"),
    ('device_glob = "/dev/nvidia\\u0000"', "device_glob"),
    ("interval = 1e-9", "interval"),                 # was: a core pinned
    ("interval = inf", "interval"),
    ("interval = nan", "interval"),
    ("interval = -1", "interval"),
    ("interval = 3601", "interval"),
    ('interval = "2"', "interval"),
    ("interval = false", "interval"),
    ("theme = 3", "theme"),
    ('theme = ""', "theme"),
    ('read_only = "yes"', "read_only"),
    ("read_only = 1", "read_only"),
    ("colour = 'red'", "colour"),                    # unknown key
]

BAD_KEYS = [
    ('sigkill = 5', "sigkill"),
    ('sigkill = ""', "sigkill"),
    ('sigkill = "ctlr+k"', "sigkill"),
    ('sigkill = "qustion_mark"', "sigkill"),
    ('sigkill = "K,,k"', "sigkill"),
    ('sigkill = " "', "sigkill"),
]


def write(tmp_path, text: str):
    cfg = tmp_path / "console.toml"
    cfg.write_text(text + "\n", encoding="utf-8")
    return cfg


def run(*args):
    """The command line in this process (conftest.run_cli); the real one: test_..._real_process."""
    return run_cli(*args)


def one_line(r) -> str:
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in r.stderr, r.stderr
    assert lines[0].startswith("gpu-incident: ")
    return lines[0]


@pytest.mark.parametrize("line,key", BAD_DEFAULTS)
def test_a_bad_default_is_one_line_naming_key_and_file(tmp_path, line, key):
    cfg = write(tmp_path, "[defaults]\n" + line)
    with pytest.raises(ValueError) as exc:
        load_config(str(cfg))
    message = str(exc.value)
    assert "\n" not in message and str(cfg) in message and key in message, message
    # the same through the real command line, before any console starts
    shown = one_line(run("--config", str(cfg), "demo", "--incident-dir", str(tmp_path / "inc")))
    assert str(cfg) in shown and key in shown, shown
    assert not (tmp_path / "inc").exists()                  # nothing started


def test_a_bad_config_file_stops_the_real_process_with_one_line(tmp_path):
    """The same check through the installed command (a new interpreter, nothing imported yet)."""
    cfg = write(tmp_path, "[defaults]\ninterval = 1e-9")
    r = subprocess.run([*gpu_incident_cmd(), "--config", str(cfg), "demo", "--incident-dir", str(tmp_path / "inc")],
                       capture_output=True, text=True, timeout=60)
    shown = one_line(r)
    assert str(cfg) in shown and "interval" in shown, shown
    assert not (tmp_path / "inc").exists()


@pytest.mark.parametrize("line,key", BAD_KEYS)
def test_a_bad_key_binding_is_one_line_naming_key_and_file(tmp_path, line, key):
    cfg = write(tmp_path, "[keys]\n" + line)
    with pytest.raises(ValueError) as exc:
        load_config(str(cfg))
    message = str(exc.value)
    assert "\n" not in message and str(cfg) in message and key in message, message
    shown = one_line(run("--config", str(cfg), "demo"))
    assert str(cfg) in shown and key in shown, shown


@pytest.mark.parametrize("text,named", [
    ('[defaults]\ntheme = "no-such-theme"', "theme"),
    ('[keys]\nnuke = "x"', "nuke"),
    ('[default]\ninterval = 2', "default"),                # a misspelt table is not ignored
    ('defaults = 3', "defaults"),
])
def test_what_only_the_console_knows_is_checked_before_it_starts(tmp_path, text, named):
    cfg = write(tmp_path, text)
    shown = one_line(run("--config", str(cfg), "demo", "--incident-dir", str(tmp_path / "inc")))
    assert str(cfg) in shown and named in shown, shown
    assert not (tmp_path / "inc").exists()


def test_good_values_are_read_as_the_console_uses_them(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    cfg = write(tmp_path, "[defaults]\ninterval = 2\nprobe_timeout = 0.5\ntheme = \"daylight\"\n"
                          "incident_dir = \"~/incidents\"\ndevice_glob = \"/dev/nvidia[0-9]*\"\n"
                          "read_only = true\n[keys]\nsigkill = \"K\"\nquit = \"ctrl+q,q\"\nhelp = \"f1,question_mark\"")
    config = load_config(str(cfg))
    assert config.defaults == {"interval": 2.0, "probe_timeout": 0.5, "theme": "daylight",
                               "incident_dir": str(tmp_path / "incidents"),
                               "device_glob": "/dev/nvidia[0-9]*", "read_only": True}
    assert config.keys == {"sigkill": "K", "quit": "ctrl+q,q", "help": "f1,question_mark"}


def test_every_default_key_of_the_console_is_a_valid_key_name():
    from console.config import key_spec
    from console.ui.keys import KEYS
    for k in KEYS:
        assert key_spec(k.key) == k.key


@pytest.mark.parametrize("args,named", [
    (["--interval", "1e-9"], "--interval"),               # was: a core pinned
    (["--interval", "inf"], "--interval"),                # was: accepted
    (["--interval", "nan"], "--interval"),
    (["--interval", "-1"], "--interval"),
    (["--interval", "3601"], "--interval"),
    (["--probe-timeout", "abc"], "--probe-timeout"),
    (["--probe-timeout", "-5"], "--probe-timeout"),
    (["--probe-timeout", "inf"], "--probe-timeout"),
    (["--probe-timeout", "0.1"], "--probe-timeout"),
    (["--device-glob", "dev/nvidia*"], "--device-glob"),
    (["--device-glob", "/dev/nvidia*\n/etc"], "--device-glob"),
    (["--theme", "no-such-theme"], "theme"),
])
def test_a_bad_flag_is_one_line(args, named, tmp_path):
    shown = one_line(run("demo", *args, "--incident-dir", str(tmp_path / "inc")))
    assert named in shown, shown
    assert not (tmp_path / "inc").exists()


@pytest.mark.parametrize("args", [
    ["snapshot", "--json", "demo", "--probe-timeout", "nan"],
    ["snapshot", "--json", "demo", "--device-glob", "nvidia*"],
    ["bench", "--quick", "--probe-timeout", "inf"],
])
def test_subcommands_check_the_shared_flags_too(args):
    one_line(run(*args))
