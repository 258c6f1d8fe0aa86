"""A node reached through a POSIX shell: the SSH source and the simulator share this.

``poll`` sends the whole probe (probe.py) in one round trip and parses it with
the pure parsers in parse.py; ``run`` sends one command line. Subclasses only
provide the transport, ``_exec`` (and a streaming ``_exec_probe`` where they can).

One deadline, ``probe_timeout``, covers reading and parsing. The read stops
``parse_reserve(probe_timeout)`` early, so that what arrived (the process sections
come first) is still parsed in time. Output over INLINE_PARSE_BYTES is parsed in a worker
thread, never on the event loop, at most one at a time per node: a big or flooding node
never stalls the others (smaller output, a millisecond's work, is parsed on the loop); a section whose text is what it was at the last poll is not parsed again. The output is capped (``limits``, probe.ProbeLimits): over a cap the node says
"too much output" and keeps the sections that arrived whole.
"""
from __future__ import annotations

import abc
import asyncio
import dataclasses
import time

from console.model import CommandResult, NodeSnapshot
from console import probe, probe_loop
from console.clock import timeout_ignoring_stalls
from console.probe import DEFAULT_COMMAND_TIMEOUT_S, DEFAULT_LIMITS, DEFAULT_PROBE_TIMEOUT_S, ProbeLimits
from console.sources.base import Source, logged
from console.probe_scope import Scope
from console.sources.capture import Capture, ProbeOutput, TooMuchOutput
from console.probe_scope import MAX_SCOPE_PIDS
from console.sources.watch import scope_for, snap_driver
from console.turns import KEYS_FIRST, offload, pause

#: the most of the deadline kept for parsing when the read runs long
PARSE_RESERVE_S = 1.0
#: probe output up to this size is parsed on the event loop: a millisecond or so (a node with
#: a hundred processes), less than handing it to a worker thread costs, and worker threads
#: fight the loop for the GIL (every key and frame waits on that); bigger output goes to a
#: worker thread under the deadline
INLINE_PARSE_BYTES = 64 * 1024


#: the mark's place in a probe text built before its mark is drawn (ShellSource._script); no
#: mark (probe.new_mark: hex digits) is this
_MARK_SLOT = "::gi-mark::"
#: loop mode (console/probe_loop.py): its newest sample stands for the per-poll queries while
#: it is at most this old (probe time); started more than LOOP_STARTS_MAX times within
#: LOOP_BACKOFF_S (or unable to start), the loops rest that long and every poll asks nvidia-smi
LOOP_FRESH_S = 3.0
LOOP_BACKOFF_S = 300.0
LOOP_STARTS_MAX = 3
#: the sticky sections asked every so many polls (probe.STICKY)
_EVERY = {"driver": probe.DRIVER_EVERY, "xid": probe.XID_EVERY, "remap": probe.REMAP_EVERY,
          "pmon": probe.PMON_EVERY, "pci": probe.PCI_EVERY}
#: a whole probe (every stat record, every fd: probe_scope.py) comes every WHOLE_MIN_S, so a
#: zombie or a hidden holder outside the watched set shows within that; less often on a node
#: where it is dear: its extra cost on the node (the whole probe's time over a light one's),
#: spread over the seconds between two, stays within WHOLE_BUDGET_MS_PER_S (1.5% of a core),
#: up to WHOLE_MAX_S apart (the bound on the biggest nodes). On this machine class a whole probe
#: of 2,000 processes and 10,000 threads takes ~100 ms: every 10 s. The console's side of it
#: (~5 ms to parse 2,000 records) is why it is not more often on small nodes either: 256 nodes
#: every 10 s are 26 whole probes a second.
WHOLE_MIN_S = 10.0
WHOLE_MAX_S = 30.0
WHOLE_BUDGET_MS_PER_S = 15.0
#: a whole probe this recent counts as the node's whole table now (whole_is_fresh)
WHOLE_FRESH_S = 1.5
#: ``sys`` is asked with ``driver`` (both change only with a driver reload)
_ASKED_WITH = {"driver": ("driver", "sys")}


def parse_reserve(timeout: float) -> float:
    """Seconds of a ``timeout`` the read leaves to the parser: a quarter, at most PARSE_RESERVE_S."""
    return min(PARSE_RESERVE_S, timeout / 4)


def _parse(name: str, data: bytes, mark: str, taken_at: float, probe_ms: float | None,
           cache: dict | None = None, scope: Scope | None = None, detail: bool = True) -> NodeSnapshot:
    from console.sources.parse import parse_probe
    return parse_probe(name, data.decode("utf-8", "replace"), mark, taken_at=taken_at, probe_ms=probe_ms,
                       cache=cache, scope=scope, between=pause, detail=detail)


class ShellSource(Source):
    #: the process sections' output gathered into one write on the node (probe.COALESCE_OPEN):
    #: for a transport that pays per packet (SSH); the simulator reads the probe's lines itself
    coalesce_output = False

    def __init__(self, name: str, *, device_glob: str = probe.DEFAULT_DEVICE_GLOB,
                 probe_timeout: float = DEFAULT_PROBE_TIMEOUT_S,
                 limits: ProbeLimits = DEFAULT_LIMITS) -> None:
        super().__init__(name)
        self.device_glob = device_glob
        self.probe_timeout = probe_timeout
        self.limits = limits
        self._parsing: asyncio.Future[NodeSnapshot] | None = None
        #: the PIDs the driver listed in the last probe: the next probe reads their cgroup too
        self._driver_pids: tuple[int, ...] = ()
        #: sections parsed at the last poll (parse.parse_probe): the same text is not parsed again
        self._parse_cache: dict = {}
        # what lets a probe leave out probe.STICKY's sections (their last answers still hold)
        self._skip: frozenset[str] = frozenset()
        self._meta_shell: object | None = None     # the shell whose meta answer the console has
        #: polls since each of the sections asked every so many polls was answered
        self._age = {name: every for name, every in _EVERY.items()}
        self._no_mig = False                        # the last poll's GPUs: none in MIG mode
        self._gpu_procs: bool | None = None         # the last poll's driver listed a process (None: no poll yet)
        self._pmon_unsupported = False              # the last pmon answer: not supported here
        self._gpu_shape: tuple | None = None        # the last poll's GPU count and lost GPUs
        # the two speeds (probe_scope.py): what the next probe reads of the process table
        self._scope: Scope | None = None            # None: a shell's first probe (everything)
        self._users: tuple[int, ...] = ()
        self._table_snap: NodeSnapshot | None = None   # the last poll that read a process table
        self._whole_at: float | None = None            # when the last whole probe answered
        self._whole_wanted = True
        self._light_ms: float | None = None            # a light probe's time, smoothed
        self._whole_extra_ms = 0.0                     # what a whole probe takes on top of it
        self._args_age = 0
        self._script_key: tuple | None = None       # what the probe text below was built for
        self._script_text = ""
        # loop mode (console/probe_loop.py): the GPU and compute-apps queries from nvidia-smi
        # loops the probe shell keeps, not two nvidia-smi starts a poll
        self.smi_loop = True                        # wanted (a long-lived shell is needed too)
        self._loop = False                          # this probe asks the loop sections
        self._per_poll = True                       # ... and the per-poll queries
        self._loop_paused = 0                       # actions that must not meet our NVML handle
        self._loop_off_until = float("-inf")        # monotonic: loops failed, per-poll until then
        self._loop_starts: list[float] = []         # when the loops were started (monotonic)

    def request_whole(self) -> None:
        """Read every process at the next poll (the operator looks at all of them, searches for
        holders, or is about to confirm an action)."""
        self._whole_wanted = True

    def whole_is_fresh(self) -> bool:
        return self._whole_at is not None and time.monotonic() - self._whole_at < WHOLE_FRESH_S

    def whole_period_s(self) -> float:
        """Seconds between two whole probes now (see WHOLE_MAX_S)."""
        return min(WHOLE_MAX_S, max(WHOLE_MIN_S, self._whole_extra_ms / WHOLE_BUDGET_MS_PER_S))

    def _next_scope(self) -> Scope | None:
        prev = self._table_snap
        if prev is None or "meta" not in self._skip:
            return None                     # a shell's first probe: everything, every thread
        whole = (self._whole_wanted or self._whole_at is None
                 or time.monotonic() - self._whole_at >= self.whole_period_s())
        cache = self._parse_cache
        ask = set(sorted(cache.get("unread", ()))[:MAX_SCOPE_PIDS])
        ask.update(cache.get("renamed", ()))        # renamed since their line was read (proc_read.py)
        self._args_age += 1
        scope = scope_for(prev, whole=whole, memo=self._parse_cache)
        if self._args_age >= probe.ARGS_EVERY:
            self._args_age = 0
            ask.update(scope.watched)
        return dataclasses.replace(scope, args=tuple(ask), ack=cache.get("listing_gen"))

    def _unnamed_users(self) -> tuple[int, ...]:
        cache = self._parse_cache
        want = sorted(cache.get("unnamed", set()) - cache.setdefault("users_asked", set()))
        return tuple(want[:64])

    @abc.abstractmethod
    async def _exec(self, script: str, timeout: float) -> CommandResult:
        """Run shell text on the node; never raises. On failure ``error`` holds one
        human line using the words of the snapshot contract (docs/snapshot-json.md) (unreachable, refused, authentication,
        host key, timed out)."""

    def _capture(self, mark: str) -> Capture:
        return Capture(mark, probe.last_section(self.device_glob, self._skip, loop=self._loop, per_poll=self._per_poll),
                       self.limits)

    def _script(self, mark: str) -> str:
        """The probe for ``mark``: built once per scope (at 2,000 processes the scope's PID lists
        make a text of tens of KB, mostly the same from poll to poll), the mark put in after."""
        key = (self.device_glob, self._driver_pids, self._skip, self._scope, self._users, self._loop,
               self._per_poll)
        if key != self._script_key:
            self._script_key = key
            self._script_text = probe.build_script(_MARK_SLOT, *key, coalesce=self.coalesce_output)
        return self._script_text.replace(_MARK_SLOT, mark)

    # ------------------------------------------------------------------ loop mode
    def _loop_plan(self) -> tuple[bool, bool]:
        """(ask the loop sections, ask the per-poll queries) for the next probe: the loops while
        wanted and not paused or backed off, on a shell that lives from probe to probe; the
        per-poll queries until the loops' newest sample is fresh."""
        if (not self.smi_loop or self._loop_paused or time.monotonic() < self._loop_off_until
                or self._shell_token() is None or self._shell_token() is not self._meta_shell):
            return False, True
        at = self._parse_cache.get("smi_loop_at")
        fresh = at is not None and self.clock_now() - at < LOOP_FRESH_S
        return True, not fresh

    def clock_now(self) -> float:
        clock = getattr(self, "clock", None)
        return clock.now() if clock is not None else time.time()

    def _note_loop(self) -> None:
        """After a probe that asked the loops: back off to per-poll calls when they keep dying
        (an nvidia-smi that cannot loop, a driver that fails) or cannot start."""
        what = self._parse_cache.get("smi_loop_what", "")
        now = time.monotonic()
        if what == "failed":
            self._loop_off_until = now + LOOP_BACKOFF_S
        elif what in ("started", "died+started"):
            self._loop_starts = [t for t in self._loop_starts if now - t < LOOP_BACKOFF_S] + [now]
            if len(self._loop_starts) > LOOP_STARTS_MAX:
                self._loop_off_until = now + LOOP_BACKOFF_S
                self._loop_starts = []

    @property
    def loop_answering(self) -> bool:
        """The last probe took the GPUs and their processes from the loops (no nvidia-smi start)."""
        return self._loop and not self._per_poll

    @property
    def loop_pids(self) -> tuple[int, ...]:
        """The console's own nvidia-smi loops on the node (``timeout``'s PIDs), while they run."""
        if not self._loop:
            return ()
        return tuple(self._parse_cache.get("smi_loop_pids", ()))

    def loop_stop_commands(self, snap: NodeSnapshot | None) -> tuple[str, ...]:
        """The commands that stop the loops now (each guarded by its start time from ``snap``:
        a PID reused since is refused)."""
        out = []
        snap = snap if snap is not None else self._table_snap
        for pid in self.loop_pids:
            proc = snap.proc(pid) if snap is not None else None
            if proc is not None and proc.start_ticks is not None:
                out.append(probe.guarded_kill_command(pid, "TERM", proc.start_ticks))
            else:          # not read yet: the process must still be a loop of ours (its command line)
                out.append(probe_loop.guarded_stop_command(pid))
        return tuple(out)

    def pause_loop(self) -> None:
        """No loop is started until ``resume_loop``: an action (R, B, F, reboot) must not meet
        the console's own NVML handle."""
        self._loop_paused += 1

    def resume_loop(self) -> None:
        self._loop_paused = max(0, self._loop_paused - 1)

    def _shell_token(self) -> object | None:
        """The long-lived shell the probe goes to, while the transport keeps one (what the
        ``meta`` section says holds while it lives); None: a new shell for every probe."""
        return None

    def _sticky_skip(self) -> frozenset[str]:
        """probe.STICKY sections this probe can leave out."""
        skip = {section for name in _EVERY if self._age[name] + 1 < self._every(name)
                for section in _ASKED_WITH.get(name, (name,))}
        if self._gpu_procs is False:
            skip.add("pmon")             # no process: no SM share to ask (and no nvidia-smi start)
        token = self._shell_token()
        if token is not None and token is self._meta_shell:
            skip.add("meta")
        if self._no_mig:
            skip.add("list")
        return frozenset(skip)

    def _every(self, name: str) -> int:
        """Polls between two answers of a sticky section (pmon: far fewer where not supported)."""
        if name == "pmon" and self._pmon_unsupported:
            return probe.PMON_UNSUPPORTED_EVERY
        return _EVERY[name]

    def _remember(self, snap: NodeSnapshot) -> None:
        ok = snap.error is None
        if snap.processes:
            self._note_table(snap)
        if "meta" not in self._skip:
            self._meta_shell = self._shell_token() if ok else None
        for name in _EVERY:
            asked = all(s not in self._skip for s in _ASKED_WITH.get(name, (name,)))
            self._age[name] = (0 if ok else self._every(name)) if asked else self._age[name] + 1
        self._no_mig = ok and bool(snap.gpus) and not any(g.mig_mode for g in snap.gpus)
        # the GPUs the driver lists changed (one lost, one gone): the next poll reads the PCI bus
        shape = (len(snap.gpus), snap.lost_gpus)
        if self._gpu_shape is not None and shape != self._gpu_shape:
            self._age["pci"] = self._every("pci")
        self._gpu_shape = shape
        self._gpu_procs = bool(snap.driver_processes)
        if "pmon" not in self._skip:
            self._pmon_unsupported = bool(self._parse_cache.get("pmon_unsupported"))

    async def _exec_probe(self, script: str, mark: str, timeout: float) -> ProbeOutput:
        """Run the probe script; a transport with a long-lived shell overrides this (and reads
        through ``_capture`` as the output arrives)."""
        result = await self._exec(script, timeout)
        timed_out = result.rc is None and (result.error or "").startswith("timed out")
        if result.error and not timed_out:
            return ProbeOutput(error=result.error)
        cap = self._capture(mark)
        try:
            cap.feed(result.stdout.encode("utf-8", "replace"))
        except TooMuchOutput as exc:
            return ProbeOutput(cap.before_cut(), error=str(exc))
        return ProbeOutput(cap.data(), timed_out=timed_out)

    def _timed_out(self, why: str = "") -> str:
        return f"probe timed out after {self.probe_timeout:g} s{why}"

    def _note_table(self, snap: NodeSnapshot) -> None:
        """After a poll that read a process table: when the next whole probe is due, and what it
        costs."""
        scope = self._scope or Scope()
        whole = scope.whole or bool(self._parse_cache.get("wrapped"))
        ms = snap.probe_ms
        if whole:
            self._whole_at = time.monotonic()
            self._whole_wanted = False
            if ms is not None and self._light_ms is not None:
                self._whole_extra_ms = max(0.0, ms - self._light_ms)
        elif ms is not None:
            self._light_ms = ms if self._light_ms is None else 0.8 * self._light_ms + 0.2 * ms
        # a process the driver charges that this probe did not watch: its family is unknown
        if self._table_snap is not None and not whole and snap_driver(snap) - set(scope.watched):
            self._whole_wanted = True
        self._table_snap = snap

    async def poll(self) -> NodeSnapshot:
        self._skip = self._sticky_skip()
        self._scope = self._next_scope()
        self._users = self._unnamed_users()
        self._parse_cache.setdefault("users_asked", set()).update(self._users)
        self._loop, self._per_poll = self._loop_plan()
        snap = await self._poll()
        self._remember(snap)
        if self._loop:
            self._note_loop()
        return snap

    async def _poll(self) -> NodeSnapshot:
        started = time.monotonic()
        deadline = started + self.probe_timeout
        if self._parsing is not None and not self._parsing.done():
            # the last poll's parse outlived its deadline: wait for it rather than start another
            try:
                await asyncio.wait_for(asyncio.shield(self._parsing), self.probe_timeout)
            except TimeoutError:
                return NodeSnapshot(name=self.name, taken_at=self.clock.now(),
                                    error=self._timed_out(" (still parsing the previous probe's output)"))
        mark = probe.new_mark()
        budget = max(0.0, deadline - time.monotonic() - parse_reserve(self.probe_timeout))
        out = await self._exec_probe(self._script(mark), mark, budget)
        probe_ms = round((time.monotonic() - started) * 1000, 1)
        error = out.error or (self._timed_out() if out.timed_out else None)
        if not out.data:
            return NodeSnapshot(name=self.name, taken_at=self.clock.now(), error=error, probe_ms=probe_ms)
        await KEYS_FIRST.turn()               # an operator's key is answered first (console/turns.py)
        if len(out.data) <= INLINE_PARSE_BYTES or not offload():   # the engine's own thread: inline
            await asyncio.sleep(0)            # a poll always lets the others run once
            snap = _parse(self.name, out.data, mark, self.clock.now(), probe_ms, self._parse_cache, self._scope,
                          self.detail)
            return self._note_driver_pids(snap if error is None else dataclasses.replace(snap, error=error))
        done: list[NodeSnapshot] = []        # set by the worker: a late event loop is no late parse

        def work(taken_at: float) -> NodeSnapshot:
            done.append(_parse(self.name, out.data, mark, taken_at, probe_ms, self._parse_cache, self._scope,
                               self.detail))
            return done[0]

        self._parsing = asyncio.get_running_loop().run_in_executor(None, work, self.clock.now())
        # the parse gets what is left of the deadline, and at least the reserve the read left it
        # (a loop stalled during the read spent the deadline's wall time, not the work's)
        left = max(parse_reserve(self.probe_timeout), deadline - time.monotonic())
        try:
            async with timeout_ignoring_stalls(left):
                snap = await asyncio.shield(self._parsing)
        except TimeoutError:
            if not done:
                return NodeSnapshot(name=self.name, taken_at=self.clock.now(), probe_ms=probe_ms,
                                    error=self._timed_out(f" (parsing {len(out.data) / probe.MIB:.0f} MiB of output)"))
            snap = done[0]
        if error is not None:        # a probe cut short: what arrived, and why the rest did not
            snap = dataclasses.replace(snap, error=error)
        return self._note_driver_pids(snap)

    def _note_driver_pids(self, snap: NodeSnapshot) -> NodeSnapshot:
        """Note the PIDs the driver listed (the next probe reads their cgroup too)."""
        table = self._parse_cache.get("table", {})
        self._driver_pids = tuple(sorted({d.pid for d in snap.driver_processes if d.pid in table}))
        return snap

    async def run(self, command: str, timeout: float = DEFAULT_COMMAND_TIMEOUT_S) -> CommandResult:
        # a command may have changed what the remap section reads (a reset applies a pending row
        # remap): the next poll asks again instead of keeping the last answer for a minute
        self._age["remap"] = _EVERY["remap"]
        return logged(self.name, await self._exec(command, timeout))
