"""Theme files (themes/*.toml, shipped as console.themes) -> plain dicts. Free of Textual.

A theme file holds Textual's theme colours (``COLOR_KEYS``), optional ``[variables]`` (Textual
CSS variables such as ``footer-key-foreground``) and an optional ``[ansi]`` table: the 16 terminal
colours (``ANSI_NAMES``) that the console's own styles ("yellow", "bold red" …) are drawn in
under this theme. tests/test_themes.py holds every theme to WCAG's 4.5:1 for text, computed from
these files."""
from __future__ import annotations

import importlib.resources
import tomllib
from pathlib import Path
from typing import Any

DEFAULT_THEME = "incident"
COLOR_KEYS = ("primary", "secondary", "warning", "error", "success", "accent", "foreground",
              "background", "surface", "panel", "boost")
ANSI_NAMES = ("black", "red", "green", "yellow", "blue", "magenta", "cyan", "white",
              "bright_black", "bright_red", "bright_green", "bright_yellow", "bright_blue", "bright_magenta",
              "bright_cyan", "bright_white")


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
        variables = data.get("variables")
        if isinstance(variables, dict):
            theme["variables"] = {str(k): v for k, v in variables.items() if isinstance(v, str)}
        ansi = data.get("ansi")
        if isinstance(ansi, dict):
            if all(isinstance(ansi.get(n), str) for n in ANSI_NAMES):
                theme["ansi"] = {n: ansi[n] for n in ANSI_NAMES}
            else:
                warnings.append(f"theme {path.name}: [ansi] needs all of {', '.join(ANSI_NAMES)}")
        themes[str(name)] = theme
    return themes, warnings
