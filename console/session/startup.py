"""Checks made before a console, `gate` or `watch` starts: what the command line names must be
there (a key file given with ``-i``), and whether ``--incident ID`` continues an incident or
starts a new one (with the IDs it may have meant)."""
from __future__ import annotations

import difflib
import os
from pathlib import Path
from typing import Sequence

#: incident IDs offered when ``--incident ID`` names none that exists
NEAR_MATCHES = 3
SUFFIX = ".jsonl"     # an incident's file: <incident-dir>/<id>.jsonl (console/incident/timeline.py)


def check_key_files(paths: Sequence[str]) -> None:
    """ValueError of one line for a ``-i`` key file that cannot be read (as a missing
    ``--nodes-file`` is refused): asked for, it would only fail later on every node."""
    for path in paths:
        try:
            with open(path, "rb"):
                pass
        except IsADirectoryError:
            raise ValueError(f"cannot read key file {path} (-i): it is a directory") from None
        except OSError as exc:
            raise ValueError(f"cannot read key file {path} (-i): {exc.strerror or exc}") from None


def known_incidents(directory: Path) -> list[str]:
    """The IDs of the incidents in ``directory`` (their names only: no file is read)."""
    try:
        names = os.listdir(directory)
    except OSError:
        return []
    return sorted(n.removesuffix(SUFFIX) for n in names if n.endswith(SUFFIX))


def new_incident(directory: Path, ident: str) -> tuple[bool, list[str]]:
    """(True, near-matches) when ``ident`` names no incident in ``directory`` yet: ``--incident``
    then starts it, and the operator is told so with the IDs that look like it."""
    if (Path(directory) / (ident + SUFFIX)).exists():
        return False, []
    return True, difflib.get_close_matches(ident, known_incidents(Path(directory)), n=NEAR_MATCHES, cutoff=0.5)


def new_incident_words(ident: str, near: Sequence[str]) -> str:
    """The line said when ``--incident ID`` starts a new incident."""
    line = f"new incident {ident}: no incident of that ID existed, so this one starts it"
    if near:
        line += f" (did you mean {', '.join(near)}? q, then gpu-incident --incident {near[0]} …)"
    return line
