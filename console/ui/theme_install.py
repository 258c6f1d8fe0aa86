"""Register the shipped themes (themes/*.toml) on a Textual app and pick one."""
from __future__ import annotations

from rich.terminal_theme import TerminalTheme
from textual.app import App
from textual.color import Color
from textual.theme import BUILTIN_THEMES, Theme

from console.theming import ANSI_NAMES, DEFAULT_THEME, load_themes


def terminal_theme(spec: dict) -> TerminalTheme | None:
    """The theme file's [ansi] colours as the palette Textual draws ANSI-coloured text in."""
    ansi = spec.get("ansi")
    if not ansi:
        return None
    rgb = [Color.parse(ansi[n]).rgb for n in ANSI_NAMES]
    back = Color.parse(spec.get("background", "#000000" if spec.get("dark", True) else "#ffffff")).rgb
    fore = Color.parse(spec.get("foreground", "#ffffff" if spec.get("dark", True) else "#000000")).rgb
    return TerminalTheme(back, fore, rgb[:8], rgb[8:])


def _install_ansi(app: App, themes: dict[str, dict], wanted: str) -> None:
    """The ANSI palettes Textual draws the console's own styles ("yellow", "bold red") in: the
    chosen theme's [ansi] for its kind (dark or light), a shipped theme's for the other kind
    (so a switch through the palette stays readable), Textual's own where none has one."""
    for dark in (True, False):
        names = [wanted] + [n for n in themes if n != wanted]
        palette = next((terminal_theme(themes[n]) for n in names
                        if n in themes and themes[n]["dark"] == dark and themes[n].get("ansi")), None)
        if palette is not None:
            if dark:
                app.ansi_theme_dark = palette
            else:
                app.ansi_theme_light = palette


def install_themes(app: App, theme_name: str | None) -> list[str]:
    """Register every theme file, select ``theme_name`` (default: the incident theme).

    Returns one warning per theme file that could not be read; raises ValueError naming the
    known themes when ``theme_name`` is none of them.
    """
    themes, warnings = load_themes()
    for name, spec in themes.items():
        colors = {k: v for k, v in spec.items() if k not in ("dark", "variables", "ansi")}
        app.register_theme(Theme(name=name, dark=spec["dark"], variables=dict(spec.get("variables", {})), **colors))
    wanted = theme_name or DEFAULT_THEME
    if wanted not in app.available_themes:
        raise ValueError(f"unknown theme {wanted!r}; known: {', '.join(sorted(app.available_themes))}")
    _install_ansi(app, themes, wanted)
    app.theme = wanted
    return warnings


def check_theme(theme_name: str | None) -> None:
    """Before anything starts: ValueError naming the known themes when ``theme_name`` is none of
    them (the shipped themes and Textual's, as install_themes would find them)."""
    known = set(BUILTIN_THEMES) | set(load_themes()[0])
    if theme_name is not None and theme_name not in known:
        raise ValueError(f"unknown theme {theme_name!r}; known: {', '.join(sorted(known))}")
