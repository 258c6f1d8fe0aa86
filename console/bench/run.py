"""`gpu-incident bench [--quick] [--json] [--nodes N] [--target DEST]`: how fast the console is.

The headline figures (top-level keys of --json, each the median of REPS repetitions inside the
run, side by side so one noisy second on a shared machine does not decide one; TARGETS says
what each must meet on a 2-core machine):

- transport (console/bench/transport.py): ``probe_local_ms_p50``, ``ssh_poll_ms_p50``,
  ``ssh_poll_ms_p99``, ``fresh_ssh_ms_p50``, ``speedup_vs_fresh_ssh``, ``transport_overhead_ms``,
  ``node_cpu_ms_per_poll``, ``nvidia_smi_calls_per_poll`` (a loopback OpenSSH sshd, started
  and stopped here);
- fan-out (console/bench/fanout.py): the whole console on a pseudo-terminal polling
  ``fanout_nodes`` (--nodes; 256 by default) nodes served by a separate `gpu-incident simulate`:
  ``fanout_cpu_pct``, ``fanout_rss_mib``, ``fanout_round_ms_p99``, ``fanout_sim_cpu_pct``,
  ``fanout_interval_s`` (the interval the console chose), ``key_to_frame_ms_p99``;
- fleet (console/bench/fleet.py): 4096 nodes x 8 GPUs from `simulate --exporter-only` scraped by a
  real Prometheus (when ``prometheus`` is installed; else ``errors`` says so): ``fleet_nodes``,
  ``fleet_query_ms_p50``, ``fleet_query_ms_p99`` (one whole round of PrometheusSource.poll() and
  the suspicion rule), ``fleet_rss_mib`` (the polling process's peak RSS), ``fleet_suspects``;
  ``fleet_prometheus_ms_per_round`` and ``fleet_prometheus_eval_ms_per_round`` (what Prometheus
  says it spent on those rounds: its handlers, its evaluation) and ``fleet_console_share_pct``;
- fleet table (console/bench/fleet_ui.py): the fleet table of those ``fleet_nodes`` nodes x 8
  GPUs on an 80x24 pseudo-terminal, a constructed fleet queried every 2 s:
  ``fleet_key_to_frame_ms_p99`` (down, until the frame naming the next node), ``fleet_ui_rss_mib``;
- ``startup_ms`` (`gpu-incident demo` until the first frame with data) and
  ``local_probe_ms_p50`` (console/bench/startup.py); ``big_all_update_ms_p99`` (a 2000-process
  node's all-processes view, below).

Then the detailed parts, every figure wall clock (perf_counter) with p50/p95/max, plus this
process's CPU time (process_time):

1. probe   the in-process simulated node's poll; parse_probe + diagnose per poll on the
           seed node and on a generated 2000-process, 8-GPU node (bench_probe, bench_synth)
2. ssh     a few simulated nodes over SSH (16, --quick 4) in this process: connect
           storm, steady-state concurrent polls, CPU per second at a 1 s interval (bench_ssh)
3. target  with --target: one real node, kept connection vs a fresh connection per poll
4. ui      one NodeUpdated applied by the console, headless at 80x24, on the seed node, the
           2000-process node and a generated 100,000-process one with every process shown (bench_ui)

The human table goes to stdout, or with --json the document
``{"version", "machine": {"cpus", "python", ...}, "config": {...}, "results": [{"name", "unit",
"p50", "p95", "max", "n", "mean", "about", ...}], "errors": [...], "run": {...}}``: unit "ms", or
"ms/s" (CPU milliseconds per wall second) for ssh.cpu_per_s; ``cpu_ms`` is this process's CPU
over that measurement; some results add details (processes, nodes, polls, simulator CPU).
Progress lines go to stderr (not with --json).
Bad usage raises ValueError with one line (the CLI exits 2). Exit 0 otherwise: an
unreachable --target or a failed node is reported in ``errors``, as data.
"""
from __future__ import annotations

import asyncio
import json
import os
import platform
import resource
import sys
import time
from dataclasses import dataclass

from console import __version__
from console.bench.stats import Result

MAX_NODES = 1024          # as many as `gpu-incident simulate` serves
FANOUT_NODES = 256
DEFAULT_SSH_NODES = 16
QUICK_SSH_NODES = 4
REPS = 3

#: what each headline figure must meet on a 2-core machine (issue 11): (comparison, bound)
TARGETS = {
    "speedup_vs_fresh_ssh": (">=", 10.0),
    "transport_overhead_ms": ("<=", 5.0),
    "fanout_cpu_pct": ("<=", 50.0),          # 256 nodes at 1 Hz; more nodes: one core (FANOUT_CPU_MAX)
    "fanout_rss_mib": ("<=", 300.0),
    "fanout_round_ms_p99": ("<=", 250.0),
    "key_to_frame_ms_p99": ("<=", 50.0),
    "fleet_key_to_frame_ms_p99": ("<=", 50.0),     # issue 12: 4096 nodes x 8 GPUs
    "fleet_ui_rss_mib": ("<=", 300.0),
    "big_all_update_ms_p99": ("<=", 100.0),
    "startup_ms": ("<=", 800.0),
    "local_probe_ms_p50": ("<=", 15.0),
    "fleet_query_ms_p99": ("<=", 1000.0),
    "fleet_rss_mib": ("<=", 300.0),
    "fleet_console_share_pct": ("<=", 20.0),
    # issue 17: real-size nodes (2,000 processes, 10,000 threads)
    "realsize_node_cpu_pct": ("<=", 3.0),
    "realsize_node_cpu_ratio": ("<=", 2.0),
    "realsize_console_cpu_ratio": ("<=", 2.0),
    "realsize_poll_bytes_p50": ("<=", 65536.0),
    "fanout_realsize_cpu_pct": ("<=", 100.0),
    "fanout_vs_bare_ratio": ("<=", 3.0),
}
FANOUT_CPU_MAX = 100.0
#: the top-level keys of the document, in the order the human view lists them
HEADLINE = ("probe_local_ms_p50", "ssh_poll_ms_p50", "ssh_poll_ms_p99", "fresh_ssh_ms_p50",
            "speedup_vs_fresh_ssh", "transport_overhead_ms", "node_cpu_ms_per_poll",
            "nvidia_smi_calls_per_poll", "fanout_nodes", "fanout_interval_s", "fanout_connect_s",
            "fanout_cpu_pct", "fanout_rss_mib", "fanout_round_ms_p99", "fanout_sim_cpu_pct",
            "key_to_frame_ms_p99", "big_all_update_ms_p99", "startup_ms", "local_probe_ms_p50",
            "fleet_nodes", "fleet_query_ms_p50", "fleet_query_ms_p99", "fleet_rss_mib", "fleet_suspects",
            "fleet_prometheus_ms_per_round", "fleet_prometheus_eval_ms_per_round", "fleet_console_cpu_ms_per_round",
            "fleet_console_share_pct",
            "fleet_key_to_frame_ms_p99", "fleet_ui_rss_mib",
            "realsize_node_cpu_pct", "realsize_node_cpu_ratio", "realsize_console_cpu_ratio",
            "realsize_poll_bytes_p50", "fanout_procs_per_node", "fanout_realsize_cpu_pct",
            "fanout_bare_cpu_pct", "fanout_vs_bare_ratio", "nvidia_smi_starts_per_poll")


@dataclass(frozen=True)
class Plan:
    """How much of everything one run measures."""
    quick: bool
    nodes: int              # fan-out nodes
    ssh_nodes: int          # the in-process SSH part's nodes
    sim_polls: int          # in-process simulated node polls
    seed_iterations: int    # parse + diagnose of the seed node
    big_iterations: int     # parse + diagnose of the 2000-process node
    rounds: int             # SSH rounds (all nodes) and --target polls per mode
    cpu_seconds: int        # seconds of polling at 1 s for the CPU figure
    ui_updates: int         # timed NodeUpdated per case (after the first)
    transport_polls: int    # per repetition, local and kept SSH
    fresh_polls: int        # per repetition, a new ssh each
    fanout_window_s: float  # per repetition, CPU window
    keys: int               # per repetition, keys typed
    fanout_settle_s: float = 2.0   # after every fan-out node answered, before measuring
    fleet_nodes: int = 4096        # the fleet part's Hostnames (x 8 GPUs)
    fleet_rounds: int = 20         # PrometheusSource rounds, one after another
    fleet_scrape_s: float = 5.0    # Prometheus's scrape interval
    fleet_window_s: float = 10.0   # the suspicion window (waited out before measuring)
    fleet_keys: int = 60           # keys typed on the fleet table (fleet_ui.py)
    realsize_polls: int = 70       # per table at most (small, real-size, with a GPU job), at 1 Hz: two whole periods (realsize.py)
    realsize_table: tuple[int, int] = (2000, 10000)    # the real-size part's extra processes, threads
    fanout_table: tuple[int, int] | None = (2000, 10000)   # the fan-out nodes' tables (simulate --procs)

    @classmethod
    def make(cls, quick: bool, nodes: int | None) -> "Plan":
        if nodes is not None:
            if isinstance(nodes, bool) or not isinstance(nodes, int) or not 1 <= nodes <= MAX_NODES:
                raise ValueError(f"--nodes must be between 1 and {MAX_NODES} (got {nodes})")
        if quick:
            return cls(True, nodes or FANOUT_NODES, QUICK_SSH_NODES, sim_polls=20, seed_iterations=30,
                       big_iterations=6, rounds=5, cpu_seconds=3, ui_updates=3, transport_polls=20,
                       fresh_polls=5, fanout_window_s=5.0, keys=10, fleet_rounds=5, fleet_keys=30,
                       realsize_polls=70)
        return cls(False, nodes or FANOUT_NODES, DEFAULT_SSH_NODES, sim_polls=100, seed_iterations=200,
                   big_iterations=30, rounds=20, cpu_seconds=10, ui_updates=7, transport_polls=50,
                   fresh_polls=10, fanout_window_s=10.0, keys=20)


def _target_settings(args) -> tuple[str, object, str, float] | None:
    """(destination, SshOptions, device glob, probe timeout) for --target; ValueError when bad."""
    dest = getattr(args, "target", None)
    if not dest:
        return None
    from console.probe import DEFAULT_DEVICE_GLOB
    from console.sources.ssh.options import SshOptions, parse_destination
    from console.sources.targets import is_special
    if is_special(dest):
        raise ValueError(f"--target needs an SSH destination [user@]host[:port], not {dest!r}")
    parse_destination(dest)
    identity = getattr(args, "identity", None) or ()
    options = SshOptions(known_hosts=getattr(args, "known_hosts", None),
                         identity=tuple([identity] if isinstance(identity, str) else identity),
                         ssh_config=getattr(args, "ssh_config", None),
                         accept_new_host_keys=bool(getattr(args, "accept_new_host_keys", False)))
    probe_timeout = getattr(args, "probe_timeout", None) or 10.0
    if not probe_timeout > 0:
        raise ValueError(f"--probe-timeout must be > 0 (got {probe_timeout})")
    return dest, options, getattr(args, "device_glob", None) or DEFAULT_DEVICE_GLOB, float(probe_timeout)


def machine() -> dict:
    return {"cpus": os.cpu_count() or 1, "python": platform.python_version(),
            "implementation": platform.python_implementation(), "system": platform.system(),
            "machine": platform.machine()}


async def _run(plan: Plan, target, progress) -> tuple[list[Result], dict, list[str]]:
    from console.bench import fanout, fleet, fleet_ui, realsize, startup, transport
    from console.bench import ui as bench_ui
    from console.bench import ssh as bench_ssh
    from console.bench import probe as bench_probe
    head: dict = {}
    results: list[Result] = []
    errors: list[str] = []
    # the fan-out first: the machine has just been idle (what runs before it -- thousands of
    # processes started by the transport part -- leaves a 2-core machine slower for a while)
    for part in (fanout.measure(plan.nodes, REPS, plan.fanout_window_s, plan.keys, progress=progress,
                                settle_s=plan.fanout_settle_s, size=plan.fanout_table),
                 fleet.measure(plan.fleet_nodes, plan.fleet_rounds, progress, scrape_s=plan.fleet_scrape_s,
                               window_s=plan.fleet_window_s),
                 fleet_ui.measure(plan.fleet_nodes, plan.fleet_keys, progress),
                 startup.measure_startup(REPS, progress),
                 startup.measure_local(REPS, plan.transport_polls, progress),
                 transport.measure(REPS, plan.transport_polls, plan.fresh_polls, progress),
                 realsize.measure(plan.realsize_polls, *plan.realsize_table, progress=progress)):
        part_results, part_head, part_errors = await part
        results += part_results
        head.update(part_head)
        errors += part_errors
    probe_results, snaps = await bench_probe.measure(plan.sim_polls, plan.seed_iterations, plan.big_iterations,
                                                     progress)
    results += probe_results
    ui_results, ui_head = await bench_ui.measure(snaps, plan.ui_updates, progress, reps=REPS)
    results += ui_results
    head.update(ui_head)
    ssh_results, ssh_errors = await bench_ssh.measure_sim(plan.ssh_nodes, plan.rounds, plan.cpu_seconds, progress)
    results += ssh_results
    errors += ssh_errors
    if target is not None:
        dest, options, glob, probe_timeout = target
        target_results, target_errors = await bench_ssh.measure_target(
            dest, options, device_glob=glob, probe_timeout=probe_timeout, rounds=plan.rounds,
            progress=progress)
        results += target_results
        errors += target_errors
    return results, head, errors


def verdicts(head: dict) -> dict:
    """{figure: {"target": "<= 50", "met": bool | None}} (None: not measured)."""
    out = {}
    for key, (op, bound) in TARGETS.items():
        if key == "fanout_cpu_pct" and (head.get("fanout_nodes") or 0) > FANOUT_NODES:
            bound = FANOUT_CPU_MAX
        value = head.get(key)
        met = None if value is None else (value >= bound if op == ">=" else value <= bound)
        out[key] = {"target": f"{op} {bound:g}", "met": met}
    return out


def document(plan: Plan, results: list[Result], errors: list[str], wall_s: float,
             target: str | None = None, head: dict | None = None) -> dict:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    head = dict(head or {})
    return {
        "version": __version__,
        **head,
        "targets": verdicts(head),
        "repetitions": REPS,
        "machine": {**machine(), "load_1min": round(os.getloadavg()[0], 2)},
        "config": {"quick": plan.quick, "nodes": plan.nodes, "ssh_nodes": plan.ssh_nodes,
                   "rounds": plan.rounds, "cpu_seconds": plan.cpu_seconds, "target": target},
        "results": [r.as_dict() for r in results],
        "errors": errors,
        "run": {"wall_s": round(wall_s, 2), "cpu_user_s": round(usage.ru_utime, 2),
                "cpu_system_s": round(usage.ru_stime, 2),
                "max_rss_mib": round(usage.ru_maxrss / 1024, 1)},   # ru_maxrss is KiB on Linux
    }


def _num(x: float) -> str:
    return f"{x:.3f}" if x < 10 else f"{x:.1f}" if x < 1000 else f"{x:.0f}"


def table(doc: dict) -> str:
    """The human view: one line per result, then what each measures, then errors."""
    m, run, cfg = doc["machine"], doc["run"], doc["config"]
    head = (f"gpu-incident {doc['version']} bench{' --quick' if cfg['quick'] else ''}: "
            f"{m['cpus']} CPUs (load {m.get('load_1min', '?')}), Python {m['python']}, "
            f"fan-out {cfg['nodes']} simulated node(s)")
    lines = [head, "", f"headline (median of {doc.get('repetitions', REPS)} repetitions)", ""]
    hwidth = max(len(k) for k in HEADLINE)
    for key in HEADLINE:
        value = doc.get(key)
        verdict = doc.get("targets", {}).get(key)
        mark = ""
        if verdict is not None:
            mark = f"  target {verdict['target']}: " + {True: "met", False: "MISSED", None: "not measured"}[verdict["met"]]
        lines.append(f"  {key:<{hwidth}}  {'-' if value is None else _num(value) if isinstance(value, float) else value:>9}{mark}")
    width = max([len(r["name"]) for r in doc["results"]] + [6])
    lines += ["", f"{'result':<{width}}  {'unit':<5} {'p50':>9} {'p95':>9} {'max':>9} {'n':>5} {'cpu ms':>8}"]
    for r in doc["results"]:
        cpu = _num(r["cpu_ms"]) if "cpu_ms" in r else ""
        lines.append(f"{r['name']:<{width}}  {r['unit']:<5} {_num(r['p50']):>9} {_num(r['p95']):>9} "
                     f"{_num(r['max']):>9} {r['n']:>5} {cpu:>8}")
    lines.append("")
    for r in doc["results"]:
        lines.append(f"{r['name']:<{width}}  {r['about']}")
    cpu_line = next((r for r in doc["results"] if r["name"] == "ssh.cpu_per_s"), None)
    if cpu_line is not None:
        lines.append("")
        lines.append(f"polling {cpu_line.get('nodes', '?')} nodes every second costs this process "
                     f"{cpu_line['mean'] / 10:.1f}% of one core (p95 {cpu_line['p95'] / 10:.1f}%)"
                     + (f"; the simulator {cpu_line['simulator_cpu_ms_per_s'] / 10:.1f}%"
                        if "simulator_cpu_ms_per_s" in cpu_line else ""))
    lines.append(f"whole run: {run['wall_s']} s wall, {run['cpu_user_s'] + run['cpu_system_s']:.2f} s CPU, "
                 f"peak RSS {run['max_rss_mib']} MiB")
    if doc["errors"]:
        lines.append("")
        lines.append(f"errors ({len(doc['errors'])}):")
        lines.extend(f"  {e}" for e in doc["errors"][:20])
        if len(doc["errors"]) > 20:
            lines.append(f"  … and {len(doc['errors']) - 20} more")
    return "\n".join(lines) + "\n"


def run_bench(args) -> int:
    """`gpu-incident bench`. ``args``: .quick, .json, .nodes (int|None), .target (str|None) and the
    SSH options (.known_hosts, .identity, .ssh_config, .accept_new_host_keys, .device_glob,
    .probe_timeout). Raises ValueError (one line) for bad usage; returns the exit status."""
    quick = bool(getattr(args, "quick", False))
    as_json = bool(getattr(args, "json", False))
    plan = Plan.make(quick, getattr(args, "nodes", None))
    target = _target_settings(args)
    os.environ.setdefault("TEXTUAL_ANIMATIONS", "none")

    def progress(message: str) -> None:
        if not as_json:
            print(f"bench: {message}", file=sys.stderr, flush=True)

    started = time.perf_counter()
    results, head, errors = asyncio.run(_run(plan, target, progress))
    doc = document(plan, results, errors, time.perf_counter() - started, target[0] if target else None, head)
    if as_json:
        json.dump(doc, sys.stdout, indent=1)
        sys.stdout.write("\n")
    else:
        sys.stdout.write(table(doc))
    if as_json:                                  # the table lists them already
        for e in errors[:5]:
            print(f"gpu-incident bench: {e}", file=sys.stderr)
    return 0
