"""Which incidents are real: demo incidents and the ones nobody acted on, kept apart.

Every console run opens an incident — a demo, a typo, a glance at a clean node — so the
incident directory fills with incidents nobody will read. Here:

- **demo**: every node it names is simulated (its first reading's facts say so, or it is named
  as the simulated targets are: console/incident/facts.py);
- **untouched**: nobody acted — no hypothesis, check, action or verdict, and no note but those
  the console writes by itself (its start and stop, the findings it notes, its own loops);
- **nothing held**: no reading showed a GPU holding memory.

`gpu-incident timeline list` shows the real ones: it hides demo incidents, and untouched ones in
which nothing was held (a real node that held memory is shown, touched or not: it needs someone);
`--all` shows every one, marked. `gpu-incident timeline prune` deletes the untouched demo
incidents and the untouched ones that held nothing, unless a console is still attached to one
(`--dry-run` only lists them): each one's timeline and its live-state files. The gate and the
watch always state a hypothesis with their evidence, so their incidents are never pruned. Pure
but for ``prune``, which deletes.
"""
from __future__ import annotations

from pathlib import Path
from typing import Sequence

from console.incident import consoles
from console.incident.facts import is_demo
from console.incident.summary import summarize
from console.model import TimelineEntry

#: notes the console (or the gate, the watch) writes by itself: not a person acting
AUTOMATIC_NOTES = ("finding ", "gate: ", "watch", "evidence ", "stopped the console's own")
ACTING_KINDS = ("hypothesis", "check", "action", "verdict")


def touched(entries: Sequence[TimelineEntry]) -> bool:
    """Somebody acted on the incident (see the module)."""
    for e in entries:
        if e.kind in ACTING_KINDS:
            return True
        if e.kind == "note" and not (consoles.is_start(e) or consoles.is_stop(e)
                                     or e.text.startswith(AUTOMATIC_NOTES)):
            return True
    return False


def mark(entries: Sequence[TimelineEntry]) -> str:
    """"demo", "untouched", "demo, untouched" or "" (a real incident somebody acted on)."""
    parts = (["demo"] if is_demo(entries) else []) + ([] if touched(entries) else ["untouched"])
    return ", ".join(parts)


def hidden(entries: Sequence[TimelineEntry]) -> bool:
    """Left out of `timeline list` without --all: a demo, or nothing held and nobody acted."""
    return is_demo(entries) or (not touched(entries) and not summarize(entries).stuck)


def prunable(entries: Sequence[TimelineEntry], *, attached: bool) -> bool:
    """Deleted by `timeline prune`: untouched, a demo or nothing held, no console attached."""
    return not attached and not touched(entries) and (is_demo(entries) or not summarize(entries).stuck)


def still_attached(entries: Sequence[TimelineEntry]) -> bool:
    """A console started on it has not said it stopped and is not known to be gone."""
    open_ = consoles.attached(entries)
    return bool(open_) and consoles.gone_since(open_) is None


def files_of(path: Path) -> list[Path]:
    """An incident's timeline and its live-state files (``<id>.state.<pid>.json``, ``<id>.state.want``)."""
    ident = path.name.removesuffix(".jsonl")
    return [path] + sorted(p for p in path.parent.glob(f"{ident}.state.*")
                           if p.is_file() and not p.is_symlink())


def prune(incidents: Sequence[tuple[str, Path, Sequence[TimelineEntry]]], *, dry_run: bool = False,
          attached=None) -> list[str]:
    """Delete the prunable incidents (``attached(entries)``: a console is still attached); one
    line per incident deleted (or that would be, with ``dry_run``)."""
    out = []
    for ident, path, entries in incidents:
        is_attached = bool(attached(entries)) if attached is not None else still_attached(entries)
        if not prunable(entries, attached=is_attached):
            continue
        if not dry_run:
            for p in files_of(path):
                try:
                    p.unlink()
                except FileNotFoundError:
                    pass
        out.append(f"{'would remove' if dry_run else 'removed'} {ident} ({mark(entries) or 'untouched'}, "
                   f"{len(entries)} entries)")
    return out
