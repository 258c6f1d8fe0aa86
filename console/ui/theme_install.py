"""Register the shipped themes (themes/*.toml) on a Textual app and pick one."""
from __future__ import annotations

from textual.app import App
from textual.theme import BUILTIN_THEMES, Theme

from console.theming import DEFAULT_THEME, load_themes


def install_themes(app: App, theme_name: str | None) -> list[str]:
    """Register every theme file, select ``theme_name`` (default: the incident theme).

    Returns one warning per theme file that could not be read; raises ValueError naming the
    known themes when ``theme_name`` is none of them.
    """
    themes, warnings = load_themes()
    for name, spec in themes.items():
        colors = {k: v for k, v in spec.items() if k != "dark"}
        app.register_theme(Theme(name=name, dark=spec["dark"], **colors))
    wanted = theme_name or DEFAULT_THEME
    if wanted not in app.available_themes:
        raise ValueError(f"unknown theme {wanted!r}; known: {', '.join(sorted(app.available_themes))}")
    app.theme = wanted
    return warnings


def check_theme(theme_name: str | None) -> None:
    """Before anything starts: ValueError naming the known themes when ``theme_name`` is none of
    them (the shipped themes and Textual's, as install_themes would find them)."""
    known = set(BUILTIN_THEMES) | set(load_themes()[0])
    if theme_name is not None and theme_name not in known:
        raise ValueError(f"unknown theme {theme_name!r}; known: {', '.join(sorted(known))}")
