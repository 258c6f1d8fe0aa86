"""The console's keys, declared once: the footer, the Help screen and the command palette are
all generated from ``KEYS``, so a ``[keys]`` remap in the config file (``sigkill = "K"``) shows
the new key everywhere.

Each entry: the binding id (the name ``[keys]`` uses), its default key (Textual's key name),
the action it runs, the footer's short label, the Help screen's line, the palette's title, and
its scope — where it acts:

- ``app``: anywhere on the main screen;
- ``procs`` / ``gpus`` / ``findings``: on that panel only (bound to the panel, so the footer
  shows them while it has focus). Pressed anywhere else, a process or GPU key acts on nothing:
  it says which panel it belongs to (``elsewhere_bindings``), never on a cursor out of sight;
- ``tables``: in every table (first/last row);
- ``fleet``: on the fleet table (fleet mode, console/ui/fleet_view.py);
- every other screen's and widget's keys (Confirm, details, prompts, the verdict, the signal
  menu, Help, replay, follow, the tables' moves): each screen binds ``bindings(scope)``, so a
  ``[keys]`` remap reaches every binding there is.

``fleet_only`` keys exist only in fleet mode (a ``prometheus://`` target): elsewhere they are
neither bound in the footer nor listed in Help.

``dangerous`` marks a key that changes a node (a signal, a reset, clearing blockers, a Slurm
drain or resume): under ``--read-only`` it is not bound at all (k9s's way: not in the footer,
Help or the palette, and pressing it does nothing), and the action layer's refusal stays behind
it for any other way in.

``rank`` orders what the footer keeps when the terminal is narrow: 0 always, then 1, 2, …
(console/ui/footer.py drops the highest ranks first; every key stays in Help and the palette).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

from textual.binding import Binding


@dataclass(frozen=True)
class Key:
    id: str
    key: str                    # Textual key name(s), comma-separated
    action: str                 # the app's action (scope "tables": the table's own action)
    footer: str                 # short label in the footer
    help: str                   # one line on the Help screen
    palette: str | None = None  # title in the command palette (None: not listed there)
    show: bool = True           # shown in the footer
    scope: str = "app"          # app, procs, gpus, findings, tables
    rank: int = 2               # footer: kept first at narrow widths (0 always)
    fleet_only: bool = False    # only in fleet mode (Help lists it there)
    dangerous: bool = False     # changes a node: unbound under --read-only
    acting: bool = False        # serves only the keys that change a node (tag): unbound under --read-only too
    priority: bool = False      # before the focused widget's own keys (replay, follow)
    display: str | None = None  # how the footer shows the key ("→"), where not its name


SCOPES: dict[str, str] = {
    "procs": "the process panel",
    "gpus": "the GPU panel",
    "findings": "the findings panel",
    "tables": "every table",
    "fleet": "the fleet table",
    "app": "everywhere",
}

KEYS: tuple[Key, ...] = (
    Key("sigterm", "t", "act('sigterm')", "TERM", "SIGTERM the selected/tagged processes (Confirm first)",
        "SIGTERM the selected/tagged processes", scope="procs", rank=1, dangerous=True),
    Key("sigkill", "k", "act('sigkill')", "KILL", "SIGKILL the selected/tagged processes (Confirm first)",
        "SIGKILL the selected/tagged processes", scope="procs", rank=1, dangerous=True),
    Key("signal", "f9", "signal_menu", "Signal…",
        "choose a signal for the selected/tagged processes (SIGTERM first; Confirm first)",
        "Send a signal of your choice to the selected/tagged processes", scope="procs", rank=3, dangerous=True),
    Key("tag", "space", "tag", "Tag", "tag/untag the selected process and move down (multi-select)",
        scope="procs", rank=2, acting=True),
    Key("kill-holders", "F", "act('kill-holders')", "Kill holders",
        "kill every holder of the selected GPU's device files (listed, never fuser -k)",
        "Kill every holder of the selected GPU's device files", scope="gpus", rank=1, dangerous=True),
    Key("reset", "R", "act('reset')", "Reset GPU", "reset the selected GPU: nvidia-smi -r -i N",
        "Reset the selected GPU (nvidia-smi -r)", scope="gpus", rank=1, dangerous=True),
    Key("clear-blockers", "B", "act('clear-blockers')", "Clear blockers",
        "clear reset blockers: persistence mode, persistenced, MPS, DCGM, fabric manager, IMEX, NVSM, "
        "display server, nvidia_drm (modeset)",
        "Clear reset blockers of the selected GPU", scope="gpus", rank=1, dangerous=True),
    Key("next-step", "x", "next_step", "Next step",
        "do the next step (Confirm first): the highlighted finding's on the findings panel, anywhere else "
        "the node's (its first finding that has one)", "Do the next step", rank=1),
    Key("next-step-all", "X", "next_step_all", "Same step, all",
        "the node's next step on every node whose next step is the same (one Confirm lists each node's "
        "exact commands; each is recorded and verified on its own)",
        "Do this node's next step on every node that needs the same", show=False, rank=3, dangerous=True),
    Key("open-node", "enter", "open_node", "Open node",
        "open the highlighted node's console over SSH (added to the node list, same incident)",
        scope="fleet", rank=1, fleet_only=True),
    Key("fleet-filter", "slash", "fleet_filter", "Filter", "filter the fleet by hostname (empty clears)",
        scope="fleet", rank=2, fleet_only=True),
    Key("fleet-refresh", "r", "fleet_refresh", "Refresh", "query the fleet source now", scope="fleet", rank=3,
        fleet_only=True),
    Key("fleet", "escape", "fleet", "Fleet", "back to the fleet table (the nodes opened stay in the node list)",
        "Back to the fleet table", rank=1, fleet_only=True),
    Key("first-row", "home", "scroll_top", "First", "first row", show=False, scope="tables"),
    Key("last-row", "end", "scroll_bottom", "Last", "last row", show=False, scope="tables"),
    Key("wait", "w", "wait_recheck", "Wait 5s", "wait-and-recheck: 5 s, then per-GPU memory again (a check)",
        "Wait and recheck GPU memory", rank=2),
    Key("check", "c", "check", "Check", "run a check (picker): holders, states, kernel log, blockers, port, stack…",
        rank=2),
    Key("hypothesis", "h", "hypothesis", "Hypothesis", "state a hypothesis", "State a hypothesis", rank=3),
    Key("verdict", "v", "verdict", "Verdict", "verdict on the open hypothesis (c/r/i)",
        "Verdict on the open hypothesis", rank=4),
    Key("note", "n", "note", "Note", "note", "Note", rank=4),
    Key("export", "e", "export", "Export", "export the timeline as Markdown", "Export the timeline as Markdown",
        rank=5),
    Key("filter", "slash,f3,f4", "filter", "Filter",
        "filter the table in focus: the nodes on the node table (name, error, finding), else the processes "
        "(F3, F4: htop's search and filter)",
        "Filter the table in focus (nodes or processes)", rank=3),
    Key("clear-filter", "escape", "clear_filter", "Clear filter",
        "clear the filter of the panel in focus, or, where it has none, the one set (with none set, in "
        "fleet mode: back to the fleet table)", "Clear the filter", rank=1),
    Key("next-node", "right_square_bracket", "step_node(1)", "Next node",
        "the next node of the node table, from any panel (wraps)", "Next node", show=False),
    Key("previous-node", "left_square_bracket", "step_node(-1)", "Prev node",
        "the previous node of the node table, from any panel (wraps)", "Previous node", show=False),
    Key("toggle-all", "a", "toggle_all", "All procs", "show all processes / GPU-related only",
        "Show all processes / GPU-related only", show=False),
    Key("sort", "o", "sort", "Sort", "process order: tree → GPU memory → PID → user → tree",
        "Sort the processes (tree, GPU memory, PID, user)", show=False),
    Key("tree", "f5", "tree", "Tree", "the processes as a tree, or back to the last flat order (htop's F5)",
        "Processes as a tree / flat", show=False),
    Key("order", "f6", "order_menu", "Order…",
        "choose the process order: tree, GPU memory, PID, user, each also reversed (htop's F6)",
        "Choose the process order (or reverse it)", show=False),
    Key("messages", "m", "messages", "Messages", "what the console said, most recent first",
        "Messages: what the console said", rank=5),
    Key("help", "question_mark,f1", "help", "Help", "this help screen (F1 too)", "Help: every key", rank=0),
    Key("palette", "ctrl+p,colon", "command_palette", "Palette",
        "command palette: every action and check, driver reload and reboot (: as k9s's command mode)",
        show=False),
    Key("quit", "q,f10", "quit", "Quit", "quit", rank=0),
    Key("drain", "D", "drain", "Drain",
        "drain this node in Slurm (scontrol update … State=DRAIN, the reason names the incident and the finding; "
        "Confirm first): before a reset or reboot", "Drain this node in Slurm", show=False, rank=3, dangerous=True),
    Key("resume", "U", "resume", "Resume",
        "resume this node in Slurm (State=RESUME; Confirm first): only after a verified recovery",
        "Resume this node in Slurm", show=False, rank=3, dangerous=True),
    # ---- the other screens' keys (each screen's BINDINGS come from here: remappable by id)
    Key("table-up", "up", "cursor_up", "Up", "", show=False, scope="table-moves"),
    Key("table-down", "down", "cursor_down", "Down", "", show=False, scope="table-moves"),
    Key("table-page-up", "pageup", "page_up", "Page up", "", show=False, scope="table-moves"),
    Key("table-page-down", "pagedown", "page_down", "Page down", "", show=False, scope="table-moves"),
    Key("table-select", "enter", "select_cursor", "Select", "", show=False, scope="table-moves"),
    Key("help-close", "escape,q,question_mark", "dismiss", "Close", "close this screen", scope="help"),
    Key("confirm-cancel", "escape", "cancel", "Cancel", "cancel: nothing is sent", scope="confirm"),
    Key("confirm-no", "n", "cancel", "No", "cancel: nothing is sent", show=False, scope="confirm"),
    Key("confirm-yes", "y", "confirm", "Yes", "run the commands shown", show=False, scope="confirm"),
    Key("confirm-page-up", "pageup", "scroll('page_up')", "", "the targets, a page up", show=False,
        scope="confirm"),
    Key("confirm-page-down", "pagedown", "scroll('page_down')", "", "the targets, a page down", show=False,
        scope="confirm"),
    Key("details-close", "escape,q,enter", "dismiss", "Close", "close the details", scope="details"),
    Key("details-apply", "x", "apply", "Do the next step", "the finding's next step (Confirm first)",
        scope="details"),
    Key("prompt-cancel", "escape", "cancel", "Cancel", "cancel: nothing is recorded", scope="prompt"),
    Key("verdict-cancel", "escape", "cancel", "Cancel", "cancel: no verdict", scope="verdict"),
    Key("verdict-accept", "enter", "accept", "Accept suggestion", "take the suggested verdict", scope="verdict"),
    Key("verdict-confirmed", "c", "choose('confirmed')", "Confirmed", "confirmed", scope="verdict"),
    Key("verdict-refuted", "r", "choose('refuted')", "Refuted", "refuted", scope="verdict"),
    Key("verdict-inconclusive", "i", "choose('inconclusive')", "Inconclusive", "inconclusive", scope="verdict"),
    Key("signal-cancel", "escape", "cancel", "Cancel", "cancel: no signal is sent", scope="signal-menu"),
    Key("order-cancel", "escape", "cancel", "Cancel", "cancel: the order stays", scope="order-menu"),
    Key("replay-next", "right,space,n", "step(1)", "Next", "the next entry", scope="replay", priority=True,
        display="→"),
    Key("replay-previous", "left,p", "step(-1)", "Prev", "the previous entry", scope="replay", priority=True,
        display="←"),
    Key("replay-first", "home", "jump(0)", "First", "the first entry", scope="replay", priority=True),
    Key("replay-last", "end", "jump(-1)", "Last", "the last entry", scope="replay", priority=True),
    Key("replay-mode", "g", "toggle_mode", "All so far/step", "every entry so far, or this step's",
        scope="replay", priority=True),
    Key("replay-quit", "q", "quit", "Quit", "quit", scope="replay", priority=True),
    Key("follow-tail", "end", "follow_tail", "Follow new", "follow new entries as they come", scope="follow",
        priority=True),
    Key("follow-quit", "q", "quit", "Quit", "quit", scope="follow", priority=True),
    Key("follow-help", "question_mark", "help", "Help", "this help screen: the follower's keys",
        scope="follow", priority=True),
)
#: scopes whose keys are bound to a panel of the main screen and act on the app
APP_ACTION_SCOPES = ("procs", "gpus", "findings")
#: scopes whose keys are bound to a widget of a screen and act on that screen (the fleet table's)
SCREEN_ACTION_SCOPES = ("fleet",)
#: the app's actions that act on the node console's panels: off while the fleet screen shows
NODE_ACTIONS = frozenset({"wait_recheck", "check", "filter", "toggle_all", "elsewhere", "act", "signal_menu",
                          "tag", "next_step", "drain", "resume", "tree", "order_menu"})
#: the scopes of the main screen (its footer, Help and palette); the others are other screens'
MAIN_SCOPES = ("procs", "gpus", "findings", "app", "tables", "fleet")

#: keys that are not bindings of the console's own (Textual's movement, enter, the palette)
OTHER_KEYS: tuple[tuple[str, str], ...] = (
    ("↑ ↓", "move"),
    ("pgup pgdn", "a page up, down"),
    ("tab", "switch panel (nodes, GPUs, processes, findings)"),
    ("enter", "everything about the row: process, GPU, finding (with its commands)"),
)

#: palette-only actions (no key: the node's name is typed to confirm)
PALETTE_ONLY: tuple[tuple[str, str, str], ...] = (
    ("Reload the NVIDIA driver on this node", "reload-driver", "palette only: type the node's name to confirm"),
    ("Reboot this node", "reboot", "palette only: type the node's name to confirm"),
)

#: keys other tools taught (htop, vim, less, k9s) that are no key here: pressed, the console says
#: in one line which key does that job here — (key, where the habit comes from, the id of the key
#: here or None, what it does); the key here is named as remapped (``habit``)
HABITS: tuple[tuple[str, str, str | None, str], ...] = (
    ("j", "vim's down", "table-down", "moves down (k is SIGKILL on the process panel)"),
    ("g", "vim's top", "first-row", "goes to the first row"),
    ("G", "vim's bottom", "last-row", "goes to the last row"),
    ("backslash", "htop's filter", "filter", "filters the table in focus"),
    ("u", "htop's user filter", "filter", "filters by user too: type the user's name"),
    ("M", "htop's order by memory", "order", "chooses the order: GPU memory first"),
    ("P", "htop's order by CPU", "order", "chooses the order (GPU memory, PID, user, tree)"),
    ("H", "htop's threads", "check", "runs a check: the threads in D are in `states`"),
    ("s", "htop's strace", "check", "runs a check: `stack` shows a process's kernel stack"),
    ("l", "htop's open files", "check", "runs a check: `holders` lists who holds /dev/nvidia*"),
    ("d", "k9s's describe", None, "enter shows everything about the row"),
    ("f2", "htop's setup", None, "no setup screen: remap keys in the config file's [keys]; ? lists them"),
    ("f7", "htop's nice", None, "priorities are not changed here; F9 sends a signal"),
    ("f8", "htop's nice", None, "priorities are not changed here; F9 sends a signal"),
)

_SHOWN = {"slash": "/", "question_mark": "?", "space": "space", "escape": "esc", "right_square_bracket": "]",
          "left_square_bracket": "[", "colon": ":", "backslash": "\\", "down": "↓", "up": "↑"}


def _binding(k: Key, action: str, *, show: bool | None = None) -> Binding:
    return Binding(k.key, action, k.footer, id=k.id, show=k.show if show is None else show,
                   priority=k.priority, key_display=k.display)


def bindings(scope: str = "app") -> list[Binding]:
    """The bindings of one scope: ``app`` for the App; a panel's for that panel's table (its
    actions run on the app); the fleet table's (they run on its screen); ``tables`` for every
    table (the table's own actions); any other scope is one screen's or widget's (confirm,
    details, prompt, verdict, signal-menu, help, replay, follow, table-moves), its own actions."""
    out = []
    for k in KEYS:
        if k.scope == scope:
            action = (f"app.{k.action}" if scope in APP_ACTION_SCOPES
                      else f"screen.{k.action}" if scope in SCREEN_ACTION_SCOPES else k.action)
            out.append(_binding(k, action))
    return out


def elsewhere_bindings() -> list[Binding]:
    """App-level stand-ins for the process and GPU panels' keys: pressed where that panel has
    no focus, they say where the key acts instead of acting on a cursor out of sight. Same ids,
    so a ``[keys]`` remap moves them together."""
    return [_binding(k, f"elsewhere('{k.id}')", show=False) for k in KEYS if k.scope in ("procs", "gpus")]


def off_read_only(k: Key) -> bool:
    """Not bound under --read-only: a key that changes a node, or one that serves only those (tag)."""
    return k.dangerous or k.acting


def is_dangerous(action: str, parameters: tuple[object, ...] = ()) -> bool:
    """Whether the binding action ``action(parameters)`` (as Textual's check_action gets it) is
    unbound under --read-only (off_read_only), or a panel key's stand-in elsewhere
    (``elsewhere('sigkill')``)."""
    if action == "elsewhere":
        return any(off_read_only(k) and k.id in parameters for k in KEYS)
    called = f"{action}({', '.join(repr(p) for p in parameters)})" if parameters else action
    return any(off_read_only(k) and k.action == called for k in KEYS)


def help_keys(read_only: bool = False) -> tuple[Key, ...]:
    """The keys bound now: all of them, or under --read-only those that change nothing."""
    return tuple(k for k in KEYS if not (read_only and off_read_only(k)))


def habit(key: str, keymap: Mapping[str, str] | None = None) -> str | None:
    """What an unbound key that another tool taught says here ("F2: …"), or None."""
    for typed, where, key_id, does in HABITS:
        if typed == key:
            first = (keymap or {}).get(key_id, get(key_id).key).split(",")[0] if key_id else ""
            here = f"here {shown(first)} {does}" if key_id else does
            return f"{shown(typed)} ({where}): {here}"
    return None


def ids() -> set[str]:
    return {k.id for k in KEYS}


def get(key_id: str) -> Key:
    for k in KEYS:
        if k.id == key_id:
            return k
    raise KeyError(key_id)


def rank_of_action(action: str) -> int:
    """The footer rank of a binding's action (unknown ones: kept last)."""
    bare = action.removeprefix("app.").removeprefix("screen.")
    for k in KEYS:
        if k.action == bare:
            return k.rank
    return 9


def _one(key: str) -> str:
    if len(key) > 1 and key[0] == "f" and key[1:].isdigit():
        return key.upper()              # F9, as htop labels its keys
    return _SHOWN.get(key, key)


def shown(keys: str) -> str:
    """Textual key names as a person reads them: "slash" -> "/", "k,K" -> "k/K", "f10" -> "F10"."""
    parts = [_one(k.strip()) for k in keys.split(",") if k.strip()]
    return (" " if "/" in parts else "/").join(parts)      # "/ F3 F4", never "//F3/F4"


def key_of(key_id: str, keymap: Mapping[str, str] | None = None) -> str:
    """The key (as shown) that runs this binding id now, the remap applied."""
    return shown((keymap or {}).get(key_id, get(key_id).key))


def where(key_id: str, keymap: Mapping[str, str] | None = None) -> str:
    """What a scoped key says when pressed elsewhere: "k (KILL) works on the process panel: …"."""
    k = get(key_id)
    return f"{key_of(key_id, keymap)} ({k.footer}) works on {SCOPES[k.scope]}: tab there first. Nothing was sent."


def help_rows(keymap: Mapping[str, str] | None = None, fleet: bool = False,
              read_only: bool = False) -> list[tuple[str, str]]:
    """Every key and what it does, for the Help screen, the remap applied; a row with an
    empty key is a heading (where the keys below it act). ``fleet``: fleet mode, its keys first;
    ``read_only``: the dangerous keys are not bound, so not listed."""
    rows: list[tuple[str, str]] = list(OTHER_KEYS[:3])
    for scope in (("fleet",) if fleet else ()) + ("procs", "gpus", "findings", "app", "tables"):
        rows.append(("", f"on {SCOPES[scope]}" if scope != "app" else "everywhere"))
        rows += [(key_of(k.id, keymap), k.help) for k in help_keys(read_only)
                 if k.scope == scope and (fleet or not k.fleet_only)]
    rows.append(("", "and"))
    return rows + list(OTHER_KEYS[3:])
