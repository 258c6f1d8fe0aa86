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
from console.incident.readings import WAIT, moments, readings
from console.incident.safefiles import UnsafeFile, write_atomic
from console.incident.timeline import SUFFIX
from console.incident.verdicts import action_rung
from console.model import TimelineEntry
from console.output.memory_series import Mark, MemorySeries
from console.output.memory_svg import chart_name, postmortem_svg


def timeline_series(entries: Sequence[TimelineEntry]) -> dict[str, MemorySeries]:
    """Per node, the memory readings the timeline holds (console/incident/readings.py) and its
    actions and waits as marks: the chart's data when the console kept no trail."""
    out: dict[str, MemorySeries] = {}
    for node in dict.fromkeys(e.node for e in entries if e.node):
        points: dict[float, dict[int, int | None]] = {}
        for r in readings(entries):
            if r.node == node:
                points.setdefault(r.t, {}).update({int(k): v for k, v in r.memory.items() if str(k).isdecimal()})
        marks = tuple(Mark(m.t, "wait", _wait_label(m.entry), end=m.end) if m.is_wait
                      else Mark(m.t, action_rung(m.entry), m.entry.text)
                      for m in moments(entries) if m.entry.node == node)
        out[node] = MemorySeries(points=tuple(sorted(points.items())), marks=marks)
    return out


def _wait_label(e: TimelineEntry) -> str:
    """"wait: memory came back ~76 s in" (a wait's summary up to its details)."""
    said = e.text.removeprefix(WAIT + ":").strip()
    return "wait: " + said.split(" (", 1)[0].split(": ", 1)[0]


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
    svg = postmortem_svg(timeline_series(entries), memory,
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
