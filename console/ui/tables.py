"""Row contents of the console's tables and the by-key table update (Textual DataTable)."""
from __future__ import annotations

import textwrap
import weakref

from rich.text import Text
from textual.widgets import DataTable

from console.diagnosis import text as t
from console.diagnosis.who import FREED_MIB
from console.actions.ladder import top_step
from console.model import Finding, Gpu, NodeSnapshot, severity_rank
from console.output import health
from console.output.remedy import error_kind, remedy_first, remedy_of
from console.output.rows import ProcRow, fmt_mib, gpu_holders
from console.ui.error_row import error_cell, error_lines
from console.ui.text import cells as literal_cells, literal, printable
from console.ui.virtual_table import VirtualTable, cell_width

SEVERITY_STYLE = {"critical": "bold white on dark_red", "high": "bold red", "low": "yellow", "info": "dim"}
STATE_STYLE = {"Z": "bold magenta", "D": "bold red", "R": "green"}

#: the finding goes last: at 80 columns (or with a long error) it is cut at the edge, never the
#: memory and the GPU count
NODE_COLUMNS = (("Node", "node"), ("State", "state"), ("Used", "used"), ("GPUs", "gpus"), ("Probe", "probe"),
                ("Finding → next step", "finding"))
#: the node table's finding cell at most (a failing node's whole error is in its findings panel)
FINDING_CELL = 44
#: Health: temperature and power when the width allows, and marks for what is wrong at any width
#: (console/output/health.py); the name gives way first (it is in the details: enter)
GPU_COLUMNS = (("GPU", "gpu"), ("Memory used/total", "mem"), ("Util", "util"), ("Holders", "holders"),
               ("Health", "health"), ("Name", "name"))
#: the style of a health mark by its severity
MARK_STYLE = {"critical": "bold white on dark_red", "high": "bold red", "low": "yellow"}
#: SM%: each process's SM utilisation as the driver reports it (the busiest of its GPUs; empty where
#: not reported), shown only while the Process column keeps PROC_NAME_LEAST cells beside it: at 80
#: columns it gives way (names would keep ~37 cells), from 100 it shows (VirtualTable optional)
PROC_COLUMNS = (("PID", "pid"), ("S", "state"), ("D", "d"), ("GPU MiB", "mib"), ("SM%", "sm"), ("User", "user"),
                ("Process", "name"))
PROC_OPTIONAL = frozenset({"sm"})
PROC_NAME_LEAST = 40


def add_columns(table, columns: tuple[tuple[str, str], ...]) -> None:
    for label, key in columns:
        table.add_column(label, key=key)


def add_proc_columns(table: VirtualTable) -> None:
    """The process panel's columns: SM% optional (PROC_NAME_LEAST)."""
    table.last_least = PROC_NAME_LEAST
    for label, key in PROC_COLUMNS:
        table.add_column(label, key=key, optional=key in PROC_OPTIONAL)


def headline(snap: NodeSnapshot) -> Finding | None:
    """The finding a node's row names: the one that carries its next step (the ladder's top
    step), else the most severe."""
    return top_step(snap.findings) or max(snap.findings, key=lambda f: severity_rank(f.severity), default=None)


def concerned_mib(f: Finding, snap: NodeSnapshot) -> int:
    """GPU memory a finding is about: what its processes hold, else what its GPUs have in use."""
    mib = sum(p.gpu_memory_total_mib for p in map(snap.proc, f.pids) if p is not None)
    if not mib and f.gpus:
        mib = sum(g.memory_used_mib or 0 for g in snap.gpus if g.index in f.gpus)
    return mib


def finding_cell(snap: NodeSnapshot) -> Text:
    f = headline(snap)
    if f is None:
        return Text("")
    # a high or critical one is the node's State beside it: the cell keeps its room for the kind,
    # the memory and the next step (at 100 columns "critical recovery-action 60.0 GiB → clear…"
    # lost its step)
    loud = severity_rank(f.severity) >= severity_rank("high")
    cell = Text("" if loud else f"{f.severity} ", style=SEVERITY_STYLE.get(f.severity, ""))
    cell.append(f.kind, style=SEVERITY_STYLE.get(f.severity, "") if loud else "")
    mib = concerned_mib(f, snap)
    if mib:
        cell.append(" " + t.mib(mib))            # one rounding rule: console/diagnosis/text.py
    if f.rung:
        cell.append(f" → {f.rung}", style="italic")
    cell.truncate(FINDING_CELL, overflow="ellipsis")
    return cell


def node_order(name: str, snap: NodeSnapshot | None) -> tuple:
    """Trouble first: failing nodes, then by their most severe finding, then by name; nodes
    still connecting last."""
    if snap is None:
        return (2, 0, name)
    worst = max((severity_rank(f.severity) for f in snap.findings), default=-1)
    return (0 if snap.error else 1, -worst, name)


#: a probe faster than this shows as "<50ms": a healthy node's time moves every poll, and one
#: changed cell has Textual draw the whole table again (at 256 nodes, twice a second)
PROBE_FAST_MS = 50


#: the probe times the node table tells apart below a second: a cell changes only when a node
#: crosses one (at 256 real-size nodes the times wander by tens of ms every poll: in 10 ms steps
#: every row was redrawn at every redraw)
PROBE_STEPS_MS = (PROBE_FAST_MS, 100, 250, 500, 1000)


def probe_cell(ms: float | None) -> str:
    """A node's probe time as the node table shows it: "<50ms" when healthy, then "<100ms",
    "<250ms", "<500ms", "<1s", and in tenths of a second above."""
    if ms is None:
        return ""
    for step in PROBE_STEPS_MS:
        if ms < step:
            return f"<{step}ms" if step < 1000 else "<1s"
    return f"{ms / 1000:.1f}s"


def node_widths(name: str, snap: NodeSnapshot | None, stale_s: float | None = None) -> dict[str, int]:
    """The cells a node's row needs in each column but the last (the finding: it takes what is
    left), without making its finding cell (the dear one: the memory its processes hold)."""
    cells = node_cells(name, snap, stale_s, finding=False)
    return {key: cell_width(value) for (_label, key), value in zip(NODE_COLUMNS[:-1], cells)}


def node_cells(name: str, snap: NodeSnapshot | None, stale_s: float | None = None, *,
               finding: bool = True) -> tuple:
    """Node, state, GPUs, used, probe time, and what matters most there: the finding that
    carries its next step, or — for a node that fails — why, in one line. ``stale_s``: no
    reading came for that long (the poll itself stopped returning): State says so.
    ``finding``: False leaves the finding's cell empty (a healthy node's: node_widths)."""
    if snap is None:
        return (literal(name, limit=28), Text("connecting…", style="dim"), "", "", "", "")
    if stale_s is not None:
        cells = node_cells(name, snap, finding=finding)
        return (cells[0], Text(f"stale {stale_s:.0f}s", style="bold yellow"), *cells[2:])
    probe = probe_cell(snap.probe_ms)
    if snap.error:          # the cause in State ("✖ host key"), what to do about it first beside it
        why = snap.error.partition(": ")[2] or snap.error          # State says the kind already
        cell = remedy_first(snap.error) if remedy_of(snap.error) else why
        return (literal(name, limit=28), literal("✖ " + error_kind(snap.error), "bold red", limit=16), "", "",
                probe, literal(cell, "bold red", limit=FINDING_CELL))
    used = sum(g.memory_used_mib or 0 for g in snap.gpus)
    # the node's worst finding when it is high or critical, else what its GPUs do: "holding" (a
    # GPU holds memory: the finding beside it says whose and what to do) or "idle" — never "ok",
    # which read as healthy beside a node holding 594 GiB (a low finding, persistence mode say,
    # needs nothing done)
    worst = max((f.severity for f in snap.findings if severity_rank(f.severity) >= severity_rank("high")),
                key=severity_rank, default=None)
    holding = any((g.memory_used_mib or 0) > FREED_MIB for g in snap.gpus)
    word = worst or ("holding" if holding else "idle")
    if snap.warnings:
        word += f" ⚠{len(snap.warnings)}"
    state = Text(word, style=SEVERITY_STYLE.get(worst, "") if worst
                 else ("green" if not snap.warnings and not holding else "yellow"))
    return (literal(name, limit=28), state, t.mib(used), str(len(snap.gpus)), probe,
            finding_cell(snap) if finding else "")


def health_cell(g: Gpu, room: int | None = None) -> Text:
    """``61°C 350W ECC 3``: console/output/health.py's words for ``room`` cells, each mark in
    its severity's style."""
    cell = Text()
    for text, severity in health.fit(g, room):
        if cell:
            cell.append(" ")
        cell.append(text, style=MARK_STYLE.get(severity, ""))
    return cell


def gpu_cells(snap: NodeSnapshot, g: Gpu, name_room: int | None = None, health_room: int | None = None) -> tuple:
    """``name_room``: the cells the name may take before the panel's edge (it is cut there with
    "…", never mid-word against the memory chart; under 4: no name); ``health_room``: the
    health cell's (health.fit)."""
    holders = gpu_holders(snap, g.index)
    used, total = g.memory_used_mib, g.memory_total_mib
    share = (used or 0) / total if total else 0
    style = "bold red" if share > 0.5 and not holders else ("yellow" if share > 0.5 else "")
    mig = f" MIG×{len(g.mig_instances)}" if g.mig_mode else ""
    return (Text(str(g.index)), Text(f"{fmt_mib(used)} / {fmt_mib(total)}", style=style),
            "N/A" if g.utilization_pct is None else f"{g.utilization_pct}%",
            str(len(holders)), health_cell(g, health_room), _cut(literal(g.name + mig, limit=48), name_room))


def _cut(text: Text, room: int | None) -> Text:
    if room is not None and room < 4:
        return Text("")
    if room is not None and text.cell_len > room:
        text.truncate(room, overflow="ellipsis")
    return text


def gpu_layout(snap: NodeSnapshot | None, width: int | None, padding: int = 1
               ) -> tuple[tuple[tuple[str, str], ...], dict[str, tuple]]:
    """The GPU panel's columns and rows for a table ``width`` cells wide (None: not laid out
    yet: everything). The memory, the utilisation, the holders and what is wrong with a GPU
    always show; as the width shrinks the name goes first (cut with "…", then gone with its
    header), then each GPU's power, then its temperature — a hot one stays, as a mark
    (health.fit)."""
    if snap is None:
        return GPU_COLUMNS, {}
    rows = {f"{snap.name}:{g.index}": gpu_cells(snap, g) for g in snap.gpus}
    rows.update({f"{snap.name}:lost:{bus}": lost_gpu_cells(bus) for bus in snap.lost_gpus})
    if width is None:
        return _labels(rows), rows
    health_room = width - _fixed_width(rows, padding) - 2 * padding
    rows = {key: cells[:4] + ((health_cell(g, health_room),) if g is not None else cells[4:5]) + cells[5:]
            for (key, cells), g in zip(rows.items(), [*snap.gpus, *[None] * len(snap.lost_gpus)])}
    columns = _labels(rows)
    health_w = _column_width(columns[4][0], rows, 4)
    name_room = health_room - health_w - 2 * padding
    rows = {key: cells[:5] + (_cut(cells[5], name_room),) for key, cells in rows.items()}
    return _labels(rows), rows


def _column_width(label: str, rows: dict[str, tuple], i: int) -> int:
    """The cells column ``i`` needs: its label's and its widest cell's."""
    return max([cell_width(label)] + [cell_width(r[i]) for r in rows.values()])


def _fixed_width(rows: dict[str, tuple], padding: int) -> int:
    """The GPU panel's first four columns (index, memory, utilisation, holders), padding included:
    what always shows."""
    return sum(_column_width(label, rows, i) + 2 * padding for i, (label, _key) in enumerate(GPU_COLUMNS[:4]))


def _labels(rows: dict[str, tuple]) -> tuple[tuple[str, str], ...]:
    """GPU_COLUMNS, with no header over a column that holds nothing (the health of a driver that
    reports none, the names with no room): no "Na" cut at the panel's edge."""
    empty = {key for i, (_label, key) in enumerate(GPU_COLUMNS)
             if i >= 4 and rows and not any(cell_width(r[i]) for r in rows.values())}
    return tuple(("" if key in empty else label, key) for label, key in GPU_COLUMNS)


def gpu_need(snap: NodeSnapshot | None, padding: int = 1) -> int:
    """The cells the GPU table needs at least: its first four columns and each GPU's health at
    its narrowest (the first mark, health.fit with no room)."""
    if snap is None:
        return 0
    _columns, rows = gpu_layout(snap, None)
    fixed = _fixed_width(rows, padding)
    marks = max([health.width_of(health.fit(g, 0)) for g in snap.gpus] + [0])
    return fixed + (marks + 2 * padding if marks else 0)


#: the memory chart's widest (its CSS max-width) and, below this, no chart at all
CHART_MOST, CHART_LEAST = 64, 8


def fit_gpu_chart(row, chart, snap: NodeSnapshot | None) -> bool:
    """The memory chart beside the GPU table gives way (narrower, then hidden) when the table
    needs the room for a GPU's marks (on a terminal under 80 columns); True when it changed."""
    width = row.size.width
    if width <= 0:
        return False
    room = width - gpu_need(snap)
    most = max(0, min(CHART_MOST, room))
    if getattr(chart, "room_given", CHART_MOST) == most:
        return False
    chart.room_given = most
    chart.display = most >= CHART_LEAST
    chart.styles.max_width = most
    chart.styles.min_width = min(14, most)
    return True


#: per GPU table, the snapshot it last showed (fitted again when its width changes)
_GPU_SNAPSHOT: "weakref.WeakKeyDictionary[DataTable, NodeSnapshot | None]" = weakref.WeakKeyDictionary()


def last_gpu_snapshot(table: DataTable) -> NodeSnapshot | None:
    return _GPU_SNAPSHOT.get(table)


#: per GPU table, the columns it was last given (gpu_layout): a change rebuilds them
_GPU_COLUMNS_SENT: "weakref.WeakKeyDictionary[DataTable, tuple]" = weakref.WeakKeyDictionary()


def _gpu_fit(table: DataTable, snap: NodeSnapshot | None) -> tuple[tuple, dict[str, tuple]]:
    """The GPU panel's columns (and their widths) and rows at the table's width now."""
    width = table.scrollable_content_region.width
    columns, rows = gpu_layout(snap, width if width > 0 else None, table.cell_padding)
    return (columns, tuple(_column_width(label, rows, i) for i, (label, _key) in enumerate(columns))), rows


def gpu_fitted(table: DataTable) -> bool:
    """Whether the GPU panel's columns are those of its width now (a resize refits them after
    the next refresh: tests wait for this before they take a picture)."""
    return _GPU_COLUMNS_SENT.get(table) == _gpu_fit(table, _GPU_SNAPSHOT.get(table))[0]


def sync_gpu_table(table: DataTable, snap: NodeSnapshot | None) -> None:
    """The GPU panel at its width now (gpu_layout). A column's width only grows as cells change
    (_wider): when the layout changes (a resize, a mark that comes or goes) the columns are
    made anew, so a column left wide does not push the name past the edge; the cursor stays
    on its GPU."""
    _GPU_SNAPSHOT[table] = snap
    fit, rows = _gpu_fit(table, snap)
    selected = selected_key(table)
    if _GPU_COLUMNS_SENT.get(table) != fit:
        table.clear(columns=True)
        _SENT.pop(table, None)
        columns, _widths = fit
        add_columns(table, columns)
        _GPU_COLUMNS_SENT[table] = fit
    sync_table(table, rows)
    if selected is not None and selected in rows and selected_key(table) != selected:
        table.move_cursor(row=table.get_row_index(selected), animate=False)


def lost_gpu_cells(bus: str) -> tuple:
    """A GPU the driver cannot reach: its bus id where the health would be (the names may have no room)."""
    return (Text("?"), Text("GPU is lost", style="bold red"), "", "", literal(bus), Text(""))


def proc_widths(rows, tagged: set[str]) -> dict[str, int]:
    """The process panel's column widths for ``rows`` without building their cells (the
    panel builds only those it draws): as wide as the widest PID, D count, memory and user."""
    if not rows:
        return {}
    mem = [cell_width(mem_cell(r.proc)) for r in rows if r.proc.gpu_memory_mib or r.proc.holds_devices]
    return {"pid": max(len(str(r.proc.pid)) for r in rows) + (1 if tagged else 0),
            "d": max(len(str(r.proc.threads_in_d)) if r.proc.threads_in_d else 0 for r in rows),
            "mib": max(mem, default=0),
            "sm": max(len(sm_cell(r.proc)) for r in rows),
            "user": min(10, max(len(r.proc.user or "?") for r in rows))}


def sm_cell(p) -> str:
    """The SM% cell: "97" (the busiest of its GPUs), empty where the driver reports none."""
    return "" if p.gpu_sm_pct is None else str(p.gpu_sm_pct)


def mem_cell(p) -> str:
    """The GPU MiB cell: "76105 g0", "81920 ×8", "dev g7" for a device holder with no memory."""
    mib = p.gpu_memory_total_mib
    gpus = ",".join(sorted(p.gpu_memory_mib, key=lambda k: (len(k), k)))
    devs = p.device_gpus
    mem = str(mib) if mib else ((f"dev g{devs[0]}" if len(devs) == 1 else f"dev ×{len(devs)}" if devs
                                 else "dev") if p.holds_devices else "")
    if gpus and mib:
        mem = f"{mib} g{gpus}" if len(p.gpu_memory_mib) <= 2 else f"{mib} ×{len(p.gpu_memory_mib)}"
    return mem


def process_text(p) -> str:
    """The process as the panel names it: its command line; a process that renamed itself (a
    data loader's ``pt_data_worker``, which the findings call it) first by that name."""
    if not p.cmdline:
        return f"[{p.name}]"
    if p.name and p.name not in p.cmdline:
        return f"{p.name}: {p.cmdline}"
    return p.cmdline


def proc_cells(r: ProcRow, tagged: bool = False) -> tuple:
    """A process row's cells, in PROC_COLUMNS' order."""
    p = r.proc
    mem = mem_cell(p)
    indent = "  " * r.depth
    name = indent + (f"{p.name} <defunct>" if p.state == "Z" else process_text(p))
    return (Text(f"*{p.pid}" if tagged else str(p.pid), style="bold reverse" if tagged else ""),
            Text(p.state, style=STATE_STYLE.get(p.state, "")),
            Text(str(p.threads_in_d) if p.threads_in_d else "", style="bold red"),
            mem, sm_cell(p),
            literal(p.user or "?", limit=10), literal(name, limit=200))


#: the key of the process table's last row when it cannot hold every process: it counts the rest
MORE_KEY = "more-processes"


def more_cells(hidden: int) -> tuple:
    """The row that stands for the processes the table does not hold (enter on it: filter);
    short enough for 80 columns (the panel's title says of how many)."""
    return (Text("…", style="dim"), "", "", "", "", "",
            Text(f"{hidden:,} more not shown (/ filters)", style="italic"))


def finding_key(f: Finding) -> str:
    """Stable across polls, so the cursor stays on the same finding."""
    return f"{f.kind}:{','.join(map(str, f.pids))}:{','.join(map(str, f.gpus))}:{f.summary[:40]}"


def finding_order(findings) -> list:
    """By what to do next: the findings that propose a step first, in diagnose's order (most
    severe first; the first is what ``x`` does anywhere: ladder.top_step), then those that need
    nothing done."""
    return sorted(findings, key=lambda f: f.rung is None)


def finding_rows(snap: NodeSnapshot | None, width: int, room: int = 0) -> dict[str, tuple]:
    """By what to do next (``finding_order``): a line of summary and a line of next step each
    (Enter shows all). ``room``: the lines the panel has; what the rows leave of it goes to the
    findings cut short, the first first (its next step, then its summary): a finding takes all
    it needs before the next gets any."""
    rows: dict[str, tuple] = {}
    if snap is None:
        rows["waiting"] = (Text(" waiting for the first poll…", style="dim"),)
        return rows
    if snap.error:          # the remedy first, whole (console/ui/error_row.py)
        rows["error"] = (error_cell(snap.error, width),)
    order = finding_order(snap.findings)
    spare = room - finding_lines(snap, width)
    for f in order:
        summary, step = [printable(f.summary, width - 9)], [printable(f.next_step, width - 9)] if f.next_step else []
        if spare > 0:
            # the lines to spare, to the next step first (what to do), then to the summary
            whole_step = _wrapped(f.next_step, width - 9) if f.next_step else []
            whole_summary = _wrapped(f.summary, width - 9)
            more_step = min(spare, len(whole_step) - len(step))
            more_summary = min(spare - more_step, len(whole_summary) - 1)
            if more_step > 0:
                step = _first(whole_step, len(step) + more_step, width - 9)
            if more_summary > 0:
                summary = _first(whole_summary, 1 + more_summary, width - 9)
            spare -= more_step + more_summary
        cell = Text(f"{f.severity.upper():<8} ", style=SEVERITY_STYLE.get(f.severity, ""))
        cell.append("\n         ".join(summary))
        if step:
            cell.append("\n       → " + "\n         ".join(step), style="italic")
        rows[finding_key(f)] = (cell,)
    if not rows:
        rows["none"] = (Text(" no findings", style="dim"),)
    return rows


def finding_lines(snap: NodeSnapshot | None, width: int | None = None) -> int:
    """The lines ``finding_rows`` takes with no room given: a line of summary and one of next
    step each, the node's error (its remedy and itself wrapped at ``width``; one line without),
    one line when there is nothing to show."""
    if snap is None:
        return 1
    error = (len(error_lines(snap.error, width)) if width else 1) if snap.error else 0
    return (error + sum(2 if f.next_step else 1 for f in snap.findings)) or 1


def _first(lines: list[str], n: int, width: int) -> list[str]:
    """The first ``n`` of wrapped ``lines``, the last of them ending in … where more follows."""
    if n >= len(lines):
        return lines
    return lines[:n - 1] + [lines[n - 1][:max(0, width - 1)] + "…"]


def _wrapped(text: str, width: int) -> list[str]:
    """``text`` made printable and wrapped at ``width`` (a word longer than that is cut)."""
    return textwrap.wrap(printable(text), max(1, width), break_long_words=True, break_on_hyphens=False) or [""]


def cell_lines(cells: tuple) -> int:
    """Lines a row of these cells takes (its tallest cell)."""
    return max((len((c.plain if isinstance(c, Text) else str(c)).split("\n")) for c in cells), default=1)


def content_lines(table) -> int:
    """Lines that show the whole table: its header and every row."""
    if isinstance(table, VirtualTable):
        return table.content_lines()
    header = table.header_height if table.show_header else 0
    return header + sum(r.height if not r.auto_height else cell_lines(tuple(table.get_row(r.key)))
                        for r in table.ordered_rows)


def rows_in_view(table: DataTable, lines: int) -> int:
    """How many rows fit whole in ``lines`` (the header taken off)."""
    lines -= table.header_height if table.show_header else 0
    if isinstance(table, VirtualTable):         # one line a row
        return max(0, min(lines, table.row_count))
    shown = 0
    for r in table.ordered_rows:
        lines -= r.height if not r.auto_height else cell_lines(tuple(table.get_row(r.key)))
        if lines < 0:
            break
        shown += 1
    return shown


def selected_key(table: DataTable) -> str | None:
    if isinstance(table, VirtualTable):
        return table.selected_key
    if not table.row_count or not 0 <= table.cursor_row < table.row_count:
        return None
    return table.coordinate_to_cell_key((table.cursor_row, 0)).row_key.value


#: per table, {row key: (the table's Row, the cells it holds)}: what sync_table last sent, so
#: unchanged rows are compared without reading the table back
_SENT: "weakref.WeakKeyDictionary[DataTable, dict[str, tuple[object, tuple]]]" = weakref.WeakKeyDictionary()


def row_height(cells: tuple) -> int | None:
    """1 for a row of one-line cells (what measuring it would give, without rendering it
    first); None (measured) when a cell has more lines or is not plain text."""
    for cell in cells:
        if isinstance(cell, Text):
            if "\n" in cell.plain:
                return None
        elif not isinstance(cell, str) or "\n" in cell:
            return None
    return 1


def _wider(table: DataTable, col: str, value: object) -> bool:
    """Whether a new cell value needs its column widened. Columns widen, never narrow, as
    values change: Textual re-measures the whole column for every narrower value (each
    update of a 256-row node table would measure 256 cells), and a column that keeps its
    width does not jump about as probe times go from 120ms to 9ms."""
    column = table.columns.get(col)    # a ColumnKey hashes and compares as its string
    return column is None or cell_width(value) > column.content_width


def _send(table: DataTable, sent: dict, key: str, row: object, cells: tuple, columns: list) -> tuple:
    """Bring an existing row to ``cells``, sending only the cells that differ from what it
    holds; returns the cells it holds now (unchanged ones are the objects it already had)."""
    current = _held(table, sent, key, row, columns)
    if current == cells:                    # the usual case: nothing changed
        return current
    held = list(current)
    for j, (col, old, value) in enumerate(zip(columns, current, cells)):
        if old != value:
            table.update_cell(key, col, value, update_width=_wider(table, col, value))
            held[j] = value
    sent[key] = (row, tuple(held))
    return sent[key][1]


def _held(table: DataTable, sent: dict, key: str, row: object, columns: list) -> tuple:
    """The cells a row holds: as sent from here, or read back (and remembered) when not."""
    hit = sent.get(key)
    if hit is not None and hit[0] is row and len(hit[1]) == len(columns):
        return hit[1]
    current = tuple(table.get_row(key))
    sent[key] = (row, current)
    return current


#: Textual removes a row in time proportional to the table (and moves its cursor each time):
#: when more rows go than this, and most of the table, it is refilled instead
REFILL_AT = 8


def _refill(table: DataTable, wanted: dict[str, tuple], selected: str | None) -> None:
    """Most rows are gone (another node's processes, all processes hidden): fill the table
    anew; the selected row keeps the cursor when it stays, else the cursor keeps its place."""
    row = table.cursor_row
    sent = _SENT.setdefault(table, {})
    table.clear()
    sent.clear()
    columns = len(table.ordered_columns)
    for key, cells in wanted.items():
        row_key = table.add_row(*cells, key=key, height=row_height(cells))
        sent[key] = (table.rows[row_key], tuple(cells) + (None,) * (columns - len(cells)))
    if selected is not None and selected in wanted:
        table.move_cursor(row=table.get_row_index(selected), animate=False)
    elif table.row_count:
        table.move_cursor(row=min(row, table.row_count - 1), animate=False)


def sync_table(table: DataTable, wanted: dict[str, tuple]) -> None:
    """Update rows by key: the cursor stays on the same row (process). When most rows go, the
    table is refilled (_refill), the cursor put back on its row by key.

    Only cells that differ from what the row holds are sent. The first cell of every row is
    a fresh object, so the sort key can find each row's wanted position by that object's
    identity.
    """
    wanted = {key: literal_cells(cells) for key, cells in wanted.items()}   # literally, never markup
    selected = selected_key(table)
    sent = _SENT.setdefault(table, {})
    present = {rk.value: row for rk, row in table.rows.items()}
    gone = present.keys() - wanted.keys()
    if len(gone) > REFILL_AT and 2 * len(gone) > len(present):
        _refill(table, wanted, selected)
        return
    for key in gone:
        table.remove_row(key)
    for key in [k for k in sent if k not in wanted or k not in present]:
        del sent[key]
    columns = [c.key for c in table.ordered_columns]
    position: dict[int, int] = {}
    for i, (key, cells) in enumerate(wanted.items()):
        row = present.get(key)
        if row is not None and getattr(row, "auto_height", False) \
                and cell_lines(_held(table, sent, key, row, columns)) != cell_lines(cells):
            table.remove_row(key)           # a measured row keeps the height it was added with
            sent.pop(key, None)
            row = None
        if row is not None:
            held = _send(table, sent, key, row, cells, columns)
            position[id(held[0])] = i
        else:
            row_key = table.add_row(*cells, key=key, height=row_height(cells))
            sent[key] = (table.rows[row_key], tuple(cells) + (None,) * (len(columns) - len(cells)))
            position[id(cells[0])] = i
    if [r.key.value for r in table.ordered_rows] != list(wanted):
        table.sort(key=lambda cells: position.get(id(cells[0]), 1 << 30))
    if selected is not None and selected in wanted:
        table.move_cursor(row=table.get_row_index(selected), animate=False)
