"""The local machine as a node: NVML (nvidia-ml-py) + /proc, no shell round trips.

``poll`` runs three things at once and never raises:

* one NVML reading in a dedicated thread, bounded by ``nvml_timeout`` (a hung
  driver is reported as "NVML call timed out after Ns"; while it stays stuck
  no new NVML call is started);
* one /proc scan in another dedicated thread (every process: state, ppid,
  user, command line, start time, threads in D, open device files; see procscan.py);
* ``dmesg`` for NVRM Xid lines, at most every 30 s.

Then, for the GPU holders only (device files open, or listed by the driver), /proc/PID/cgroup
(their container or systemd unit; sources/cgroup.py) and /proc/PID/exe (their executable); for
them and every process with a thread in D, the signals pending in /proc/PID/status (a SIGKILL
sent and not taken); the GPUs the kernel module knows (/proc/driver/nvidia/gpus) and whether
each still answers on the PCI bus (the first bytes of its config space in sysfs); and two
sysfs/devfs facts the reset advice needs: nvidia_drm's modeset parameter and the NVSwitch
device files.

``signal`` checks identity with ``psutil.Process(pid).create_time()``, which the scan
computes exactly as psutil does.
"""
from __future__ import annotations

import asyncio
import dataclasses
import glob as _glob
import os
import shlex
import signal as _signal
import socket
import tempfile
import time
from typing import Any, Callable, Sequence

import psutil

from console.clock import REAL_CLOCK, Clock
from console.model import CommandResult, DriverProc, NodeSnapshot, PciGpu, Proc
from console.sources.local import nvml as _nvml
from console.probe import DEFAULT_COMMAND_TIMEOUT_S
from console.sources.base import Source, logged
from console.sources.parse import DMESG_DENIED, credit_driver_memory, parse_stat_line, parse_xid
from console.sources.parse_pmon import credit_sm
from console.probe import DEFAULT_DEVICE_GLOB, DRM_MODESET_FILE, NVIDIA_GPUS_DIR, NVSWITCH_GLOB, PCI_DEVICES_DIR
from console.sources.cgroup import parse_cgroup
from console.sources.parse import MAX_PCI_GPUS, config_present, parse_sys
from console.sources.parse_proc import parse_pending
from console.sources.local.procscan import ProcScan, ProcScanner, own_ancestry, own_pids_now, read_file

__all__ = ["DEFAULT_DEVICE_GLOB", "DMESG_DENIED", "LocalSource", "ProcScan", "ProcScanner",
           "own_ancestry"]

DMESG_EVERY_S = 30.0
DMESG_TIMEOUT_S = 3.0
DMESG_WAIT_S = 1.0
XID_KEEP = 50
REFUSED_RC = 3


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


def _with_cgroups(procs: list[Proc], dprocs: Sequence[DriverProc], proc_root: str = "/proc") -> list[Proc]:
    """/proc/PID/cgroup of the GPU holders (device files, or listed by the driver) only: cheap."""
    listed = {d.pid for d in dprocs if d.local is not False}
    out = []
    for p in procs:
        if p.device_files or p.pid in listed:
            raw = read_file(f"{proc_root}/{p.pid}/cgroup", small=True)
            cg = parse_cgroup(raw.decode("utf-8", "replace")) if raw else None
            if cg is not None:
                p = dataclasses.replace(p, cgroup=cg)
        out.append(p)
    return out


def _pending(status: bytes | None) -> bool | None:
    """SIGKILL pending in a /proc/PID/status (SigPnd or ShdPnd, parse_pending's rule), or None
    when neither line could be read."""
    if not status:
        return None
    lines = [line for line in status.decode("ascii", "replace").split("\n")
             if line.startswith(("SigPnd:", "ShdPnd:"))]
    return parse_pending("".join(f"/proc/0/status:{line}\n" for line in lines)).get(0)


def _with_evidence(procs: list[Proc], dprocs: Sequence[DriverProc], proc_root: str = "/proc") -> list[Proc]:
    """The executable of each GPU holder (device files, or listed by the driver: readlink
    /proc/PID/exe, " (deleted)" kept as the kernel says it; None where it cannot be read: another
    user's process, a zombie), and whether a SIGKILL is pending for them and for every process with
    a thread in D (/proc/PID/status): a read or two each, only for those."""
    listed = {d.pid for d in dprocs if d.local is not False}
    out = []
    for p in procs:
        holder = bool(p.device_files) or p.pid in listed
        if holder or p.state == "D" or p.d_threads:
            exe = None
            if holder:
                try:
                    exe = os.readlink(f"{proc_root}/{p.pid}/exe")
                except OSError:          # permission denied, a zombie, a kernel thread, gone
                    exe = None
            pending = _pending(read_file(f"{proc_root}/{p.pid}/status", small=True))
            if exe != p.exe or pending != p.sigkill_pending:
                p = dataclasses.replace(p, exe=exe, sigkill_pending=pending)
        out.append(p)
    return out


def read_pci(root: str = "") -> tuple[PciGpu, ...] | None:
    """The GPUs the kernel module knows (the directories of ROOT/proc/driver/nvidia/gpus, named by
    bus id) and whether each still answers on the PCI bus (the first four bytes of
    ROOT/sys/bus/pci/devices/BUS/config: all ones, fallen off; unreadable, None); None when the
    directory is not there. ``root``: "" on a machine, a fake tree in the tests."""
    try:
        names = sorted(os.listdir(f"{root}{NVIDIA_GPUS_DIR}"))
    except OSError:
        return None
    out = []
    for name in names[:MAX_PCI_GPUS]:
        head = None
        try:
            fd = os.open(f"{root}{PCI_DEVICES_DIR}/{name}/config", os.O_RDONLY | os.O_CLOEXEC)
            try:
                head = os.read(fd, 4)
            finally:
                os.close(fd)
        except OSError:
            head = None
        out.append(PciGpu(bus_id=name, present=config_present([f"{b:02x}" for b in head or b""])))
    return tuple(out)


def read_sys(modeset_file: str = DRM_MODESET_FILE, nvswitch_glob: str = NVSWITCH_GLOB):
    """nvidia_drm's modeset and the NVSwitch device files, as the probe's sys section gives them."""
    raw = read_file(modeset_file)
    switches = " ".join(sorted(_glob.glob(nvswitch_glob)))
    return parse_sys(f"modeset {(raw or b'').decode('ascii', 'replace').strip()}\nnvswitch {switches}\n")


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
                 clock: Clock = REAL_CLOCK, drm_modeset_file: str = DRM_MODESET_FILE,
                 nvswitch_glob: str = NVSWITCH_GLOB, node_root: str = "") -> None:
        """``node_root``: where /proc/driver/nvidia/gpus and /sys/bus/pci/devices are read ("": the
        machine's own; the tests give a fake tree, as GI_NODE_ROOT does for the probe)."""
        super().__init__(name)
        self.node_root = node_root
        self.drm_modeset_file = drm_modeset_file
        self.nvswitch_glob = nvswitch_glob
        self.device_glob = device_glob
        self.nvml_timeout = float(nvml_timeout)
        self.scan_timeout = float(scan_timeout if scan_timeout is not None
                                  else max(self.nvml_timeout, 5.0))
        self.dmesg_command = tuple(dmesg_command)
        self.dmesg_every = dmesg_every
        self.clock = clock
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
            return ProcScan([], own_pids_now(), [f"{exc}: processes not listed"])
        except Exception as exc:  # noqa: BLE001
            return ProcScan([], own_pids_now(), [f"process scan failed: {exc}"])

    async def _kernel_log(self) -> tuple[tuple[str, ...], str | None]:
        """Cached Xid lines; dmesg runs at most every ``dmesg_every`` s, in the background,
        and a poll waits for it at most ``DMESG_WAIT_S``."""
        now = self.clock.monotonic()
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
        if DMESG_DENIED in parse_xid(res.stderr)[1]:
            return (), DMESG_DENIED
        lines = tuple(parse_xid(res.stdout)[0][-XID_KEEP:])
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
            procs = _with_cgroups(procs, dprocs, self._scanner.proc)
            procs = _with_evidence(procs, dprocs, self._scanner.proc)
            procs = list(credit_sm(procs, dprocs, reading.process_sm))
            sysinfo = read_sys(self.drm_modeset_file, self.nvswitch_glob)
            names = {p.pid: p.name for p in procs}
            dprocs = [d if d.name or not d.local else dataclasses.replace(d, name=names[d.pid])
                      for d in dprocs]
            warnings = [*reading.warnings, *scan.warnings] + ([kwarn] if kwarn else [])
            return NodeSnapshot(
                name=self.name, taken_at=time.time(), error=reading.error,
                warnings=tuple(warnings), probe_ms=round((time.monotonic() - started) * 1000, 1),
                gpus=reading.gpus, processes=tuple(procs), driver_processes=tuple(dprocs),
                lost_gpus=reading.lost_gpus, kernel_log=klog, hostname=self._hostname,
                own_pids=scan.own_pids, driver_version=reading.driver_version,
                drm_modeset=sysinfo.drm_modeset, nvswitches=sysinfo.nvswitches,
                pci_gpus=read_pci(self.node_root), driver_list_ok=self._driver_list_ok(reading),
                boot_time=self._scanner.boot_time)
        except Exception as exc:  # noqa: BLE001 — poll never raises
            return NodeSnapshot(name=self.name, taken_at=time.time(),
                                error=f"local probe failed: {exc or type(exc).__name__}",
                                probe_ms=round((time.monotonic() - started) * 1000, 1))

    def _driver_list_ok(self, reading: _nvml.NvmlReading) -> bool | None:
        """Did NVML's process calls answer? None when NVML was not asked (paused for a reset, or
        no pynvml here); False when the reading failed as a whole (no driver, a hung call: no list
        of who holds memory); else what the reading says of its process calls."""
        if reading.error == _nvml.NO_PYNVML:
            return None
        if reading.error is not None:
            return False
        return reading.driver_list_ok

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
        own = own_pids_now()
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
                stat = read_file(f"/proc/{pid}/stat")
                st = parse_stat_line(stat.decode("utf-8", "replace")) if stat else None
                if st is None:
                    return done(1, gone)
                if st.start_ticks != int(start_ticks):
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
