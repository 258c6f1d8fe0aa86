"""One simulated GPU machine's state and the physics that move it.

State is changed only by commands (signals, reset, persistence, systemd) and by
the passing of time. Time is evaluated lazily: scheduled events (a driver
teardown that ends 90 s after a SIGKILL, a graceful exit 2 s after SIGTERM) run
when anything looks at the host after their moment, in order, each at its own
time. The host knows nothing of the shell or the scenarios: node.py builds it
from a scenario and runs command lines on it (shell.py); the command modules read
and change it.
"""
from __future__ import annotations

import heapq
import itertools
import random
from typing import Callable

from console.clock import RealClock
from console.sim.state import (ALIVE, CLK_TCK, EXITING, GONE, HOST_PID_NS, ZOMBIE, GroundTruth, Scenario, SimContext,
                               SimGpu, SimMps, SimProc)

#: nvidia-smi's explanation after a refused reset of one GPU (NVIDIA/gpu-operator#118, mig-parted#181)
_IN_USE_HINT = ("1 device is currently being used by one or more other processes (e.g., Fabric Manager, CUDA "
                "application, graphics application such as an X server, or a monitoring application such as "
                "another instance of nvidia-smi). Please first kill all processes using this device and all "
                "compute applications running in the system.")

_DEFAULT_IGNORED = {"CHLD", "CONT", "URG", "WINCH"}
_STOPPING = {"STOP", "TSTP", "TTIN", "TTOU"}


class SimHost:
    """The state of one simulated machine (see console.sim.scenarios for what is on it)."""

    def __init__(self, scenario: Scenario, clock=None, name: str = "demo", seed: int = 0,
                 build: Callable[[SimHost], None] | None = None) -> None:
        """``build`` puts the machine's GPUs, processes and logs on it (default: the scenario's own)."""
        self.scenario = scenario
        self.clock = clock if clock is not None else RealClock()
        self.name = name
        self.seed = seed
        self.rng = random.Random(f"{scenario.name}/{name}/{seed}")
        self.procs: dict[int, SimProc] = {}
        self.gpus: list[SimGpu] = []
        self.contexts: list[SimContext] = []
        self.kernel_log: list[tuple[float, str]] = []
        self.units: dict[str, Callable[[], SimProc]] = {}   # systemd unit -> starts its process
        self.history: list[tuple[float, str]] = []           # every command line run, with its time
        self.pid_ns = HOST_PID_NS        # the namespace the node's shell (and /proc) sees
        self.has_systemd = True
        self.dmesg_allowed = True
        self.driver_state = "ok"         # ok | not-loaded | mismatch | no-devices
        self.nvsmi_hang = False          # nvidia-smi blocks (wedged driver) until killed
        #: False: ``nvidia-smi pmon`` prints "Not supported on the device(s)" (a GeForce of the
        #: 415 driver, keylase/nvidia-patch #89) and no process's SM share is known
        self.pmon_supported = True
        #: the console's nvidia-smi loops running here (console/probe_loop.py): PID -> started at
        self.smi_loops: dict[int, float] = {}
        self.mps: SimMps | None = None   # an MPS control daemon and its servers (mps_control answers)
        self.driver_version = "580.95.05"
        self.nvswitches = 0              # /dev/nvidia-nvswitchN files (an NVSwitch system)
        self.drm_modeset: bool | None = None   # nvidia_drm loaded with modeset=Y/N; None: not loaded
        self.cuda_version = "13.0"
        self.ncpu = 128
        self.down_until: float | None = None   # rebooting: unreachable until then
        self._events: list[tuple[float, int, Callable[[], None]]] = []
        self._seq = itertools.count()
        self._event_time: float | None = None
        self._next_pid = 300
        self._cursor = 300               # where the next process built without an explicit PID goes
        start = self.clock.now()
        self.btime = int(start - self.scenario.uptime_s)
        self.created_at = start
        self.shell_pid = 0
        (build or scenario.build)(self)
        self._cursor = self._next_pid    # processes started from now on get fresh, higher PIDs

    # ------------------------------------------------------------------ time

    @property
    def now(self) -> float:
        return self._event_time if self._event_time is not None else self.clock.now()

    def at(self, when: float, fn: Callable[[], None]) -> None:
        heapq.heappush(self._events, (when, next(self._seq), fn))

    def settle(self) -> None:
        """Run every scheduled event whose moment has come, each at its own time."""
        if self._event_time is not None:
            return                     # already inside an event: it runs at its own moment
        limit = self.clock.now()
        while self._events and self._events[0][0] <= limit:
            when, _, fn = heapq.heappop(self._events)
            self._event_time = when
            try:
                fn()
            finally:
                self._event_time = None

    def ticks(self, epoch: float) -> int:
        return int(round((epoch - self.btime) * CLK_TCK))

    def uptime(self, epoch: float | None = None) -> float:
        return (self.now if epoch is None else epoch) - self.btime

    # ------------------------------------------------------------------ building

    def alloc_pid(self, nthreads: int = 1, at: int | None = None) -> int:
        """A free PID (and room for its thread ids): from ``at`` when given, else after the last one."""
        pid = self._next_pid if at is None else at
        while any(pid <= q.pid + q.nthreads - 1 and q.pid <= pid + max(1, nthreads) - 1
                  for q in self.procs.values()):
            pid += 1
        self._next_pid = max(self._next_pid, pid + max(1, nthreads))
        self._cursor = pid + max(1, nthreads)
        return pid

    def add_proc(self, *, pid: int | None = None, **kw) -> SimProc:
        nthreads = kw.get("nthreads", 1)
        if pid is None:
            pid = self.alloc_pid(nthreads, at=self._cursor)
        else:
            self._next_pid = max(self._next_pid, pid + nthreads)
        kw.setdefault("start", self.now)
        kw.setdefault("pid_ns", self.pid_ns)
        kw.setdefault("pgrp", pid)
        kw.setdefault("sid", pid)
        p = SimProc(pid=pid, **kw)
        self.procs[pid] = p
        return p

    def add_context(self, gpu: int, mib: int, holders, *, driver_pid: int | None = None,
                    name: str | None = None, listed: bool = True) -> SimContext:
        holders = list(holders)
        first = self.procs.get(holders[0]) if holders else None
        ctx = SimContext(gpu=gpu, mib=mib, driver_pid=driver_pid if driver_pid is not None else holders[0],
                         name=name if name is not None else (first.args.split(" ")[0] if first else ""),
                         holders=set(holders), listed=listed)
        self.contexts.append(ctx)
        return ctx

    def klog(self, text: str, when: float | None = None) -> None:
        self.kernel_log.append((self.now if when is None else when, text))
        self.kernel_log.sort(key=lambda e: e[0])

    # ------------------------------------------------------------------ reading

    def visible_procs(self) -> list[SimProc]:
        self.settle()
        return sorted((p for p in self.procs.values() if p.visible), key=lambda p: p.pid)

    def proc(self, pid: int) -> SimProc | None:
        self.settle()
        p = self.procs.get(pid)
        return p if p is not None and p.visible else None

    def leader_state(self, p: SimProc) -> str:
        if p.phase in (ZOMBIE, EXITING):
            return "Z"
        if p.stopped:
            return "T"
        if p.state == "spin":
            return "R" if (int(self.now) + p.pid) % 3 == 0 else "S"
        return p.state

    def threads(self, p: SimProc) -> list[tuple[int, str, str, str]]:
        """(tid, name, state, wchan) for every thread the kernel still has."""
        if p.phase == GONE:
            return []
        if p.phase == ZOMBIE:
            return [(p.pid, p.comm, "Z", "0")]
        if p.phase == EXITING:
            return [(p.pid, p.comm, "Z", "0"),
                    (p.stuck_tid or p.pid + 1, p.teardown_thread or p.comm, "D", p.teardown_wchan or "0")]
        state = self.leader_state(p)
        out = [(p.pid, p.comm, state, "0" if state == "R" else p.wchan)]
        names = p.thread_names or (p.comm,)
        for k in range(1, p.nthreads):
            out.append((p.pid + k, names[(k - 1) % len(names)], "S", "futex_wait_queue"))
        return out

    def num_threads(self, p: SimProc) -> int:
        return len(self.threads(p))

    def gpu(self, index: int) -> SimGpu | None:
        for g in self.gpus:
            if g.index == index:
                return g
        return None

    def gpu_used(self, g: SimGpu) -> int:
        self.settle()
        return g.reserved_mib + g.stuck_mib + sum(c.mib for c in self.contexts if c.gpu == g.index)

    def gpu_util(self, g: SimGpu) -> int:
        for c in self.contexts:
            if c.gpu == g.index and any((q := self.procs.get(h)) is not None and q.alive for h in c.holders):
                return g.util_busy
        return 0

    def context_sm(self, c: SimContext) -> int:
        """The SM share pmon reports for a context: none while no holder of it runs (a stuck or
        dead one: the seed's hung schedulers show 0), else its GPU's utilisation a little
        under it (an SM share is at most the time a kernel ran), a few points apart per process."""
        g = self.gpu(c.gpu)
        if g is None or not g.util_busy or not any(
                (q := self.procs.get(h)) is not None and q.alive and q.state not in ("Z", "D") for h in c.holders):
            return 0
        return max(0, g.util_busy - (3 + c.driver_pid % 5 if g.util_busy > 10 else 0))

    def device_paths(self) -> list[str]:
        paths = [f"/dev/nvidia{g.index}" for g in self.gpus]
        paths += ["/dev/nvidia-caps", "/dev/nvidia-modeset", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools",
                  "/dev/nvidiactl"]
        if self.nvswitches:
            paths += [f"/dev/nvidia-nvswitch{k}" for k in range(self.nvswitches)] + ["/dev/nvidia-nvswitchctl"]
        return sorted(paths)

    def holders_of(self, path: str) -> list[SimProc]:
        return [p for p in self.visible_procs() if p.alive and path in p.fds]

    @property
    def ground_truth(self) -> GroundTruth:
        return self.scenario.truth

    def memory_freed(self) -> bool:
        """The scenario's end: no GPU keeps memory beyond what the driver reserves with no client."""
        self.settle()
        return all(self.gpu_used(g) <= g.reserved_mib for g in self.gpus if not g.lost)

    # ------------------------------------------------------------------ signals

    def signal(self, pid: int, sig: str) -> str | None:
        """Deliver a signal. Returns None, or "ESRCH" when there is no such process here."""
        self.settle()
        if pid in self.smi_loops:            # a loop of the console's (sim/probe_answers.py)
            if sig != "0":
                del self.smi_loops[pid]
            return None
        p = self.procs.get(pid)
        if p is None or not p.visible:
            return "ESRCH"
        if sig == "0" or p.kthread or p.phase != ALIVE:
            return None
        if sig == "KILL":
            self._die(p, "KILL")
            return None
        if sig == "CONT":
            p.stopped = False
            return None
        if sig in p.ignored:
            return None
        if sig in p.caught:
            if p.on_term == "graceful" and sig in ("TERM", "INT", "HUP", "QUIT"):
                self._graceful(p)
            return None            # "hung": the handler never gets to run
        if sig in _STOPPING:
            p.stopped = True
            return None
        if sig in _DEFAULT_IGNORED:
            return None
        self._die(p, sig)
        return None

    def _graceful(self, p: SimProc) -> None:
        members = [q for q in self.procs.values() if q.alive and p.group and q.group == p.group] or [p]

        def finish() -> None:
            for q in members:
                if q.alive:
                    self._die(q, None)
        self.at(self.now + p.grace_s, finish)

    def _die(self, p: SimProc, sig: str | None) -> None:
        p.died_at = self.now
        p.exit_signal = sig
        p.stopped = False
        p.fds.clear()
        p.ports.clear()
        holds_memory = any(p.pid in c.holders for c in self.contexts)
        if p.teardown_s > 0 and holds_memory:
            p.phase = EXITING
            p.stuck_tid = p.pid + max(1, p.nthreads - 1)
            self.at(self.now + p.teardown_s, lambda: self._finish_exit(p))
        else:
            self._finish_exit(p)
        self._orphan_children(p)
        if sig is not None and p.group and p.on_term == "graceful":
            self._graceful(p)          # the rest of the group notices the death and shuts down

    def _finish_exit(self, p: SimProc) -> None:
        if p.phase in (ZOMBIE, GONE):
            return
        for ctx in list(self.contexts):
            ctx.holders.discard(p.pid)
            if not ctx.holders:
                self.contexts.remove(ctx)
        p.phase = ZOMBIE
        p.stuck_tid = None
        if p.unit == "nvidia-persistenced":
            for g in self.gpus:
                g.persistence = False
        parent = self.procs.get(p.ppid)
        if parent is None or not parent.visible or (parent.alive and parent.reaps) or p.ppid == 0:
            p.phase = GONE

    def _orphan_children(self, p: SimProc) -> None:
        for c in list(self.procs.values()):
            if c.ppid != p.pid or not c.visible or c is p:
                continue
            c.ppid = 1 if 1 in self.procs else 0
            if c.phase == ZOMBIE:
                c.phase = GONE             # init reaps what it inherits
            elif c.alive and c.pdeathsig:
                self.signal(c.pid, c.pdeathsig)

    # ------------------------------------------------------------------ MPS

    #: what nvidia-cuda-mps-control prints when no daemon listens on its pipe directory
    MPS_NO_DAEMON = "Cannot find MPS control daemon process"

    def mps_control(self, line: str) -> tuple[str, str, int]:
        """One command line to the MPS control daemon (nvidia-cuda-mps-control on stdin): NVIDIA's
        documented answers, one PID a line (no real paste was found to copy: docs/field-facts.md)."""
        self.settle()
        mps = self.mps
        control = self.procs.get(mps.control_pid) if mps is not None else None
        if mps is None or control is None or not control.alive:
            return "", self.MPS_NO_DAEMON + "\n", 1
        words = line.split()
        if not words:
            return "", "", 0
        live = {pid: ctx for pid, ctx in mps.servers.items() if (p := self.procs.get(pid)) is not None and p.alive}
        if words[0] == "get_server_list":
            return "".join(f"{pid}\n" for pid in sorted(live)), "", 0
        if words[0] == "get_client_list" and len(words) == 2 and words[1].isdecimal():
            return "".join(f"{pid}\n" for pid in mps.clients.get(int(words[1]), {})), "", 0
        if words[0] == "terminate_client" and len(words) == 3 and all(w.isdecimal() for w in words[1:]):
            server, client = int(words[1]), int(words[2])
            if server in live and client in mps.clients.get(server, {}):
                self.at(self.now + mps.terminate_s, lambda: self._mps_end_client(server, client))
            return "", "", 0
        if words[0] == "quit":
            for server in list(live):
                for client in list(mps.clients.get(server, {})):
                    self._mps_end_client(server, client)
                self._die(self.procs[server], None)
            self._die(control, None)
            return "", "", 0
        return "", "", 0

    def _mps_end_client(self, server: int, client: int) -> None:
        """The client's GPU work ends: its share of the server's memory comes back; a live client
        process gets cudaErrorMpsClientTerminated (810) and exits."""
        mps = self.mps
        if mps is None:
            return
        mib = mps.clients.get(server, {}).pop(client, None)
        ctx = mps.servers.get(server)
        if mib is not None and ctx is not None:
            ctx.mib = max(0, ctx.mib - mib)
            if ctx.mib == 0 and ctx in self.contexts:
                self.contexts.remove(ctx)
        p = self.procs.get(client)
        if p is not None and p.alive:
            self._die(p, None)

    def stop_process(self, p: SimProc) -> None:
        """An orderly exit (systemctl stop)."""
        if p.alive:
            self._die(p, None)

    # ------------------------------------------------------------------ driver actions

    def reset_gpu(self, index: int) -> tuple[str, int]:
        self.settle()
        g = self.gpu(index)
        if g is None:
            return "No devices were found\n", 6
        if g.lost:
            return (f"Unable to reset GPU {g.bus_id}: GPU is lost. Reboot the system to recover this GPU\n", 15)
        dev = f"/dev/nvidia{index}"
        busy = (any(c.gpu == index for c in self.contexts) or g.persistence
                or any(p.alive and dev in p.fds for p in self.procs.values()))
        if busy:    # as real drivers print it (tests/fixtures/real/reset-in-use-*)
            return (f"The following GPUs could not be reset:\n  GPU {g.bus_id}: In use by another client\n\n"
                    f"{_IN_USE_HINT}\n", 255)
        g.stuck_mib = 0
        g.reset_required = False
        g.remap_pending = False                 # the reset applies a pending remap (not a failed one)
        g.ecc_uncorrected = 0                   # volatile counts start again
        g.pages_pending = None if g.pages_pending is None else False
        self.klog(f"NVRM: GPU at PCI:{g.pci_short}: {g.uuid}")
        self.klog(f"NVRM: GPU Board Serial Number: {g.serial}")
        return f"GPU {g.bus_id} was successfully reset.\nAll done.\n", 0

    def _persistenced(self) -> SimProc | None:
        for p in self.procs.values():
            if p.unit == "nvidia-persistenced" and p.alive:
                return p
        return None

    def set_persistence(self, index: int | None, on: bool) -> tuple[str, int]:
        self.settle()
        targets = self.gpus if index is None else [g for g in self.gpus if g.index == index]
        if not targets:
            return "No devices were found\n", 6
        daemon = self._persistenced()
        lines = []
        for g in targets:
            g.persistence = on
            dev = f"/dev/nvidia{g.index}"
            if daemon is not None:
                if on and dev not in daemon.fds:
                    daemon.fds.append(dev)
                if not on:
                    daemon.fds[:] = [f for f in daemon.fds if f != dev]
            mode = "persistence mode" if daemon is not None or not on else "Legacy persistence mode"
            lines.append(f"{'Enabled' if on else 'Disabled'} {mode} for GPU {g.bus_id}.")
        lines.append("All done.")
        return "\n".join(lines) + "\n", 0

    def systemctl(self, action: str, unit: str) -> tuple[str, str, int]:
        self.settle()
        if not self.has_systemd:
            return ("", "System has not been booted with systemd as init system (PID 1). Can't operate.\n"
                        "Failed to connect to bus: Host is down\n", 1)
        name = unit.removesuffix(".service")
        running = [p for p in self.procs.values() if p.unit == name and p.alive]
        if action == "is-active":
            return ("active\n", "", 0) if running else ("inactive\n", "", 3)
        if name not in self.units:
            verb = {"stop": "stop", "start": "start", "restart": "restart"}.get(action)
            if verb is None:
                return "", f"Unknown command verb '{action}'.\n", 1
            return "", f"Failed to {verb} {name}.service: Unit {name}.service not loaded.\n", 5
        if action in ("stop", "restart"):
            for p in running:
                self.stop_process(p)
        if action in ("start", "restart") and (action == "restart" or not running):
            self.units[name]()
        if action not in ("stop", "start", "restart"):
            return "", f"Unknown command verb '{action}'.\n", 1
        return "", "", 0

    def reboot(self, delay_s: float = 60.0) -> None:
        """Go down now; come back ``delay_s`` later as a freshly booted machine (no workload)."""
        self.down_until = self.now + delay_s

        def boot() -> None:
            self.procs.clear()
            self.contexts.clear()
            self.kernel_log.clear()
            self._events = [e for e in self._events if e[0] > self.now]
            self.btime = int(self.now) - 1
            for g in self.gpus:
                g.stuck_mib, g.reset_required, g.lost, g.remap_pending = 0, False, False, False
                g.ecc_uncorrected = 0
                g.pages_pending = None if g.pages_pending is None else False
            self._next_pid = self._cursor = 300
            self.start_after_boot()
            self.down_until = None
        self.at(self.down_until, boot)

    def start_after_boot(self) -> None:
        """What a fresh boot puts back (the boot log, init and the daemons, logins): nothing on a bare
        host; node.py's SimNode starts the ordinary machine (machine.py)."""
