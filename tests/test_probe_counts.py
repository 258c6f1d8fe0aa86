"""The pids section's listing from the kernel's counts (console/probe_scope.py LISTING_COMMAND):
a light probe on a node where no task ended lists nothing (/proc/loadavg's task count and last
PID say what began); a thread that began is not a process; a process that began is new; a
task that ended sends the shell back to listing /proc. Run in a real ``sh`` with real processes.

This machine's other processes come and go too: a probe whose window held another task's start
or end lists /proc instead (correct either way; each test asserts what it shows every time, and
retries until a probe of its window was answered from the counts).
"""
from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from console.probe_scope import COUNTED, Scope, pids_command
from console.sources.proc_table import parse_listing
from tests.polling import BOUND_S
from tests.test_real_kernel import run, started  # noqa: F401 (fixture)

LIGHT = pids_command(Scope(whole=False))
WHOLE = pids_command(Scope(whole=True))
END = "::end-of-answer::"
TRIES = 200


def tries(bound_s: float = BOUND_S):
    """Tries until the bound (a busy machine may go a while without a quiet moment)."""
    deadline = time.monotonic() + bound_s
    n = 0
    while n < TRIES or time.monotonic() < deadline:
        n += 1
        yield n

#: a process that starts a thread on each line on stdin, and prints the thread's ID
THREADS = """
    import os, sys, threading, time
    print(os.getpid(), flush=True)
    for line in sys.stdin:
        t = threading.Thread(target=time.sleep, args=(300,), daemon=True)
        t.start()
        print(t.native_id, flush=True)
"""


class Shell:
    """A long-lived ``sh``, as the probe's: one section at a time, its answer and the NEW PIDs."""

    def __init__(self) -> None:
        self.proc = subprocess.Popen(["sh"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)

    def ask(self, command: str) -> str:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(f"{command}; echo; echo '{END}'\n")
        self.proc.stdin.flush()
        lines = []
        for line in self.proc.stdout:
            if line.strip() == END:
                return "".join(lines)
            lines.append(line)
        raise AssertionError("the shell ended")

    def pids(self, command: str = LIGHT) -> tuple[str, set[int], set[int]]:
        """(the section's text, its listing's PIDs, the NEW PIDs the other sections read)."""
        text = self.ask(command)
        new = {int(w) for w in self.ask("echo $gi_n").split()}
        listing = parse_listing(text)
        return text, set(listing.pids or ()), new

    def close(self) -> None:
        self.proc.kill()
        self.proc.wait()


@pytest.fixture
def sh():
    shell = Shell()
    shell.pids(WHOLE)
    yield shell
    shell.close()


def counted(text: str) -> bool:
    return COUNTED in text.split("\n")


def test_a_node_where_nothing_ended_keeps_its_listing_from_the_counts(sh):
    """Two light probes back to back: the second needs no listing of /proc; its listing is the
    first one's and what began meanwhile (another test's process, on a busy machine), and only
    that is new."""
    for _ in tries():
        _, before, _ = sh.pids()
        text, after, new = sh.pids()
        assert os.getpid() in after and sh.proc.pid in after
        if counted(text):
            assert after == before | new and new.isdisjoint(before), (new, after ^ before)
            return
    pytest.fail(f"no probe in {BOUND_S} s was answered from the kernel's counts")


def test_a_thread_that_began_is_not_a_process_and_a_process_is_new(sh, started):  # noqa: F811
    p, words = run(started, THREADS)
    pid = int(words[0])
    seen_thread = seen_process = False
    for _ in tries():
        sh.pids()
        assert p.stdin is not None and p.stdout is not None
        p.stdin.write("\n")
        p.stdin.flush()
        tid = int(p.stdout.readline())
        text, listing, new = sh.pids()
        assert pid in listing and tid not in listing and tid not in new, (tid, text[:200])
        seen_thread |= counted(text)
        child = subprocess.Popen(["sleep", "300"])
        try:
            text, listing, new = sh.pids()
            assert child.pid in listing and child.pid in new, "a process that began is new, read at once"
            seen_process |= counted(text)
        finally:
            child.kill()
            child.wait()
        if seen_thread and seen_process:
            return
    pytest.fail(f"in {BOUND_S} s no try answered from the counts (thread {seen_thread}, process {seen_process})")


def test_a_process_that_ended_is_gone_at_the_next_probe(sh):
    for _ in range(TRIES // 10):
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"])
        _, listing, _ = sh.pids()
        assert child.pid in listing
        child.kill()
        child.wait()
        text, listing, new = sh.pids()
        assert child.pid not in listing and not counted(text), "a task ended: /proc listed again"


def test_a_whole_probe_always_lists_proc(sh):
    for _ in range(3):
        assert not counted(sh.pids(WHOLE)[0])
