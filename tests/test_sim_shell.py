"""The simulator's fake shell: probe sections in their real formats, commands, errors, time limits."""
import re

import pytest
from hypothesis import HealthCheck, given
from hypothesis import strategies as st

from tests.fuzzing import examples
from console.clock import FakeClock
from console.sim.node import SimNode
from console.sources import parse
from console import probe
from console.sources.sim import SimSource
from tests.sim_fixtures import sh  # the clock and node fixtures come from there too

#: what an operator types to list the processes (the simulator answers it as ps does)
PS = "timeout 10 ps -eo pid=,user:32=,args="



async def test_probe_script_answers_every_section_with_rc(node):
    mark = probe.new_mark()
    r = await sh(node, probe.build_script(mark))
    secs = probe.split_sections(r.stdout, mark)
    assert list(secs) == [name for name, _ in probe.sections()]
    assert all(rc == 0 for rc, _ in secs.values()), {k: v[0] for k, v in secs.items()}
    meta = secs["meta"][1].splitlines()
    assert re.fullmatch(r"\d+\.\d{9}", meta[0]) and meta[1] == "100" and meta[2].startswith("btime ")
    assert meta[3] == "demo" and meta[4] == "0" and meta[5] == "pid:[4026531836]"
    assert int(meta[6]) == node.shell_pid


async def test_stat_lines_have_52_fields_and_kernel_comm(node):
    out = (await sh(node, probe.STAT)).stdout.splitlines()
    pids = [int(ln.split(" ", 1)[0]) for ln in out]
    assert pids == sorted(pids, key=str)            # the shell's glob order, not numeric
    for ln in out:
        comm = ln[ln.index("(") + 1:ln.rindex(")")]
        assert len(comm) <= 15
        assert len(ln[ln.rindex(")") + 2:].split()) == 50     # + pid and comm = 52
    launcher = next(ln for ln in out if ln.startswith("72169 "))
    st = parse.parse_stat_line(launcher)
    assert st.comm == "python3" and st.ppid == 1 and st.num_threads == 14
    btime = node.btime
    assert abs(btime + st.start_ticks / 100 - (node.clock.now() - 92 * 60)) < 0.02


async def test_ps_format_right_aligns_pid_and_pads_user(node):
    out = (await sh(node, PS)).stdout.splitlines()
    row = next(ln for ln in out if " 72169 " in ln[:8])
    assert row == "  72169 " + "root".ljust(32) + " " + node.procs[72169].args
    assert any(ln.endswith("[kthreadd]") for ln in out)
    assert any("ps -eo pid=,user:32=,args=" in ln for ln in out)     # ps sees itself
    assert "nvidia-persistenced" in " ".join(out)


async def test_nvidia_smi_query_forms(node):
    r = await sh(node, "nvidia-smi --query-gpu=index,name,memory.used,utilization.gpu --format=csv -i 7")
    assert r.stdout == ("index, name, memory.used [MiB], utilization.gpu [%]\n"
                        "7, NVIDIA RTX PRO 6000 Blackwell Server Edition, 76069 MiB, 0 %\n")
    r = await sh(node, "nvidia-smi --query-compute-apps=pid,used_memory --format=csv,nounits")
    lines = r.stdout.splitlines()
    assert lines[0] == "pid, used_gpu_memory [MiB]" and len(lines) == 9
    r = await sh(node, "nvidia-smi --query-gpu=bogus --format=csv")
    assert r.rc == 2 and 'Field "bogus" is not a valid field to query.' in r.stdout
    lst = await sh(node, probe.LIST_GPUS)
    assert re.fullmatch(r"GPU 0: NVIDIA RTX PRO 6000 Blackwell Server Edition \(UUID: GPU-[0-9a-f-]{36}\)",
                        lst.stdout.splitlines()[0])
    table = (await sh(node, "nvidia-smi")).stdout
    assert "76109MiB /  97887MiB" in table and "sglang::scheduler_TP0" in table


@pytest.mark.parametrize("state,rc,word", [("not-loaded", 9, "driver"), ("mismatch", 18, "mismatch"),
                                           ("no-devices", 6, "no devices")])
async def test_driver_failures_use_real_texts_and_exit_codes(clock, state, rc, word):
    src = SimSource(clock=clock)
    src.node.driver_state = state
    r = await src.run(probe.QUERY_GPU)
    assert r.rc == rc
    snap = await src.poll()
    assert snap.error and word in snap.error
    assert snap.proc(72169) is not None          # /proc still answers


async def test_lost_gpu_is_reported_and_the_rest_still_listed(clock):
    src = SimSource(clock=clock)
    src.node.gpus[3].lost = True
    r = await src.run(probe.QUERY_GPU)
    assert r.rc == 15 and "Unable to determine the device handle for GPU 0000:41:00.0: GPU is lost" in r.stdout
    snap = await src.poll()
    assert len(snap.gpus) == 7 and snap.lost_gpus == ("0000:41:00.0",)


async def test_hung_nvidia_smi_is_cut_by_timeout_124(clock):
    src = SimSource(clock=clock)
    src.node.nvsmi_hang = True
    r = await src.run(f"{probe.timed(probe.QUERY_GPU)}; echo rc=$?")
    assert r.stdout == "rc=124\n" and r.rc == 0
    snap = await src.poll()
    assert snap.error and "timed out" in snap.error


async def test_unknown_command_is_127(node):
    r = await sh(node, "frobnicate --now")
    assert r.rc == 127 and r.stderr == "sh: 1: frobnicate: not found\n"
    r = await sh(node, "true\nfrobnicate")
    assert r.stderr == "sh: 2: frobnicate: not found\n"


async def test_exec_timeout_bounds_sleeps(node, clock):
    t0 = clock.now()
    r = await sh(node, "echo start; sleep 100; echo never", timeout=3)
    assert r.rc is None and r.error == "timed out after 3s" and r.stdout == "start\n"
    assert clock.now() - t0 == pytest.approx(3)
    r = await sh(node, "timeout 2 sleep 10; echo $?; timeout 5 sleep 1 && echo ok")
    assert r.stdout == "124\nok\n" and r.rc == 0


async def test_and_or_lists_redirections_and_pipes(node):
    r = await sh(node, "false && echo no || echo yes; kill -9 999999 2>&1 | grep -c 'No such'; echo $?")
    assert r.stdout == "yes\n1\n0\n"
    r = await sh(node, "kill -9 999999 2>/dev/null; echo rc=$?")
    assert r.stdout == "rc=1\n" and r.stderr == ""
    r = await sh(node, "echo $$")
    assert r.stdout == f"{node.shell_pid}\n"
    r = await sh(node, "kill -s BOGUS 1")
    assert r.rc == 2 and "invalid signal number or name: BOGUS" in r.stderr


async def test_guarded_kill_checks_start_ticks(node):
    stat = (await sh(node, "cat /proc/72169/stat")).stdout
    ticks = int(stat[stat.rindex(")") + 2:].split()[19])
    assert (await sh(node, probe.stat_starttime_command(72169))).stdout == f"{ticks}\n"
    r = await sh(node, probe.guarded_kill_command(72169, "KILL", ticks + 1))
    assert r.rc == 3 and "start time changed" in r.stderr
    assert node.proc(72169).alive
    r = await sh(node, probe.guarded_kill_command(72169, "KILL", ticks))
    assert r.rc == 0 and node.proc(72169) is None
    r = await sh(node, probe.guarded_kill_command(72169, "KILL", ticks))
    assert r.rc == 3                                # gone: the start time no longer matches


async def test_source_signal_uses_the_guard(clock):
    src = SimSource(clock=clock)
    snap = await src.poll()
    p = snap.proc(72169)
    r = await src.signal(p.pid, "SIGKILL", start_ticks=p.start_ticks + 5)
    assert r.rc == 3 and src.node.proc(72169).alive
    r = await src.signal(p.pid, "SIGKILL", start_ticks=p.start_ticks)
    assert r.rc == 0 and src.node.proc(72169) is None


async def test_proc_files_and_tools(node):
    await sh(node, "kill -9 72169")
    z = node.procs[72230]
    status = (await sh(node, "cat /proc/72230/status")).stdout
    assert "State:\tZ (zombie)" in status and "PPid:\t1" in status and "Threads:\t2" in status
    tid = z.stuck_tid
    assert (await sh(node, f"cat /proc/72230/task/{tid}/wchan")).stdout == "_nv043417rm"
    stack = (await sh(node, f"cat /proc/72230/task/{tid}/stack")).stdout
    assert "nvidia_close" in stack and stack.startswith("[<0>] _nv043417rm")
    task = (await sh(node, "ls -l /proc/72230/task")).stdout.splitlines()
    assert task[0] == "total 0" and [ln.split()[-1] for ln in task[1:]] == ["72230", str(tid)]
    assert (await sh(node, "cat /proc/99999/stat")).stderr == "cat: /proc/99999/stat: No such file or directory\n"


async def test_fuser_table_on_stderr_pids_on_stdout(node):
    r = await sh(node, "fuser -v /dev/nvidia3")
    assert r.rc == 0
    assert sorted(int(x) for x in r.stdout.split()) == [1563, 72230, 72294, 72358, 72422, 72486, 72550, 72614, 72678]
    assert r.stderr.splitlines()[0].split() == ["USER", "PID", "ACCESS", "COMMAND"]
    assert "/dev/nvidia3:" in r.stderr and "nvidia-persiste" in r.stderr
    assert (await sh(node, "fuser /dev/nvidia9")).stderr == "Specified filename /dev/nvidia9 does not exist.\n"


async def test_systemctl_and_persistence(node):
    assert (await sh(node, "systemctl is-active nvidia-persistenced")).stdout == "active\n"
    r = await sh(node, "systemctl stop nvidia-fabricmanager")
    assert r.rc == 5 and "not loaded" in r.stderr
    await sh(node, "systemctl stop nvidia-persistenced")
    pm = await sh(node, "nvidia-smi --query-gpu=persistence_mode --format=csv,noheader")
    assert pm.stdout == "Disabled\n" * 8
    await sh(node, "systemctl start nvidia-persistenced")
    assert (await sh(node, "systemctl is-active nvidia-persistenced")).rc == 0
    assert "Enabled" in (await sh(node, "nvidia-smi --query-gpu=persistence_mode --format=csv,noheader -i 0")).stdout


async def test_commands_are_recorded_with_their_time(node, clock):
    await sh(node, "sleep 1")
    await sh(node, "echo hi")
    assert [c for _, c in node.history] == ["sleep 1", "echo hi"]
    assert node.history[1][0] - node.history[0][0] == pytest.approx(1)


WORDS = ["kill", "-9", "-s", "TERM", "72169", "nvidia-smi", "-r", "-i", "3", "--query-gpu=index,memory.used",
         "--format=csv", "ps", "-eo", "pid=,args=", "fuser", "-k", "/dev/nvidia*", "cat", "/proc/[0-9]*/stat",
         "sleep", "0.5", "timeout", "1", "pkill", "-f", "sglang", "systemctl", "stop", "ss", "-ltnp", "dmesg",
         "|", "||", "&&", ";", "2>&1", ">/dev/null", "'", '"', "$(", ")", "$?", "${x%/*}", "grep", "head",
         "-n", "echo", "ls", "-l", "/proc/72230/task", "sed", "s/a/b/", "cut", "-d", "-f2", "$$", "\\", "#"]


@given(st.lists(st.sampled_from(WORDS), max_size=12) | st.text(max_size=80))
@examples(300, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_any_command_line_gives_a_result_never_an_exception(words):
    import asyncio
    node = SimNode("seed", clock=FakeClock())
    line = " ".join(words) if isinstance(words, list) else words
    r = asyncio.run(node.exec(line, 5))
    assert r.rc is None or isinstance(r.rc, int)
    assert isinstance(r.stdout, str) and isinstance(r.stderr, str)


async def test_shell_source_refuses_a_signal_without_a_start_time():
    from console.clock import FakeClock
    from console.sources.sim import SimSource
    src = SimSource(scenario="graceful", clock=FakeClock())
    snap = await src.poll()
    target = next(p for p in snap.processes if p.gpu_memory_mib)
    res = await src.signal(target.pid, "TERM")
    assert res.rc == 3 and "PID-reuse guard" in res.stderr
    after = await src.poll()
    assert after.proc(target.pid).state == target.state and after.gpus == snap.gpus
    res = await src.signal(1, "KILL", start_ticks=1)
    assert res.rc == 3 and "init" in res.stderr
