"""Bench: what one poll costs by transport, side by side in one run, and what it costs the node.

The console's probe (probe.build_script) three ways, with a ``sh`` stand-in for nvidia-smi
that answers at once (so the figures are the transport's and the probe's own commands'):

- ``probe_local``  a long-lived local ``sh`` fed the probe on stdin: no SSH, the work floor;
- ``ssh_poll``     the console's way: SshSource over one kept connection to a loopback
                   OpenSSH sshd (console/bench/sshd.py) that this bench starts and stops;
- ``fresh_ssh``    the seed's (and pdsh's, clush's) way: a new ``ssh`` process per poll.

The kept shells, local and remote, are ShellSources: each poll leaves out what the console's
leaves out, on its cadence (probe.STICKY); a fresh ``ssh`` gets the whole probe every time.

Each is the probe's round trip: the script written until its last section's end marker
arrived (``fresh``: until ``ssh`` exited); parsing is measured apart (probe.parse.*). The
node's CPU per poll is read from the kept session's remote shell: its own CPU time and its
children's (every command the probe ran), over the polls. The stand-in counts its calls:
nvidia-smi runs per poll, what a real GPU node pays most for (scripts/device-check times them).
"""
from __future__ import annotations

import asyncio
import shutil
import statistics
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from console import probe
from console.bench import sshd as loopback
from console.bench.stats import Result, percentile
from console.model import CommandResult
from console.sources.capture import ProbeOutput
from console.sources.shell import ShellSource
from console.sources.ssh.options import SshOptions
from console.sources.ssh.source import SshSource

#: answers like nvidia-smi on an idle 8-GPU node, at once; one line per call into $GI_BENCH_SMI_CALLS
STANDIN = r"""#!/bin/bash
# The bench's nvidia-smi: eight GPUs. With -lms N it loops as the real one does (console/probe_loop.py),
# a sample every interval, each line after its timestamp, with no process started per sample
# (bash's own clock and a read that times out instead of date and sleep): what a real loop costs
# the node is NVML's queries, not forks.
echo "$*" >> "${GI_BENCH_SMI_CALLS:-/dev/null}"
P=
rows() {
case "$*" in
  *--query-gpu=*)
    for i in 0 1 2 3 4 5 6 7; do
      echo "$P$i, GPU-0bench00-0000-0000-0000-00000000000$i, NVIDIA H100 80GB HBM3, 00000000:1$i:00.0, 1, 81559, 0, Enabled, [N/A]"
    done ;;
  *--query-compute-apps=*) ;;
  "-q"*)      # -q -d ROW_REMAPPER,PAGE_RETIREMENT: nothing pending
    for i in 0 1 2 3 4 5 6 7; do
      printf 'GPU 00000000:1%s:00.0\n    Remapped Rows\n        %-34s: 0\n        %-34s: 0\n        %-34s: No\n' \
        "$i" "Correctable Error" "Uncorrectable Error" "Pending"
    done ;;
  "pmon"*)    # pmon -c 1 -s u: the header, and each GPU's row of a device with no process sampled
    echo "# gpu        pid  type    sm   mem   enc   dec   command"
    echo "# Idx          #   C/G     %     %     %     %   name"
    for i in 0 1 2 3 4 5 6 7; do echo "    $i          -     -     -     -     -     -   -"; done ;;
  *" -L"*|"-L")
    for i in 0 1 2 3 4 5 6 7; do
      echo "GPU $i: NVIDIA H100 80GB HBM3 (UUID: GPU-0bench00-0000-0000-0000-00000000000$i)"
    done ;;
  *) echo "bench nvidia-smi stand-in: unsupported call: $*" >&2; return 2 ;;
esac
}
case " $* " in
  *" -lms "*)
    exec 9<> <(:)
    while :; do
      printf -v ts '%(%Y/%m/%d %H:%M:%S)T' -1
      ms=${EPOCHREALTIME#*.}
      P="$ts.${ms:0:3}, "
      rows "$@"
      read -r -t 1 -u 9
    done ;;
  *) rows "$@"; exit $? ;;
esac
"""
READ_CHUNK = 1 << 16
#: polls (a quarter second apart) the kept connection gets for its nvidia-smi loops to answer
LOOP_WARM_POLLS = 40
POLL_TIMEOUT_S = 30.0


@dataclass
class Rep:
    """One repetition's samples (ms) and node figures."""
    local: list[float] = field(default_factory=list)
    kept: list[float] = field(default_factory=list)
    fresh: list[float] = field(default_factory=list)
    node_cpu_ms: float | None = None
    smi_calls: float | None = None


def _node_env(root: Path) -> dict[str, str]:
    return {"PATH": f"{root / 'bin'}:/usr/bin:/bin", "HOME": str(root / "home"),
            "GI_BENCH_SMI_CALLS": str(root / "smi-calls"), "LC_ALL": "C"}


def _setup(root: Path) -> None:
    (root / "bin").mkdir()
    (root / "home").mkdir()
    standin = root / "bin" / "nvidia-smi"
    standin.write_text(STANDIN)
    standin.chmod(0o755)
    (root / "smi-calls").touch()


def _smi_calls(root: Path) -> int:
    try:
        return len((root / "smi-calls").read_bytes().splitlines())
    except OSError:
        return 0


class LocalShell(ShellSource):
    """A long-lived local ``sh`` answering the probe, as the kept remote shell does: a ShellSource,
    so it leaves out what the console's kept shell leaves out, on the same cadence
    (probe.STICKY); ``probe`` is one poll's round trip, the parse left out."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        super().__init__("local-sh")
        self.proc = proc

    @classmethod
    async def start(cls, root: Path) -> "LocalShell":
        proc = await asyncio.create_subprocess_exec(
            "sh", stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.DEVNULL, env=_node_env(root), cwd=str(root / "home"))
        return cls(proc)

    def _shell_token(self) -> object | None:
        return self.proc if self.proc.returncode is None else None

    async def _exec(self, script: str, timeout: float) -> CommandResult:
        return CommandResult(script, None, error="the bench's local shell answers probes only")

    async def _exec_probe(self, script: str, mark: str, timeout: float) -> ProbeOutput:
        cap = self._capture(mark)
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(script.encode())
        async with asyncio.timeout(POLL_TIMEOUT_S):
            while not cap.complete:
                chunk = await self.proc.stdout.read(READ_CHUNK)
                if not chunk:
                    raise RuntimeError("the local sh ended mid-probe")
                cap.feed(chunk)
        return ProbeOutput(cap.data())

    async def probe(self) -> float:
        snap = await self.poll()
        if snap.error is not None or snap.probe_ms is None:
            raise RuntimeError(f"the local sh's probe failed: {snap.error}")
        return snap.probe_ms

    async def close(self) -> None:
        if self.proc.returncode is None:
            if self.proc.stdin is not None:
                self.proc.stdin.close()
            try:
                await asyncio.wait_for(self.proc.wait(), 5)
            except asyncio.TimeoutError:
                self.proc.kill()
                await self.proc.wait()


def _shell_cpu_s(server: loopback.LoopbackSshd) -> float | None:
    """CPU seconds of the kept session's remote ``sh`` and of every child it waited for."""
    shells = [p for p in server.sessions() if _name(p) == "sh"]
    if len(shells) != 1:
        return None
    try:
        t = shells[0].cpu_times()
    except Exception:  # noqa: BLE001 - gone: no figure
        return None
    return t.user + t.system + t.children_user + t.children_system


def _name(p) -> str:
    try:
        return p.name()
    except Exception:  # noqa: BLE001
        return ""


async def _fresh_probe(argv: list[str]) -> float:
    """A new ``ssh`` per poll: connect, authenticate, ``sh`` fed the probe, until ssh exits."""
    mark = probe.new_mark()
    t0 = time.perf_counter()
    proc = await asyncio.create_subprocess_exec(*argv, stdin=asyncio.subprocess.PIPE,
                                                stdout=asyncio.subprocess.PIPE,
                                                stderr=asyncio.subprocess.PIPE)
    try:
        async with asyncio.timeout(POLL_TIMEOUT_S):
            out, err = await proc.communicate(probe.build_script(mark).encode())
    except TimeoutError:
        proc.kill()
        await proc.wait()
        raise RuntimeError("a fresh ssh poll timed out") from None
    ms = (time.perf_counter() - t0) * 1000
    if proc.returncode != 0 or f"{mark} end driver".encode() not in out:
        raise RuntimeError(f"a fresh ssh poll failed (rc {proc.returncode}): "
                           f"{err.decode('utf-8', 'replace').strip()[-200:]}")
    return ms


def _p50(xs: list[float]) -> float:
    return percentile(xs, 50)


def median(values: list[float]) -> float:
    return statistics.median(values)


async def measure(reps: int, polls: int, fresh_polls: int,
                  progress: Callable[[str], None] = lambda _m: None
                  ) -> tuple[list[Result], dict, list[str]]:
    """(results, headline figures, error lines). Headline figures are medians of the
    repetitions' figures; a part that cannot run here leaves its figures None and says why."""
    errors: list[str] = []
    root = Path(tempfile.mkdtemp(prefix="gpu-incident-bench-transport-"))
    _setup(root)
    local: LocalShell | None = None
    server: loopback.LoopbackSshd | None = None
    kept: SshSource | None = None
    runs = [Rep() for _ in range(reps)]
    why = loopback.missing()
    try:
        local = await LocalShell.start(root)
        await local.probe()                                  # warm: page cache, first exec
        if why is None:
            progress("transport: starting a loopback OpenSSH sshd")
            host = loopback.make_host_key(root / "host_ed25519")
            client_key = root / "client_ed25519"
            loopback.write_key(client_key)
            port = loopback.free_ports(1)[0]
            server = loopback.LoopbackSshd(root / "sshd", host, Path(str(client_key) + ".pub").read_text(),
                                           [port], {port: _node_env(root)})
            await asyncio.to_thread(server.start)
            known = server.write_known_hosts(root / "known_hosts")
            config = root / "ssh_config"
            config.write_text("")
            dest = f"{loopback.login_user()}@127.0.0.1:{port}"
            kept = SshSource(dest, SshOptions(known_hosts=str(known), identity=(str(client_key),),
                                              ssh_config=str(config), connect_timeout=10.0))
            snap = await kept.poll()                         # connect, and warm
            if snap.error is not None:
                errors.append(f"transport: the kept SSH connection failed: {snap.error}")
                kept = None
            else:       # until the nvidia-smi loops answer (console/probe_loop.py): the steady state
                for _ in range(LOOP_WARM_POLLS):
                    if kept.loop_answering:
                        break
                    await asyncio.sleep(0.25)
                    await kept.poll()
            fresh_argv = ["ssh", "-F", "/dev/null", "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=yes",
                          "-o", f"UserKnownHostsFile={known}", "-o", "IdentitiesOnly=yes",
                          "-i", str(client_key), "-p", str(port), f"{loopback.login_user()}@127.0.0.1", "sh"]
        else:
            errors.append(f"transport: SSH figures not measured: {why}")
        for i, rep in enumerate(runs):
            progress(f"transport: repetition {i + 1} of {reps}")
            for _ in range(polls):
                rep.local.append(await local.probe())
            if kept is not None and server is not None:
                cpu0, calls0 = _shell_cpu_s(server), _smi_calls(root)
                done = 0
                for _ in range(polls):
                    snap = await kept.poll()
                    if snap.error is not None or snap.probe_ms is None:
                        errors.append(f"transport: kept SSH poll failed: {snap.error}")
                        break
                    rep.kept.append(snap.probe_ms)
                    done += 1
                cpu1 = _shell_cpu_s(server)
                if done and cpu0 is not None and cpu1 is not None:
                    rep.node_cpu_ms = (cpu1 - cpu0) * 1000 / done
                if done:
                    rep.smi_calls = (_smi_calls(root) - calls0) / done
                for _ in range(fresh_polls):
                    try:
                        rep.fresh.append(await _fresh_probe(fresh_argv))
                    except RuntimeError as exc:
                        errors.append(f"transport: {exc}")
                        break
    finally:
        if kept is not None:
            await kept.close()
        if local is not None:
            await local.close()
        if server is not None:
            await asyncio.to_thread(server.stop)
        shutil.rmtree(root, ignore_errors=True)
    return _results(runs), _headline(runs), errors


def _results(runs: list[Rep]) -> list[Result]:
    out = []
    for attr, name, about in (
            ("local", "transport.probe_local", "the probe through a long-lived local sh (no SSH): "
                                               "written until its end marker arrived"),
            ("kept", "transport.ssh_kept", "the probe over the kept SSH connection to a loopback OpenSSH sshd "
                                           "(SshSource: one long-lived remote sh)"),
            ("fresh", "transport.ssh_fresh", "the probe through a new ssh process per poll (connect, "
                                             "authenticate, sh) until ssh exited")):
        xs = [x for r in runs for x in getattr(r, attr)]
        if xs:
            out.append(Result(name, about, xs, extra={"repetitions": len(runs)}))
    return out


def _med(values: list[float | None]) -> float | None:
    xs = [v for v in values if v is not None]
    return round(median(xs), 3) if xs else None


def _headline(runs: list[Rep]) -> dict:
    local = [_p50(r.local) if r.local else None for r in runs]
    kept = [_p50(r.kept) if r.kept else None for r in runs]
    kept99 = [percentile(r.kept, 99) if r.kept else None for r in runs]
    fresh = [_p50(r.fresh) if r.fresh else None for r in runs]
    speedup = [f / k if f and k else None for f, k in zip(fresh, kept)]
    overhead = [k - p if k is not None and p is not None else None for k, p in zip(kept, local)]
    return {
        "probe_local_ms_p50": _med(local),
        "ssh_poll_ms_p50": _med(kept),
        "ssh_poll_ms_p99": _med(kept99),
        "fresh_ssh_ms_p50": _med(fresh),
        "speedup_vs_fresh_ssh": _med(speedup),
        "transport_overhead_ms": _med(overhead),
        "node_cpu_ms_per_poll": _med([r.node_cpu_ms for r in runs]),
        # each call is a start (no loop mode yet): NVML is initialised once a call
        "nvidia_smi_starts_per_poll": _med([r.smi_calls for r in runs]),
        "nvidia_smi_calls_per_poll": _med([r.smi_calls for r in runs]),
    }
