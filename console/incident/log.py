"""The reasoning half of an incident: hypotheses, checks, verdicts and notes in the timeline.

Free of Textual: the console's keys (h, c, w, v, n) call this, and so can scripts.
"""
from __future__ import annotations

from typing import Any, Callable

from console.checks.registry import CheckResult, digest
from console.model import TimelineEntry
from console.incident.timeline import Timeline, hypothesis_label, hypothesis_numbers
from console.incident.verdicts import suggest

OUTPUT_LIMIT = 8000            # characters of raw output kept per check entry


class IncidentLog:
    def __init__(self, timeline: Timeline | None, on_error: Callable[[str], None] | None = None) -> None:
        self.timeline = timeline
        self.on_error = on_error

    @property
    def entries(self) -> list[TimelineEntry]:
        return self.timeline.entries if self.timeline is not None else []

    def open_hypothesis(self) -> TimelineEntry | None:
        """The newest hypothesis that has no verdict yet."""
        judged = {e.hypothesis for e in self.entries if e.kind == "verdict"}
        for e in reversed(self.entries):
            if e.kind == "hypothesis" and e.seq not in judged:
                return e
        return None

    def _append(self, kind: str, text: str, node: str | None, **fields: Any) -> TimelineEntry | None:
        if self.timeline is None:
            return None
        try:
            return self.timeline.append(kind, text, node=node or None, **fields)   # "": no node (a fleet)
        except OSError as exc:  # disk full, directory gone: say so, keep the console running
            if self.on_error is not None:
                self.on_error(f"timeline write failed ({exc.strerror or exc}): {kind} not recorded")
            return None

    def hypothesis(self, node: str | None, text: str) -> TimelineEntry | None:
        return self._append("hypothesis", text.strip(), node)

    def note(self, node: str | None, text: str, **fields: Any) -> TimelineEntry | None:
        """A note (``fields``: more of the entry's, e.g. the ``console`` that writes it)."""
        return self._append("note", text.strip(), node, **fields)

    def observation(self, node: str | None, text: str, output: str = "", **memory: Any) -> TimelineEntry | None:
        """What was seen without running a check (a headless caller's evidence: a snapshot; a
        node's memory: ``gpu_memory_before`` / ``gpu_memory_after``; what the console found and
        knows of the node: ``findings``, ``facts``, ``workload``)."""
        fields: dict[str, Any] = {k: dict(v) for k, v in memory.items()
                                  if k in ("gpu_memory_before", "gpu_memory_after") and v}
        fields.update({k: v for k, v in memory.items() if k in ("findings", "facts", "workload") and v is not None})
        return self._append("observation", text.strip(), node, **({"output": output} if output else {}), **fields)

    def record_check(self, result: CheckResult) -> TimelineEntry | None:
        """A check entry, linked to the open hypothesis; memory before/after when it read them."""
        fields: dict[str, Any] = {}
        before, after = result.data.get("before"), result.data.get("after")
        if isinstance(before, dict) and before:
            fields["gpu_memory_before"] = dict(before)
        if isinstance(after, dict) and after:
            fields["gpu_memory_after"] = dict(after)
        freed = result.data.get("freed_total_mib")
        if isinstance(freed, int):
            fields["freed_mib"] = freed
        summary_lines = digest(result.name, result.raw)      # from the whole output, before it is cut
        if summary_lines:
            fields["digest"] = summary_lines
        hyp = self.open_hypothesis()
        output = result.raw if len(result.raw) <= OUTPUT_LIMIT else result.raw[:OUTPUT_LIMIT] + "\n[…cut]"
        return self._append("check", f"{result.name}: {result.summary}", result.node,
                            hypothesis=hyp.seq if hyp else None, command=result.command, rc=result.rc,
                            output=output, **fields)

    def suggest_verdict(self) -> tuple[str, str]:
        """(verdict, why) for the open hypothesis, from the checks and the actions (with their
        outcomes) linked to it: console/incident/verdicts.py."""
        found = suggest(self.entries, self.open_hypothesis())
        return found.verdict, found.why

    def number(self, hypothesis_seq: int | None) -> str:
        """"H2": a hypothesis as people number them (1, 2, 3 per incident, never the seq)."""
        return hypothesis_label(hypothesis_numbers(self.entries), hypothesis_seq)

    def verdict(self, node: str | None, verdict: str, text: str = "") -> TimelineEntry | None:
        hyp = self.open_hypothesis()
        if hyp is None:
            raise ValueError("no open hypothesis: state one first (h)")
        return self._append("verdict", text or f"{verdict}: {hyp.text}", node, hypothesis=hyp.seq,
                            verdict=verdict)
