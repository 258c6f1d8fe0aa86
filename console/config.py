"""The optional TOML config file (--config FILE): defaults and key remapping, and the ranges the
same settings have on the command line (cli.py's flags check with these functions too).

    [defaults]
    interval = 2.0             # seconds between polls, 0.1 to 3600
    fleet_interval = 15        # seconds between fleet queries (prometheus://), 0.1 to 3600
    probe_timeout = 10         # deadline of one poll of a node, 0.5 to 600 s
    theme = "daylight"         # a theme's name (a shipped themes/*.toml or a Textual built-in)
    incident_dir = "~/incidents"
    device_glob = "/dev/nvidia*"   # an absolute glob
    read_only = true
    as = "alice"               # who you are in the incident (--as): every entry's `by` is alice@host

    [keys]
    quit = "ctrl+q"        # binding id = key(s), comma-separated for alternatives

    [slurm]                # docs/fleet.md, "Slurm"
    enabled = true         # default: when scontrol and squeue are found (here, or on the controller)
    controller = "admin@slurmctl01"   # run scontrol there over SSH (default: this machine)
    nodes = { "gpu01.example" = "gpu01" }   # console node name -> Slurm node name

Every value is type- and range-checked when the file is read: a bad one is a ValueError of one
line naming the key and the file (the CLI exits 2 with it), never a node that fails every poll
or an internal error later.
"""
from __future__ import annotations

import math
import re
import tomllib
import unicodedata
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

INTERVAL_S = (0.1, 3600.0)          # poll interval: at most 10 polls a second, at least one an hour
PROBE_TIMEOUT_S = (0.5, 600.0)      # one poll's deadline
FLEET_INTERVAL_S = 15.0             # a fleet source (prometheus://) is queried this often by default

# key names Textual knows besides single characters and Unicode character names
KEY_MODIFIERS = frozenset({"ctrl", "shift", "alt", "meta", "super", "hyper"})
SPECIAL_KEYS = frozenset({"escape", "enter", "return", "tab", "space", "backspace", "delete", "insert",
                          "home", "end", "pageup", "pagedown", "up", "down", "left", "right",
                          "slash", "backslash", "at", "minus", "plus", "underscore"}
                         | {f"f{i}" for i in range(1, 25)})


def seconds_in(value: object, low: float, high: float) -> float:
    """``value`` (a number, not a string or a boolean) as a finite number of seconds within
    [low, high]; ValueError saying what is wrong (without the setting's name) otherwise."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"must be a number of seconds, not {_kind(value)}")
    number = float(value)
    if not math.isfinite(number) or not low <= number <= high:
        raise ValueError(f"must be between {low:g} and {high:g} s (got {value!r})")
    return number


def seconds_text(text: str, low: float, high: float) -> float:
    """seconds_in for the command line's text (``--interval 2.5``)."""
    try:
        number = float(text)
    except ValueError:
        raise ValueError(f"not a number: {text!r}") from None
    if not math.isfinite(number) or not low <= number <= high:
        raise ValueError(f"must be between {low:g} and {high:g} s (got {text!r})")
    return number


def device_glob(value: object) -> str:
    """An absolute glob of device files (``/dev/nvidia*``), one line."""
    if not isinstance(value, str):
        raise ValueError(f"must be a string (an absolute glob such as /dev/nvidia*), not {_kind(value)}")
    if not value.startswith("/"):
        raise ValueError(f"must be an absolute glob starting with / (got {value!r})")
    if not value.isprintable():
        raise ValueError(f"must be one line of printable text (got {value!r})")
    return value


def _path(value: object) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"must be a non-empty string (a directory), not {_kind(value)}")
    if "\0" in value or "\n" in value:
        raise ValueError(f"must be one line without NUL bytes (got {value!r})")
    return str(Path(value).expanduser())          # "~/incidents" is the user's, as in a shell


def _theme(value: object) -> str:
    if not isinstance(value, str) or not value.strip() or not value.isprintable():
        raise ValueError(f"must be a theme's name (a non-empty string), not {_kind(value)}")
    return value


def _bool(value: object) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"must be true or false, not {_kind(value)}")
    return value


#: the longest name ``--as`` (or ``as``) takes: a name, not a paragraph (it is in every entry's ``by``)
NAME_LIMIT = 64


def person_name(value: object) -> str:
    """A person's name (``--as NAME``, ``[defaults] as``): one line of printable text, at most
    NAME_LIMIT characters, stripped. Markup such as ``[bold]`` is kept as typed (every screen
    shows it literally)."""
    if not isinstance(value, str):
        raise ValueError(f"must be a string (a person's name), not {_kind(value)}")
    name = value.strip()
    if not name:
        raise ValueError("is empty: give the person's name")
    if any(not ch.isprintable() for ch in name):
        raise ValueError("holds control characters or line breaks: give the name as one line of text")
    if len(name) > NAME_LIMIT:
        raise ValueError(f"is longer than {NAME_LIMIT} characters")
    return name


#: every [defaults] key and its check (returns the value the console uses)
DEFAULTS: dict[str, Callable[[object], Any]] = {
    "interval": lambda v: seconds_in(v, *INTERVAL_S),
    "fleet_interval": lambda v: seconds_in(v, *INTERVAL_S),
    "probe_timeout": lambda v: seconds_in(v, *PROBE_TIMEOUT_S),
    "theme": _theme,
    "incident_dir": _path,
    "device_glob": device_glob,
    "read_only": _bool,
    "as": person_name,
}
DEFAULT_KEYS = tuple(DEFAULTS)


def _kind(value: object) -> str:
    """How TOML calls a value's type (for error lines)."""
    if isinstance(value, bool):
        return f"a boolean ({str(value).lower()})"
    if isinstance(value, (int, float)):
        return f"a number ({value!r})"
    if isinstance(value, str):
        return f"a string ({value!r})"
    return {dict: "a table", list: "an array"}.get(type(value), f"a {type(value).__name__}")


def key_spec(value: object) -> str:
    """A key binding as Textual names keys: alternatives separated by commas, each
    ``[modifier+...]key`` where key is one printable character (``K``, ``?``) or a key name
    (``escape``, ``f5``, ``question_mark``)."""
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"must be a non-empty string of key names, not {_kind(value)}")
    for alternative in value.split(","):
        alt = alternative.strip()
        if not alt:
            raise ValueError(f"has an empty key in {value!r}")
        *mods, key = alt.split("+")
        bad = [m for m in mods if m.lower() not in KEY_MODIFIERS]
        if bad or not key:
            raise ValueError(f"{alt!r} is not a key ({', '.join(sorted(KEY_MODIFIERS))} + a key)")
        if not _key_name(key):
            raise ValueError(f"{key!r} is not a key name (one character, or a name such as "
                             "escape, f5, question_mark)")
    return value


def _key_name(key: str) -> bool:
    if len(key) == 1:
        return key.isprintable() and not key.isspace()
    if key.lower() in SPECIAL_KEYS:
        return True
    if not key.replace("_", "").isalnum():
        return False
    try:
        unicodedata.lookup(key.replace("_", " ").upper())
    except KeyError:
        return False
    return True


#: the [slurm] table: where scontrol runs and how console node names map to Slurm's
SLURM_KEYS = ("enabled", "controller", "nodes")


def slurm_table(value: object) -> dict[str, Any]:
    """[slurm]: ``enabled`` (true/false; default: when scontrol and squeue are found), ``controller``
    (an SSH destination where Slurm's client works; default this machine), ``nodes`` (a table:
    console node name -> Slurm node name; default the node's short host name)."""
    if not isinstance(value, dict):
        raise ValueError("must be a table")
    unknown = sorted(set(value) - set(SLURM_KEYS))
    if unknown:
        raise ValueError(f"unknown key(s) {', '.join(unknown)}; known: {', '.join(SLURM_KEYS)}")
    out: dict[str, Any] = {}
    if "enabled" in value:
        try:
            out["enabled"] = _bool(value["enabled"])
        except ValueError as exc:
            raise ValueError(f"enabled {exc}") from None
    if "controller" in value:
        ctl = value["controller"]
        if not isinstance(ctl, str) or not ctl.strip() or any(c.isspace() for c in ctl):
            raise ValueError(f"controller must be an SSH destination [user@]host[:port], not {_kind(ctl)}")
        out["controller"] = ctl
    if "nodes" in value:
        nodes = value["nodes"]
        if not isinstance(nodes, dict):
            raise ValueError(f"nodes must be a table (node = \"slurm-name\"), not {_kind(nodes)}")
        for k, v in nodes.items():
            if not isinstance(v, str) or not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}", v):
                raise ValueError(f"nodes.{k} must be a Slurm node name (letters, digits, '.', '_', '-'), "
                                 f"not {_kind(v)}")
        out["nodes"] = {str(k): v for k, v in nodes.items()}
    return out


@dataclass(frozen=True)
class Config:
    defaults: dict[str, Any] = field(default_factory=dict)
    keys: dict[str, str] = field(default_factory=dict)
    slurm: dict[str, Any] = field(default_factory=dict)


def load_config(path: str | None) -> Config:
    """Read and validate; a bad file raises ValueError with one line naming the problem (the
    key and the file)."""
    if not path:
        return Config()
    p = Path(path).expanduser()
    try:
        data = tomllib.loads(p.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ValueError(f"config file {path} not found") from None
    except IsADirectoryError:
        raise ValueError(f"config file {path} is a directory") from None
    except PermissionError:
        raise ValueError(f"config file {path}: permission denied") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ValueError(f"config file {path}: {exc}") from None
    unknown_tables = sorted(set(data) - {"defaults", "keys", "slurm"})
    if unknown_tables:
        raise ValueError(f"config file {path}: unknown table(s) {', '.join(unknown_tables)}; "
                         "known: [defaults], [keys], [slurm]")
    try:
        slurm = slurm_table(data.get("slurm", {}))
    except ValueError as exc:
        raise ValueError(f"config file {path}: [slurm] {exc}") from None
    defaults = data.get("defaults", {})
    keys = data.get("keys", {})
    if not isinstance(defaults, dict) or not isinstance(keys, dict):
        raise ValueError(f"config file {path}: [defaults] and [keys] must be tables")
    unknown = set(defaults) - set(DEFAULTS)
    if unknown:
        raise ValueError(f"config file {path}: unknown default(s) {', '.join(sorted(unknown))}; "
                         f"known: {', '.join(DEFAULT_KEYS)}")
    checked: dict[str, Any] = {}
    for key, value in defaults.items():
        try:
            checked[key] = DEFAULTS[key](value)
        except ValueError as exc:
            raise ValueError(f"config file {path}: [defaults] {key} {exc}") from None
    for k, v in keys.items():
        try:
            key_spec(v)
        except ValueError as exc:
            raise ValueError(f"config file {path}: [keys] {k} {exc}") from None
    return Config(defaults=checked, keys={str(k): str(v) for k, v in keys.items()}, slurm=slurm)
