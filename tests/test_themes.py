"""Every shipped theme is readable: text at least 4.5:1 against what it is drawn on (WCAG 2.x AA),
computed from the theme files themselves (themes/*.toml), and checked once more on the colours a
running console actually draws (the footer's key letters, a GPU's memory figure)."""
from __future__ import annotations

import pytest

import conftest

pytest.importorskip("textual")

from textual.color import Color  # noqa: E402
from textual.theme import Theme  # noqa: E402

from console.theming import load_themes  # noqa: E402

MINIMUM = 4.5
THEMES, WARNINGS = load_themes()
#: the terminal colours the console's own styles use as text (console/ui/tables.py, reasoning, …)
ANSI_TEXT = ("red", "green", "yellow", "blue", "magenta", "cyan")
CSS_TEXT = ("foreground", "text-muted", "text-primary", "text-warning", "text-error", "text-success",
            "text-accent")
GROUNDS = ("background", "surface", "panel")


def luminance(c: Color) -> float:
    def channel(v: int) -> float:
        v = v / 255
        return v / 12.92 if v <= 0.03928 else ((v + 0.055) / 1.055) ** 2.4
    return 0.2126 * channel(c.r) + 0.7152 * channel(c.g) + 0.0722 * channel(c.b)


def contrast(fg: Color, bg: Color) -> float:
    fg = bg.blend(fg.with_alpha(1.0), fg.a) if fg.a < 1 else fg      # translucent text over its ground
    a, b = luminance(fg), luminance(bg)
    return (max(a, b) + 0.05) / (min(a, b) + 0.05)


def test_the_reference_pairs():
    assert contrast(Color.parse("#000000"), Color.parse("#ffffff")) == pytest.approx(21.0)
    assert contrast(Color.parse("#777777"), Color.parse("#ffffff")) == pytest.approx(4.48, abs=0.01)


def variables(spec: dict) -> dict[str, str]:
    colors = {k: v for k, v in spec.items() if k not in ("dark", "variables", "ansi")}
    return Theme(name="t", dark=spec["dark"], variables=spec.get("variables", {}), **colors) \
        .to_color_system().generate()


def resolve(value: str, ground: Color) -> Color:
    """A CSS variable's colour over ``ground`` ("auto 60%": the ground's contrast text at 60%)."""
    if value.startswith("auto"):
        alpha = float(value.split()[1].rstrip("%")) / 100 if " " in value else 1.0
        return ground.get_contrast_text(alpha)
    return Color.parse(value)


@pytest.mark.parametrize("name", sorted(THEMES))
def test_every_theme_text_is_at_least_4_5_to_1(name):
    spec = THEMES[name]
    v = variables(spec)
    low = []
    for ground_name in GROUNDS:
        ground = Color.parse(v[ground_name])
        for text in CSS_TEXT:
            ratio = contrast(resolve(v[text], ground), ground)
            if ratio < MINIMUM:
                low.append(f"${text} on ${ground_name}: {ratio:.2f}")
        assert "ansi" in spec, f"{name}: no [ansi] table (the console's own styles would use Textual's)"
        for colour in ANSI_TEXT:
            ratio = contrast(Color.parse(spec["ansi"][colour]), ground)
            if ratio < MINIMUM:
                low.append(f"ansi {colour} on ${ground_name}: {ratio:.2f}")
    footer = Color.parse(v["footer-background"])
    for text in ("footer-key-foreground", "footer-description-foreground", "footer-foreground"):
        ratio = contrast(resolve(v[text], footer), footer)
        if ratio < MINIMUM:
            low.append(f"${text} on $footer-background: {ratio:.2f}")
    cursor = Color.parse(v["block-cursor-background"])
    ratio = contrast(resolve(v["block-cursor-foreground"], cursor), cursor)
    if ratio < MINIMUM:
        low.append(f"$block-cursor-foreground on $block-cursor-background: {ratio:.2f}")
    # a critical finding's label: white on dark red (console/ui/tables.py SEVERITY_STYLE)
    ratio = contrast(Color.parse(spec["ansi"]["white"]), Color.parse("#870000"))
    if ratio < MINIMUM:
        low.append(f"ansi white on dark_red: {ratio:.2f}")
    assert not low, f"theme {name}: " + "; ".join(low)


def test_theme_files_load_without_warnings():
    assert not WARNINGS and {"incident", "daylight"} <= set(THEMES)


@pytest.mark.parametrize("name", sorted(THEMES))
async def test_what_the_console_draws_is_readable(name):
    """On the running console: the footer's key letters and a mostly-full GPU's memory figure
    (styled "yellow") are drawn in colours at least 4.5:1 against their ground."""
    from textual.widgets import DataTable
    from textual.widgets._footer import FooterKey

    from console.clock import FakeClock
    from console.sources.sim import SimSource
    from console.ui.app import IncidentApp
    app = IncidentApp([SimSource(name="demo", scenario="seed", clock=FakeClock())], theme_name=name,
                      autostart=False)
    async with app.run_test(size=(120, 36)) as pilot:
        await app.monitors[0].poll_once()
        gpus = app.query_one("#gpus", DataTable)
        # the footer is composed again at its first size: its keys, and the node's GPUs, once drawn
        await conftest.wait_for(pilot, lambda: app.screen.query(FooterKey) and gpus.row_count)
        keys = list(app.screen.query(FooterKey))
        for key in keys:
            style = key.get_component_rich_style("footer-key--key")
            ground = key.styles.background if style.bgcolor is None else Color.from_rich_color(style.bgcolor)
            ground = Color.parse(app.theme_variables["footer-background"]) if ground.a == 0 else ground
            fg = Color.from_rich_color(style.color)
            assert contrast(fg, ground) >= MINIMUM, (key.key, fg.hex, ground.hex)
        memory = gpus.get_row(gpus.ordered_rows[0].key)[1]            # "76109MiB / 97887MiB", yellow
        assert "yellow" in str(memory.style)
        drawn = Color(*app.ansi_theme.ansi_colors[3])      # how Textual draws "yellow" now
        ground = Color.parse(app.theme_variables["background"])
        assert drawn == Color.parse(THEMES[name]["ansi"]["yellow"])
        assert contrast(drawn, ground) >= MINIMUM
