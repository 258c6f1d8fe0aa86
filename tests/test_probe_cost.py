"""What a poll costs the node, over a real sshd with the test nvidia-smi (which counts its calls):
once the kept shell has answered, a probe leaves out what cannot have changed (probe.STICKY)
and the snapshot is the same as a whole probe's."""
from __future__ import annotations

import dataclasses

from console import probe
from console.sources.ssh.source import SshSource
from tests.test_ssh import node_a, options  # noqa: F401 (fixture)


def _calls(node, since: int) -> list[str]:
    return node.smi.calls()[since:]


async def test_without_loop_mode_a_kept_shell_is_asked_two_nvidia_smi_calls_a_poll_and_the_snapshot_is_the_same(
        sshd, node_a, tmp_path, ssh_home, gpu_workers):  # noqa: F811
    """(Loop mode, where NVML starts once per shell: tests/test_smi_loop.py; this is the per-poll
    path, what a node whose nvidia-smi cannot loop is asked.)"""
    (w0,) = gpu_workers(1)
    node_a.smi.set(used=(61000, 1200), apps=[(w0, 0, 60000, "sleep")])
    src = SshSource(node_a.target, options(sshd, tmp_path))
    src.smi_loop = False
    whole = SshSource(node_a.target, options(sshd, tmp_path))
    try:
        before = len(node_a.smi.calls())
        first = await src.poll()
        assert first.error is None, first.error
        # the first probe asks everything: -L, the row remapping (-q -d ROW_REMAPPER) and the
        # processes' SM share (pmon: whether the driver lists a process is not known yet) included
        assert len(_calls(node_a, before)) == 5
        mid = len(node_a.smi.calls())
        for _ in range(3):
            later = await src.poll()
        asked = _calls(node_a, mid)
        # two a poll (pmon again only every probe.PMON_EVERY polls)
        assert len(asked) == 6 and not any(c.startswith(("-L", "-q", "pmon")) for c in asked), asked
        # what the poll leaves out still holds: own processes, start times, driver, GPUs
        assert later.own_pids == first.own_pids and later.proc(w0).create_time == first.proc(w0).create_time
        assert later.driver_version == first.driver_version and later.gpus == first.gpus
        assert later.gpus[0].memory_repair is not None        # the first probe's remap answer holds
        # a whole probe of a fresh shell sees the same node
        full = await whole.poll()
        # (the cgroup, executable and pending signals of a PID the driver listed are read from the
        # probe after it: not yet by the fresh one)
        assert later.proc(w0).exe == "/usr/bin/sleep" and later.proc(w0).sigkill_pending is False
        assert dataclasses.replace(later.proc(w0), cgroup=None, exe=None, sigkill_pending=None) == full.proc(w0)
        assert later.gpus == full.gpus
        assert later.driver_version == full.driver_version and later.hostname == full.hostname
        assert later.own_pids[0] != full.own_pids[0]      # each its own shell
    finally:
        await src.close()
        await whole.close()


async def test_a_gpu_in_mig_mode_is_asked_for_its_instances_every_poll(sshd, node_a, tmp_path,
                                                                       ssh_home):  # noqa: F811
    node_a.smi.set(mig=True)
    src = SshSource(node_a.target, options(sshd, tmp_path))
    try:
        before = len(node_a.smi.calls())
        for _ in range(3):
            snap = await src.poll()
        assert [c for c in _calls(node_a, before) if c.startswith("-L")] == ["-L"] * 3
        assert [m.profile for m in snap.gpu(0).mig_instances] == ["3g.48gb", "3g.48gb"]
    finally:
        await src.close()


async def test_a_new_shell_answers_meta_again(sshd, node_a, tmp_path, ssh_home):  # noqa: F811
    src = SshSource(node_a.target, options(sshd, tmp_path))
    try:
        first = await src.poll()
        await src.poll()
        assert "meta" in src._skip
        src._drop_shell()                        # as after a probe that timed out
        again = await src.poll()
        assert "meta" not in src._skip and again.error is None
        assert again.own_pids and again.own_pids[0] != first.own_pids[0], "the new shell's own PID"
    finally:
        await src.close()


def test_sticky_sections_are_what_a_probe_may_leave_out():
    mark = probe.new_mark()
    script = probe.build_script(mark, skip=frozenset(probe.STICKY))
    assert all(f"begin {name}'" not in script for name in probe.STICKY)
    assert probe.last_section(skip=frozenset(probe.STICKY)) == "apps"
    assert probe.last_section() == "driver" and f"{mark} begin driver" in probe.build_script(mark)


def test_one_known_hosts_file_is_parsed_once_for_every_node_until_it_changes(tmp_path):
    from console.sources.ssh.trust import HostTrust
    from tests.sshd_fixture import make_keys
    keys = make_keys(tmp_path / "keys")
    kh = tmp_path / "known_hosts"
    kh.write_text("".join(f"[127.0.0.1]:{20000 + i} {keys.host_public}\n" for i in range(50)))
    a, b = HostTrust([str(kh)], str(kh), False), HostTrust([str(kh)], str(kh), False)
    assert a.load() is b.load(), "fifty nodes, one parse"
    with open(kh, "a") as f:                   # another console recorded a key
        f.write(f"[127.0.0.1]:30000 {keys.host_public}\n")
    c = HostTrust([str(kh)], str(kh), False).load()
    assert c is not a.known
    import asyncssh
    assert asyncssh.match_known_hosts(c, "127.0.0.1", "127.0.0.1", 30000)[0]


async def test_a_new_process_shows_its_command_line_in_the_first_poll_that_lists_it(
        sshd, node_a, tmp_path, ssh_home, gpu_workers):  # noqa: F811
    """ps is never run: the probe reads the command line and user of the PIDs its listing shows
    as new, in the same probe, and no others (a light probe that saw nothing new reads none)."""
    src = SshSource(node_a.target, options(sshd, tmp_path))
    try:
        for _ in range(3):
            await src.poll()
        assert src._scope is not None and not src._scope.whole
        (w0,) = gpu_workers(1)
        p = None
        for _ in range(3):
            p = (await src.poll()).proc(w0)
            if p is not None:
                break
        assert p is not None and p.name == "sleep" and p.cmdline == "sleep 300" and p.user, p
    finally:
        await src.close()


async def test_the_kernel_log_and_the_driver_files_are_read_on_their_cadence(sshd, node_a, tmp_path,
                                                                              ssh_home):  # noqa: F811
    src = SshSource(node_a.target, options(sshd, tmp_path))
    try:
        xid = []
        for _ in range(2 * probe.XID_EVERY + 1):
            snap = await src.poll()
            assert snap.error is None, snap.error
            xid.append("xid" not in src._skip)
            assert ("sys" in src._skip) == ("driver" in src._skip)
        assert xid.count(True) == 3 and xid[0] and xid[probe.XID_EVERY], xid
    finally:
        await src.close()
