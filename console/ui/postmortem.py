"""The postmortem's files: the Markdown (console/incident/export.py) and, beside it, the memory
chart (console/output/memory_svg.py), linked from it. Used by the `e` key and by
`gpu-incident timeline export -o FILE`. No Textual here (the command line imports it without
starting a screen). Both files are written 0600 to a temporary file renamed over the target:
a symlink planted there is replaced, never written through."""
from __future__ import annotations

from pathlib import Path
from typing import Mapping, Sequence

from console.incident.export import as_markdown
from console.incident.mirror import read_states, state_path
from console.incident.safefiles import UnsafeFile, write_atomic
from console.incident.timeline import SUFFIX
from console.incident.verdicts import action_rung
from console.model import TimelineEntry
from console.output.memory_svg import chart_name, postmortem_svg


def write_chart(entries: Sequence[TimelineEntry], incident_file: Path, markdown: Path,
                memory: Mapping | None = None) -> str | None:
    """The memory chart beside ``markdown`` (`<name>.memory.svg`): the console's poll-by-poll
    memory (``memory``, from the running console; else from the live state beside the incident
    when there is one), else the timeline's readings; actions marked. Its file name (for the
    link), or None when nothing was read."""
    if not memory:
        try:
            memory = read_states(state_path(incident_file)).memory
        except (FileNotFoundError, UnsafeFile, ValueError, OSError):
            memory = None
    svg = postmortem_svg(entries, memory, rung_of=action_rung,
                         title=f"Incident {Path(incident_file).name.removesuffix(SUFFIX)}")
    if svg is None:
        return None
    target = Path(markdown).with_name(chart_name(markdown))
    write_atomic(target, svg.encode("utf-8"))
    return target.name


def write_postmortem(entries: Sequence[TimelineEntry], incident_file: Path, markdown: Path,
                     incident_id: str, memory: Mapping | None = None) -> tuple[Path, str | None]:
    """The Markdown at ``markdown`` and its chart beside it: (the Markdown's path, the chart's name).
    ``memory``: the running console's memory trails (write_chart)."""
    chart = write_chart(entries, incident_file, markdown, memory)
    write_atomic(markdown, as_markdown(entries, incident_id=incident_id, chart=chart).encode("utf-8"))
    return Path(markdown), chart
