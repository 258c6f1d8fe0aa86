"""Full text of one finding, process or GPU (Enter on a row): nothing cut, markup shown literally."""
from __future__ import annotations

import datetime as dt

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical, VerticalScroll
from textual.screen import ModalScreen

from console.model import Finding, Gpu, NodeSnapshot, Proc
from console.output.rows import fmt_mib, gpu_holders
from console.ui.tables import SEVERITY_STYLE
from console.ui import pinned
from console.ui.text import LiteralStatic, printable


def _field(out: Text, name: str, value: object, style: str = "") -> None:
    out.append(f"{name:<14} ", style="bold")
    out.append(printable(value) + "\n", style=style)


def _when(epoch: float | None) -> str:
    if epoch is None:
        return "?"
    return dt.datetime.fromtimestamp(epoch, dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


def finding_detail(f: Finding, snap: NodeSnapshot) -> Text:
    from console.actions.ladder import commands_for, step_args
    out = Text()
    out.append(f"{f.severity.upper()} ", style=SEVERITY_STYLE.get(f.severity, ""))
    out.append(f"{f.kind} on {printable(snap.name)}\n\n", style="bold")
    out.append(printable(f.summary) + "\n\n")
    out.append("Next step\n", style="bold")
    out.append(printable(f.next_step) + "\n")
    if f.rung:
        try:
            commands = commands_for(f.rung, snap, *step_args(f))
        except Exception as exc:  # noqa: BLE001 - never lose the screen over a rendering bug
            commands = [f"(cannot render: {exc})"]
        if commands:
            out.append(f"\nRung '{f.rung}' would run, exactly:\n", style="bold")
            for c in commands:
                out.append("  $ " + printable(c) + "\n", style="italic")
    if f.since:
        _field(out, "\nsince", _when(f.since))
    if f.pids:
        _field(out, "PIDs", " ".join(map(str, f.pids)))
    if f.gpus:
        _field(out, "GPUs", " ".join(map(str, f.gpus)))
    if f.evidence:
        out.append("\nEvidence\n", style="bold")
        for k, v in f.evidence.items():
            _field(out, f"  {k}", v)
    return out


def proc_detail(p: Proc, snap: NodeSnapshot) -> Text:
    out = Text()
    out.append(f"PID {p.pid} on {printable(snap.name)}\n\n", style="bold")
    _field(out, "command", p.cmdline or f"[{p.name}]")
    _field(out, "name (comm)", p.name)
    _field(out, "state", p.state + (" (zombie: <defunct>)" if p.state == "Z" else ""))
    parent = snap.proc(p.ppid)
    _field(out, "parent", f"{p.ppid}" + (f" {parent.name}" if parent else ""))
    _field(out, "user", p.user or "?")
    _field(out, "started", _when(p.create_time))
    if p.num_threads is not None:
        _field(out, "threads", p.num_threads)
    if p.gpu_memory_mib:
        _field(out, "GPU memory", ", ".join(f"GPU{k} {fmt_mib(v)}" for k, v in sorted(p.gpu_memory_mib.items())))
    if p.device_files:
        _field(out, "device files", " ".join(p.device_files))
    if p.pid_ns:
        _field(out, "pid namespace", p.pid_ns)
    for t in p.d_threads:
        _field(out, "thread in D", f"TID {t.tid} {t.name or ''} waiting in {t.wchan or '?'}", "bold red")
    related = [f for f in snap.findings if p.pid in f.pids]
    if related:
        out.append("\nFindings\n", style="bold")
        for f in related:
            out.append(f"  {f.severity.upper():<8} ", style=SEVERITY_STYLE.get(f.severity, ""))
            out.append(printable(f.summary) + "\n")
    if p.pid in snap.own_pids:
        out.append("\nThis is the console itself or its session: never signalled.\n", style="yellow")
    return out


def gpu_detail(g: Gpu, snap: NodeSnapshot) -> Text:
    out = Text()
    out.append(f"GPU {g.index} on {printable(snap.name)}\n\n", style="bold")
    _field(out, "name", g.name)
    _field(out, "uuid", g.uuid)
    _field(out, "bus id", g.bus_id)
    _field(out, "memory", f"{fmt_mib(g.memory_used_mib)} / {fmt_mib(g.memory_total_mib)}")
    if g.memory_reserved_mib is not None:
        _field(out, "reserved", fmt_mib(g.memory_reserved_mib))
    _field(out, "utilization", "N/A" if g.utilization_pct is None else f"{g.utilization_pct}%")
    _field(out, "persistence", {True: "on", False: "off", None: "N/A"}[g.persistence_mode])
    if g.mig_mode:
        _field(out, "MIG", ", ".join(f"{m.profile} ({m.uuid})" for m in g.mig_instances) or "enabled")
    holders = gpu_holders(snap, g.index)
    out.append(f"\nHolders ({len(holders)})\n", style="bold")
    for p in holders:
        mib = p.gpu_memory_mib.get(str(g.index))
        out.append(f"  {p.pid:>8} {printable(p.state, 1)} {fmt_mib(mib) if str(g.index) in p.gpu_memory_mib else 'device':>10}  ")
        out.append(printable(p.cmdline or p.name, 60) + "\n")
    return out


class DetailScreen(ModalScreen[str | None]):
    """Dismisses with None, or with "apply" when the operator asks for the finding's next step
    (x; only offered for a finding whose step is a rung: the Confirm screen still comes first).
    The keys line stays at the bottom; the body scrolls (↑ ↓ pgup pgdn home end)."""
    BINDINGS = [Binding("escape,q,enter", "dismiss", "Close"), Binding("x", "apply", "Do the next step")]

    def __init__(self, body: Text, *, can_apply: bool = False) -> None:
        super().__init__()
        self._body = body
        self._can_apply = can_apply
        self._scrolls = False

    @property
    def text(self) -> str:
        """Everything the modal shows, as plain text (body, then the keys line)."""
        return pinned.text_of(self)

    def action_apply(self) -> None:
        if self._can_apply:
            self.dismiss("apply")

    def _keys(self) -> Text:
        out = Text()
        if self._can_apply:
            out.append("x: do this next step (Confirm first)   ", style="bold")
        out.append("esc: close", style="bold")
        if self._scrolls:
            out.append("   ↓ pgdn end: more", style="dim")
        return out

    def compose(self) -> ComposeResult:
        with Vertical(id="detail"):
            with VerticalScroll(id="detail-body"):
                yield LiteralStatic(self._body)
            yield LiteralStatic(self._keys(), id="detail-keys")

    def on_mount(self) -> None:
        self.query_one("#detail-body").focus()
        self.call_after_refresh(self._fit)

    def on_resize(self) -> None:
        self.call_after_refresh(self._fit)

    def _fit(self) -> None:
        scrolls = pinned.fit_middle(self, self.query_one("#detail"), self.query_one("#detail-body"), 0.9)
        if scrolls != self._scrolls:
            self._scrolls = scrolls
            self.query_one("#detail-keys", LiteralStatic).update(self._keys())
