"""The console's keys, declared once: the footer, the Help screen and the command palette are
all generated from ``KEYS``, so a ``[keys]`` remap in the config file (``sigkill = "K"``) shows
the new key everywhere.

Each entry: the binding id (the name ``[keys]`` uses), its default key (Textual's key name),
the action it runs, the footer's short label, the Help screen's line and the palette's title.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

from textual.binding import Binding


@dataclass(frozen=True)
class Key:
    id: str
    key: str                    # Textual key name(s), comma-separated
    action: str                 # Textual action string
    footer: str                 # short label in the footer
    help: str                   # one line on the Help screen
    palette: str | None = None  # title in the command palette (None: not listed there)
    show: bool = True           # shown in the footer


KEYS: tuple[Key, ...] = (
    Key("sigterm", "t", "act('sigterm')", "TERM", "SIGTERM the selected/tagged processes (Confirm first)",
        "SIGTERM the selected/tagged processes"),
    Key("sigkill", "k", "act('sigkill')", "KILL", "SIGKILL the selected/tagged processes (Confirm first)",
        "SIGKILL the selected/tagged processes"),
    Key("kill-holders", "F", "act('kill-holders')", "Kill holders",
        "kill every holder of the selected GPU's device files (listed, never fuser -k)",
        "Kill every holder of the selected GPU's device files", show=False),
    Key("reset", "R", "act('reset')", "Reset GPU", "reset the selected GPU: nvidia-smi -r -i N",
        "Reset the selected GPU (nvidia-smi -r)", show=False),
    Key("clear-blockers", "B", "act('clear-blockers')", "Clear blockers",
        "clear reset blockers: persistence mode, persistenced, MPS, DCGM, fabric manager, IMEX, NVSM, "
        "display server, nvidia_drm (modeset)",
        "Clear reset blockers of the selected GPU", show=False),
    Key("wait", "w", "wait_recheck", "Wait 5s", "wait-and-recheck: 5 s, then per-GPU memory again (a check)",
        "Wait and recheck GPU memory"),
    Key("check", "c", "check", "Check", "run a check (picker): holders, states, kernel log, blockers, port, stack…"),
    Key("hypothesis", "h", "hypothesis", "Hypothesis", "state a hypothesis", "State a hypothesis"),
    Key("verdict", "v", "verdict", "Verdict", "verdict on the open hypothesis (c/r/i)",
        "Verdict on the open hypothesis"),
    Key("note", "n", "note", "Note", "note", "Note"),
    Key("export", "e", "export", "Export", "export the timeline as Markdown", "Export the timeline as Markdown"),
    Key("filter", "slash", "filter", "Filter", "filter processes", "Filter processes"),
    Key("tag", "space", "tag", "Tag", "tag the selected process (multi-select)", show=False),
    Key("toggle-all", "a", "toggle_all", "All procs", "show all processes / GPU-related only",
        "Show all processes / GPU-related only", show=False),
    Key("help", "question_mark", "help", "Help", "this help screen", "Help: every key"),
    Key("quit", "q", "quit", "Quit", "quit"),
)

#: keys that are not bindings of the console's own (Textual's movement, enter, the palette)
OTHER_KEYS: tuple[tuple[str, str], ...] = (
    ("↑ ↓", "move"),
    ("tab", "switch panel (nodes, GPUs, processes, findings)"),
    ("enter", "everything about the row: process, GPU, finding (with its commands)"),
    ("ctrl+p", "command palette: every action and check, driver reload and reboot"),
)

#: palette-only actions (no key: the node's name is typed to confirm)
PALETTE_ONLY: tuple[tuple[str, str, str], ...] = (
    ("Reload the NVIDIA driver on this node", "reload-driver", "palette only: type the node's name to confirm"),
    ("Reboot this node", "reboot", "palette only: type the node's name to confirm"),
)

_SHOWN = {"slash": "/", "question_mark": "?", "space": "space", "escape": "esc"}


def bindings() -> list[Binding]:
    return [Binding(k.key, k.action, k.footer, id=k.id, show=k.show) for k in KEYS]


def ids() -> set[str]:
    return {k.id for k in KEYS}


def shown(keys: str) -> str:
    """Textual key names as a person reads them: "slash" -> "/", "k,K" -> "k/K"."""
    return "/".join(_SHOWN.get(k.strip(), k.strip()) for k in keys.split(",") if k.strip())


def key_of(key_id: str, keymap: Mapping[str, str] | None = None) -> str:
    """The key (as shown) that runs this binding id now, the remap applied."""
    for k in KEYS:
        if k.id == key_id:
            return shown((keymap or {}).get(key_id, k.key))
    raise KeyError(key_id)


def help_rows(keymap: Mapping[str, str] | None = None) -> list[tuple[str, str]]:
    """Every key and what it does, for the Help screen, the remap applied."""
    return list(OTHER_KEYS[:2]) + [(key_of(k.id, keymap), k.help) for k in KEYS] + list(OTHER_KEYS[2:])
