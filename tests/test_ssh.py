"""The SSH source against a real OpenSSH sshd on 127.0.0.1 (stock session/startup limits)."""
from __future__ import annotations

import asyncio
import dataclasses
import time

import psutil
import pytest

from tests.polling import eventually
from console.sources.ssh.source import ConnectLimiter, SshSource
from console.sources.ssh.options import SshOptions
from tests.sshd_fixture import Sshd, free_port


def options(sshd, tmp_path, **kw) -> SshOptions:
    if "known_hosts" not in kw:
        kw["known_hosts"] = str(sshd.write_known_hosts(tmp_path / "trusted_known_hosts"))
    kw.setdefault("identity", (str(sshd.keys.client_key),))
    kw.setdefault("connect_timeout", 3.0)
    return SshOptions(**kw)


@pytest.fixture
def node_a(sshd):
    node = sshd.nodes[0]
    node.smi.set()
    yield node
    node.smi.set()


@pytest.fixture
def node_b(sshd):
    node = sshd.nodes[1]
    node.smi.set()
    yield node
    node.smi.set()


async def test_poll_reads_gpus_and_joins_gpu_memory_to_real_processes(sshd, node_a, tmp_path, ssh_home,
                                                                         gpu_workers):
    w0, w1 = gpu_workers(2)
    node_a.smi.set(used=(61000, 30500), apps=[(w0, 0, 60000, "/usr/bin/sleep"), (w1, 1, 30000, "sleep"),
                                              (w1, 0, None, "sleep")])
    src = SshSource(node_a.target, options(sshd, tmp_path))
    try:
        snap = await src.poll()
        assert snap.error is None, snap.error
        assert [(g.index, g.bus_id, g.memory_used_mib, g.memory_total_mib) for g in snap.gpus] == [
            (0, "00000000:18:00.0", 61000, 97887), (1, "00000000:2A:00.0", 30500, 97887)]
        p0, p1 = snap.proc(w0), snap.proc(w1)
        assert p0.cmdline == "sleep 300" and p0.user == "root" and p0.gpu_memory_mib == {"0": 60000}
        assert p1.gpu_memory_mib == {"1": 30000, "0": None}
        assert {p.pid for p in snap.holders} >= {w0, w1}
        # the probe shell and the sshd session serving it are the console's own processes
        own = [snap.proc(pid) for pid in snap.own_pids]
        assert own[0].name == "sh"
        assert any(p and p.name == "sshd" and p.cmdline.startswith("sshd: root@") for p in own)
        assert not any(p and "[listener]" in p.cmdline for p in own)
        # the next poll reuses the connection and sees the change
        node_a.smi.set(used=(1200, 30500), apps=[(w1, 1, 30000, "sleep")])
        snap = await src.poll()
        assert snap.gpu(0).memory_used_mib == 1200 and snap.proc(w0).gpu_memory_mib == {}
        assert src.connects == 1
    finally:
        await src.close()


async def test_mig_gpu_is_parsed_as_mig(sshd, node_a, tmp_path, ssh_home):
    node_a.smi.set(mig=True)
    src = SshSource(node_a.target, options(sshd, tmp_path))
    try:
        snap = await src.poll()
        g0, g1 = snap.gpu(0), snap.gpu(1)
        assert g0.mig_mode is True and [m.profile for m in g0.mig_instances] == ["3g.48gb", "3g.48gb"]
        assert g1.mig_mode is None and g1.mig_instances == ()
    finally:
        await src.close()


@pytest.mark.parametrize("mode, words", [
    ("nodriver", "driver"), ("nodevices", "no devices"), ("mismatch", "mismatch")])
async def test_driver_failures_are_one_line_errors(sshd, node_a, tmp_path, ssh_home, mode, words):
    node_a.smi.set(mode=mode)
    src = SshSource(node_a.target, options(sshd, tmp_path))
    try:
        snap = await src.poll()
        assert snap.error and words in snap.error.lower() and "\n" not in snap.error
        assert snap.gpus == () and snap.processes, "processes are still listed"
    finally:
        await src.close()


async def test_lost_gpu_is_a_warning_and_the_rest_still_reads(sshd, node_a, tmp_path, ssh_home):
    node_a.smi.set(mode="lost")
    src = SshSource(node_a.target, options(sshd, tmp_path))
    try:
        snap = await src.poll()
        assert snap.error is None
        assert [g.index for g in snap.gpus] == [0]
        assert snap.lost_gpus == ("0000:2A:00.0",)
        assert any("lost" in w for w in snap.warnings)
    finally:
        await src.close()


async def test_node_without_nvidia_smi_says_so(sshd, tmp_path, ssh_home):
    src = SshSource(sshd.bare[0].target, options(sshd, tmp_path))
    try:
        snap = await src.poll()
        assert snap.error and "nvidia-smi not found" in snap.error
    finally:
        await src.close()


async def test_hung_nvidia_smi_times_out_while_another_node_keeps_updating(sshd, node_a, node_b, tmp_path,
                                                                            ssh_home):
    opts = options(sshd, tmp_path)
    hung = SshSource(node_a.target, opts, probe_timeout=4)
    live = SshSource(node_b.target, opts, probe_timeout=4)
    try:
        assert (await hung.poll()).error is None
        node_a.smi.set(mode="hang")
        hung_poll = asyncio.create_task(hung.poll())
        seen = []
        while len(seen) < 3:         # the live node answers, each time its new value, meanwhile
            node_b.smi.set(used=(1000 + len(seen), 2000))
            snap = await live.poll()
            assert snap.error is None
            seen.append(snap.gpu(0).memory_used_mib)
            assert not hung_poll.done(), f"the live node waited on the hung one: {seen}"
        assert seen == [1000, 1001, 1002], "the live node kept its own rhythm"
        snap = await hung_poll
        assert snap.error == "probe timed out after 4 s"
        # the driver answers again: a fresh probe shell over the same connection
        node_a.smi.set()
        snap = await hung.poll()
        assert snap.error is None and snap.gpu(0).memory_used_mib == 76109
        assert hung.connects == 1
    finally:
        await asyncio.gather(hung.close(), live.close())


async def test_refused_port_fails_fast_and_backs_off(ssh_keys, tmp_path, ssh_home, monkeypatch):
    port = free_port()
    src = SshSource(f"root@127.0.0.1:{port}", SshOptions(known_hosts=str(tmp_path / "kh"),
                                                          reconnect_min=30))
    attempts = []
    real_connect = src._connect

    async def counting():
        attempts.append(time.monotonic())
        return await real_connect()

    monkeypatch.setattr(src, "_connect", counting)
    first = await src.poll()
    second = await src.poll()
    assert "refused" in first.error and f"127.0.0.1:{port}" in first.error
    assert second.error == first.error and len(attempts) == 1, "no new connect while backing off"


async def test_port_that_never_speaks_ssh_is_reported_unreachable(tmp_path, ssh_home):
    async def silent(reader, writer):
        await asyncio.sleep(30)

    server = await asyncio.start_server(silent, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    src = SshSource(f"root@127.0.0.1:{port}", SshOptions(known_hosts=str(tmp_path / "kh"),
                                                          connect_timeout=0.5))
    try:
        snap = await src.poll()
        assert "unreachable" in snap.error and "timed out" in snap.error
    finally:
        server.close()


async def test_dead_nodes_do_not_delay_a_live_one(sshd, node_a, tmp_path, ssh_home):
    async def silent(reader, writer):
        await asyncio.sleep(30)

    server = await asyncio.start_server(silent, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    opts = options(sshd, tmp_path, connect_timeout=0.8)
    dead = [SshSource(f"root@127.0.0.1:{port}", opts) for _ in range(8)]    # every handshake slot
    live = SshSource(node_a.target, opts)
    try:
        pending = [asyncio.create_task(d.poll()) for d in dead]
        await asyncio.sleep(0)          # every dead connect has started and holds its slot
        assert (await live.poll()).error is None
        assert not any(t.done() for t in pending), "the live node answered while the dead ones still wait"
        assert all("unreachable" in s.error for s in await asyncio.gather(*pending))
    finally:
        server.close()
        await live.close()


def test_reconnect_delays_double_with_jitter_up_to_the_cap():
    src = SshSource("gpu01", SshOptions(reconnect_min=1.0, reconnect_max=30.0))
    for failures, full in [(1, 1.0), (2, 2.0), (3, 4.0), (5, 16.0), (6, 30.0), (20, 30.0)]:
        src._failures = failures
        delays = {src._backoff() for _ in range(50)}
        assert all(full / 2 <= d <= full for d in delays) and len(delays) > 1


async def test_refused_key_is_an_authentication_failure(sshd, node_a, tmp_path, ssh_home):
    src = SshSource(node_a.target, options(sshd, tmp_path, identity=(str(sshd.keys.stranger_key),)))
    snap = await src.poll()
    assert snap.error.startswith(f"authentication failed for root@127.0.0.1:{node_a.port}")


async def test_unknown_host_key_is_refused_then_recorded_on_request(sshd, node_a, tmp_path, ssh_home):
    kh = tmp_path / "known_hosts"
    kh.write_text("")
    snap = await SshSource(node_a.target, options(sshd, tmp_path, known_hosts=str(kh))).poll()
    assert snap.error.startswith(f"host key not trusted for 127.0.0.1:{node_a.port}")
    assert sshd.keys.host_fingerprint in snap.error and "ssh-ed25519" in snap.error
    assert kh.read_text() == ""

    src = SshSource(node_a.target, options(sshd, tmp_path, known_hosts=str(kh), accept_new_host_keys=True))
    try:
        assert (await src.poll()).error is None
    finally:
        await src.close()
    assert kh.read_text() == sshd.known_hosts_line(node_a.port)
    # trusted from now on, without the flag
    src = SshSource(node_a.target, options(sshd, tmp_path, known_hosts=str(kh)))
    try:
        assert (await src.poll()).error is None
    finally:
        await src.close()


async def test_changed_host_key_is_refused_even_with_accept_new(sshd, node_a, tmp_path, ssh_home):
    other = (sshd.keys.stranger_key.with_suffix(".pub")).read_text().split()[:2]
    kh = tmp_path / "known_hosts"
    kh.write_text(f"[127.0.0.1]:{node_a.port} {' '.join(other)}\n")
    before = kh.read_text()
    snap = await SshSource(node_a.target, options(sshd, tmp_path, known_hosts=str(kh),
                                                  accept_new_host_keys=True)).poll()
    assert snap.error.startswith(f"host key CHANGED for 127.0.0.1:{node_a.port}")
    assert sshd.keys.host_fingerprint in snap.error
    assert kh.read_text() == before


async def test_node_recovers_after_sshd_is_killed_and_restarted(ssh_keys, tmp_path, ssh_home):
    server = Sshd(tmp_path / "sshd", ssh_keys, [free_port()]).start()
    node = server.nodes[0]
    src = SshSource(node.target, options(server, tmp_path, reconnect_min=0.05, reconnect_max=0.1))
    try:
        assert (await src.poll()).error is None
        server.kill()
        down = await src.poll()
        assert "unreachable" in down.error
        server.start()
        deadline = time.monotonic() + 5
        snap = down
        while snap.error is not None and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
            snap = await src.poll()
        assert snap.error is None and snap.gpu(0).memory_used_mib == 76109
        assert src.connects == 2
    finally:
        await src.close()
        server.stop()


async def test_ssh_config_alias_user_port_identity_and_proxyjump(sshd, node_a, tmp_path, ssh_home):
    kh = sshd.write_known_hosts(tmp_path / "known_hosts")
    cfg = tmp_path / "ssh_config"
    cfg.write_text(f"""\
Host gpu-alias gpu-behind
    Hostname 127.0.0.1
    Port {node_a.port}
    User root
    IdentityFile {sshd.keys.client_key}
    UserKnownHostsFile {kh}
Host gpu-behind
    ProxyJump gpu-alias
""")
    for alias in ("gpu-alias", "gpu-behind"):
        src = SshSource(alias, SshOptions(ssh_config=str(cfg), connect_timeout=3))
        try:
            snap = await src.poll()
            assert snap.error is None, (alias, snap.error)
            assert snap.gpu(0).memory_used_mib == 76109
        finally:
            await src.close()


async def test_run_bounds_the_command_on_the_node_and_here(sshd, node_a, tmp_path, ssh_home):
    src = SshSource(node_a.target, options(sshd, tmp_path))
    try:
        r = await src.run("echo out; echo err >&2; exit 3", 5)
        assert (r.rc, r.stdout, r.stderr, r.error) == (3, "out\n", "err\n", None)
        r = await src.run("sleep 7.25", 0.5)
        assert r.rc != 0 and "timed out after 0.5 s" in r.error
        assert await eventually(lambda: not [p for p in psutil.process_iter(["cmdline"])
                                             if p.info["cmdline"] == ["sleep", "7.25"]]), "the node's command was left running"
    finally:
        await src.close()


async def test_channels_per_node_stay_under_max_sessions(sshd, node_a, tmp_path, ssh_home):
    src = SshSource(node_a.target, options(sshd, tmp_path))
    try:
        snap, *results = await asyncio.gather(src.poll(), *[src.run("sleep 0.3; echo ok", 10) for _ in range(14)])
        assert snap.error is None
        assert [r.stdout for r in results] == ["ok\n"] * 14, [r.error for r in results if r.error]
        # quick commands churn channels faster than sshd frees its sessions
        churn = await asyncio.gather(*[src.run("true", 10) for _ in range(60)])
        assert [r.error for r in churn if r.error] == [] and {r.rc for r in churn} == {0}
    finally:
        await src.close()
    # without the cap sshd's MaxSessions 10 refuses channels: the cap is what keeps them
    src = SshSource(node_a.target, options(sshd, tmp_path, max_channels=14))
    try:
        results = await asyncio.gather(*[src.run("sleep 0.8; echo ok", 10) for _ in range(14)])
        assert any(r.error and "channel" in r.error for r in results)
    finally:
        await src.close()


async def test_many_nodes_connect_at_once_without_tripping_max_startups(sshd, node_a, tmp_path, ssh_home):
    opts = options(sshd, tmp_path)
    sources = [SshSource(node_a.target, opts) for _ in range(40)]
    try:
        results = await asyncio.gather(*[s.run("echo up", 10) for s in sources])
        assert [r.stdout for r in results] == ["up\n"] * 40, {r.error for r in results}
        assert ConnectLimiter.for_loop().peak <= 8
    finally:
        await asyncio.gather(*[s.close() for s in sources])


class FreezableProxy:
    """A TCP relay to sshd that can go silent, like a node whose network stalls."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.frozen = asyncio.Event()
        self.server: asyncio.Server | None = None

    async def start(self) -> int:
        self.server = await asyncio.start_server(self._relay, "127.0.0.1", 0)
        return self.server.sockets[0].getsockname()[1]

    async def _relay(self, reader, writer) -> None:
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target_port)

        async def pipe(src, dst):
            while data := await src.read(65536):
                if self.frozen.is_set():
                    return                 # swallow everything from now on
                dst.write(data)
                await dst.drain()

        try:
            await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))
        except (ConnectionError, OSError):
            pass
        finally:
            if not self.frozen.is_set():
                writer.close()
                up_writer.close()

    def close(self) -> None:
        self.server.close()


async def test_keepalive_notices_a_silent_link_and_the_node_reconnects(sshd, node_a, tmp_path, ssh_home):
    proxy = FreezableProxy(node_a.port)
    port = await proxy.start()
    kh = tmp_path / "known_hosts"
    kh.write_text(sshd.known_hosts_line(port))
    src = SshSource(f"root@127.0.0.1:{port}", options(sshd, tmp_path, known_hosts=str(kh), keepalive=0.2,
                                                      reconnect_min=0.05), probe_timeout=5)
    try:
        assert (await src.poll()).error is None
        proxy.frozen.set()
        snap = await src.poll()
        # keepalives, not the 5 s probe deadline, noticed it
        assert "unreachable" in snap.error and "keepalive" in snap.error, snap.error
        proxy.frozen.clear()
        snap = await src.poll()
        assert snap.error is None and src.connects == 2
    finally:
        await src.close()
        proxy.close()


async def test_a_connection_reset_before_the_login_is_tried_again_once(sshd, node_a, tmp_path, ssh_home):
    """What sshd does at MaxStartups: it resets a new connection at random. A real loopback
    listener resets the first connection (RST) and forwards the next to the real sshd."""
    import socket
    import struct
    resets = []

    async def pipe(reader, writer):
        try:
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        except ConnectionError:
            pass
        finally:
            writer.close()

    async def handle(reader, writer):
        if not resets:
            resets.append(1)
            writer.get_extra_info("socket").setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            writer.transport.abort()
            return
        up_r, up_w = await asyncio.open_connection("127.0.0.1", node_a.port)
        await asyncio.gather(pipe(reader, up_w), pipe(up_r, writer))

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    opts = options(sshd, tmp_path)
    kh = tmp_path / "known_hosts_proxy"
    kh.write_text("".join(line.replace(f"[127.0.0.1]:{node_a.port}", f"[127.0.0.1]:{port}")
                          for line in open(opts.known_hosts)))
    user = node_a.target.rsplit("@", 1)[0] + "@" if "@" in node_a.target else ""
    src = SshSource(f"{user}127.0.0.1:{port}", dataclasses.replace(opts, known_hosts=str(kh)))
    try:
        result = await src.run("echo up", 10)
        assert resets == [1], "the first connection was reset"
        assert result.error is None and result.stdout == "up\n", result.error
    finally:
        await src.close()
        server.close()
        await server.wait_closed()


async def test_the_connection_asks_aes_gcm_first_unless_the_ssh_config_names_its_ciphers(sshd, node_a, tmp_path,
                                                                                          ssh_home):
    """AES-GCM costs a sixth of chacha20-poly1305 a packet in asyncssh (the probe's output is many
    packets a poll); a Ciphers line in the operator's ssh config is used as written."""
    src = SshSource(node_a.target, options(sshd, tmp_path))
    try:
        assert (await src.poll()).error is None
        assert src._conn.get_extra_info("send_cipher") == "aes128-gcm@openssh.com"
    finally:
        await src.close()
    kh = sshd.write_known_hosts(tmp_path / "known_hosts")
    cfg = tmp_path / "ssh_config"
    cfg.write_text(f"Host gpu-alias\n    Hostname 127.0.0.1\n    Port {node_a.port}\n    User root\n"
                   f"    IdentityFile {sshd.keys.client_key}\n    UserKnownHostsFile {kh}\n"
                   "    Ciphers chacha20-poly1305@openssh.com\n")
    src = SshSource("gpu-alias", SshOptions(ssh_config=str(cfg), connect_timeout=3))
    try:
        assert (await src.poll()).error is None
        assert src._conn.get_extra_info("send_cipher") == "chacha20-poly1305@openssh.com"
    finally:
        await src.close()
