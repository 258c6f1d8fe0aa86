"""LocalSource's view of real processes: children, zombies, device holders, D threads, dmesg."""
from __future__ import annotations

import json
import os
import pwd
import shutil
import statistics
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest
from hypothesis import given, strategies as st

from tests.fuzzing import examples
from console.clock import FakeClock
from console.sources.local.source import DMESG_DENIED, LocalSource, ProcScanner
from console.sources.parse import parse_stat_line
from fake_pynvml import FakeNvml, eight_gpus

PY = sys.executable
ROOT = Path(__file__).resolve().parent.parent


def source(**kw) -> LocalSource:
    kw.setdefault("dmesg_command", ("true",))
    kw.setdefault("nvml_module", FakeNvml(eight_gpus()[:1]))
    return LocalSource("local", **kw)


def spawn(code: str, *args: str) -> subprocess.Popen:
    """A python child that prints 'ready ...' once set up."""
    p = subprocess.Popen([PY, "-c", textwrap.dedent(code), *args], stdout=subprocess.PIPE,
                         text=True)
    line = p.stdout.readline()
    assert line.startswith("ready"), line
    p.ready_line = line.split()[1:]
    return p


@pytest.fixture
def children():
    procs: list[subprocess.Popen] = []
    yield procs
    for p in procs:
        if p.poll() is None:
            p.kill()
        p.wait()


async def test_child_appears_with_ppid_cmdline_and_identity(children):
    p = spawn("import time; print('ready', flush=True); time.sleep(60)", "--marker-4711")
    children.append(p)
    snap = await source().poll()
    me = snap.proc(p.pid)
    assert me is not None
    assert me.ppid == os.getpid()
    assert me.cmdline == f"{PY} -c import time; print('ready', flush=True); time.sleep(60) --marker-4711"
    assert me.state == "S"
    assert me.user == pwd.getpwuid(os.geteuid()).pw_name
    assert me.create_time == psutil.Process(p.pid).create_time()
    field22 = Path(f"/proc/{p.pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
    assert me.start_ticks == int(field22)
    assert me.num_threads == 1 and me.d_threads == () and not me.holds_devices
    # the console and its ancestors, never pid 1
    assert snap.own_pids[0] == os.getpid() and os.getppid() in snap.own_pids
    assert 1 not in snap.own_pids and p.pid not in snap.own_pids


async def test_real_zombie_shows_state_z(children):
    parent = spawn("""
        import os, time
        pid = os.fork()
        if pid == 0:
            os._exit(0)
        print('ready', pid, flush=True)
        time.sleep(60)      # never reaps
    """)
    children.append(parent)
    zpid = int(parent.ready_line[0])
    for _ in range(100):
        if Path(f"/proc/{zpid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z":
            break
        time.sleep(0.01)
    snap = await source().poll()
    z = snap.proc(zpid)
    assert z is not None and z.state == "Z"
    assert z.ppid == parent.pid
    assert z.cmdline == "" and z.name            # no argv left, comm still there
    assert snap.proc(parent.pid).state == "S"


async def test_zombie_leader_with_a_live_thread(children):
    # the leader thread exits (pthread_exit), another thread keeps running:
    # ps shows Z, yet the process is alive and can hold memory
    p = spawn("""
        import ctypes, threading, time
        threading.Thread(target=time.sleep, args=(60,)).start()
        print('ready', flush=True)
        ctypes.CDLL(None).pthread_exit(None)
    """)
    children.append(p)
    for _ in range(100):
        if Path(f"/proc/{p.pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z":
            break
        time.sleep(0.01)
    snap = await source().poll()
    z = snap.proc(p.pid)
    assert z.state == "Z" and z.num_threads == 2
    assert z.d_threads == ()            # its live thread sleeps (S), not D


def test_d_threads_read_from_task_stat(tmp_path):
    """D threads come from /proc/PID/task/*/stat, not from the leader's state alone."""
    proc = tmp_path / "proc"
    (proc).mkdir()
    (proc / "stat").write_text("cpu 1 2 3\nbtime 1764400000\n")
    rest = " ".join(["0"] * 13) + " 20 0 3 0 123456 "   # fields 5-17, 18-22 + " ".join(["0"] * 30)

    def stat(pid: int, comm: str, state: str, ppid: int) -> str:
        return f"{pid} ({comm}) {state} {ppid} {rest}\n"

    leader = proc / "72170"
    (leader / "task" / "72170").mkdir(parents=True)
    (leader / "task" / "72171").mkdir()
    (leader / "task" / "72172").mkdir()
    (leader / "stat").write_text(stat(72170, "VLLM::EngineCor", "Z", 1))
    (leader / "cmdline").write_bytes(b"")
    (leader / "status").write_text("Name:\tx\nUid:\t0\t0\t0\t0\n")
    (leader / "fd").mkdir()
    (leader / "task" / "72170" / "stat").write_text(stat(72170, "VLLM::EngineCor", "Z", 1))
    (leader / "task" / "72171" / "stat").write_text(stat(72171, "cuda-EvtHandlr", "D", 1))
    (leader / "task" / "72171" / "wchan").write_text("uvm_gpu_wait")
    (leader / "task" / "72172" / "stat").write_text(stat(72172, "python3", "S", 1))
    scan = ProcScanner("/dev/nvidia*", proc=str(proc)).scan(own_pid=72170)
    [p] = scan.processes
    assert (p.pid, p.state, p.name, p.num_threads, p.start_ticks) == (
        72170, "Z", "VLLM::EngineCor", 3, 123456)
    assert p.create_time == 1764400000 + 123456 / os.sysconf("SC_CLK_TCK")
    assert [(t.tid, t.state, t.wchan, t.name) for t in p.d_threads] == [
        (72171, "D", "uvm_gpu_wait", "cuda-EvtHandlr")]
    assert p.threads_in_d == 1 and p.user == "root"


async def test_open_device_files_under_a_custom_glob(tmp_path, children):
    for name in ("nvidia0", "nvidiactl", "nvidia-uvm", "other.txt"):
        (tmp_path / name).write_text("")
    p = spawn("""
        import sys, time
        fds = [open(f, 'rb') for f in sys.argv[1:]]
        print('ready', flush=True)
        time.sleep(60)
    """, str(tmp_path / "nvidia0"), str(tmp_path / "nvidiactl"), str(tmp_path / "other.txt"))
    children.append(p)
    bystander = spawn("import time; print('ready', flush=True); time.sleep(60)")
    children.append(bystander)
    snap = await source(device_glob=f"{tmp_path}/nvidia*").poll()
    holder = snap.proc(p.pid)
    assert sorted(holder.device_files) == [f"{tmp_path}/nvidia0", f"{tmp_path}/nvidiactl"]
    assert holder.holds_devices and holder.is_gpu_holder
    assert holder.pid_ns == os.readlink(f"/proc/{p.pid}/ns/pid")
    assert not snap.proc(bystander.pid).holds_devices
    assert [h.pid for h in snap.holders] == [p.pid]


async def test_driver_memory_lands_on_the_real_process(children):
    p = spawn("import time; print('ready', flush=True); time.sleep(60)")
    children.append(p)
    gpus = eight_gpus()[:2]
    gpus[1].compute = [(p.pid, 75800 * 1024 * 1024)]
    snap = await source(nvml_module=FakeNvml(gpus)).poll()
    assert dict(snap.proc(p.pid).gpu_memory_mib) == {"1": 75800}
    assert snap.proc(p.pid).is_gpu_holder


async def test_xid_lines_from_dmesg_cached_for_30s(tmp_path):
    counter = tmp_path / "calls"
    script = (f"echo x >> {counter}; "
              "echo '[ 12.5] usb 1-1: new device'; "
              "echo '[ 99.1] NVRM: Xid (PCI:0000:18:00): 79, pid=72170, GPU has fallen off the bus.'; "
              "echo '[ 99.2] NVRM: Xid (PCI:0000:18:00): 119, Timeout waiting for RPC'")
    clock = FakeClock(1000.0)
    src = source(dmesg_command=("sh", "-c", script), clock=clock)
    snap = await src.poll()
    assert snap.kernel_log == (
        "[ 99.1] NVRM: Xid (PCI:0000:18:00): 79, pid=72170, GPU has fallen off the bus.",
        "[ 99.2] NVRM: Xid (PCI:0000:18:00): 119, Timeout waiting for RPC")
    clock.advance(29)
    assert (await src.poll()).kernel_log == snap.kernel_log
    assert counter.read_text().count("x") == 1
    clock.advance(2)
    await src.poll()
    assert counter.read_text().count("x") == 2


def _nobody_can_run_here() -> bool:
    return os.geteuid() == 0 and shutil.which("setpriv") is not None


@pytest.mark.skipif(not _nobody_can_run_here(), reason="needs root and setpriv")
async def test_dmesg_not_permitted_is_one_warning():
    restrict = Path("/proc/sys/kernel/dmesg_restrict")
    if not restrict.exists() or restrict.read_text().strip() != "1":
        pytest.skip("dmesg is readable by everyone here")
    src = source(dmesg_command=("setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                                "dmesg"))
    snap = await src.poll()
    assert snap.warnings.count(DMESG_DENIED) == 1
    assert snap.kernel_log == () and snap.error is None and snap.processes


@pytest.mark.skipif(not _nobody_can_run_here(), reason="needs root and setpriv")
def test_unprivileged_scan_warns_about_unreadable_fds(tmp_path, children):
    """As nobody, root's fd tables cannot be read: one warning, no crash, processes still listed."""
    holder = spawn("import time; print('ready', flush=True); time.sleep(60)")
    children.append(holder)
    code = textwrap.dedent(f"""
        import asyncio, json, sys
        sys.path.insert(0, {str(ROOT)!r})
        from console.sources.local.source import LocalSource
        class NoNvml: pass
        async def main():
            snap = await LocalSource(nvml_module=None, dmesg_command=("dmesg",)).poll()
            print(json.dumps({{"warnings": snap.warnings, "n": len(snap.processes),
                              "root_pid": snap.proc({holder.pid}) is not None}}))
        asyncio.run(main())
    """)
    out = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                          PY, "-c", code], capture_output=True, text=True, timeout=30,
                         cwd="/")
    if out.returncode != 0 and "Permission denied" in out.stderr:
        pytest.skip("the checkout is not readable by nobody")
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout)
    fd_warnings = [w for w in got["warnings"] if "open files" in w]
    assert len(fd_warnings) == 1 and "permission denied" in fd_warnings[0]
    assert got["root_pid"] and got["n"] > 3


async def test_poll_cost_with_300_processes(children):
    """One poll a second must stay cheap: well under 100 ms with ~300 processes."""
    # others' processes come and go meanwhile (a busy CI machine's other test worker): at least
    # 250 of the ~300 are this test's own
    need = max(250, 320 - len(psutil.pids()))
    sleepers = [subprocess.Popen(["sleep", "60"]) for _ in range(need)]
    children.extend(sleepers)
    src = source(nvml_module=FakeNvml(eight_gpus()))
    await src.poll()
    times = []
    for _ in range(5):
        t0 = time.perf_counter()
        snap = await src.poll()
        times.append((time.perf_counter() - t0) * 1000)
    assert all(snap.proc(s.pid) is not None for s in sleepers)
    assert len(snap.processes) >= len(sleepers) + 20, "and the machine's own (60 or more here)"
    median = statistics.median(times)
    print(f"poll with {len(snap.processes)} processes: median {median:.1f} ms (bench: local_probe)")


@examples(300)
@given(st.text(max_size=200) | st.builds(
    lambda pid, comm, state, ppid, tail: f"{pid} ({comm}) {state} {ppid} {tail}",
    st.integers(0, 2**22), st.text(max_size=20), st.text(max_size=2), st.text(max_size=8),
    st.text(max_size=120)))
def test_parse_stat_never_raises(text):
    got = parse_stat_line(text)
    assert got is None or isinstance(got.ppid, int)


def test_parse_stat_comm_with_spaces_and_parens():
    rest = " ".join(["0"] * 13) + " 20 0 7 0 4242 0"
    got = parse_stat_line(f"72170 (sglang::sch (TP0) x) D 9 {rest}")
    comm, state, ppid, threads, start = got.comm, got.state, got.ppid, got.num_threads, got.start_ticks
    assert (comm, state, ppid, threads, start) == ("sglang::sch (TP0) x", "D", 9, 7, 4242)
