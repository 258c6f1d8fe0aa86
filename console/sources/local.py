"""The local machine as a node: NVML (nvidia-ml-py) + /proc, no shell round trips.

``poll`` runs three things at once and never raises:

* one NVML reading in a dedicated thread, bounded by ``nvml_timeout`` (a hung
  driver is reported as "NVML call timed out after Ns"; while it stays stuck
  no new NVML call is started);
* one /proc scan in another dedicated thread (every process: state, ppid,
  user, command line, start time, threads in D, open device files);
* ``dmesg`` for NVRM Xid lines, at most every 30 s.

The /proc scan reads the files directly instead of going through
``psutil.process_iter``: on a 300-process machine that is ~5x cheaper, and the
poll runs every second. ``create_time`` is computed exactly as psutil does
(start ticks / CLK_TCK + btime), so ``signal`` can check identity with
``psutil.Process(pid).create_time()``.
"""
from __future__ import annotations

import asyncio
import dataclasses
import fnmatch
import os
import pwd
import re
import shlex
import signal as _signal
import socket
import tempfile
import time
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import psutil

from ..model import CommandResult, DriverProc, NodeSnapshot, Proc, ThreadInfo
from . import nvml as _nvml
from .base import DEFAULT_COMMAND_TIMEOUT_S, Source, logged
from .parse import credit_driver_memory

DEFAULT_DEVICE_GLOB = "/dev/nvidia*"
DMESG_EVERY_S = 30.0
DMESG_TIMEOUT_S = 3.0
DMESG_WAIT_S = 1.0
DMESG_DENIED = "dmesg not permitted: Xid lines unavailable"
XID_MARK = "NVRM: Xid"
XID_KEEP = 50
REFUSED_RC = 3


# --------------------------------------------------------------------------- /proc scan

@dataclass
class _Raw:
    pid: int
    ppid: int
    state: str
    comm: str
    cmdline: str
    uid: int | None
    num_threads: int | None
    start_ticks: int | None


@dataclass
class ProcScan:
    processes: list[Proc]
    own_pids: tuple[int, ...]
    warnings: list[str]


def parse_stat(text: str) -> tuple[str, str, int, int | None, int | None] | None:
    """(comm, state, ppid, num_threads, starttime) from a /proc/PID/stat line, or None."""
    left, right = text.find("("), text.rfind(")")
    if left < 0 or right < left:
        return None
    comm = text[left + 1:right]
    rest = text[right + 2:].split()
    if len(rest) < 2:
        return None
    try:
        ppid = int(rest[1])
    except ValueError:
        return None
    try:
        threads = int(rest[17])
    except (IndexError, ValueError):
        threads = None
    try:
        start = int(rest[19])
    except (IndexError, ValueError):
        start = None
    return comm, rest[0][:1] or "?", ppid, threads, start


def _read(path: str, *, small: bool = False) -> bytes | None:
    """Whole file, or None. Raw os.open/os.read costs a third of open().read().

    ``small``: a seq_file under 16 KiB (stat, status) comes back in one read."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        chunks = []
        while True:
            chunk = os.read(fd, 16384)
            if not chunk:
                break
            chunks.append(chunk)
            if small and len(chunk) < 16384:
                break
        return b"".join(chunks)
    except OSError:
        return None
    finally:
        os.close(fd)


def _boot_time(proc: str) -> float:
    data = _read(f"{proc}/stat") or b""
    for line in data.splitlines():
        if line.startswith(b"btime"):
            try:
                return float(line.split()[1])
            except (IndexError, ValueError):
                break
    return psutil.boot_time()


def _euid(status: bytes | None) -> int | None:
    if not status:
        return None
    i = status.find(b"\nUid:")
    if i < 0:
        return None
    words = status[i + 5:status.find(b"\n", i + 5)].split()
    try:
        return int(words[1] if len(words) > 1 else words[0])
    except (IndexError, ValueError):
        return None


class ProcScanner:
    """Blocking scan of every process in /proc (run it off the event loop)."""

    def __init__(self, device_glob: str = DEFAULT_DEVICE_GLOB, *, proc: str = "/proc") -> None:
        self.device_glob = device_glob
        self.proc = proc
        self._match = re.compile(fnmatch.translate(device_glob)).match
        self._ticks = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
        self._btime = _boot_time(proc)
        self._users: dict[int, str | None] = {}

    def _user(self, uid: int | None) -> str | None:
        if uid is None:
            return None
        if uid not in self._users:
            try:
                self._users[uid] = pwd.getpwuid(uid).pw_name
            except (KeyError, OverflowError):
                self._users[uid] = str(uid)
        return self._users[uid]

    def _raw(self, pid: int) -> _Raw | None:
        base = f"{self.proc}/{pid}"
        stat = _read(f"{base}/stat", small=True)
        if stat is None:
            return None
        parsed = parse_stat(stat.decode("utf-8", "replace"))
        if parsed is None:
            return None
        comm, state, ppid, threads, start = parsed
        cmd = _read(f"{base}/cmdline") or b""
        args = [a.decode("utf-8", "replace") for a in cmd.split(b"\0")]
        while args and not args[-1]:
            args.pop()
        return _Raw(pid=pid, ppid=ppid, state=state, comm=comm, cmdline=" ".join(args),
                    uid=_euid(_read(f"{base}/status", small=True)), num_threads=threads, start_ticks=start)

    def _device_files(self, pid: int) -> tuple[tuple[str, ...], bool]:
        """(matching targets, permission denied)."""
        found: list[str] = []
        try:
            with os.scandir(f"{self.proc}/{pid}/fd") as it:
                for entry in it:
                    try:
                        target = os.readlink(entry.path)
                    except OSError:
                        continue
                    if self._match(target) and target not in found:
                        found.append(target)
        except PermissionError:
            return (), True
        except OSError:
            pass
        return tuple(found), False

    def _d_threads(self, pid: int) -> tuple[ThreadInfo, ...]:
        out: list[ThreadInfo] = []
        base = f"{self.proc}/{pid}/task"
        try:
            with os.scandir(base) as it:
                tids = [e.name for e in it if e.name.isdecimal()]
        except OSError:
            return ()
        for tid in tids:
            stat = _read(f"{base}/{tid}/stat", small=True)
            if stat is None:
                continue
            parsed = parse_stat(stat.decode("utf-8", "replace"))
            if parsed is None or parsed[1] != "D":
                continue
            wchan = (_read(f"{base}/{tid}/wchan") or b"").decode("utf-8", "replace").strip()
            out.append(ThreadInfo(tid=int(tid), state="D",
                                  wchan=None if wchan in ("", "0") else wchan, name=parsed[0]))
        return tuple(sorted(out, key=lambda t: t.tid))

    def pid_ns(self, pid: int) -> str | None:
        try:
            return os.readlink(f"{self.proc}/{pid}/ns/pid")
        except OSError:
            return None

    def scan(self, own_pid: int | None = None) -> ProcScan:
        try:
            with os.scandir(self.proc) as it:
                pids = sorted(int(e.name) for e in it if e.name.isdecimal())
        except OSError as exc:
            return ProcScan([], (), [f"cannot list {self.proc}: {exc.strerror or exc}"])
        denied = 0
        procs: list[Proc] = []
        parents: dict[int, int] = {}
        for pid in pids:
            raw = self._raw(pid)
            if raw is None:
                continue            # exited while we looked
            parents[pid] = raw.ppid
            kernel_thread = pid == 2 or raw.ppid == 2
            files: tuple[str, ...] = ()
            if not kernel_thread and raw.state not in ("Z", "X"):
                files, was_denied = self._device_files(pid)
                denied += was_denied
            d_threads: tuple[ThreadInfo, ...] = ()
            if raw.state in ("D", "Z") or (raw.num_threads or 1) > 1:
                d_threads = self._d_threads(pid)
            create = (self._btime + raw.start_ticks / self._ticks
                      if raw.start_ticks is not None else None)
            procs.append(Proc(
                pid=pid, ppid=raw.ppid, state=raw.state, user=self._user(raw.uid),
                name=raw.comm, cmdline=raw.cmdline, create_time=create,
                start_ticks=raw.start_ticks, device_files=files, d_threads=d_threads,
                num_threads=raw.num_threads, pid_ns=self.pid_ns(pid) if files else None))
        warnings = []
        if denied:
            warnings.append(f"cannot read open files of {denied} process(es) (permission "
                            "denied): device holders among them are not shown")
        return ProcScan(procs, own_ancestry(own_pid or os.getpid(), parents), warnings)


def own_ancestry(pid: int, parents: dict[int, int]) -> tuple[int, ...]:
    """pid and its ancestors, stopping before pid 1 (or where the chain leaves our view)."""
    out: list[int] = []
    seen: set[int] = set()
    while pid > 1 and pid not in seen:
        out.append(pid)
        seen.add(pid)
        pid = parents.get(pid, 0)
    return tuple(out)


def _own_pids_now() -> tuple[int, ...]:
    parents: dict[int, int] = {}
    pid = os.getpid()
    while pid > 1 and pid not in parents:
        stat = _read(f"/proc/{pid}/stat")
        parsed = parse_stat(stat.decode("utf-8", "replace")) if stat else None
        parents[pid] = parsed[2] if parsed else 0
        pid = parents[pid]
    return own_ancestry(os.getpid(), parents)


# --------------------------------------------------------------------------- the source

def _merge_gpu_memory(procs: list[Proc], dprocs: Sequence[DriverProc],
                      scanner: ProcScanner) -> tuple[list[Proc], list[DriverProc]]:
    """Driver memory onto processes (parse.credit_driver_memory); NVML lists a process doing
    compute and graphics twice with the same figure: counted once."""
    unique = list({(d.pid, d.gpu_index, d.gpu_uuid, d.used_memory_mib): d for d in dprocs}.values())
    procs, marked = credit_driver_memory(procs, unique)
    credited = {d.pid for d in marked if d.local}
    procs = [dataclasses.replace(p, pid_ns=p.pid_ns or scanner.pid_ns(p.pid)) if p.pid in credited else p
             for p in procs]
    return procs, marked


def _signal_number(signame: str) -> _signal.Signals | None:
    name = str(signame).strip().upper()
    if name.isdecimal():
        try:
            return _signal.Signals(int(name))
        except ValueError:
            return None
    name = name if name.startswith("SIG") else "SIG" + name
    try:
        return _signal.Signals[name]
    except KeyError:
        return None


class LocalSource(Source):
    kind = "local"

    def __init__(self, name: str = "local", device_glob: str = DEFAULT_DEVICE_GLOB,
                 nvml_timeout: float = 5.0, nvml_module: Any = None, *,
                 scan_timeout: float | None = None,
                 dmesg_command: Sequence[str] = ("dmesg",),
                 dmesg_every: float = DMESG_EVERY_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__(name)
        self.device_glob = device_glob
        self.nvml_timeout = float(nvml_timeout)
        self.scan_timeout = float(scan_timeout if scan_timeout is not None
                                  else max(self.nvml_timeout, 5.0))
        self.dmesg_command = tuple(dmesg_command)
        self.dmesg_every = dmesg_every
        self._clock = clock
        module = nvml_module if nvml_module is not None else _nvml.load_pynvml()
        self._session = _nvml.NvmlSession(module)
        self._nvml_worker = _nvml.DeadlineWorker("NVML call")
        self._scan_worker = _nvml.DeadlineWorker("process scan")
        self._scanner = ProcScanner(device_glob)
        self._dmesg_at: float | None = None
        self._dmesg_lines: tuple[str, ...] = ()
        self._dmesg_warning: str | None = None
        self._dmesg_task: asyncio.Future | None = None
        self._hostname = socket.gethostname()
        #: True while NVML is released for a local GPU reset: polls leave the driver alone.
        self.nvml_paused = False

    # ---- poll

    async def _nvml(self) -> _nvml.NvmlReading:
        if self.nvml_paused:
            return _nvml.NvmlReading(warnings=("NVML released for a GPU reset: "
                                               "GPU readings paused",))
        try:
            return await self._nvml_worker.call(self._session.read, self.nvml_timeout)
        except _nvml.CallTimeout as exc:
            return _nvml.NvmlReading(error=str(exc))
        except Exception as exc:  # noqa: BLE001 — read() already never raises; belt and braces
            return _nvml.NvmlReading(error=f"NVML error: {exc or type(exc).__name__}")

    async def _scan(self) -> ProcScan:
        try:
            return await self._scan_worker.call(self._scanner.scan, self.scan_timeout)
        except _nvml.CallTimeout as exc:
            return ProcScan([], _own_pids_now(), [f"{exc}: processes not listed"])
        except Exception as exc:  # noqa: BLE001
            return ProcScan([], _own_pids_now(), [f"process scan failed: {exc}"])

    async def _kernel_log(self) -> tuple[tuple[str, ...], str | None]:
        """Cached Xid lines; dmesg runs at most every ``dmesg_every`` s, in the background,
        and a poll waits for it at most ``DMESG_WAIT_S``."""
        now = self._clock()
        due = self._dmesg_at is None or now - self._dmesg_at >= self.dmesg_every
        if due and (self._dmesg_task is None or self._dmesg_task.done()):
            self._dmesg_at = now
            self._dmesg_task = asyncio.ensure_future(self._refresh_dmesg())
        if self._dmesg_task is not None and not self._dmesg_task.done():
            await asyncio.wait({self._dmesg_task}, timeout=DMESG_WAIT_S)
        return self._dmesg_lines, self._dmesg_warning

    async def _refresh_dmesg(self) -> None:
        try:
            self._dmesg_lines, self._dmesg_warning = await self._read_dmesg()
        except Exception as exc:  # noqa: BLE001
            self._dmesg_lines, self._dmesg_warning = (), f"dmesg failed ({exc}): Xid lines unavailable"

    async def _read_dmesg(self) -> tuple[tuple[str, ...], str | None]:
        res = await _exec(self.dmesg_command, DMESG_TIMEOUT_S)
        if res.error is not None and res.rc is None:
            return (), f"dmesg did not answer: {res.error}: Xid lines unavailable"
        if res.rc == 127 and not res.stdout:
            return (), "dmesg not found: Xid lines unavailable"
        if "Operation not permitted" in res.stderr or "Permission denied" in res.stderr:
            return (), DMESG_DENIED
        lines = tuple(line for line in res.stdout.splitlines() if XID_MARK in line)[-XID_KEEP:]
        if res.rc != 0 and not lines:
            first = (res.stderr.strip().splitlines() or [f"exit status {res.rc}"])[0]
            return (), f"dmesg failed ({first}): Xid lines unavailable"
        return lines, None

    async def poll(self) -> NodeSnapshot:
        started = time.monotonic()
        try:
            reading, scan, (klog, kwarn) = await asyncio.gather(
                self._nvml(), self._scan(), self._kernel_log())
            procs, dprocs = _merge_gpu_memory(scan.processes, reading.driver_processes, self._scanner)
            names = {p.pid: p.name for p in procs}
            dprocs = [d if d.name or not d.local else dataclasses.replace(d, name=names[d.pid])
                      for d in dprocs]
            warnings = [*reading.warnings, *scan.warnings] + ([kwarn] if kwarn else [])
            return NodeSnapshot(
                name=self.name, taken_at=time.time(), error=reading.error,
                warnings=tuple(warnings), probe_ms=round((time.monotonic() - started) * 1000, 1),
                gpus=reading.gpus, processes=tuple(procs), driver_processes=tuple(dprocs),
                lost_gpus=reading.lost_gpus, kernel_log=klog, hostname=self._hostname,
                own_pids=scan.own_pids, driver_version=reading.driver_version)
        except Exception as exc:  # noqa: BLE001 — poll never raises
            return NodeSnapshot(name=self.name, taken_at=time.time(),
                                error=f"local probe failed: {exc or type(exc).__name__}",
                                probe_ms=round((time.monotonic() - started) * 1000, 1))

    # ---- commands

    async def run(self, command: str, timeout: float = DEFAULT_COMMAND_TIMEOUT_S) -> CommandResult:
        return logged(self.name, await _exec(("/bin/sh", "-c", command), timeout, shown=command))

    async def signal(self, pid: int, signame: str, *, start_ticks: int | None = None,
                     create_time: float | None = None) -> CommandResult:
        started = time.monotonic()
        sig = _signal_number(signame)
        try:
            pid = int(pid)
        except (TypeError, ValueError):
            return CommandResult(command=f"kill -s {signame} {pid}", rc=2,
                                 stderr=f"refused: {pid!r} is not a PID", error="bad PID")
        shown_sig = sig.name.removeprefix("SIG") if sig else str(signame)
        command = f"kill -s {shown_sig} {pid}"

        def done(rc: int | None, stderr: str = "", error: str | None = None) -> CommandResult:
            return CommandResult(command=command, rc=rc, stderr=stderr, error=error,
                                 duration_s=round(time.monotonic() - started, 4))

        if sig is None:
            return done(2, f"kill: {signame}: invalid signal specification")
        if pid <= 1:
            return done(REFUSED_RC, f"refused: PID {pid} is init or a process group, "
                                    "never signalled by this console")
        own = _own_pids_now()
        if pid in own:
            return done(REFUSED_RC, f"refused: PID {pid} is this console or the session "
                                    "it runs in")
        if start_ticks is None and create_time is None:
            return done(REFUSED_RC, f"refused: the start time of PID {pid} is unknown, so a reused "
                                    "PID could not be told apart (PID-reuse guard)")
        try:
            return logged(self.name, await asyncio.to_thread(self._send, pid, sig, start_ticks,
                                                             create_time, done))
        except Exception as exc:  # noqa: BLE001 — never raises
            return logged(self.name, done(1, f"kill: ({pid}) - {exc}"))

    def _send(self, pid: int, sig: _signal.Signals, start_ticks: int | None,
              create_time: float | None, done: Callable[..., CommandResult]) -> CommandResult:
        gone = f"kill: ({pid}) - No such process"
        pidfd = None
        if hasattr(os, "pidfd_open"):
            try:
                pidfd = os.pidfd_open(pid)    # pins this very process; identity checked next
            except ProcessLookupError:
                return done(1, gone)
            except OSError:
                pidfd = None                  # old kernel: psutil's own reuse check below
        try:
            try:
                proc = psutil.Process(pid)
                actual = proc.create_time()
            except psutil.NoSuchProcess:
                return done(1, gone)
            except psutil.AccessDenied:
                return done(1, f"kill: ({pid}) - Operation not permitted")
            if create_time is not None and abs(actual - float(create_time)) > 1e-3:
                return done(REFUSED_RC, f"refused: PID {pid} is no longer the same process "
                                        "(start time changed)")
            if start_ticks is not None:
                stat = _read(f"/proc/{pid}/stat")
                parsed = parse_stat(stat.decode("utf-8", "replace")) if stat else None
                if parsed is None:
                    return done(1, gone)
                if parsed[4] != int(start_ticks):
                    return done(REFUSED_RC, f"refused: PID {pid} is no longer the same "
                                            "process (start time changed)")
            try:
                if pidfd is not None:
                    _signal.pidfd_send_signal(pidfd, sig)
                else:
                    proc.send_signal(sig)     # psutil re-checks (pid, create_time)
            except (ProcessLookupError, psutil.NoSuchProcess):
                return done(1, gone)
            except (PermissionError, psutil.AccessDenied):
                return done(1, f"kill: ({pid}) - Operation not permitted")
            return done(0)
        finally:
            if pidfd is not None:
                os.close(pidfd)

    async def close(self) -> None:
        """Release NVML (nvmlShutdown) — needed before a local GPU reset. A later poll
        opens it again unless ``nvml_paused`` is set."""
        try:
            await self._nvml_worker.call(self._session.shutdown, self.nvml_timeout)
        except Exception:  # noqa: BLE001
            pass
        self._nvml_worker.stop()
        self._scan_worker.stop()


async def _exec(argv: Sequence[str], timeout: float, *, shown: str | None = None) -> CommandResult:
    """Run argv in its own process group; never raises. On timeout the whole group is killed.

    Output goes to unlinked temporary files, not pipes: a background child of the
    command (``sleep 30 &``) would hold a pipe open and stall the read after the
    command itself has finished.
    """
    command = shown if shown is not None else shlex.join(argv)
    started = time.monotonic()

    def elapsed() -> float:
        return round(time.monotonic() - started, 4)

    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        try:
            proc = await asyncio.create_subprocess_exec(
                *argv, stdin=asyncio.subprocess.DEVNULL, stdout=out, stderr=err,
                start_new_session=True)
        except FileNotFoundError:
            return CommandResult(command=command, rc=127, stderr=f"{argv[0]}: not found",
                                 duration_s=elapsed())
        except OSError as exc:
            return CommandResult(command=command, rc=126, stderr=f"{argv[0]}: {exc.strerror}",
                                 duration_s=elapsed(),
                                 error=f"cannot run {argv[0]}: {exc.strerror}")
        rc: int | None = None
        error: str | None = None
        try:
            rc = await asyncio.wait_for(proc.wait(), timeout)
        except (asyncio.TimeoutError, TimeoutError):
            error = f"timed out after {timeout:g}s"
            _kill_group(proc.pid)
            try:
                await asyncio.wait_for(proc.wait(), 2.0)
            except (asyncio.TimeoutError, TimeoutError):
                pass
        except asyncio.CancelledError:
            _kill_group(proc.pid)
            raise
        return CommandResult(command=command, rc=rc, stdout=_contents(out),
                             stderr=_contents(err), duration_s=elapsed(), error=error)


def _kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, _signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _contents(f: Any, limit: int = 4 * 1024 * 1024) -> str:
    f.seek(0)
    return f.read(limit).decode("utf-8", "replace")
