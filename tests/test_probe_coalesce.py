"""An SSH probe's process sections come back in one write (probe.COALESCE_OPEN): each chunk that
arrives on its own costs the console a wake-up, a decrypt and asyncssh's packet path (docs/
performance.md, "What a probe's packets cost"). Gathered or not, the probe says the same."""
from __future__ import annotations

import re
import shutil
import subprocess

import pytest

from console import probe
from console.probe_scope import Scope
from console.sources.ssh.source import SshSource
from tests.sshd_fixture import *  # noqa: F401,F403 (fixtures)
from tests.test_ssh import node_a, options  # noqa: F401 (fixture)


class _Chunks(SshSource):
    """An SshSource that keeps each probe's output as the chunks it was read in."""

    def __init__(self, *a, gather: bool, **kw) -> None:
        super().__init__(*a, **kw)
        self.coalesce_output = gather
        self.chunks: list[list[bytes]] = []

    def _capture(self, mark: str):
        cap = super()._capture(mark)
        feed = cap.feed
        got: list[bytes] = []

        def kept(chunk):
            got.append(bytes(chunk))
            return feed(chunk)
        cap.feed = kept
        self.chunks.append(got)
        return cap


def _sections(snap_text: bytes) -> list[str]:
    return re.findall(rb":: end (\w+)", snap_text)


def _chunk_of(chunks: list[bytes], marker: bytes) -> int:
    return next(i for i, c in enumerate(chunks) if marker in c)


async def test_a_light_probes_process_sections_arrive_in_one_write(sshd, node_a, tmp_path, ssh_home):
    """Gathered, the sections from stat to the last gathered one come in one piece, whatever the
    machine's load (the node's shell writes them at once); the answer is the one the ungathered
    probe gives."""
    snaps = {}
    for gather in (False, True):
        src = _Chunks(node_a.target, options(sshd, tmp_path), gather=gather)
        try:
            for _ in range(4):             # the first probe whole, then light ones
                snap = await src.poll()
                assert snap.error is None or "driver" in snap.error, snap.error
            snaps[gather] = snap
            if gather:
                for chunks in src.chunks[1:]:
                    assert _chunk_of(chunks, b"begin stat") == _chunk_of(chunks, b" end pend "), \
                        [c[:60] for c in chunks]
        finally:
            await src.close()
    assert snaps[True].gpus == snaps[False].gpus
    assert {p.pid for p in snaps[True].processes} >= {1} <= {p.pid for p in snaps[False].processes}


def _run_probe(shell_path: str, env: dict, script: str, mark: str, last: str) -> bytes:
    done = subprocess.run([shell_path], input=script.encode() + b"exit\n", env=env, capture_output=True, timeout=60)
    assert f"{mark} end {last}".encode() in done.stdout, done.stdout[-300:]
    return done.stdout


@pytest.mark.parametrize("shell_name", ["sh", "bash"])
def test_a_node_whose_dd_cannot_gather_answers_as_before(tmp_path, shell_name):
    """A dd without iflag=fullblock (busybox's, say) is found out once a shell: the probe writes
    as it would without gathering, every section there."""
    shell_path = shutil.which(shell_name)
    if shell_path is None:
        pytest.skip(f"no {shell_name}")
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "dd").write_text('#!/bin/sh\ncase "$*" in *iflag=*) echo "dd: unknown operand" >&2; exit 1;; esac\n'
                             'exec /bin/dd "$@"\n')
    (fake / "dd").chmod(0o755)
    mark = "::gi-test::"
    script = probe.build_script(mark, coalesce=True) + probe.build_script(mark.replace("test", "again"),
                                                                          scope=Scope(whole=False), coalesce=True)
    last = probe.last_section()
    plain_env = {"PATH": "/usr/bin:/bin", "LC_ALL": "C"}
    broken = _run_probe(shell_path, {**plain_env, "PATH": f"{fake}:/usr/bin:/bin"}, script, mark.replace("test", "again"),
                        probe.last_section())
    fine = _run_probe(shell_path, plain_env, script, mark.replace("test", "again"), last)
    assert _sections(broken) == _sections(fine)
    assert b"begin stat" in broken and b"end pend" in broken


def test_the_nvidia_smi_loops_start_before_the_gathering():
    """The loop section starts background nvidia-smi loops; started inside the gathering they
    would inherit the shell's saved stdout (the SSH channel) and keep the session open after the
    console leaves. They start before it; their readers (loopg, loopa) are gathered."""
    script = probe.build_script("::gi-t::", coalesce=True, loop=True)
    opened = script.index(probe.COALESCE_OPEN.split("\n")[0])
    closed = script.index(probe.COALESCE_CLOSE)
    assert script.index("::gi-t:: begin loop'") < opened
    assert opened < script.index("::gi-t:: begin loopg'") < closed
