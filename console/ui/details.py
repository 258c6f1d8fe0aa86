"""Full text of one finding, process or GPU (Enter on a row): nothing cut, markup shown literally."""
from __future__ import annotations

import datetime as dt

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical, VerticalScroll
from textual.screen import ModalScreen

from console.diagnosis.liveness import evidence_words
from console.model import Finding, Gpu, NodeSnapshot, Proc, recovery_words
from console.output import health
from console.output.rows import fmt_mib, gpu_holders
from console.ui.tables import MORE_KEY, SEVERITY_STYLE, finding_key
from console.ui import pinned
from console.ui.text import LiteralStatic, printable
from console.ui import keys


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
        procs = f.evidence.get("processes")
        if isinstance(procs, list) and procs:
            out.append("\nWhy the console thinks so\n", style="bold")
            for ev in procs:
                if isinstance(ev, dict):
                    out.append("  " + printable(evidence_words(ev)) + "\n")
        out.append("\nEvidence\n", style="bold")
        for k, v in f.evidence.items():
            if k != "processes":
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
    if p.gpu_memory_mib:         # a process the driver lists: what it says of its SM use
        _field(out, "GPU SM busy", f"{p.gpu_sm_pct}% (the busiest of its GPUs)" if p.gpu_sm_pct is not None
               else "not reported (no sample, or the driver does not support it)")
    if p.device_files:
        _field(out, "device files", " ".join(p.device_files))
    if p.pid_ns:
        _field(out, "pid namespace", p.pid_ns)
    if p.cgroup is not None:
        if p.cgroup.in_container:
            _field(out, "container", p.cgroup.describe())
        elif p.cgroup.unit:
            _field(out, "systemd unit", p.cgroup.unit)
        _field(out, "cgroup", p.cgroup.path)
    for d in snap.driver_processes_here():
        if d.pid == p.pid and d.gpu_instance_id is not None:
            g = snap.gpu(d.gpu_index) if d.gpu_index is not None else None
            m = g.mig_instance(d.gpu_instance_id, d.compute_instance_id) if g is not None else None
            _field(out, "MIG instance", f"GPU {d.gpu_index} GI {d.gpu_instance_id} CI {d.compute_instance_id}"
                   + (f" ({m.profile}, {m.uuid})" if m else ""))
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


def health_words(g: Gpu) -> str:
    """'54 °C · 71.2 W · SM 1455 MHz · PCIe gen 5 x16 · 0 uncorrected ECC errors'; what the driver
    does not report is left out ("not reported" when nothing is)."""
    parts = []
    if g.temperature_c is not None:
        slows = f", slows down at {g.temperature_slowdown_c} °C" if g.temperature_slowdown_c else ""
        parts.append(f"{g.temperature_c} °C" + (f" (hot{slows})" if health.hot(g) else
                                                (f" ({slows[2:]})" if slows else "")))
    if g.power_w is not None:
        parts.append(f"{g.power_w:.1f} W")
    if g.clock_sm_mhz is not None:
        parts.append(f"SM {g.clock_sm_mhz} MHz")
    if g.pcie_gen is not None or g.pcie_width is not None:
        link = (f"PCIe gen {g.pcie_gen if g.pcie_gen is not None else '?'}"
                + (f" x{g.pcie_width}" if g.pcie_width is not None else ""))
        if health.link_degraded(g):
            link += f" (degraded: x{g.pcie_width_max} possible)"
        elif g.pcie_gen is not None and g.pcie_gen_max is not None and g.pcie_gen < g.pcie_gen_max:
            link += f" (gen {g.pcie_gen_max} possible: an idle link runs slower)"
        parts.append(link)
    if g.ecc_uncorrected is not None:
        parts.append(f"{g.ecc_uncorrected} uncorrected ECC error{'s' if g.ecc_uncorrected != 1 else ''}")
    return " · ".join(parts) or "not reported by this driver"


def repair_words(g: Gpu) -> tuple[str, str]:
    """Row remapping / page retirement in words, and their style: 'remap pending (4 rows after
    uncorrectable errors): a reset applies it'."""
    r = g.memory_repair
    if r is None:
        return "not read yet (asked once a minute)", "dim"
    rows = [f"{n} row{'s' if n != 1 else ''} after {kind} errors" for n, kind in ((r.rows_uncorrectable, "uncorrectable"),
                                                       (r.rows_correctable, "correctable")) if n]
    counted = f" ({', '.join(rows)})" if rows else ""
    if r.remap_failure:
        return f"a row remap FAILED{counted}: drain the node, the GPU wants inspecting or replacing", "bold red"
    if r.remap_pending:
        return f"row remap pending{counted}: a reset applies it", "bold yellow"
    if r.pages_pending:
        return "pages pending retirement: a reset retires them", "bold yellow"
    if r.remap_pending is None and r.pages_pending is None:
        return "not reported by this GPU or driver", ""
    return f"nothing pending{counted}", ""


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
    _field(out, "recovery", "not reported by this driver" if g.recovery_action is None
           else recovery_words(g.recovery_action), "" if g.recovery_action in (None, "none") else "bold red")
    _field(out, "health", health_words(g))
    words, style = repair_words(g)
    _field(out, "memory repair", words, style)
    if g.fabric_state is not None or g.fabric_status is not None:
        _field(out, "NVLink fabric", f"{g.fabric_state or '?'} / {g.fabric_status or '?'}",
               "" if (g.fabric_state, g.fabric_status) == ("Completed", "Success") else "bold yellow")
    if g.mig_mode:
        _mig_lines(out, g, snap)
    holders = gpu_holders(snap, g.index)
    out.append(f"\nHolders ({len(holders)})\n", style="bold")
    for p in holders:
        mib = p.gpu_memory_mib.get(str(g.index))
        out.append(f"  {p.pid:>8} {printable(p.state, 1)} {fmt_mib(mib) if str(g.index) in p.gpu_memory_mib else 'device':>10}  ")
        out.append(printable(p.cmdline or p.name, 60) + "\n")
    return out


def _mig_lines(out: Text, g: Gpu, snap: NodeSnapshot) -> None:
    """MIG: each instance with its memory and the processes the driver lists on it."""
    out.append(f"\nMIG instances ({len(g.mig_instances)})\n", style="bold")
    procs = [d for d in snap.driver_processes if d.gpu_index == g.index]
    placed: set[int] = set()
    for m in g.mig_instances:
        ids = f"GI {m.gpu_instance_id} CI {m.compute_instance_id}" if m.gpu_instance_id is not None else \
            f"device {m.device_index}"
        mem = (f"{fmt_mib(m.memory_used_mib)} / {fmt_mib(m.memory_total_mib)}" if m.memory_used_mib is not None
               else "memory not reported")
        out.append(f"  MIG {printable(m.profile)} {ids}  {mem}  {printable(m.uuid)}\n")
        for d in procs:
            if m.gpu_instance_id is not None and d.gpu_instance_id == m.gpu_instance_id and \
                    d.compute_instance_id in (None, m.compute_instance_id):
                placed.add(id(d))
                out.append(f"      {d.pid:>8} {fmt_mib(d.used_memory_mib):>10}  {printable(d.name, 60)}\n")
    rest = [d for d in procs if id(d) not in placed]
    if rest:
        out.append("  on an instance the driver does not name:\n")
        for d in rest:
            out.append(f"      {d.pid:>8} {fmt_mib(d.used_memory_mib):>10}  {printable(d.name, 60)}\n")
    if g.mig_instances and all(m.memory_used_mib is None for m in g.mig_instances):
        out.append("  Per-instance memory and each process's instance are not in nvidia-smi's CSV queries "
                   "(a remote node); the local console reads them through NVML.\n", style="dim")


def row_detail(table: str | None, key: str, snap: NodeSnapshot) -> tuple[Text | None, Finding | None]:
    """What enter on a row of a panel shows (the driving console's and the follower's): the
    detail of the process, GPU or finding the row's key names, and the finding itself (its
    window offers its step); (None, None) for the row counting hidden processes, a lost GPU, or
    a key no longer in the snapshot."""
    if table == "procs" and key != MORE_KEY:
        proc = snap.proc(int(key.rsplit(":", 1)[1]))
        return (proc_detail(proc, snap) if proc else None), None
    if table == "gpus" and ":lost:" not in key:
        gpu = snap.gpu(int(key.rsplit(":", 1)[1]))
        return (gpu_detail(gpu, snap) if gpu else None), None
    if table == "findings" and key == "error" and snap.error:
        from console.ui.error_row import error_detail
        return error_detail(snap.name, snap.error), None
    if table == "findings":
        found = next((f for f in snap.findings if finding_key(f) == key), None)
        return (finding_detail(found, snap) if found else None), found
    return None, None


class DetailScreen(ModalScreen[str | None]):
    """Dismisses with None, or with "apply" when the operator asks for the finding's next step
    (x; only offered for a finding whose step is a rung: the Confirm screen still comes first).
    The keys line stays at the bottom; the body scrolls (↑ ↓ pgup pgdn home end)."""
    BINDINGS = keys.bindings("details")

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
        body = self.query("#detail-body")
        if not body:          # opened as the console quits (a check's result): nothing to show
            return
        body.first().focus()
        self.call_after_refresh(self._fit)

    def on_resize(self) -> None:
        self.call_after_refresh(self._fit)

    def _fit(self) -> None:
        scrolls = pinned.fit_middle(self, self.query_one("#detail"), self.query_one("#detail-body"), 0.9)
        if scrolls != self._scrolls:
            self._scrolls = scrolls
            self.query_one("#detail-keys", LiteralStatic).update(self._keys())
