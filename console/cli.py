"""Command line: `gpu-incident [TARGET ...]` and its subcommands (the README's Usage section is the contract).

Bad usage exits 2 with one line on stderr and no traceback. Textual is only
imported when the console itself starts, after TEXTUAL_* variables are set.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import sys
import time
from pathlib import Path
from typing import Callable, Sequence

from console import __version__, malloc_tuning
from console.config import FLEET_INTERVAL_S, INTERVAL_S, PROBE_TIMEOUT_S, device_glob, seconds_text
from console.probe import DEFAULT_DEVICE_GLOB
from console.sim.state import DEFAULT_SCENARIO

SUBCOMMANDS = ("snapshot", "simulate", "timeline", "replay", "follow", "bench", "gate", "watch")
SEVERITY_WORDS = ("info", "low", "high", "critical")


class UsageError(Exception):
    """Bad usage: one line, exit 2."""


class Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        raise UsageError(message)


def _checked(check, *bounds):
    """An argparse type from a console.config check (one home for each setting's range)."""
    def parse(text: str):
        try:
            return check(text, *bounds)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None
    return parse


_interval = _checked(seconds_text, *INTERVAL_S)
_probe_timeout = _checked(seconds_text, *PROBE_TIMEOUT_S)
_device_glob = _checked(device_glob)
_gate_wait = _checked(seconds_text, 0.0, 3600.0)
_kernel_window = _checked(seconds_text, 0.0, 30 * 86400.0)
_watch_window = _checked(seconds_text, 0.0, 86400.0)


def _port(text: str) -> int:
    if not text.isdecimal() or not 1 <= int(text) <= 65535:
        raise argparse.ArgumentTypeError(f"not a TCP port: {text!r}")
    return int(text)


def _port_or_zero(text: str) -> int:
    return 0 if text == "0" else _port(text)


def _add_ssh_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("SSH (apply to every SSH target)")
    g.add_argument("--nodes-file", metavar="FILE", help="targets, one per line, # comments")
    g.add_argument("--known-hosts", metavar="FILE", help="known_hosts file (default ~/.ssh/known_hosts)")
    g.add_argument("-i", dest="identity", metavar="IDENTITY", action="append", default=[],
                   help="private key file (repeatable)")
    g.add_argument("--ssh-config", metavar="FILE", help="ssh config file (default ~/.ssh/config)")
    g.add_argument("--accept-new-host-keys", action="store_true",
                   help="record keys of hosts not yet known (never changed keys)")
    g.add_argument("--device-glob", type=_device_glob, default=DEFAULT_DEVICE_GLOB, metavar="GLOB",
                   help=f"device files whose holders are GPU holders (default {DEFAULT_DEVICE_GLOB})")
    g.add_argument("--probe-timeout", type=_probe_timeout, default=10.0, metavar="S",
                   help=f"deadline of one poll of a node, {PROBE_TIMEOUT_S[0]:g} to {PROBE_TIMEOUT_S[1]:g} s "
                        "(default 10)")


def _window(text: str) -> float:
    from console.sources.prometheus.queries import parse_window
    try:
        return parse_window(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _add_fleet_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("fleet (prometheus:// and prometheus+https:// targets)")
    g.add_argument("--suspicion-window", type=_window, default=600.0, metavar="DURATION",
                   help="a GPU holding memory at 0%% utilisation this long is suspect: 10m (default), 5s, 1h")
    g.add_argument("--prometheus-token-file", metavar="FILE",
                   help="bearer token for Prometheus (default: $GPU_INCIDENT_PROMETHEUS_TOKEN)")
    g.add_argument("--prometheus-ca", metavar="FILE",
                   help="trust only this CA for prometheus+https:// (default: the system's trust store)")
    g.add_argument("--ssh-domain", metavar="DOMAIN",
                   help="reach a fleet node HOSTNAME over SSH as HOSTNAME.DOMAIN (else its name, via ssh_config)")


def build_console_parser() -> Parser:
    p = Parser(prog="gpu-incident", description="Console for GPU nodes that will not give their memory back.",
               epilog="subcommands: " + ", ".join(SUBCOMMANDS) + " (gpu-incident SUBCOMMAND --help)")
    p.add_argument("targets", nargs="*", metavar="TARGET",
                   help="local (default), demo, demo:SCENARIO, [user@]host[:port], hostlist gpu[01-16], "
                        "a fleet source prometheus://HOST:PORT")
    p.add_argument("--interval", type=_interval, default=None, metavar="S",
                   help=f"poll interval, {INTERVAL_S[0]:g} to {INTERVAL_S[1]:g} s (1.0; more than 256 "
                        "nodes: 1 s per 256 nodes)")
    p.add_argument("--fleet-interval", type=_interval, default=FLEET_INTERVAL_S, metavar="S",
                   help=f"how often a fleet source (prometheus://) is queried ({FLEET_INTERVAL_S:g}; "
                        "config key fleet_interval)")
    p.add_argument("--read-only", action="store_true", help="refuse every destructive action")
    p.add_argument("--dry-run", action="store_true", help="record commands without running them")
    p.add_argument("--theme", default=None, metavar="NAME",
                   help="incident (default), daylight, or any Textual built-in theme")
    p.add_argument("--incident-dir", metavar="DIR",
                   help="where incident timelines go (default: the user state dir)")
    p.add_argument("--incident", metavar="ID", help="continue an existing incident")
    p.add_argument("--as", dest="as", type=_as_name, default=None, metavar="NAME",
                   help="who you are in the incident: every entry's `by` is NAME@host (default: the user, "
                        "SUDO_USER under sudo; config key as)")
    p.add_argument("--config", metavar="FILE", help="TOML config (key bindings, defaults)")
    p.add_argument("--debug-log", metavar="FILE", help="record polls, commands and timings")
    p.add_argument("--version", action="version", version=f"gpu-incident {__version__}")
    g = p.add_argument_group("Slurm (drain before a reset or reboot, resume after a verified recovery)")
    g.add_argument("--slurm-controller", metavar="HOST",
                   help="run scontrol/squeue on HOST over SSH (the SSH options apply; default: this machine)")
    g.add_argument("--no-slurm", action="store_true", help="never ask Slurm, even where scontrol is found")
    _add_ssh_options(p)
    _add_fleet_options(p)
    return p


SUB_DESCRIPTIONS = {
    "snapshot": "One poll of every target: a plain report, or the JSON document with --json.",
    "simulate": ("Serve simulated GPU nodes over SSH (for trying the console on several nodes, or the bench). "
                 "Writes known_hosts, a client key and targets.txt into the state dir and prints "
                 "the command that connects to them; runs until interrupted."),
    "timeline": "List the incidents in the incident dir, show one as text, or export it (Markdown postmortem or JSON).",
    "replay": "Step through a recorded incident (→/← or n/p, home/end, g, q). FILE or an incident ID.",
    "follow": ("Read-only live view of an incident another console is writing (FILE or an incident ID). "
               "--live adds that console's own panels (GPUs, processes, findings), mirrored from the state "
               "it writes beside the incident; nothing here probes a node or changes anything."),
    "gate": ("Are these nodes' GPUs clean for the next job (a Slurm Prolog/Epilog, a readiness check)? "
             "Waits up to --wait S for memory to come back to idle; exit 0 when clean, 1 when memory is "
             "still held or a node cannot be read (an incident then holds the evidence; --drain also "
             "drains the node in Slurm), 2 for bad usage."),
    "watch": ("Headless: poll the targets as the console does, and when a cause appears (memory no process "
              "holds, hidden holders, an orphan, a thread in D too long, a serious Xid, a recovery action, "
              "memory held at 0% too long) open an incident with the evidence, before anyone kills "
              "anything. Runs until SIGTERM or SIGINT (exit 0)."),
    "bench": "Measured figures: probe, diagnosis and UI timings on simulated nodes (and a real one with --target).",
}


def _scenario_epilog() -> str:
    from console.sim.mixes import MIXES
    from console.sim.scenarios import SCENARIOS
    width = max(len(n) for n in [*SCENARIOS, *MIXES])
    return ("scenarios:\n" + "\n".join(f"  {n:<{width}}  {s.title}" for n, s in SCENARIOS.items())
            + "\nfleet mixes (each node its own scenario; with --exporter-port / --exporter-only):\n"
            + "\n".join(f"  {n:<{width}}  {m.title}" for n, m in MIXES.items()))


def build_sub_parser(name: str) -> Parser:
    if name == "simulate":
        import textwrap
        p = Parser(prog=f"gpu-incident {name}", description=textwrap.fill(SUB_DESCRIPTIONS[name], 78),
                   epilog=_scenario_epilog(), formatter_class=argparse.RawDescriptionHelpFormatter)
    else:
        p = Parser(prog=f"gpu-incident {name}", description=SUB_DESCRIPTIONS.get(name))
    p.add_argument("--debug-log", metavar="FILE", help="record polls, commands and timings in FILE")
    if name == "snapshot":
        p.add_argument("targets", nargs="*", metavar="TARGET")
        p.add_argument("--json", action="store_true",
                       help="JSON document on stdout (the contract); without it, a plain-text report")
        p.add_argument("--fail-on", choices=SEVERITY_WORDS, metavar="SEVERITY",
                       help="exit 1 when a finding reaches SEVERITY (info, low, high, critical; "
                            "a fleet suspect with memory held at 0%% is high)")
        _add_ssh_options(p)
        _add_fleet_options(p)
    elif name == "simulate":
        p.add_argument("--scenario", default=DEFAULT_SCENARIO, metavar="NAME",
                       help=f"what the nodes replay (default {DEFAULT_SCENARIO}; the list is below)")
        p.add_argument("--nodes", type=int, default=1, metavar="N", help="how many nodes to serve (default 1)")
        p.add_argument("--port", type=_port, default=None, metavar="P",
                       help="the first node's SSH port, the others follow (default: a free one)")
        p.add_argument("--state-dir", metavar="DIR", default=None,
                       help="where the keys, known_hosts and targets.txt go (default: a new temporary dir)")
        p.add_argument("--exporter-port", type=_port_or_zero, default=None, metavar="P",
                       help="also serve every node's GPUs on http://127.0.0.1:P/metrics in dcgm-exporter's "
                            "format (0: a free port), for a Prometheus to scrape")
        p.add_argument("--exporter-only", action="store_true",
                       help="serve only the metrics (no SSH), up to 4096 nodes on one endpoint")
        p.add_argument("--exporter-bind", metavar="ADDR", default="127.0.0.1",
                       help="the exporter's listen address (default 127.0.0.1: loopback only)")
        p.add_argument("--procs", type=_table_size, default=None, metavar="N",
                       help="give every node a real-size process table of N processes around the "
                            "scenario's own (2000 is an ordinary GPU node; default: the scenario's own only)")
        p.add_argument("--threads", type=_table_size, default=None, metavar="T",
                       help="threads in all with --procs (default 5 a process)")
    elif name == "timeline":
        p.add_argument("verb", choices=("list", "show", "export", "prune"))
        p.add_argument("ref", nargs="?", metavar="FILE|ID")
        p.add_argument("--all", action="store_true", help="list: demo incidents and those nobody acted on too")
        p.add_argument("--dry-run", action="store_true", help="prune: say what would be removed, remove nothing")
        p.add_argument("--format", choices=("markdown", "json"), default="markdown")
        p.add_argument("-o", dest="output", metavar="FILE")
        p.add_argument("--incident-dir", metavar="DIR")
    elif name in ("replay", "follow"):
        p.add_argument("file", metavar="FILE|ID", help="an incident file, or an incident ID in the incident dir")
        p.add_argument("--incident-dir", metavar="DIR", help="where incident IDs are looked up (default: the "
                                                              "user state dir, as the console writes them)")
        p.add_argument("--theme", default=None, metavar="NAME")
        if name == "follow":
            p.add_argument("--live", action="store_true",
                           help="also mirror the driving console's panels (GPUs, processes, findings), read-only")
            p.add_argument("--as", dest="as", type=_as_name, default=None, metavar="NAME",
                           help="who you are: your hypotheses and notes (h, n) are recorded as NAME@host")
    elif name == "gate":
        p.add_argument("targets", nargs="*", metavar="TARGET", help="as the console's (default: local)")
        p.add_argument("--wait", type=_gate_wait, default=120.0, metavar="S",
                       help="how long memory may take to come back, 0 to 3600 s (default 120)")
        p.add_argument("--json", action="store_true", help="the verdict as JSON on stdout")
        p.add_argument("--kernel-window", type=_kernel_window, default=3600.0, metavar="S",
                       help="with no clean verdict on record for this boot, kernel lines (Xid, NVRM) younger "
                            "than S count (default 3600); after one, every line since it does")
        p.add_argument("--drain", action="store_true",
                       help="a node that is not clean is drained in Slurm (Reason: gpu-incident <id>: <kind>)")
        p.add_argument("--incident-dir", metavar="DIR", help="where the incident goes (default: the user state dir)")
        p.add_argument("--config", metavar="FILE",
                       help="TOML config: its [slurm] table (controller, node names) for --drain")
        g = p.add_argument_group("Slurm (with --drain)")
        g.add_argument("--slurm-controller", metavar="HOST", help="run scontrol on HOST over SSH")
        g.add_argument("--no-slurm", action="store_true", help=argparse.SUPPRESS)
        _add_ssh_options(p)
    elif name == "watch":
        p.add_argument("targets", nargs="*", metavar="TARGET", help="as the console's (default: local)")
        p.add_argument("--interval", type=_interval, default=None, metavar="S", help="poll interval (1.0)")
        p.add_argument("--notify", metavar="CMD",
                       help="run CMD (split like a shell, run without one) with the incident's JSON on stdin, "
                            "once per new cause")
        p.add_argument("--webhook", metavar="URL", help="POST the incident's JSON to URL, once per new cause")
        p.add_argument("--metrics-port", type=_port, default=None, metavar="P",
                       help="serve the watch's state as Prometheus text on 127.0.0.1:P")
        p.add_argument("--dstate-after", type=_watch_window, default=60.0, metavar="S",
                       help="a thread in D this long is a cause (default 60)")
        p.add_argument("--idle-after", type=_watch_window, default=600.0, metavar="S",
                       help="memory held at 0%% utilisation this long is a cause (default 600)")
        p.add_argument("--clear-after", type=_watch_window, default=30.0, metavar="S",
                       help="a cause absent this long is gone (default 30: a flapping node opens one incident)")
        p.add_argument("--incident-dir", metavar="DIR", help="where incidents go (default: the user state dir)")
        _add_ssh_options(p)
    elif name == "bench":
        p.add_argument("--quick", action="store_true", help="a short run (seconds, not minutes)")
        p.add_argument("--json", action="store_true", help="results as JSON on stdout")
        p.add_argument("--nodes", type=int, default=None, help="simulated SSH nodes to poll")
        p.add_argument("--target", metavar="DEST", help="also measure a real SSH node")
        _add_ssh_options(p)
    return p


def setup_debug_log(path: str | None) -> None:
    # Without --debug-log, log records go nowhere (never to the terminal the UI draws on).
    logging.getLogger("gpu_incident").addHandler(logging.NullHandler())
    if not path:
        return
    # 0600 and never through a symbolic link: it holds commands, PIDs and host names, and the
    # console runs as root (a link planted at the path would aim its appends anywhere)
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        import stat
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(f"--debug-log {path}: not a regular file")
    except BaseException:
        os.close(fd)
        raise
    handler = logging.StreamHandler(os.fdopen(fd, "a", encoding="utf-8"))
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger("gpu_incident")
    root.addHandler(handler)
    root.setLevel(logging.DEBUG)
    root.debug("gpu-incident %s started: %s", __version__, " ".join(sys.argv))


def _ssh_options(args: argparse.Namespace):
    from console.session.startup import check_key_files
    from console.sources.ssh.options import SshOptions
    check_key_files(args.identity)          # a missing -i key: refused here, as a missing nodes file is
    return SshOptions(known_hosts=args.known_hosts, identity=tuple(args.identity),
                      ssh_config=args.ssh_config, accept_new_host_keys=args.accept_new_host_keys)


def make_sources(args: argparse.Namespace, default_target: str = "local", targets: list[str] | None = None):
    """Targets from the command line -> Source objects (ValueError on a bad target)."""
    from console.sources.targets import expand_targets, make_source
    if targets is None:
        targets = expand_targets(args.targets or ([] if args.nodes_file else [default_target]), args.nodes_file)
    if not targets:
        raise ValueError("no targets (the nodes file is empty)")
    ssh = _ssh_options(args)
    return [make_source(t, ssh=ssh, device_glob=args.device_glob, probe_timeout=args.probe_timeout)
            for t in targets]


def make_fleet_source(args: argparse.Namespace, target: str):
    """A ``prometheus://`` target -> its PrometheusSource (ValueError of one line)."""
    from console.sources.prometheus import PrometheusSource
    return PrometheusSource(target, window_s=args.suspicion_window, timeout_s=args.probe_timeout,
                            token_file=args.prometheus_token_file, ca_file=args.prometheus_ca)


def fleet_destination(args: argparse.Namespace):
    """Hostname -> the SSH destination to drill in (None for a Hostname that is no host name)."""
    from console.sources.fleet_hosts import check_domain, ssh_destination
    domain = check_domain(args.ssh_domain) if args.ssh_domain else None

    def dest(hostname: str) -> str | None:
        try:
            return ssh_destination(hostname, domain=domain)
        except ValueError:
            return None
    return dest


def make_fleet(args: argparse.Namespace, target: str):
    """Fleet mode's setup: the fleet source, and how a node's Hostname becomes a Source to drill
    in (console/sources/fleet_hosts.py: the nodes file's destination for it, else
    HOSTNAME.DOMAIN with --ssh-domain, else the name through --ssh-config)."""
    from console.sources.fleet_hosts import check_domain, nodes_index, ssh_destination
    from console.sources.targets import expand_targets, ssh_source
    from console.ui.fleet_view import FleetSetup
    ssh = _ssh_options(args)
    nodes = nodes_index(expand_targets([], args.nodes_file)) if args.nodes_file else None
    domain = check_domain(args.ssh_domain) if args.ssh_domain else None

    def node_source(hostname: str):
        dest = ssh_destination(hostname, nodes=nodes, domain=domain)       # ValueError: why not
        # always SSH: a Hostname "local" or "demo" is a host of that name (never this machine)
        return ssh_source(dest, ssh=ssh, device_glob=args.device_glob, probe_timeout=args.probe_timeout)
    return FleetSetup(make_fleet_source(args, target), target, node_source, interval=args.fleet_interval)


def make_slurm(args: argparse.Namespace, config=None):
    """The Slurm client (console/sources/slurm.py), or None: --no-slurm, ``[slurm] enabled = false``,
    or no controller named and no scontrol/squeue on this machine."""
    import shutil
    from console.sources.ssh.options import SshOptions, parse_destination
    settings = config.slurm if config is not None else {}
    if args.no_slurm or settings.get("enabled") is False:
        return None
    controller = args.slurm_controller or settings.get("controller")
    if controller:
        parse_destination(controller)           # ValueError: one line, exit 2
    elif not settings.get("enabled") and not (shutil.which("scontrol") and shutil.which("squeue")):
        return None
    from console.sources.slurm import SlurmClient
    ssh = SshOptions(known_hosts=args.known_hosts, identity=tuple(args.identity),
                     ssh_config=args.ssh_config, accept_new_host_keys=args.accept_new_host_keys)
    return SlurmClient(controller, ssh_options=ssh, node_names=settings.get("nodes"))


def cmd_snapshot(args: argparse.Namespace) -> int:
    from console.diagnosis import fails
    from console.sources.targets import expand_targets, is_fleet_target
    targets = expand_targets(args.targets or ([] if args.nodes_file else ["local"]), args.nodes_file)
    fleet_targets = [t for t in targets if is_fleet_target(t)]
    if fleet_targets:
        return _fleet_snapshot(args, targets)
    from console.monitor import snapshot_all
    sources = make_sources(args, targets=targets)
    taken = time.time()
    snaps = asyncio.run(snapshot_all(sources))
    rc = 1 if args.fail_on and fails([f for s in snaps for f in s.findings], args.fail_on) else 0

    def write() -> None:
        if args.json:
            from console.output.json import snapshot_document
            json.dump(snapshot_document(snaps, taken), sys.stdout, indent=1)
            sys.stdout.write("\n")
        else:  # a plain-text report for a terminal or a ticket; scripts use --json
            from console.output.report import snapshot_report
            sys.stdout.write(snapshot_report(snaps))
    _emit(write)
    return rc


def _emit(write: Callable[[], None]) -> None:
    """Write a verdict's output; a reader that went away (`gate … | logger` with the logger gone:
    EPIPE) loses the text but never the verdict's exit status, which the caller returns."""
    try:
        write()
        sys.stdout.flush()
    except BrokenPipeError:
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())      # the interpreter's last flush must not fail either
            os.close(devnull)
        except (OSError, ValueError):
            pass
        print("gpu-incident: stdout closed: the verdict is in the exit status", file=sys.stderr)


def _fleet_snapshot(args: argparse.Namespace, targets: list[str]) -> int:
    """`snapshot` with fleet targets (and maybe nodes): every target's nodes in the order given,
    a fleet's suspects first."""
    from console.diagnosis import fails
    from console.diagnosis.fleet import assess, fleet_findings
    from console.monitor import snapshot_all
    from console.sources.targets import is_fleet_target
    node_targets = [t for t in targets if not is_fleet_target(t)]
    fleets = [make_fleet_source(args, t) for t in targets if is_fleet_target(t)]
    sources = make_sources(args, targets=node_targets) if node_targets else []
    destination = fleet_destination(args)
    taken = time.time()

    async def poll_all():
        try:
            return await asyncio.gather(snapshot_all(sources), *(f.poll() for f in fleets))
        finally:
            await asyncio.gather(*(f.close() for f in fleets))
    node_snaps, *fleet_snaps = asyncio.run(poll_all())
    fleet_snaps = [assess(s) for s in fleet_snaps]
    by_target = dict(zip(node_targets, node_snaps))
    by_fleet = {s.source: s for s in fleet_snaps}
    findings = [f for s in node_snaps for f in s.findings]
    findings += [f for s in fleet_snaps for n in s.nodes for f in fleet_findings(n, s.window_s)]
    if args.json:
        from console.output.fleet import fleet_nodes_json
        from console.output.json import iso_utc, node_json
        nodes = []
        for t in targets:
            if is_fleet_target(t):
                nodes += fleet_nodes_json(by_fleet[t], destination)
            else:
                nodes.append(node_json(by_target[t]))
        json.dump({"taken_at": iso_utc(taken), "nodes": nodes}, sys.stdout, indent=1)
        sys.stdout.write("\n")
    else:
        from console.output.fleet import fleet_report
        from console.output.report import snapshot_report
        for t in targets:
            sys.stdout.write(fleet_report(by_fleet[t]) if is_fleet_target(t) else snapshot_report([by_target[t]]))
    if args.fail_on and fails(findings, args.fail_on):
        return 1
    return 0


def cmd_timeline(args: argparse.Namespace) -> int:
    from console.incident import export
    from console.incident import timeline
    directory = Path(args.incident_dir) if args.incident_dir else None
    if args.verb in ("list", "prune"):
        from console.incident import hygiene
        from console.incident.summary import incident_rows
        rows = [(ident, path, timeline.load(path)[0]) for ident, path, _n, _first in timeline.list_incidents(directory)]
        if args.verb == "prune":
            said = hygiene.prune(rows, dry_run=args.dry_run)
            print("\n".join(said) if said else "nothing to prune (no untouched demo incident, none untouched "
                                                "that held nothing)")
            return 0
        shown = [(ident, entries) for ident, _path, entries in rows if args.all or not hygiene.hidden(entries)]
        if shown:
            sys.stdout.write(incident_rows(shown, marks=hygiene.mark if args.all else None))
        if len(shown) < len(rows):
            print(f"({len(rows) - len(shown)} hidden: demo incidents and those nobody acted on that held nothing "
                  "— `timeline list --all` shows them, `timeline prune` removes the untouched ones)")
        elif not rows:
            print(f"no incidents in {directory or timeline.default_incident_dir()}")
        return 0
    if not args.ref:
        raise UsageError(f"timeline {args.verb} needs FILE or ID")
    try:
        path = timeline.resolve(args.ref, directory)
    except FileNotFoundError as exc:
        raise UsageError(str(exc)) from None
    entries, warnings = timeline.load(path)
    for w in warnings:
        print(f"warning: {w}", file=sys.stderr)
    if args.verb == "show" and args.format == "markdown":
        text = export.as_text(entries)
    elif args.format == "json":
        text = "\n".join(json.dumps(d, ensure_ascii=False) for d in timeline.iter_json(entries)) + "\n"
    else:
        from console.ui.postmortem import write_chart    # no Textual in there
        chart = write_chart(entries, path, Path(args.output)) if args.output else None
        if chart is not None:
            print(f"wrote {Path(args.output).with_name(chart)}", file=sys.stderr)
        text = export.as_markdown(entries, incident_id=path.name.removesuffix(timeline.SUFFIX), chart=chart)
    if args.output:   # a temp file renamed over FILE: a symlink already there is replaced, not followed
        from console.incident.safefiles import write_atomic
        write_atomic(args.output, text.encode("utf-8"))
        print(f"wrote {args.output}", file=sys.stderr)
    else:
        sys.stdout.write(text)
    return 0


def _as_name(text: str) -> str:
    """--as NAME: a person's name, one line of text (console/incident/pairing.py)."""
    from console.incident.pairing import check_name
    try:
        return check_name(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"NAME {exc}") from None


def _table_size(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if not 0 <= n <= 100_000:
        raise argparse.ArgumentTypeError(f"{n} is out of range (0 to 100000)")
    return n


def cmd_simulate(args: argparse.Namespace) -> int:
    from console.sim.server import run_simulate
    return run_simulate(args)


def apply_config(args: argparse.Namespace, parser: argparse.ArgumentParser):
    """Config-file defaults fill in what the command line left at its default."""
    from console.config import load_config
    config = load_config(args.config)
    for key, value in config.defaults.items():
        if getattr(args, key, None) == parser.get_default(key):
            setattr(args, key, value)
    return config


def check_ui_settings(args: argparse.Namespace, config=None) -> None:
    """The theme and [keys] remaps, checked before anything starts: ValueError of one line,
    naming the config file when the setting came from it. (Imports Textual.)"""
    from console.ui import keys
    from console.ui.theme_install import check_theme
    where = f"config file {args.config}: " if config is not None and args.config else ""
    try:
        check_theme(args.theme)
    except ValueError as exc:
        if where and config.defaults.get("theme") == args.theme:
            raise ValueError(f"{where}[defaults] theme: {exc}") from None
        raise
    unknown = sorted(set(config.keys) - keys.ids()) if config is not None else []
    if unknown:
        raise ValueError(f"{where}[keys] unknown action id(s) {', '.join(unknown)}; "
                         f"known: {', '.join(sorted(keys.ids()))}")


def cmd_console(args: argparse.Namespace, config=None) -> int:
    from console.sources.targets import expand_targets, is_fleet_target
    fleets = [t for t in args.targets if is_fleet_target(t)]
    if len(fleets) > 1:
        raise ValueError(f"one fleet source at a time (got {', '.join(fleets)})")
    fleet_target = fleets[0] if fleets else None
    if fleet_target is None:
        sources = make_sources(args)
    else:     # fleet mode: the nodes named here open at start; a nodes file only maps Hostnames
        nodes = [t for t in args.targets if not is_fleet_target(t)]
        sources = make_sources(args, targets=expand_targets(nodes)) if nodes else []
    slurm = make_slurm(args, config)
    # a frame within 50 ms of a key: a key's change waits for the screen's next frame tick, at
    # 120 frames a second at most 8 ms (at 60, 17 ms: a third of the key tail at 256 real-size
    # nodes); frames are drawn only when something changed (node updates a few times a second, keys)
    os.environ.setdefault("TEXTUAL_FPS", "120")
    check_ui_settings(args, config)        # Textual only from here on
    fleet = make_fleet(args, fleet_target) if fleet_target else None
    from console.incident import timeline
    from console.incident.pairing import person
    from console.session.startup import new_incident, new_incident_words
    directory = Path(args.incident_dir) if args.incident_dir else timeline.default_incident_dir()
    started = new_incident(directory, args.incident) if args.incident else (False, [])
    tl = timeline.open_incident(directory, args.incident, by=person(getattr(args, "as", None)))
    from console.ui.app import IncidentApp
    from console.monitor import interval_for
    interval = args.interval if args.interval is not None else interval_for(len(sources))
    logging.getLogger("gpu_incident").debug("poll interval %g s for %d nodes", interval, len(sources))
    app = IncidentApp(sources, timeline=tl, interval=interval, read_only=args.read_only,
                      dry_run=args.dry_run, theme_name=args.theme,
                      keymap=config.keys if config else None, slurm=slurm, fleet=fleet,
                      engine_thread=os.environ.get("GPU_INCIDENT_ENGINE_THREAD", "1") != "0",
                      stop_signals=True,     # SIGHUP and SIGTERM stop it as q does (ui/app.py)
                      new_incident=new_incident_words(args.incident, started[1]) if started[0] else None)
    try:
        app.run()
    finally:
        tl.close()
    if app.return_code:  # Textual's own exit status (e.g. 1 after an unhandled error)
        return app.return_code
    why = f" (stopped by {app.stopped_by})" if app.stopped_by else ""
    try:        # after SIGHUP the terminal may be gone: nothing left to say it on
        if tl.path.exists():
            print(f"incident timeline: {tl.path}{why}", file=sys.stderr)
        else:
            print(f"incident timeline: {tl.path} was deleted while the console ran (actions were refused "
                  f"from then on){why}", file=sys.stderr)
    except OSError:
        pass
    return 0


def _incident_file(args: argparse.Namespace) -> Path:
    """FILE or ID (looked up in --incident-dir, else the default incident dir) -> the file."""
    from console.incident import timeline
    try:
        return timeline.resolve(args.file, Path(args.incident_dir) if args.incident_dir else None)
    except FileNotFoundError as exc:
        raise UsageError(str(exc)) from None


def cmd_replay(args: argparse.Namespace) -> int:
    path = _incident_file(args)
    from console.ui.timeline_view import run_replay  # Textual only from here on
    return run_replay(str(path), args.theme)


def cmd_follow(args: argparse.Namespace) -> int:
    path = _incident_file(args)
    if args.live:
        from console.incident.mirror import state_path
        from console.ui.mirror_view import run_live_follow  # Textual only from here on
        from console.incident.pairing import person
        return run_live_follow(str(path), str(state_path(path)), args.theme, by=person(getattr(args, "as", None)))
    from console.ui.timeline_view import run_follow  # Textual only from here on
    return run_follow(str(path), args.theme)


def cmd_gate(args: argparse.Namespace) -> int:
    """`gpu-incident gate`: 0 clean, 1 held or unreadable (fail closed), 2 bad usage."""
    sources = make_sources(args)
    from console.config import load_config
    config = load_config(args.config) if args.config else None
    slurm = make_slurm(args, config) if args.drain else None
    from console.incident import timeline
    from console.session import gate
    from console.session.paste import continue_command
    opened = []
    directory = Path(args.incident_dir) if args.incident_dir else timeline.default_incident_dir()

    def open_incident():
        tl = timeline.open_incident(directory)
        opened.append(tl)
        return tl
    try:
        nodes, incident = asyncio.run(gate.run(sources, wait_s=args.wait, open_incident=open_incident,
                                               slurm=slurm, drain_nodes=args.drain, directory=directory,
                                               kernel_window_s=args.kernel_window))
    finally:
        for tl in opened:
            tl.close()
    def write() -> None:
        if args.json:
            json.dump(gate.document(nodes, args.wait, incident), sys.stdout, indent=1)
            sys.stdout.write("\n")
        else:
            for node in nodes:
                print(gate.line(node, args.wait, incident))
            if incident:
                held = [n.name for n in nodes if not n.clean]
                print(f"gpu-incident gate: evidence in incident {incident}: "
                      f"{continue_command(incident, held, _paste_options(args, directory))}")
    _emit(write)
    return 0 if all(n.clean for n in nodes) else 1


def cmd_watch(args: argparse.Namespace) -> int:
    """`gpu-incident watch`: until SIGTERM/SIGINT (exit 0)."""
    import signal
    from console.incident import timeline
    from console.monitor import interval_for
    from console.session import tell, watch
    sources = make_sources(args)
    notify = tell.notify_argv(args.notify) if args.notify is not None else None
    webhook = tell.webhook_url(args.webhook) if args.webhook is not None else None
    directory = Path(args.incident_dir) if args.incident_dir else timeline.default_incident_dir()
    interval = args.interval if args.interval is not None else interval_for(len(sources))

    def say(line: str) -> None:
        print(line, flush=True)

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        teller = tell.Teller(notify=notify, webhook=webhook) if (notify or webhook) else None
        await watch.run(sources, open_incident=lambda: timeline.open_incident(directory), interval=interval,
                        directory=directory,
                        dstate_after=args.dstate_after, idle_after=args.idle_after, clear_after=args.clear_after,
                        teller=teller, metrics_port=args.metrics_port, say=say, stop=stop,
                        options=_paste_options(args, directory))
    asyncio.run(main())
    return 0


def _paste_options(args: argparse.Namespace, directory: Path) -> list[str]:
    """The options a printed "continue with" command needs to open the nodes and the incident
    as this run did (console/session/paste.py); the incident dir always: a Prolog's gate runs as
    root with no XDG_STATE_HOME, the person who pastes has another default."""
    from console.session.paste import console_options
    return console_options(_ssh_options(args), incident_dir=directory, device_glob=args.device_glob)


def cmd_bench(args: argparse.Namespace) -> int:
    from console.bench.run import run_bench
    return run_bench(args)


COMMANDS = {"snapshot": cmd_snapshot, "timeline": cmd_timeline, "simulate": cmd_simulate,
            "replay": cmd_replay, "follow": cmd_follow, "bench": cmd_bench, "gate": cmd_gate,
            "watch": cmd_watch}


def main(argv: Sequence[str] | None = None) -> int:
    if argv is None:            # the process is gpu-incident's own: its allocator, tuned for hours of polling
        malloc_tuning.tune()
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        if argv and argv[0] in SUBCOMMANDS:
            args = build_sub_parser(argv[0]).parse_args(argv[1:])
            setup_debug_log(args.debug_log)
            return COMMANDS[argv[0]](args)
        parser = build_console_parser()
        args = parser.parse_args(argv)
        config = apply_config(args, parser)
        setup_debug_log(args.debug_log)
        return cmd_console(args, config)
    except UsageError as exc:
        print(f"gpu-incident: {exc}", file=sys.stderr)
        return 2
    except (ValueError, FileNotFoundError, NotADirectoryError, PermissionError) as exc:
        print(f"gpu-incident: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # `gpu-incident snapshot --json | head`: the reader left, fine
        try:
            sys.stdout = open(os.devnull, "w")
        except OSError:
            pass
        return 0
    except OSError as exc:  # a path the user gave that cannot be used (--debug-log DIR, -o FILE)
        print(f"gpu-incident: {exc.strerror or exc}: {exc.filename or ''}".rstrip(": "), file=sys.stderr)
        return 2
    except Exception as exc:  # noqa: BLE001 - a bug: one line here, the traceback in --debug-log
        logging.getLogger("gpu_incident").exception("internal error")
        print(f"gpu-incident: internal error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 70
