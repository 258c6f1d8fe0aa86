"""`gpu-incident watch`: one incident per cause episode with its evidence, telling someone once,
hysteresis against flapping, timers for D-state and idle memory, a hostile or hung notify that
never stops the watch, and the metrics page — on the simulator, and over a real sshd with real
processes (a mknod device holder the driver does not list, a thread in D by the vfork recipe)."""
from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import sys
from pathlib import Path

import pytest

from console.clock import FakeClock
from console.incident.timeline import load, open_incident
from console.monitor import diagnosed
from console.session import Session, tell, watch
from console.session import metrics
from console.sources.sim import SimSource
from console.sources.ssh.source import SshSource
from tests.polling import eventually


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def watcher(tmp_path, scenario="hidden-holders", **options):
    source = SimSource(name="gpu07", scenario=scenario, clock=FakeClock())
    session = Session([source])
    lines: list[str] = []
    told: list[dict] = []
    clock = Clock()
    w = watch.Watcher(session, open_incident=lambda: open_incident(tmp_path), say=lines.append,
                      tell=told.append, clock=clock, **options)
    return w, session, source, lines, told, clock


def incidents(tmp_path) -> list[Path]:
    return sorted(tmp_path.glob("*.jsonl"))


def kinds(path) -> list[str]:
    return [e.kind for e in load(path)[0]]


async def reading(source):
    return diagnosed(await source.poll())


async def test_a_cause_opens_one_incident_with_its_evidence_and_tells_once(tmp_path):
    w, session, source, lines, told, clock = watcher(tmp_path)
    for _ in range(3):
        await w.update(await reading(source))
        clock.t += 1
    path, = incidents(tmp_path)
    entries = load(path)[0]
    assert entries[0].text.startswith("watch opened this incident: hidden-holder: ")
    assert {"hypothesis", "observation", "check"} <= set(kinds(path))
    assert {e.text.split(":")[0] for e in entries if e.kind == "check"} >= {"holders", "states", "kernel-log"}
    assert "action" not in kinds(path), "the watch records; it never acts"
    assert len(told) == 1 and told[0]["opened"] and told[0]["node"] == "gpu07"
    assert {c["kind"] for c in told[0]["causes"]} >= {"hidden-holder"}     # its memory folded into it
    assert told[0]["continue"] == f"gpu-incident --incident {told[0]['incident']} gpu07"
    assert sum("opened incident" in line for line in lines) == 1
    await session.stop()
    await w.stop()


async def test_a_running_job_is_no_cause(tmp_path):
    w, session, source, lines, told, clock = watcher(tmp_path, scenario="graceful")
    for _ in range(3):
        await w.update(await reading(source))
        clock.t += 1
    assert incidents(tmp_path) == [] and told == []
    await session.stop()


async def test_memory_at_zero_percent_is_a_cause_only_after_the_window(tmp_path):
    w, session, source, lines, told, clock = watcher(tmp_path, scenario="seed", idle_after=30)
    snap = await reading(source)
    await w.update(snap)
    clock.t += 29
    await w.update(snap)
    assert incidents(tmp_path) == [], "29 s at 0 %: not yet"
    clock.t += 2
    await w.update(snap)
    assert len(incidents(tmp_path)) == 1 and told[0]["causes"][0]["kind"] == "idle-memory"
    await session.stop()
    await w.stop()


async def test_a_flapping_cause_opens_one_incident_and_a_new_episode_a_new_one(tmp_path):
    w, session, source, lines, told, clock = watcher(tmp_path, clear_after=30)
    held = await reading(source)
    clean = dataclasses.replace(held, findings=(), gpus=tuple(dataclasses.replace(g, memory_used_mib=4)
                                                              for g in held.gpus))
    for snap in (held, clean, held, clean, held, clean):      # flapping every 5 s
        await w.update(snap)
        clock.t += 5
    assert len(incidents(tmp_path)) == 1 and len(told) == 1
    clock.t += 31
    await w.update(clean)
    first, = incidents(tmp_path)
    assert load(first)[0][-1].text == "watch: gpu07 has had no cause for 30 s"
    assert any("cause gone: hidden-holder" in line for line in lines)
    clock.t += 5
    await w.update(held)                                       # a new episode
    assert len(incidents(tmp_path)) == 2 and len(told) == 2
    await session.stop()
    await w.stop()


async def test_a_hung_or_failing_notify_never_stops_the_watch(tmp_path, monkeypatch):
    monkeypatch.setattr(tell, "NOTIFY_TIMEOUT_S", 0.5)
    warnings: list[str] = []
    pidfile = tmp_path / "notify.pid"
    hung = tell.Teller(notify=["sh", "-c", f"echo $$ > {pidfile}; exec sleep 60"], warn=warnings.append)
    hung({"incident": "x"})
    failing = tell.Teller(notify=["sh", "-c", "cat >/dev/null; echo 'no slack token' >&2; exit 3"],
                          warn=warnings.append)
    failing({"incident": "x"})
    missing = tell.Teller(notify=["/nonexistent/notify"], warn=warnings.append)
    missing({"incident": "x"})
    assert await eventually(lambda: len(warnings) == 3), warnings
    assert any("did not finish within 0.5 s" in w for w in warnings)
    assert any("exited 3: no slack token" in w for w in warnings)
    assert any("could not start" in w for w in warnings)
    pid = int(pidfile.read_text())
    assert await eventually(lambda: not Path(f"/proc/{pid}").exists()), "the hung command was stopped"
    for t in (hung, failing, missing):
        await t.close()


async def test_notify_gets_valid_json_on_stdin_never_in_its_arguments(tmp_path):
    out = tmp_path / "got.json"
    teller = tell.Teller(notify=["sh", "-c", f"cat > {out}"])
    teller({"incident": "20261201-x", "node": "gpu07; rm -rf /", "causes": [{"kind": "orphan"}]})
    assert await eventually(lambda: teller.sent == 1)
    assert json.loads(out.read_text())["node"] == "gpu07; rm -rf /"
    await teller.close()


@pytest.mark.parametrize("bad", ["", "'unclosed"])
def test_a_notify_that_cannot_be_split_is_refused_at_start(bad):
    with pytest.raises(ValueError, match="--notify"):
        tell.notify_argv(bad)


@pytest.mark.parametrize("bad", ["file:///etc/passwd", "ftp://x/y", "http://", "gopher://h/"])
def test_only_http_webhooks(bad):
    with pytest.raises(ValueError, match="--webhook"):
        tell.webhook_url(bad)


async def test_a_webhook_that_never_answers_is_given_up_without_holding_the_watch(tmp_path, monkeypatch):
    monkeypatch.setattr(tell, "WEBHOOK_TIMEOUT_S", 0.2)
    monkeypatch.setattr(tell, "WEBHOOK_TRIES", 2)
    monkeypatch.setattr(tell, "WEBHOOK_BACKOFF_S", 0.05)
    conns = []

    async def silent(reader, writer):         # reads the request, answers nothing (drips nothing)
        conns.append(writer)
        await reader.read(1 << 16)
    server = await asyncio.start_server(silent, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    warnings: list[str] = []
    teller = tell.Teller(webhook=f"http://127.0.0.1:{port}/hook", warn=warnings.append)
    teller({"incident": "x"})
    ticks = 0
    while not warnings:
        await asyncio.sleep(0.05)              # the loop keeps turning meanwhile
        ticks += 1
        assert ticks < 400
    assert "--webhook failed 2 times" in warnings[0] and ticks > 5
    await teller.close()
    server.close()


async def test_the_metrics_page_escapes_what_a_node_calls_itself():
    text = metrics.page([('gpu"07\n# HELP fake', "orphan")], {"gpu07": True}, 1, 0)
    line = next(x for x in text.splitlines() if x.startswith("gpu_incident_open{"))
    assert line == 'gpu_incident_open{node="gpu\\"07\\n# HELP fake",kind="orphan"} 1'
    assert "# HELP fake" not in [x[:11] for x in text.splitlines()]
    server = await metrics.serve(0, lambda: text)
    port = server.sockets[0].getsockname()[1]
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"GET /metrics HTTP/1.0\r\n\r\n")
    body = (await reader.read()).decode()
    assert body.startswith("HTTP/1.0 200 OK") and body.endswith(text)
    server.close()


async def test_the_evidence_holds_the_nodes_memory_since_the_watch_began(tmp_path):
    w, session, source, lines, told, clock = watcher(tmp_path)
    snap = await reading(source)
    session.feed.add(snap, None)                     # what the session keeps of each poll
    await w.update(snap)
    path, = incidents(tmp_path)
    memory = next(e for e in load(path)[0] if e.kind == "observation" and "memory over the" in e.text)
    assert json.loads(memory.output)["points"][0][1]["0"] == snap.gpus[0].memory_used_mib
    assert any(e.text.startswith("smi-report: nvidia-smi -q") for e in load(path)[0] if e.kind == "check")
    await session.stop()
    await w.stop()


async def test_watch_run_stops_on_request_and_closes_what_it_opened(tmp_path):
    stop = asyncio.Event()
    lines: list[str] = []
    task = asyncio.create_task(watch.run([SimSource(name="gpu07", scenario="hidden-holders", clock=FakeClock())],
                                         open_incident=lambda: open_incident(tmp_path), interval=0.1,
                                         say=lines.append, stop=stop))
    assert await eventually(lambda: any("opened incident" in x for x in lines)), lines
    stop.set()
    await asyncio.wait_for(task, 30)
    path, = incidents(tmp_path)
    assert load(path)[0][-1].text == "watch stopped" and lines[-1] == "gpu-incident watch: stopped"


# ---------------------------------------------------------------- real processes over a real sshd

from tests.test_probe_two_speeds import LATE_HOLDER, THREAD_VFORK, _say  # noqa: E402
from tests.test_real_kernel import devices, in_d, run, started  # noqa: E402,F401 (fixtures)
from tests.test_ssh import node_a, options  # noqa: E402,F401 (fixture)

root_only = pytest.mark.skipif(os.geteuid() != 0, reason="mknod needs root (CI runs as root)")


@root_only
async def test_a_real_hidden_holder_over_ssh_opens_the_incident_and_notify_gets_it(
        sshd, node_a, tmp_path, ssh_home, started, devices):  # noqa: F811
    p, words = run(started, LATE_HOLDER, str(devices / "nvidia0"))
    pid = int(words[0])
    _say(p)
    assert p.stdout.readline().strip() == "open"
    node_a.smi.set(used=(70_000, 4), apps=())          # the driver lists nobody: memory nobody accounts for
    got = tmp_path / "notified"
    teller = tell.Teller(notify=["sh", "-c", f"cat >> {got}"])
    src = SshSource(node_a.target, options(sshd, tmp_path), device_glob=f"{devices}/nvidia*")
    stop = asyncio.Event()
    lines: list[str] = []
    inc = tmp_path / "incidents"
    task = asyncio.create_task(watch.run([src], open_incident=lambda: open_incident(inc), interval=0.3,
                                         teller=teller, say=lines.append, stop=stop))
    try:
        assert await eventually(lambda: teller.sent == 1, 60), lines
        await asyncio.sleep(1.5)                        # more polls: still one incident, one notify
        path, = incidents(inc)
        assert teller.sent == 1
        doc = json.loads(got.read_text())
        assert doc["incident"] == path.stem and {"hidden-holder", "ghost-memory"} & {c["kind"] for c in doc["causes"]}
        holders = next(e for e in load(path)[0] if e.kind == "check" and e.text.startswith("holders"))
        assert str(pid) in holders.output
    finally:
        stop.set()
        await asyncio.wait_for(task, 30)


@root_only
async def test_a_thread_in_d_is_a_cause_once_it_lasted(sshd, node_a, tmp_path, ssh_home, started):  # noqa: F811
    p, words = run(started, THREAD_VFORK)
    pid = int(words[0])
    node_a.smi.set(used=(30000, 4), apps=[(pid, 0, 29000, Path(sys.executable).name)])
    src = SshSource(node_a.target, options(sshd, tmp_path))
    stop = asyncio.Event()
    lines: list[str] = []
    inc = tmp_path / "incidents"
    task = asyncio.create_task(watch.run([src], open_incident=lambda: open_incident(inc), interval=0.3,
                                         dstate_after=1.0, idle_after=3600, say=lines.append, stop=stop))
    try:
        assert await eventually(lambda: any("watching" in x for x in lines))
        await asyncio.sleep(1.0)
        assert incidents(inc) == [], "a running worker is no cause"
        _say(p)                                         # its second thread vforks: D from now on
        assert await eventually(lambda: any("opened incident" in x and "d-state" in x for x in lines), 60), lines
        path, = incidents(inc)
        states = next(e for e in load(path)[0] if e.kind == "check" and e.text.startswith("states"))
        assert f"{pid} " in states.text and "in D" in states.text
    finally:
        stop.set()
        await asyncio.wait_for(task, 30)


@root_only
async def test_a_real_zombie_the_driver_still_charges_opens_one_incident(sshd, node_a, tmp_path, ssh_home,
                                                                        started):  # noqa: F811
    """A worker that exited unreaped (a real zombie) while the driver still lists its memory."""
    from tests.test_probe_two_speeds import UNREAPED
    p, words = run(started, UNREAPED)
    parent, child = int(words[0]), int(words[1])
    _say(p)                                          # the child exits; its parent never reaps it
    from tests.polling import until
    assert until(lambda: Path(f"/proc/{child}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z")
    node_a.smi.set(used=(40_000, 4), apps=[(child, 0, 39_900, Path(sys.executable).name)])
    src = SshSource(node_a.target, options(sshd, tmp_path))
    stop = asyncio.Event()
    lines: list[str] = []
    inc = tmp_path / "incidents"
    task = asyncio.create_task(watch.run([src], open_incident=lambda: open_incident(inc), interval=0.3,
                                         say=lines.append, stop=stop))
    try:
        assert await eventually(lambda: any("opened incident" in x for x in lines), 60), lines
        await asyncio.sleep(1.0)
        path, = incidents(inc)
        opened = [x for x in lines if "opened incident" in x]
        assert len(opened) == 1 and "zombie" in opened[0], opened
        states = next(e for e in load(path)[0] if e.kind == "check" and e.text.startswith("states"))
        assert f"{child} Z" in states.text
    finally:
        stop.set()
        await asyncio.wait_for(task, 30)


def test_the_metrics_page_carries_the_time_to_free_histogram():
    times = [{"after": "sigkill", "seconds": s} for s in (3, 20, 26, 90)] + [{"after": "job", "seconds": 2}]
    text = metrics.page([], {}, 0, 0, times)
    assert 'gpu_incident_time_to_free_seconds_bucket{after="sigkill",le="30"} 3' in text
    assert 'gpu_incident_time_to_free_seconds_bucket{after="sigkill",le="+Inf"} 4' in text
    assert 'gpu_incident_time_to_free_seconds_count{after="job"} 1' in text
    assert "# TYPE gpu_incident_time_to_free_seconds histogram" in text
