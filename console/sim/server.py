"""Simulated nodes served over real SSH: `gpu-incident simulate`.

N SimNodes, one asyncssh server each, on 127.0.0.1 ports P..P+N-1. An exec
request behaves as sshd + the node's shell would:

- ``exec sh`` (or ``sh``, or a shell request) is a long-lived shell: it reads
  stdin line by line and runs each line through the node's fake shell, writing
  its output as it goes, until EOF -- the SSH source's probe shell.
- ``timeout [-k K] T sh -c CMD`` (how the SSH source runs a command) runs CMD
  with a T-second bound; a command that overruns exits 124 like timeout(1).
- anything else runs as one script.

The state directory receives ``known_hosts`` (a host key per node, for
``[127.0.0.1]:PORT``), ``client_key`` (0600; its public key is the one accepted)
and ``targets.txt`` (``root@127.0.0.1:PORT`` per line). Keys found there from an
earlier run are reused, so a restarted simulator stays trusted.
"""
from __future__ import annotations

import asyncio
import logging
import os
import random
import shlex
import signal
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import asyncssh

from console import probe
from console.model import CommandResult
from console.probe import DEFAULT_COMMAND_TIMEOUT_S
from console.sim.fleet import Fleet, build_fleet
from console.sim.node import SimNode

log = logging.getLogger("gpu_incident.simulate")

HOST = "127.0.0.1"
USER = "root"
MAX_NODES = 1024
#: what one line of the long-lived shell may take (the client has its own deadline)
LINE_TIMEOUT_S = 3600.0
_PORT_TRIES = 50
_READ_CHUNK = 1 << 16


def unwrap_command(command: str) -> tuple[str, float]:
    """``timeout [-k K] [-s SIG] T sh -c CMD`` -> (CMD, T); anything else -> (command, default)."""
    try:
        words = shlex.split(command)
    except ValueError:
        return command, DEFAULT_COMMAND_TIMEOUT_S
    if len(words) < 5 or words[0] != "timeout":
        return command, DEFAULT_COMMAND_TIMEOUT_S
    i = 1
    while i < len(words) and words[i].startswith("-"):
        i += 2 if words[i] in ("-k", "-s") else 1
    try:
        limit = float(words[i].rstrip("s"))
    except (IndexError, ValueError):
        return command, DEFAULT_COMMAND_TIMEOUT_S
    if words[i + 1:i + 3] == ["sh", "-c"] and len(words) == i + 4:
        return words[i + 3], limit
    return command, DEFAULT_COMMAND_TIMEOUT_S


def is_shell_request(command: str | None) -> bool:
    return command is None or command.strip() in ("exec sh", "sh", "exec /bin/sh", "/bin/sh")


async def _write(process: asyncssh.SSHServerProcess, out: str, err: str) -> None:
    if out:
        process.stdout.write(out)
    if err:
        process.stderr.write(err)
    await process.stdout.drain()


async def _exec(node: SimNode, script: str, timeout: float,
                env: dict[str, str] | None = None) -> CommandResult:
    """The node's fake shell; a bug in it is the command's stderr, not a dropped connection."""
    try:
        return await node.exec(script, timeout, env)
    except Exception as exc:  # noqa: BLE001
        log.exception("simulated node %s failed on %r", node.name, script[:200])
        return CommandResult(script, rc=2, stderr=f"sh: simulator error: {exc!r}\n")


async def _long_lived_shell(node: SimNode, process: asyncssh.SSHServerProcess, fleet: Fleet | None) -> None:
    """Each line read runs as it arrives; the answers to lines that came together and that the
    fleet answers at once (a whole probe, as a rule) go out in one write, as a shell's output
    fills a pipe: a few SSH packets per probe, not one per section."""
    env: dict[str, str] = {}            # the shell's variables live as long as the shell
    rest = ""
    while True:
        chunk = await process.stdin.read(_READ_CHUNK)
        if not chunk:
            break
        lines = (rest + chunk).split("\n")
        rest = lines.pop()
        out: list[str] = []
        err: list[str] = []
        for line in lines:
            if not line.strip() or probe.coalesce_line(line):
                continue
            result = await fleet.answer(node, line, env) if fleet is not None else None
            if result is None:              # it may take a while: what came before goes first
                await _write(process, "".join(out), "".join(err))
                out, err = [], []
                result = await _exec(node, line, LINE_TIMEOUT_S, env)
            out.append(result.stdout)
            err.append(result.stderr)
            if line.strip() == "exit":
                await _write(process, "".join(out), "".join(err))
                process.exit(0)
                return
        await _write(process, "".join(out), "".join(err))
    process.exit(0)


async def _one_command(node: SimNode, process: asyncssh.SSHServerProcess, command: str,
                       fleet: Fleet | None) -> None:
    if fleet is not None:
        fleet.leave(node)               # from now on the node answers from its own state
    script, limit = unwrap_command(command)
    result = await _exec(node, script, limit)
    await _write(process, result.stdout, result.stderr)
    if result.rc is None:
        process.exit(124)          # timeout(1)'s status for an overrun
    else:
        process.exit(result.rc if 0 <= result.rc < 256 else 255)


def _process_factory(node: SimNode, fleet: Fleet | None):
    async def handle(process: asyncssh.SSHServerProcess) -> None:
        try:
            if is_shell_request(process.command):
                await _long_lived_shell(node, process, fleet)
            else:
                await _one_command(node, process, process.command, fleet)
        except (asyncssh.Error, BrokenPipeError, ConnectionError, asyncio.IncompleteReadError):
            process.close()        # the client closed the channel (its deadline): stop here
    return handle


class _Server(asyncssh.SSHServer):
    def __init__(self, conns: set) -> None:
        self._conns = conns
        self._conn: asyncssh.SSHServerConnection | None = None

    def connection_made(self, conn: asyncssh.SSHServerConnection) -> None:
        self._conn = conn
        self._conns.add(conn)

    def connection_lost(self, exc: Exception | None) -> None:
        self._conns.discard(self._conn)


@dataclass
class SimServers:
    """The running simulator: ``nodes[i]`` answers on ``ports[i]``."""
    state_dir: Path
    nodes: list[SimNode]
    ports: list[int]
    known_hosts: Path
    client_key: Path
    targets_file: Path
    _acceptors: list = field(default_factory=list, repr=False)
    _conns: set = field(default_factory=set, repr=False)
    #: answers the probe once per tick for the nodes still identical (console/sim/fleet.py); a
    #: node changed other than by a command it runs must leave it (``fleet.leave(node)``)
    fleet: Fleet | None = field(default=None, repr=False)
    #: the scenario each node runs (one, or a mix's: console/sim/mixes.py)
    scenarios: list[str] = field(default_factory=list)

    @property
    def ssh_config(self) -> Path:
        """``Host simnodeNN`` -> 127.0.0.1 and its port, with this dir's key and known_hosts."""
        return self.state_dir / "ssh_config"

    @property
    def targets(self) -> list[str]:
        return [f"{USER}@{HOST}:{p}" for p in self.ports]

    def close(self) -> None:
        """Stop listening and drop every client connection."""
        for acceptor in self._acceptors:
            acceptor.close()
        for conn in list(self._conns):
            conn.close()

    async def wait_closed(self) -> None:
        for acceptor in self._acceptors:
            await acceptor.wait_closed()

    async def __aenter__(self) -> "SimServers":
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.close()
        await self.wait_closed()


def _load_or_make_key(path: Path) -> asyncssh.SSHKey:
    if path.exists():
        try:
            return asyncssh.read_private_key(str(path))
        except (OSError, ValueError, asyncssh.KeyImportError):
            pass
    key = asyncssh.generate_private_key("ssh-ed25519")
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(key.export_private_key())
    tmp.replace(path)
    return key


def _public_line(key: asyncssh.SSHKey) -> str:
    return " ".join(key.export_public_key("openssh").decode().split()[:2])


def _write_text(path: Path, text: str, mode: int = 0o644) -> None:
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(text)
    tmp.replace(path)


def node_names(count: int) -> list[str]:
    """simnode01..simnodeNN (the Hostname label, the ssh_config alias, the node's own name)."""
    width = max(2, len(str(count)))
    return [f"simnode{i + 1:0{width}d}" for i in range(count)]


def node_scenarios(scenario: str, count: int) -> list[str]:
    """The scenario each of ``count`` nodes runs: ``scenario`` for all, or a mix's choice."""
    from console.sim.mixes import is_mix, scenario_of
    if is_mix(scenario):
        return [scenario_of(scenario, i, count) for i in range(count)]
    return [scenario] * count


def _ssh_quote(path: Path) -> str:
    text = str(path)
    return f'"{text}"' if any(c.isspace() for c in text) else text


def ssh_config_text(names: list[str], ports: list[int], client_key: Path, known_hosts: Path) -> str:
    """An ssh_config (OpenSSH's and asyncssh's syntax) mapping each node name to its port."""
    out = ["# written by gpu-incident simulate: each simulated node by its Hostname\n"]
    for name, port in zip(names, ports):
        out.append(f"Host {name}\n    HostName {HOST}\n    Port {port}\n    User {USER}\n"
                   f"    IdentityFile {_ssh_quote(client_key)}\n    IdentitiesOnly yes\n"
                   f"    UserKnownHostsFile {_ssh_quote(known_hosts)}\n    StrictHostKeyChecking yes\n")
    return "".join(out)


async def start_sim_servers(scenario: str, nodes: int, port: int | None, state_dir: Path | str,
                            clock=None, size: tuple[int, int] | None = None) -> SimServers:
    """Serve ``nodes`` SimNodes of ``scenario`` on 127.0.0.1 ports port..port+nodes-1
    (a free block when ``port`` is None). ValueError for a bad scenario or count,
    OSError (naming the port) when a port is taken."""
    if not 1 <= nodes <= MAX_NODES:
        raise ValueError(f"--nodes must be between 1 and {MAX_NODES}")
    if port is not None and port + nodes - 1 > 65535:
        raise ValueError(f"ports {port}..{port + nodes - 1} go past 65535")
    width = max(2, len(str(nodes)))
    names = node_names(nodes)
    scenarios = node_scenarios(scenario, nodes)
    fleets: dict[str, Fleet] = {}
    by_name: dict[str, SimNode] = {}
    try:
        for one in dict.fromkeys(scenarios):     # one fleet per scenario, built in node order
            group = [n for n, s in zip(names, scenarios) if s == one]
            built, fleets[one] = await build_fleet(one, group, clock, size)
            by_name.update(zip(group, built))
    except (KeyError, ValueError) as exc:
        raise ValueError(f"unknown scenario {scenario!r}: {exc}") from None
    sim_nodes = [by_name[n] for n in names]
    node_fleet = [fleets[s] for s in scenarios]
    fleet = fleets[scenarios[0]]

    state = Path(state_dir)
    state.mkdir(mode=0o700, parents=True, exist_ok=True)
    client_key = state / "client_key"
    client = _load_or_make_key(client_key)
    _write_text(state / "client_key.pub", _public_line(client) + " gpu-incident-simulate\n")
    authorized = asyncssh.import_authorized_keys(_public_line(client) + "\n")
    key_dir = state / "host_keys"
    key_dir.mkdir(mode=0o700, exist_ok=True)
    host_keys = [_load_or_make_key(key_dir / f"node{i + 1:0{width}d}") for i in range(nodes)]
    conns: set = set()

    def starter(i: int):
        async def start(p: int):
            return await asyncssh.create_server(
                lambda: _Server(conns), HOST, p, server_host_keys=[host_keys[i]],
                authorized_client_keys=authorized, process_factory=_process_factory(sim_nodes[i], node_fleet[i]),
                password_auth=False, kbdint_auth=False, allow_scp=False, x11_forwarding=False,
                agent_forwarding=False, keepalive_interval=30, reuse_address=True)
        return start

    async def start_block(base: int) -> list:
        acceptors: list = []
        try:
            for i in range(nodes):
                try:
                    acceptors.append(await starter(i)(base + i))
                except OSError as exc:
                    raise OSError(exc.errno, f"cannot listen on {HOST}:{base + i}: {exc.strerror}") from None
        except BaseException:
            for acceptor in acceptors:
                acceptor.close()
            raise
        return acceptors

    if port is not None:
        base = port
        acceptors = await start_block(base)
    else:
        for attempt in range(_PORT_TRIES):
            base = random.randint(20000, 60000 - nodes)
            try:
                acceptors = await start_block(base)
                break
            except OSError:
                if attempt == _PORT_TRIES - 1:
                    raise
    ports = list(range(base, base + nodes))

    known_hosts = state / "known_hosts"
    _write_text(known_hosts, "".join(f"[{HOST}]:{p} {_public_line(k)}\n" for p, k in zip(ports, host_keys)))
    targets_file = state / "targets.txt"
    _write_text(targets_file, "".join(f"{USER}@{HOST}:{p}\n" for p in ports))
    _write_text(state / "ssh_config", ssh_config_text(names, ports, client_key, known_hosts))
    return SimServers(state, sim_nodes, ports, known_hosts, client_key, targets_file,
                      acceptors, conns, fleet, scenarios=scenarios)


def describe(servers: SimServers, scenario: str) -> str:
    ports = servers.ports
    span = f"port {ports[0]}" if len(ports) == 1 else f"ports {ports[0]}-{ports[-1]}"
    n = len(ports)
    return (f"serving {n} simulated node{'s' if n != 1 else ''} (scenario {scenario}) on {HOST} {span}\n"
            f"  known hosts: {servers.known_hosts}\n"
            f"  client key:  {servers.client_key}\n"
            f"  targets:     {servers.targets_file}\n"
            f"  ssh config:  {servers.ssh_config}  (ssh -F FILE simnode01, gpu-incident --ssh-config FILE simnode01)\n"
            f"watch them with:\n"
            f"  gpu-incident --nodes-file {shlex.quote(str(servers.targets_file))} "
            f"--known-hosts {shlex.quote(str(servers.known_hosts))} -i {shlex.quote(str(servers.client_key))}\n"
            f"SIGINT (Ctrl-C) or SIGTERM stops the simulator.")


#: ``--exporter-only`` serves this many Hostnames at most (no SSH port each)
MAX_EXPORTER_NODES = 4096


def table_size(args) -> tuple[int, int] | None:
    """(processes, threads) of the real-size table --procs/--threads ask for, or None."""
    procs = getattr(args, "procs", None)
    threads = getattr(args, "threads", None)
    if procs is None:
        if threads is not None:
            raise ValueError("--threads needs --procs")
        return None
    return procs, threads if threads is not None else 5 * procs


async def _serve(args) -> int:
    exporter_port = getattr(args, "exporter_port", None)
    exporter_only = getattr(args, "exporter_only", False)
    bind = getattr(args, "exporter_bind", None) or HOST
    from console.sim import exporter as ex
    servers = None
    if exporter_only:
        if not 1 <= args.nodes <= MAX_EXPORTER_NODES:
            raise ValueError(f"--nodes must be between 1 and {MAX_EXPORTER_NODES} with --exporter-only")
        if args.port is not None:
            raise ValueError("--exporter-only serves no SSH port: drop --port")
        names = node_names(args.nodes)
        try:
            nodes = ex.shared_nodes(names, node_scenarios(args.scenario, args.nodes))
        except (KeyError, ValueError) as exc:
            raise ValueError(f"unknown scenario {args.scenario!r}: {exc}") from None
    else:
        state_dir = Path(args.state_dir) if args.state_dir else Path(tempfile.mkdtemp(prefix="gpu-incident-sim-"))
        servers = await start_sim_servers(args.scenario, args.nodes, args.port, state_dir, size=table_size(args))
        nodes = ex.own_nodes(servers.nodes, servers.scenarios)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    metrics = None
    if exporter_only or exporter_port is not None:
        exporter = ex.Exporter(nodes)
        exporter.render()
        try:
            metrics = ex.ExporterServer(exporter, bind, exporter_port or 0, loop)
        except OSError as exc:
            if servers is not None:
                servers.close()
            raise OSError(exc.errno, f"cannot listen on {bind}:{exporter_port}: {exc.strerror}") from None
        metrics.start()
    if servers is not None:
        print(describe(servers, args.scenario), flush=True)
    if metrics is not None:
        print(f"exporter: http://{bind}:{metrics.port}/metrics ({len(nodes)} Hostnames, dcgm-exporter "
              f"format, scenario {args.scenario}; first render {metrics.exporter.render_ms:.0f} ms)", flush=True)
        if exporter_only:
            print("SIGINT (Ctrl-C) or SIGTERM stops the simulator.", flush=True)
    try:
        await stop.wait()
    finally:
        if metrics is not None:
            await asyncio.to_thread(metrics.close)
        if servers is not None:
            servers.close()
            await servers.wait_closed()
    print("simulator stopped", flush=True)
    return 0


def run_simulate(args) -> int:
    """`gpu-incident simulate`: serve until SIGINT/SIGTERM. Bad input: one line on stderr, exit 2."""
    try:
        return asyncio.run(_serve(args))
    except ValueError as exc:
        print(f"gpu-incident simulate: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"gpu-incident simulate: {exc.strerror or exc}", file=sys.stderr)
        return 2
