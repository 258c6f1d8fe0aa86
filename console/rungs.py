"""The console's actions, one record each: the rungs of the escalation ladder and the actions
beside it (a signal of the operator's choice, the MPS steps, Slurm's drain and resume, a command
of one's own). Everything the code knows about a rung is an attribute here — its key, its
words, its signal, how it is planned and verified, how long its effects are its own, its letter
on the memory chart, what the postmortem calls it — so adding one is this record, its planning
(console/actions/plan.py, by ``plans``), its tests and docs/keys.md.

It sits at the bottom of the layers (beside the model) because every layer speaks of rungs:
diagnosis proposes them and reads which ones were sent, the actions plan and run them, the
incident tells them, the screen binds them to keys.

Rungs, gentlest first (the exact commands: console/actions/ladder.py)::

    wait            let the driver finish tearing down (nothing runs: the wait-and-reread check)
    sigterm         kill -s TERM <pids>            ask the processes to exit
    sigkill         kill -s KILL <pids>            force them
    kill-holders    kill -s KILL <pids>            every holder of the GPUs' device files, one by one
    clear-blockers  stop the reset blockers (each by its unit, container or PID), nvidia-smi -pm 0
    reset           nvidia-smi -r -i N
    reload-driver   modprobe -r … && modprobe nvidia        (palette only, the node's name typed)
    reboot          systemctl reboot                        (palette only, the node's name typed)
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

#: a process given SIGTERM gets this long before SIGKILL is advised
SIGTERM_GRACE_S = 15.0
#: after SIGKILL the driver may take this long to tear contexts down: 26 s for large pinned
#: buffers and ~90 s for the seed's workers stuck in the driver have been seen
TEARDOWN_WINDOW_S = 120.0
#: how long an action is verified when its rung asks for no other window
VERIFY_WINDOW_S = 10.0


@dataclass(frozen=True)
class Rung:
    id: str
    #: how the incident's words and the chart's legend name it ("freed … after SIGTERM")
    after: str
    #: the memory chart's mark: the key that sends it where there is one
    letter: str
    #: how it is planned (the family of its commands, console/actions/ladder.py and plan.py):
    #: signal | blockers | reset | restore | driver | reboot | mps-terminate | mps-quit | slurm |
    #: custom; wait and mps-clients are read-only checks (a step, nothing to confirm)
    plans: str
    #: what its verification waits to see: memory | blockers-gone | blockers-back | mps (the
    #: driver's list shows the clients' memory back) | mps-gone (and the server gone) | slurm-drained | slurm-resumed
    settles_on: str = "memory"
    #: the signal it sends (the "signal" rung's is the operator's choice; TERM is its default)
    signal: str | None = None
    #: a read-only check, not an action: the check it runs (console/checks/registry.py)
    check: str | None = None
    #: after its check: the rung the check's answer is planned into (console/actions/step.py)
    then: str | None = None
    #: the operator chooses its signal (the F9 menu; ``signal`` is the default)
    chooses_signal: bool = False
    #: diagnosis may propose it as a finding's next step
    proposed: bool = False
    #: planned from a reading of every process (its targets are every holder of a GPU)
    whole_first: bool = False
    #: the console's own nvidia-smi loops hold the device files: stopped before, started after
    stops_loops: bool = False
    #: a local NVML handle must be released first (the driver refuses while a client holds one)
    releases_nvml: bool = False
    #: a GPU fault (an Xid) is its reason: the findings it rests on are noted before it
    rests_on_faults: bool = False
    #: the node is drained in Slurm before it (no new job may land meanwhile)
    drain_first: bool = False
    #: it acts on processes (a finding's PIDs are its targets; else on GPUs or the node)
    on_processes: bool = False
    #: it frees no memory itself: it only unblocks or undoes
    unblocks: bool = False
    #: it ends processes: a process coming back after it is a respawn
    ends_processes: bool = False
    #: its first verification window (None: VERIFY_WINDOW_S)
    verify_window_s: float | None = None
    #: how long after it later changes are still its doing
    deadline_s: float = 30.0
    #: a connection closing under it is it happening, not a failure
    drops_connection: bool = False
    #: what `nvidia-smi -r` said is read per GPU for its outcome
    says_per_gpu: bool = False
    #: the words in a hypothesis that name it (verdicts: "SIGKILL frees it" names sigkill)
    words: tuple[str, ...] = field(default=())

    def __str__(self) -> str:
        return self.id

    @property
    def every_holder(self) -> bool:
        """It signals every holder of a GPU (its targets come from a whole reading: F)."""
        return self.signal is not None and self.whole_first

    @property
    def through_slurm(self) -> bool:
        """It runs through Slurm's client, not on the node (drain, resume)."""
        return self.settles_on.startswith("slurm-")

    @property
    def stops_blockers(self) -> bool:
        return self.settles_on == "blockers-gone"

    @property
    def frees_memory(self) -> bool:
        """Its verification reads the GPUs' memory (the blockers' rungs read the daemons instead)."""
        return self.settles_on not in ("blockers-gone", "blockers-back")

    @property
    def verify_s(self) -> float:
        return VERIFY_WINDOW_S if self.verify_window_s is None else self.verify_window_s


def _w(*patterns: str) -> tuple[str, ...]:
    return patterns


TERM_WORDS = r"\bsig ?term\b|\bterm(inate)?\b|-TERM\b|\bgraceful"
KILL_WORDS = r"\bsig ?kill\b|\bkill(ing|ed)?\b|-9\b|-KILL\b"

ALL: tuple[Rung, ...] = (
    Rung("wait", "the wait", "w", "wait", check="wait-and-reread", proposed=True),
    Rung("sigterm", "SIGTERM", "t", "signal", signal="TERM", proposed=True, on_processes=True,
         ends_processes=True, verify_window_s=SIGTERM_GRACE_S, deadline_s=30.0, words=_w(TERM_WORDS)),
    Rung("sigkill", "SIGKILL", "k", "signal", signal="KILL", proposed=True, on_processes=True,
         ends_processes=True, deadline_s=TEARDOWN_WINDOW_S, words=_w(KILL_WORDS)),
    Rung("kill-holders", "killing the holders", "F", "signal", signal="KILL", proposed=True, whole_first=True,
         stops_loops=True, on_processes=True, ends_processes=True, deadline_s=TEARDOWN_WINDOW_S,
         words=_w(KILL_WORDS, r"\bholders?\b|\bfuser\b")),
    Rung("clear-blockers", "clearing the blockers", "B", "blockers", settles_on="blockers-gone", proposed=True,
         whole_first=True, stops_loops=True, drain_first=True, unblocks=True, deadline_s=30.0,
         words=_w(r"\bblockers?\b|\bpersistence|\bpersistenced\b|\bmps\b|\bdcgm\b|\bfabric")),
    Rung("reset", "the reset", "R", "reset", proposed=True, whole_first=True, stops_loops=True,
         releases_nvml=True, rests_on_faults=True, drain_first=True, deadline_s=60.0, says_per_gpu=True,
         words=_w(r"\breset(s|ting)?\b|nvidia-smi -r\b")),
    Rung("reload-driver", "the driver reload", "L", "driver", stops_loops=True, releases_nvml=True,
         rests_on_faults=True, drain_first=True, deadline_s=120.0, words=_w(r"\breload\b|\bmodprobe\b")),
    Rung("reboot", "the reboot", "X", "reboot", proposed=True, stops_loops=True, rests_on_faults=True,
         drain_first=True, deadline_s=600.0, drops_connection=True, words=_w(r"\breboot\b|\brestart the node\b")),
    Rung("signal", "the signal", "s", "signal", signal="TERM", chooses_signal=True, on_processes=True, ends_processes=True,
         deadline_s=30.0),
    Rung("restore", "the restore", "b", "restore", settles_on="blockers-back", proposed=True, unblocks=True,
         deadline_s=30.0),
    Rung("mps-clients", "the MPS clients check", "*", "mps-clients", check="mps-clients", then="mps-terminate",
         proposed=True, on_processes=True),
    Rung("mps-terminate", "terminate_client", "m", "mps-terminate", settles_on="mps", on_processes=True,
         deadline_s=30.0),
    Rung("mps-quit", "MPS quit", "Q", "mps-quit", settles_on="mps-gone", proposed=True, on_processes=True, deadline_s=60.0),
    Rung("drain", "drain", "D", "slurm", settles_on="slurm-drained", unblocks=True),
    Rung("resume", "resume", "U", "slurm", settles_on="slurm-resumed", unblocks=True),
    Rung("custom", "custom", "$", "custom", verify_window_s=0.0, deadline_s=0.0),
)

BY_ID: dict[str, Rung] = {r.id: r for r in ALL}
#: a command line of the operator's own: an action, never one diagnosis proposes (and what a rung
#: a later version wrote, which this one does not know, reads as)
CUSTOM = BY_ID["custom"]


#: the rungs that signal processes the operator chose or the GPUs' holders (not the F9 menu's)
SIGNALLING = tuple(r.id for r in ALL if r.signal is not None and not r.chooses_signal)
#: the rung that asks processes to exit (SIGTERM)
TERMINATING = tuple(r.id for r in ALL if r.signal == "TERM" and not r.chooses_signal)
#: the rungs that send SIGKILL
KILLING = tuple(r.id for r in ALL if r.signal == "KILL")
#: the rungs that end processes (a child started again after one is a respawn)
ENDING = tuple(r.id for r in ALL if r.ends_processes)
#: the rungs that ask the MPS control daemon
MPS_ACTIONS = tuple(r.id for r in ALL if r.settles_on in ("mps", "mps-gone"))


def of(rung: str | Rung | None) -> Rung:
    """The record of a rung id (a record passes through); an id this version does not know (a
    timeline written by a later one) reads as a command of the operator's own."""
    if isinstance(rung, Rung):
        return rung
    return BY_ID.get(rung or "", CUSTOM)


def known(rung: str | None) -> bool:
    return rung in BY_ID


def ids(**flags: object) -> tuple[str, ...]:
    """The ids of the rungs whose attributes have these values, in ladder order:
    ``ids(ends_processes=True)``."""
    return tuple(r.id for r in ALL if all(getattr(r, k) == v for k, v in flags.items()))


def sending(signal: str) -> Rung | None:
    """The rung of its own that sends this signal to chosen processes (TERM: sigterm), if any."""
    return next((r for r in ALL if r.signal == signal and r.plans == "signal" and not r.every_holder
                 and not r.chooses_signal), None)


def proposable() -> tuple[str, ...]:
    """What diagnosis may propose (Finding.rung), gentlest first."""
    return ids(proposed=True)


def actions() -> tuple[str, ...]:
    """What the action layer plans from a reading (not a check, not Slurm's, not a custom line)."""
    return tuple(r.id for r in ALL if r.check is None and not r.through_slurm and r is not CUSTOM)


def named_in(text: str) -> set[str]:
    """The rungs a hypothesis's words name ("SIGKILL of the workers frees it" -> sigkill, kill-holders)."""
    found: set[str] = set()
    for r in ALL:
        if any(re.search(w, text, re.I) for w in r.words):
            found.add(r.id)
    return found


def from_title(title: str, command: str = "") -> str:
    """The rung of an action entry written before entries carried their rung: worked out from
    its title and command as those versions wrote them (a later title change does not matter:
    entries since carry the id)."""
    if title.startswith("[dry-run]") or title.startswith("[read-only]"):
        title = title.split("]", 1)[1].strip().removeprefix("refused:").strip()
    if re.match(r"SIGKILL .*holders? of", title) or (title.startswith("SIGKILL") and " holder" in title):
        return "kill-holders"
    if title.startswith("SIGKILL") or "kill -s KILL" in command:
        return "sigkill"
    if title.startswith("SIGTERM") or "kill -s TERM" in command:
        return "sigterm"
    if title.startswith("Clear the reset blockers"):
        return "clear-blockers"
    if title.startswith("Reset") or re.search(r"nvidia-smi -r\b", command):
        return "reset"
    if title.startswith("Reload"):
        return "reload-driver"
    if title.startswith("Reboot"):
        return "reboot"
    if title.startswith("Restore what B stopped"):
        return "restore"
    if title.endswith(" in Slurm") and title.startswith(("Drain ", "Resume ")):
        return "drain" if title.startswith("Drain ") else "resume"
    if re.match(r"SIG[A-Z0-9+-]+ \d+ process", title):
        return "signal"
    return "custom"
