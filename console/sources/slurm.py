"""Where the operator's Slurm client works: this machine, or a controller host over SSH.

``SlurmClient`` runs ``scontrol`` and ``squeue`` — on the console's machine as an argv list
(no shell), or on a named host (``--slurm-controller HOST``) over the SSH source's connection,
with every word through ``shlex.quote``. It reads a node's state and the jobs on it
(``read``) and runs the drain/resume lines the action layer planned (``run``, which refuses
anything but ``scontrol``/``squeue`` words). Slurm missing is not an error: ``read`` then
says ``present=False`` and the console shows nothing of Slurm.

The Slurm name of a node: the ``[slurm] nodes`` mapping of the config file first, else the
short host name the node reported (``gpu01.example`` -> ``gpu01``), else the target's host.
"""
from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import shlex
import shutil
import socket
import time
from dataclasses import dataclass, field
from typing import Iterable, Mapping

from console.clock import REAL_CLOCK, Clock
from console.model import CommandResult, NodeSnapshot
from console.sources import slurm_parse as sp
from console.sources.base import logged
from console.sources.parse import clip
from console.sources.slurm_parse import SlurmJob, SlurmNode

#: the target that is this machine (console/sources/targets.py)
LOCAL = "local"

log = logging.getLogger("gpu_incident.slurm")

#: one scontrol/squeue call's deadline (a controller that does not answer must not hold the console)
COMMAND_TIMEOUT_S = 10.0
#: the most job records read per reading (scontrol show job per job the cgroups name)
MAX_SHOW_JOBS = 16
_PROGRAMS = ("scontrol", "squeue")
#: what Slurm's clients print when the node or the job is unknown, or Slurm is not set up here
_UNKNOWN_NODE = ("Invalid node name specified", "not found")
_NO_SLURM = ("Could not establish a configuration source", "Unable to process configuration file")


@dataclass(frozen=True)
class SlurmReading:
    """One reading of a node's Slurm side (``present`` False: show nothing)."""
    slurm_name: str | None
    present: bool = False
    node: SlurmNode | None = None             # None: Slurm does not know the node
    jobs: tuple[SlurmJob, ...] = ()           # on the node (squeue), then those only the cgroups name
    gpu_jobs: Mapping[str, tuple[int, ...]] = field(default_factory=dict)   # job id -> GPU holder PIDs
    error: str | None = None                  # the controller did not answer, …
    where: str = "this machine"
    note: str | None = None                   # the node calls itself something else (name_warning)


def _is_address(host: str) -> bool:
    import ipaddress
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def gpu_jobs(snap: NodeSnapshot) -> dict[str, tuple[int, ...]]:
    """Job ID -> the GPU holders' PIDs whose cgroup is that job's (console/sources/cgroup.py reads
    the cgroups of the GPU holders)."""
    out: dict[str, list[int]] = {}
    for p in snap.processes:
        if not (p.gpu_memory_mib or p.holds_devices) or p.cgroup is None:
            continue
        job = sp.job_of_cgroup(p.cgroup.path)
        if job is not None:
            out.setdefault(job, []).append(p.pid)
    return {k: tuple(v) for k, v in out.items()}


class SlurmClient:
    def __init__(self, controller: str | None = None, *, ssh_options=None,
                 node_names: Mapping[str, str] | None = None, timeout: float = COMMAND_TIMEOUT_S,
                 clock: Clock = REAL_CLOCK, env: Mapping[str, str] | None = None) -> None:
        self.controller = controller
        self.node_names = {str(k): sp.node_name(v) for k, v in (node_names or {}).items()}
        self.timeout = timeout
        self.clock = clock
        self.env = dict(env) if env is not None else None
        self._ssh = None
        if controller:
            from console.sources.ssh.source import SshSource
            self._ssh = SshSource(controller, ssh_options)
        self._found: bool | None = None

    @property
    def where(self) -> str:
        return f"controller {self.controller}" if self.controller else "this machine"

    def slurm_name(self, source_name: str, snap: NodeSnapshot | None = None) -> str | None:
        """The node's Slurm name: the ``[slurm]`` mapping; for ``local``, ``$SLURMD_NODENAME`` (set
        in a Prolog and Epilog) or this machine's short host name; else the target's own host name (what
        the operator named, not what the node says of itself: a node whose hostname says
        ``victim01`` must not aim a drain there); else, for a target that is an address, the
        host name the node reports. None when none is a name the console sends."""
        candidates = [self.node_names.get(source_name)]
        if source_name == LOCAL:
            # this machine: in a Prolog or Epilog slurmd says which node it is; else its host name
            candidates += [os.environ.get("SLURMD_NODENAME"), sp.short_host(socket.gethostname())]
        else:
            host = source_name.rpartition("@")[2]
            host = host[1:].partition("]")[0] if host.startswith("[") else host.partition(":")[0]
            if not _is_address(host):
                candidates.append(sp.short_host(host))
        if snap is not None and snap.hostname:
            candidates.append(sp.short_host(snap.hostname))
        for c in candidates:
            if c and sp.NODE_NAME.fullmatch(c):
                return c
        return None

    def name_warning(self, source_name: str, snap: NodeSnapshot | None) -> str | None:
        """When the node calls itself something else than the Slurm name used: say so."""
        name = self.slurm_name(source_name, snap)
        reported = sp.short_host(snap.hostname) if snap is not None and snap.hostname else None
        if name and reported and reported != name and source_name not in self.node_names:
            return (f"the node calls itself {clip(reported)}, Slurm's name used is {name} (from the target): "
                    "map it in [slurm] nodes if that is wrong")
        return None

    # ------------------------------------------------------------ running
    async def found(self) -> bool:
        """scontrol and squeue exist where Slurm commands run (asked once)."""
        if self._found is None:
            if self._ssh is None:
                self._found = all(shutil.which(p, path=(self.env or os.environ).get("PATH")) for p in _PROGRAMS)
            else:
                res = await self._ssh.run("command -v scontrol && command -v squeue", self.timeout)
                if res.error is not None:
                    return False        # the controller did not answer: ask again next time
                self._found = res.rc == 0
        return self._found

    async def run_argv(self, argv: Iterable[str], timeout: float | None = None) -> CommandResult:
        argv = tuple(str(a) for a in argv)
        line = sp.shell_line(argv)
        if not argv or argv[0] not in _PROGRAMS:
            return CommandResult(line, rc=2, error=f"refused: only {', '.join(_PROGRAMS)} run through the "
                                                   "Slurm client")
        timeout = self.timeout if timeout is None else timeout
        if self._ssh is not None:
            res = await self._ssh.run(" ".join(shlex.quote(a) for a in argv), timeout)
            return logged(self.where, CommandResult(line, res.rc, res.stdout, res.stderr, res.duration_s, res.error))
        return logged(self.where, await self._local(argv, line, timeout))

    async def run(self, line: str, timeout: float | None = None) -> CommandResult:
        """A planned line (sp.shell_line of an argv): split back into that argv, never a shell."""
        try:
            argv = shlex.split(line)
        except ValueError as exc:
            return CommandResult(line, rc=2, error=f"refused: {exc}")
        res = await self.run_argv(argv, timeout)
        return CommandResult(line, res.rc, res.stdout, res.stderr, res.duration_s, res.error)

    async def _local(self, argv: tuple[str, ...], line: str, timeout: float) -> CommandResult:
        started = time.monotonic()
        env = dict(self.env) if self.env is not None else None
        try:
            proc = await asyncio.create_subprocess_exec(*argv, stdin=asyncio.subprocess.DEVNULL,
                                                        stdout=asyncio.subprocess.PIPE,
                                                        stderr=asyncio.subprocess.PIPE, env=env)
        except OSError as exc:
            return CommandResult(line, rc=None, error=f"{argv[0]}: {exc.strerror or exc}")
        try:
            out, err = await asyncio.wait_for(proc.communicate(), timeout)
        except (asyncio.TimeoutError, TimeoutError):
            proc.kill()
            await proc.wait()
            return CommandResult(line, rc=None, duration_s=round(time.monotonic() - started, 3),
                                 error=f"timed out after {timeout:g} s")
        return CommandResult(line, rc=proc.returncode, stdout=out.decode("utf-8", "replace"),
                             stderr=err.decode("utf-8", "replace"),
                             duration_s=round(time.monotonic() - started, 3))

    # ------------------------------------------------------------ reading
    async def node(self, slurm_name: str) -> SlurmNode:
        """``scontrol show node -o NAME`` as a SlurmNode; its ``error`` says why when not read."""
        res = await self.run_argv(sp.show_node_argv(slurm_name))
        node = sp.parse_show_node(res.stdout) if res.ok else None
        if node is not None:
            return node
        # the line that says why: Slurm's clients print several, the telling one last
        telling = next((ln for ln in (res.output or "").splitlines() if any(w in ln for w in (*_NO_SLURM, *_UNKNOWN_NODE))),
                       None)
        why = res.error or clip(telling or res.output) or f"rc {res.rc}"
        return SlurmNode(name=slurm_name, state="UNKNOWN", error=f"scontrol show node {slurm_name}: {why}")

    async def read(self, source_name: str, snap: NodeSnapshot | None) -> SlurmReading:
        """The node's Slurm state and the jobs on it; never raises."""
        name = self.slurm_name(source_name, snap)
        if name is None or not await self.found():
            return SlurmReading(name, present=False, where=self.where)
        try:
            reading = await self._read(name, snap)
            note = self.name_warning(source_name, snap)
            return dataclasses.replace(reading, note=note) if note else reading
        except Exception as exc:  # noqa: BLE001 - a Slurm reading never takes the console down
            log.exception("slurm reading of %s failed", name)
            return SlurmReading(name, present=False, error=f"slurm: {clip(repr(exc))}", where=self.where)

    async def _read(self, name: str, snap: NodeSnapshot | None) -> SlurmReading:
        node = await self.node(name)
        if node.error is not None:
            text = node.error
            if any(w in text for w in _NO_SLURM) and self.controller is None:
                return SlurmReading(name, present=False, error=text, where=self.where)   # not set up here
            if any(w in text for w in _UNKNOWN_NODE):
                return SlurmReading(name, present=False, error=text, where=self.where)   # not a Slurm node
            return SlurmReading(name, present=True, node=None, error=text, where=self.where)
        owned = gpu_jobs(snap) if snap is not None else {}
        res = await self.run_argv(sp.squeue_argv(name))
        listed = sp.parse_squeue(res.stdout) if res.ok else ()
        error = None if res.ok else f"squeue: {res.error or clip(res.output) or f'rc {res.rc}'}"
        jobs: list[SlurmJob] = []
        # every job squeue lists is checked with scontrol (a job name can forge a squeue line),
        # then the jobs only the GPU holders' cgroups name (ended, or Slurm placed them elsewhere)
        wanted = [j.job_id for j in listed] + [j for j in owned if j not in {x.job_id for x in listed}]
        for job_id in wanted[:MAX_SHOW_JOBS]:
            shown = await self.run_argv(sp.show_job_argv(job_id))
            record = sp.parse_show_job(shown.stdout, job_id) if shown.ok else None
            squeued = next((j for j in listed if j.job_id == job_id), None)
            if squeued is not None:
                job = sp.confirmed(squeued, record, name)
            else:
                job = record or SlurmJob(job_id, state="GONE (Slurm no longer knows it)")
            if job is not None:
                jobs.append(job)
        return SlurmReading(name, present=True, node=node, jobs=tuple(jobs), gpu_jobs=owned, error=error,
                            where=self.where)

    async def close(self) -> None:
        if self._ssh is not None:
            await self._ssh.close()
