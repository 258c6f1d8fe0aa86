"""Theme files (themes/*.toml, shipped as console.themes) -> plain dicts. Free of Textual."""
from __future__ import annotations

import importlib.resources
import tomllib
from pathlib import Path
from typing import Any

DEFAULT_THEME = "incident"
COLOR_KEYS = ("primary", "secondary", "warning", "error", "success", "accent", "foreground",
              "background", "surface", "panel", "boost")


def _theme_files() -> list[Any]:
    try:
        root = importlib.resources.files("console.themes")
        return [p for p in root.iterdir() if p.name.endswith(".toml")]
    except (ModuleNotFoundError, FileNotFoundError, TypeError):
        here = Path(__file__).resolve().parent.parent / "themes"
        return sorted(here.glob("*.toml"))


def load_themes() -> tuple[dict[str, dict[str, Any]], list[str]]:
    """{name: {primary: ..., dark: bool, ...}} and one warning line per bad file."""
    themes: dict[str, dict[str, Any]] = {}
    warnings: list[str] = []
    for path in _theme_files():
        try:
            data = tomllib.loads(path.read_text(encoding="utf-8"))
        except (tomllib.TOMLDecodeError, OSError, UnicodeDecodeError) as exc:
            warnings.append(f"theme {path.name}: {exc}")
            continue
        name = data.get("name") or path.name.removesuffix(".toml")
        if not isinstance(data.get("primary"), str):
            warnings.append(f"theme {path.name}: no primary colour")
            continue
        theme = {k: data[k] for k in COLOR_KEYS if isinstance(data.get(k), str)}
        theme["dark"] = bool(data.get("dark", True))
        themes[str(name)] = theme
    return themes, warnings
