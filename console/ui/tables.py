"""Row contents of the console's tables and the by-key table update (Textual DataTable)."""
from __future__ import annotations

import weakref

from rich.text import Text
from textual.widgets import DataTable

from console.model import Finding, Gpu, NodeSnapshot, severity_rank
from console.output.rows import ProcRow, fmt_mib, gpu_holders
from console.ui.text import cells as literal_cells, literal, printable

SEVERITY_STYLE = {"critical": "bold white on dark_red", "high": "bold red", "low": "yellow", "info": "dim"}
STATE_STYLE = {"Z": "bold magenta", "D": "bold red", "R": "green"}

NODE_COLUMNS = (("Node", "node"), ("GPUs", "gpus"), ("Used", "used"), ("Probe", "probe"),
                ("Worst finding", "finding"), ("State", "state"))
GPU_COLUMNS = (("GPU", "gpu"), ("Memory used/total", "mem"), ("Util", "util"), ("Holders", "holders"),
               ("Name", "name"))
PROC_COLUMNS = (("PID", "pid"), ("S", "state"), ("D", "d"), ("GPU MiB", "mib"), ("User", "user"),
                ("Process", "name"))


def add_columns(table: DataTable, columns: tuple[tuple[str, str], ...]) -> None:
    for label, key in columns:
        table.add_column(label, key=key)


def node_cells(name: str, snap: NodeSnapshot | None) -> tuple:
    if snap is None:
        return (literal(name, limit=28), "", "", "", "", Text("connecting…", style="dim"))
    worst = max(snap.findings, key=lambda f: severity_rank(f.severity), default=None)
    finding = Text("")
    if worst is not None:
        finding = Text(f"{worst.severity} {worst.kind}", style=SEVERITY_STYLE.get(worst.severity, ""))
    probe = "" if snap.probe_ms is None else f"{snap.probe_ms:.0f}ms"
    if snap.error:
        return (literal(name, limit=28), "", "", probe, finding,
                literal("✖ " + snap.error, "bold red", limit=60))
    used = sum(g.memory_used_mib or 0 for g in snap.gpus)
    state = Text("ok" if not snap.warnings else f"ok ⚠{len(snap.warnings)}",
                 style="green" if not snap.warnings else "yellow")
    return (literal(name, limit=28), str(len(snap.gpus)), f"{used // 1024} GiB", probe, finding, state)


def gpu_cells(snap: NodeSnapshot, g: Gpu) -> tuple:
    holders = gpu_holders(snap, g.index)
    used, total = g.memory_used_mib, g.memory_total_mib
    share = (used or 0) / total if total else 0
    style = "bold red" if share > 0.5 and not holders else ("yellow" if share > 0.5 else "")
    mig = f" MIG×{len(g.mig_instances)}" if g.mig_mode else ""
    return (Text(str(g.index)), Text(f"{fmt_mib(used)} / {fmt_mib(total)}", style=style),
            "N/A" if g.utilization_pct is None else f"{g.utilization_pct}%",
            str(len(holders)), literal(g.name + mig, limit=48))


def lost_gpu_cells(bus: str) -> tuple:
    return (Text("?"), Text("GPU is lost", style="bold red"), "", "", literal(bus))


def proc_cells(r: ProcRow, tagged: bool = False) -> tuple:
    p = r.proc
    mib = p.gpu_memory_total_mib
    gpus = ",".join(sorted(p.gpu_memory_mib, key=lambda k: (len(k), k)))
    devs = p.device_gpus
    mem = str(mib) if mib else ((f"dev g{devs[0]}" if len(devs) == 1 else f"dev ×{len(devs)}" if devs
                                 else "dev") if p.holds_devices else "")
    if gpus and mib:
        mem = f"{mib} g{gpus}" if len(p.gpu_memory_mib) <= 2 else f"{mib} ×{len(p.gpu_memory_mib)}"
    indent = "  " * r.depth
    name = indent + (f"{p.name} <defunct>" if p.state == "Z" else (p.cmdline or f"[{p.name}]"))
    return (Text(f"*{p.pid}" if tagged else str(p.pid), style="bold reverse" if tagged else ""),
            Text(p.state, style=STATE_STYLE.get(p.state, "")),
            Text(str(p.threads_in_d) if p.threads_in_d else "", style="bold red"),
            mem, literal(p.user or "?", limit=10), literal(name, limit=200))


#: the key of the process table's last row when it cannot hold every process: it counts the rest
MORE_KEY = "more-processes"


def more_cells(hidden: int) -> tuple:
    """The row that stands for the processes the table does not hold (enter on it: filter);
    short enough for 80 columns (the panel's title says of how many)."""
    return (Text("…", style="dim"), "", "", "", "",
            Text(f"{hidden:,} more not shown (/ filters)", style="italic"))


def finding_key(f: Finding) -> str:
    """Stable across polls, so the cursor stays on the same finding."""
    return f"{f.kind}:{','.join(map(str, f.pids))}:{','.join(map(str, f.gpus))}:{f.summary[:40]}"


def finding_rows(snap: NodeSnapshot | None, width: int) -> dict[str, tuple]:
    """Most severe first: a line of summary and a line of next step each (Enter shows all)."""
    rows: dict[str, tuple] = {}
    if snap is None:
        rows["waiting"] = (Text(" waiting for the first poll…", style="dim"),)
        return rows
    if snap.error:
        rows["error"] = (Text("ERROR    " + printable(snap.error, width - 9), style="bold red"),)
    for f in sorted(snap.findings, key=lambda f: -severity_rank(f.severity)):
        cell = Text(f"{f.severity.upper():<8} ", style=SEVERITY_STYLE.get(f.severity, ""))
        cell.append(printable(f.summary, width - 9))
        if f.next_step:
            cell.append("\n       → " + printable(f.next_step, width - 9), style="italic")
        rows[finding_key(f)] = (cell,)
    if not rows:
        rows["none"] = (Text(" no findings", style="dim"),)
    return rows


def selected_key(table: DataTable) -> str | None:
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


def _send(table: DataTable, sent: dict, key: str, row: object, cells: tuple, columns: list) -> tuple:
    """Bring an existing row to ``cells``, sending only the cells that differ from what it
    holds; returns the cells it holds now (unchanged ones are the objects it already had)."""
    hit = sent.get(key)
    if hit is not None and hit[0] is row and len(hit[1]) == len(columns):
        current = hit[1]
    else:                                   # not sent from here: read it back
        current = tuple(table.get_row(key))
        sent[key] = (row, current)
    if current == cells:                    # the usual case: nothing changed
        return current
    held = list(current)
    for j, (col, old, value) in enumerate(zip(columns, current, cells)):
        if old != value:
            table.update_cell(key, col, value, update_width=True)
            held[j] = value
    sent[key] = (row, tuple(held))
    return sent[key][1]


def update_row(table: DataTable, key: str, cells: tuple) -> bool:
    """Bring one row to ``cells`` (only the cells that changed), leaving every other row
    alone; False when the table has no such row (then sync_table the whole table)."""
    row = table.rows.get(key)       # a RowKey hashes and compares as its string
    if row is None:
        return False
    cells = literal_cells(cells)    # node text is never parsed as markup (console/ui/text.py)
    _send(table, _SENT.setdefault(table, {}), key, row, cells, [c.key for c in table.ordered_columns])
    return True


def sync_table(table: DataTable, wanted: dict[str, tuple]) -> None:
    """Update rows by key, never clear: the cursor stays on the same row (process).

    Only cells that differ from what the row holds are sent. The first cell of every row is
    a fresh object, so the sort key can find each row's wanted position by that object's
    identity.
    """
    wanted = {key: literal_cells(cells) for key, cells in wanted.items()}   # literally, never markup
    selected = selected_key(table)
    sent = _SENT.setdefault(table, {})
    present = {rk.value: row for rk, row in table.rows.items()}
    for key in present.keys() - wanted.keys():
        table.remove_row(key)
    for key in [k for k in sent if k not in wanted or k not in present]:
        del sent[key]
    columns = [c.key for c in table.ordered_columns]
    position: dict[int, int] = {}
    for i, (key, cells) in enumerate(wanted.items()):
        row = present.get(key)
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
