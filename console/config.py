"""The optional TOML config file (--config FILE): defaults and key remapping.

    [defaults]
    interval = 2.0
    theme = "daylight"
    incident_dir = "~/incidents"

    [keys]
    quit = "ctrl+q"        # binding id = key(s), comma-separated for alternatives
"""
from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

DEFAULT_KEYS = ("interval", "theme", "incident_dir", "device_glob", "probe_timeout", "read_only")


@dataclass(frozen=True)
class Config:
    defaults: dict[str, Any] = field(default_factory=dict)
    keys: dict[str, str] = field(default_factory=dict)


def load_config(path: str | None) -> Config:
    """Read and validate; a bad file raises ValueError with one line naming the problem."""
    if not path:
        return Config()
    p = Path(path).expanduser()
    try:
        data = tomllib.loads(p.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ValueError(f"config file {path} not found") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ValueError(f"config file {path}: {exc}") from None
    defaults = data.get("defaults", {})
    keys = data.get("keys", {})
    if not isinstance(defaults, dict) or not isinstance(keys, dict):
        raise ValueError(f"config file {path}: [defaults] and [keys] must be tables")
    unknown = set(defaults) - set(DEFAULT_KEYS)
    if unknown:
        raise ValueError(f"config file {path}: unknown default(s) {', '.join(sorted(unknown))}")
    for k, v in keys.items():
        if not isinstance(v, str) or not v.strip():
            raise ValueError(f"config file {path}: key for {k!r} must be a non-empty string")
    if "interval" in defaults and not (isinstance(defaults["interval"], (int, float)) and defaults["interval"] > 0):
        raise ValueError(f"config file {path}: interval must be a number > 0")
    return Config(defaults=dict(defaults), keys={str(k): str(v) for k, v in keys.items()})
