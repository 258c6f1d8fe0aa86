"""Two people, one incident: who a person is (``--as NAME``), what the driving console tells of
the words another writer added, the command a second person runs to see the same panels, and
the line a console says when it continues an incident.

Free of Textual: console/ui/pair_driver.py shows these on the driving console's screen.
"""
from __future__ import annotations

import shlex
import socket
from pathlib import Path
from typing import Iterable, Sequence

from console.config import person_name
from console.incident import consoles
from console.incident.timeline import SUFFIX, Timeline, default_incident_dir, hypothesis_numbers
from console.model import TimelineEntry
from console.textsafe import one_line

#: what another writer adds that the driving console tells of as it lands
NEWS_KINDS = ("hypothesis", "note", "verdict")


# ---------------------------------------------------------------- who
def check_name(value: object) -> str:
    """A person's name as ``--as`` (or the config's ``as``) gives it; ValueError (one line)
    otherwise (console/config.py person_name)."""
    return person_name(value)


def person(name: str | None, host: str | None = None) -> str | None:
    """The ``by`` of a person named ``--as NAME``: ``NAME@host`` (a name that has its own
    ``@host`` as it is); None without a name (the timeline's default: SUDO_USER, else the user)."""
    if name is None:
        return None
    name = check_name(name)
    return name if "@" in name else f"{name}@{host or socket.gethostname()}"


# ---------------------------------------------------------------- the command a second person runs
def follow_command(incident_file: str | Path, default_dir: Path | None = None) -> str:
    """``gpu-incident follow ID --live`` (the same panels, not the timeline alone), with
    ``--incident-dir`` where the incident is not in the default directory."""
    path = Path(incident_file)
    ident = path.name.removesuffix(SUFFIX)
    words = ["gpu-incident", "follow", ident, "--live"]
    default = default_dir if default_dir is not None else default_incident_dir()
    try:
        elsewhere = path.parent.resolve() != Path(default).resolve()
    except OSError:
        elsewhere = True
    if elsewhere:
        words += ["--incident-dir", str(path.parent)]
    return " ".join(shlex.quote(w) for w in words)


# ---------------------------------------------------------------- what the others add
class OthersNews:
    """The entries another writer appended to ``timeline`` (a follower's hypothesis or note, a
    second console's words) since the last look: ``news()`` after each ``timeline.refresh()``.
    What the file held when the console opened it is no news (``recap`` says it once)."""

    def __init__(self, timeline: Timeline) -> None:
        self.timeline = timeline
        self.seen = max((e.seq for e in timeline.entries), default=0)

    def news(self) -> list[TimelineEntry]:
        fresh = [e for e in self.timeline.entries if e.seq > self.seen]
        if fresh:
            self.seen = max(e.seq for e in fresh)
        return [e for e in fresh if e.seq not in self.timeline.own and _newsworthy(e)]


def _newsworthy(e: TimelineEntry) -> bool:
    if consoles.is_start(e) or consoles.is_stop(e):
        return True                          # another console joined or left
    return e.kind in NEWS_KINDS


def news_line(e: TimelineEntry, entries: Sequence[TimelineEntry]) -> str:
    """One line of what another writer added, naming who: "bob@vm: hypothesis H2 on demo — …"."""
    who = one_line(e.by, 60)
    where = f" on {one_line(e.node, 40)}" if e.node else ""
    numbers = hypothesis_numbers(entries)
    if consoles.is_start(e):
        return f"{who}'s console joined this incident ({one_line(e.text, 120)})"
    if consoles.is_stop(e):
        return f"{who}'s console left this incident ({one_line(e.text, 60)})"
    if e.kind == "hypothesis":
        label = f"H{numbers[e.seq]}" if e.seq in numbers else f"#{e.seq}"
        return f"{who}: hypothesis {label}{where} — {one_line(e.text, 200)}  (v: verdict)"
    if e.kind == "verdict":
        label = f"H{numbers[e.hypothesis]}" if e.hypothesis in numbers else "a hypothesis"
        return f"{who}: verdict on {label}: {one_line(e.verdict or '?', 20)} — {one_line(e.text, 160)}"
    return f"{who} noted{where}: {one_line(e.text, 200)}"


# ---------------------------------------------------------------- continuing an incident
def recap(entries: Iterable[TimelineEntry], incident_id: str) -> str | None:
    """"continuing ID: 14 entries, H1 confirmed, H2 open, 2 actions" for an incident that held
    entries when this console opened it; None for a new one."""
    entries = list(entries)
    if not entries:
        return None
    numbers = hypothesis_numbers(entries)
    verdict: dict[int, str] = {}
    for e in entries:
        if e.kind == "verdict" and isinstance(e.hypothesis, int) and e.verdict:
            verdict[e.hypothesis] = e.verdict           # the latest verdict stands
    hyps = [f"H{n} {one_line(verdict.get(seq, 'open'), 20)}" for seq, n in sorted(numbers.items(), key=lambda x: x[1])]
    actions = sum(1 for e in entries if e.kind == "action")
    parts = [f"{len(entries)} {'entry' if len(entries) == 1 else 'entries'}"]
    if len(hyps) > 4:
        parts += hyps[:3] + [f"{len(hyps) - 3} more hypotheses"]
    else:
        parts += hyps or ["no hypothesis yet"]
    parts.append(f"{actions} action{'' if actions == 1 else 's'}")
    return f"continuing {one_line(incident_id, 60)}: " + ", ".join(parts)
