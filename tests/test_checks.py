"""Checks: every check fed real-format output (canned, or a real shell on real processes)."""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.fuzzing import examples
from console.checks import parse as cp
from console.checks.registry import CHECKS, CheckResult, render, run_check
from console.model import CommandResult
from console.sources.cgroup import parse_cgroup
from test_diagnose_builders import RealShell, seed_stuck, snap

SEED_READ = "\n".join(f"{i}, {u} MiB" for i, u in enumerate((76109, 76113, 76113, 76113, 76113, 76113, 76113, 76069)))


def asleep(pid: int) -> int:
    """Wait (briefly) until a freshly started child is asleep, so its wchan is set."""
    import time
    for _ in range(200):
        with open(f"/proc/{pid}/wchan") as fh:
            if fh.read().strip() not in ("", "0"):
                return pid
        time.sleep(0.01)
    return pid


class Canned:
    """A node that answers every command with one canned output (and records the command)."""
    name = "gpu-node-17"

    def __init__(self, stdout: str = "", stderr: str = "", rc: int | None = 0, error: str | None = None):
        self.out, self.err, self.rc, self.error = stdout, stderr, rc, error
        self.commands: list[tuple[str, float]] = []

    async def run(self, command, timeout=30.0):
        self.commands.append((command, timeout))
        return CommandResult(command=command, rc=self.rc, stdout=self.out, stderr=self.err, error=self.error)


def test_registry_lists_every_check_with_description_and_parameters():
    assert set(CHECKS) == {"wait-and-reread", "holders", "states", "kernel-log", "blockers", "port", "stack", "smi-report",
                           "mps-clients"}
    for c in CHECKS.values():
        assert c.description and all(p.help for p in c.params)


# ---------------------------------------------------------------- wait-and-reread

class Reads:
    """A node whose memory reads come from a list, one per command (the last repeats), on a
    fake clock; records when each command ran."""
    name = "gpu-node-17"

    def __init__(self, *outputs: str | tuple[str, int | None, str | None]):
        from console.clock import FakeClock
        self.clock = FakeClock()
        self.outputs = [o if isinstance(o, tuple) else (o, 0, None) for o in outputs]
        self.commands: list[tuple[str, float, float]] = []

    async def run(self, command, timeout=30.0):
        out, rc, error = self.outputs[min(len(self.commands), len(self.outputs) - 1)]
        self.commands.append((command, timeout, self.clock.now()))
        return CommandResult(command=command, rc=rc, stdout=out, error=error)


QUERY = "nvidia-smi --query-gpu=index,memory.used --format=csv,noheader"
EIGHT_FREE = "\n".join(f"{i}, 4 MiB" for i in range(8))


async def test_wait_and_reread_seed_nothing_came_back():
    node = Reads(SEED_READ + "\n")
    r = await run_check(node, "wait-and-reread", seconds=5)
    assert isinstance(r, CheckResult) and r.node == "gpu-node-17" and r.rc == 0
    assert r.command == f"{QUERY}  # every 1 s for up to 5 s, until memory is back"
    assert [c[0] for c in node.commands] == [QUERY] * 6             # now, then every second
    assert [round(c[2] - node.commands[0][2]) for c in node.commands] == [0, 1, 2, 3, 4, 5]
    assert r.summary.startswith("no memory came back within 5 s: GPUs 0-7 still hold 594.6 GiB")
    assert "GPU 0: 76109 MiB" in r.summary
    assert r.data["before"]["7"] == 76069 and r.data["freed_total_mib"] == 0
    assert r.data["before_from"] == "command"


async def test_wait_and_reread_measures_the_moment_and_ends_early():
    """The seed after SIGKILL: memory comes back 55 s into an 86 s wait; the check says so and
    stops reading there, and says how it got on at every read."""
    node = Reads(*([SEED_READ] * 11), EIGHT_FREE)           # held at 0, 5, ... 50 s; back at 55 s
    seen = []
    r = await run_check(node, "wait-and-reread", seconds=86, progress=seen.append)
    assert r.summary.startswith("memory came back ~55 s in (not yet at 50 s): 594.6 GiB freed on GPUs 0-7")
    assert len(node.commands) == 12 and r.data["back_s"] == 55 and r.data["waited_s"] == 55
    assert [p.elapsed_s for p in seen] == [5.0 * i for i in range(12)]
    assert seen[3].text == "wait-and-reread: 15 of 86 s, nothing back yet (594.6 GiB used)"
    assert seen[-1].text.startswith("wait-and-reread: 55 of 86 s, 594.6 GiB back so far")


async def test_wait_and_reread_memory_coming_back():
    after = "\n".join(f"{i}, {u} MiB" for i, u in enumerate((4, 4, 4, 76113, 76113, 76113, 76113, 76069)))
    r = await run_check(Reads(SEED_READ, SEED_READ, SEED_READ, after), "wait-and-reread", seconds=10)
    assert r.summary.startswith("memory came back from ~3 s in, still coming within 10 s: "
                                "223.0 GiB freed on GPUs 0-2")
    assert r.data["freed_mib"]["0"] == 76105


async def test_wait_and_reread_falls_back_to_the_snapshot_when_the_first_read_failed():
    r = await run_check(Reads("Unable to determine the device handle for GPU0000:18:00.0: Unknown Error", SEED_READ),
                        "wait-and-reread", seed_stuck(), seconds=5)
    assert r.data["before_from"] == "snapshot" and r.data["freed_total_mib"] == 0


async def test_wait_and_reread_driver_gone():
    out = ("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure that the "
           "latest NVIDIA driver is installed and running.\n")
    r = await run_check(Reads((out, 9, None)), "wait-and-reread")
    assert r.summary.startswith("nvidia-smi failed: NVIDIA driver not loaded") and r.rc == 9


async def test_a_check_that_did_not_finish_says_so():
    r = await run_check(Reads(("", None, "timed out after 25 s")), "wait-and-reread")
    assert r.rc is None and r.summary == "wait-and-reread did not finish: timed out after 25 s"


def test_bad_parameters_are_one_clear_error():
    with pytest.raises(ValueError, match="seconds must be a whole number"):
        render("wait-and-reread", seconds="soon")
    with pytest.raises(ValueError, match="pids is required"):
        render("states")
    with pytest.raises(ValueError, match="out of range"):
        render("port", port=70000)
    with pytest.raises(ValueError, match="unknown check"):
        render("nope")
    with pytest.raises(ValueError, match="unknown parameter"):
        render("port", prot=1)
    assert render("states", pids="72170, 72171") == render("states", pids=[72170, 72171])


# ---------------------------------------------------------------- read-only by construction

HOSTILE = ("5; reboot", "$(reboot)", "`reboot`", "5\nreboot", "1 2 | sh -c reboot", "5 && reboot", "-1",
           "5.5", "0x10", "٣", True, "/dev/nvidia*; reboot", "/dev/nvidia* $(reboot)", "/dev/'x'", "nvidia*\n")


@pytest.mark.parametrize("name", sorted(CHECKS))
def test_no_parameter_of_a_built_in_check_brings_text_to_the_shell(name):
    """Every parameter is a validated whole number, PID list, fixed word or device pattern:
    a hostile value is refused with one clear line, never put into the command."""
    check = CHECKS[name]
    base = {"states": {"pids": [72170]}, "stack": {"pid": 72170}}.get(name, {})
    for p in check.params:
        for value in HOSTILE:
            try:
                command = render(name, **{**base, p.name: value})
            except ValueError as exc:
                assert "\n" not in str(exc) and name in str(exc)
                continue
            assert "reboot" not in command, (p.name, value, command)
            assert command.count("\n") == render(name, **base).count("\n"), (p.name, value)


@examples(200)
@given(st.sampled_from(sorted(CHECKS)).flatmap(lambda name: st.tuples(
    st.just(name), st.dictionaries(st.sampled_from([p.name for p in CHECKS[name].params] or ["none"]),
                                   st.text(max_size=30) | st.integers(-10, 10**7), max_size=3))))
def test_validated_parameters_are_only_numbers_pids_fixed_words_or_device_patterns(case):
    from console.checks.registry import GLOB_RE, _args
    name, params = case
    check = CHECKS[name]
    try:
        args = _args(check, params)
    except ValueError:
        return
    for p in check.params:
        value = args[p.name]
        if p.kind == "int":
            assert type(value) is int and p.low <= value <= p.high
        elif p.kind == "pids":
            assert value and all(type(v) is int and v >= 1 for v in value)
        elif p.kind == "choice":
            assert value in p.choices
        else:
            assert p.kind == "glob" and GLOB_RE.fullmatch(value)


# ---------------------------------------------------------------- holders

M = "::gi-check::"
HOLDERS_OUT = f"""{M} begin gpu
0, GPU-5a1c7e0b-3f0d-4c2e-9b1a-000000000000, NVIDIA RTX PRO 6000 Blackwell Server Edition, 00000000:18:00.0, 76109, 97887, 0, Enabled, [N/A]
1, GPU-5a1c7e0b-3f0d-4c2e-9b1a-000000000001, NVIDIA RTX PRO 6000 Blackwell Server Edition, 00000000:28:00.0, 76113, 97887, 0, Enabled, [N/A]
{M} end gpu 0
{M} begin apps
72170, GPU-5a1c7e0b-3f0d-4c2e-9b1a-000000000000, 76105, sglang::scheduler_TP0
41, GPU-5a1c7e0b-3f0d-4c2e-9b1a-000000000001, 76109, python3
{M} end apps 0
{M} begin pids
last 88102
1 72170 81234 88001
{M} end pids 0
{M} begin args
/proc/1/cmdline:/sbin/init\0/proc/72170/cmdline:sglang::scheduler_TP0\0/proc/81234/cmdline:python3\0\
/proc/81234/cmdline:eval.py\0/proc/88001/cmdline:python3\0/proc/88001/cmdline:serve.py\0{M} end args 0
{M} begin uids
/proc/1/status:Uid:	0	0	0	0
/proc/72170/status:Uid:	0	0	0	0
/proc/81234/status:Uid:	1000	1000	1000	1000
/proc/88001/status:Uid:	0	0	0	0
{M} end uids 0
{M} begin users
root:x:0:0:root:/root:/bin/bash
alice:x:1000:1000::/home/alice:/bin/bash
{M} end users 0
{M} begin fds
/proc/72170/fd /dev/nvidia0\0/proc/72170/fd /dev/nvidiactl\0/proc/72170/fd /dev/nvidia-uvm\0\
/proc/81234/fd /dev/nvidia3\0/proc/81234/fd /dev/nvidia-uvm\0/proc/88001/fd /dev/nvidia1\0{M} end fds 0
{M} begin pidns
72170 pid:[4026531836]
81234 pid:[4026531836]
88001 pid:[4026532890]
{M} end pidns 0
{M} begin cgroup
72170 0::/user.slice/user-0.slice/session-4.scope\0\
88001 12:devices:/docker/4f2a0c1e9b7d5e3a1c2b4d6f8e0a5e3a1c2b4d6f8e0a5e3a1c2b4d6f8e0a1b2c\n0::/\0{M} end cgroup 0
"""


async def test_holders_finds_hidden_and_foreign_pids():
    r = await run_check(Canned(HOLDERS_OUT), "holders")
    lines = dict((ln.split("begin ")[1].split("'")[0], ln) for ln in r.command.splitlines())
    assert list(lines) == ["pids", "fds", "pidns", "cgroup", "users", "args", "uids", "gpu", "apps"]   # probe order
    # every process's fds: the whole listing the pids section made (gi_k=whole: /proc listed)
    assert "gi_k=whole" in lines["pids"] and "set -- [0-9]*" in lines["pids"]
    assert "set -- $(printf '/proc/%s/fd ' $gi_p)" in lines["fds"]
    assert "-lname '/dev/nvidia*' -printf '%h %l\\0'" in lines["fds"]
    assert "nvidia-smi --query-compute-apps=pid,gpu_uuid,used_memory,process_name" in lines["apps"]
    assert r.data["hidden"] == [81234, 88001]
    assert r.data["foreign"] == [41]
    assert r.data["driver"][0] == {"pid": 72170, "gpu": 0, "gpu_uuid": "GPU-5a1c7e0b-3f0d-4c2e-9b1a-000000000000",
                                   "mib": 76105, "name": "sglang::scheduler_TP0"}
    assert r.data["holders"]["88001"]["pid_ns"] == "pid:[4026532890]"
    assert r.data["holders"]["81234"]["user"] == "alice"
    assert r.data["holders"]["88001"]["container"] == "container 4f2a0c1e9b7d… (docker)"
    assert r.data["holders"]["72170"]["container"] == "" and r.data["holders"]["81234"]["container"] is None
    assert "not listed by the driver: 81234, 88001" in r.summary
    assert "absent from /proc (another PID namespace): 41" in r.summary


async def test_holders_on_a_real_shell_with_a_device_glob(tmp_path):
    dev = tmp_path / "nvidia0"
    dev.write_text("")
    holder = subprocess.Popen(["sleep", "30"], stdin=open(dev))
    try:
        r = await run_check(RealShell(), "holders", device_glob=str(tmp_path / "nvidia*"))
        assert str(holder.pid) in r.data["holders"]
        assert r.data["holders"][str(holder.pid)]["files"] == [str(dev)]
        assert holder.pid in r.data["hidden"]                 # no nvidia-smi here: the driver lists nobody
        with open(f"/proc/{holder.pid}/cgroup") as fh:        # the pidns section's holders reach the cgroup one
            assert r.data["holders"][str(holder.pid)]["container"] == parse_cgroup(fh.read()).describe()
    finally:
        holder.kill()
        holder.wait()


# ---------------------------------------------------------------- states

STAT_Z = ("72170 (sglang::schedul) Z 1 72169 72169 0 -1 4228108 0 0 0 0 0 0 0 0 20 0 2 0 1000000 0 0 "
          "18446744073709551615 0 0 0 0 0 0 0 0 0 17 3 0 0 0 0 0")
STAT_D = ("72210 (cuda-EvtHandlr) D 1 72169 72169 0 -1 4228160 0 0 0 0 0 0 0 0 20 0 2 0 1000000 0 0 "
          "18446744073709551615 0 0 0 0 0 0 0 0 0 17 3 0 0 0 0 0")
STATES_OUT = (f"/proc/72170/task/72170/stat:{STAT_Z}\n/proc/72170/task/72210/stat:{STAT_D}\n"
              "/proc/72170/task/72170/wchan:0\n/proc/72170/task/72210/wchan:uvm_va_space_destroy\n")


async def test_states_reports_d_threads_and_gone_pids():
    r = await run_check(Canned(STATES_OUT), "states", pids=[72170, 999999])
    assert r.command == ("grep -s . /proc/72170/task/*/stat /proc/72170/task/*/wchan "
                         "/proc/999999/task/*/stat /proc/999999/task/*/wchan")
    assert r.summary == "72170 Z (1 in D at uvm_va_space_destroy); 999999 gone"
    p = r.data["processes"]["72170"]
    assert p["states"] == {"Z": 1, "D": 1} and p["d_threads"][0]["tid"] == 72210


async def test_states_on_real_processes():
    child = subprocess.Popen(["sleep", "30"])
    try:
        r = await run_check(RealShell(), "states", pids=[asleep(child.pid), 4_000_000])
        p = r.data["processes"][str(child.pid)]
        assert p["state"] == "S" and p["threads"][0]["wchan"] == "hrtimer_nanosleep"
        assert r.summary == f"{child.pid} S; 4000000 gone"
    finally:
        child.kill()
        child.wait()


# ---------------------------------------------------------------- kernel log

KLOG = """[ 8123.456789] NVRM: Xid (PCI:0000:48:00): 119, pid=72173, name=sglang::schedul, Timeout after 6s of waiting for RPC response from GPU3 GSP! Expected function 76 (GSP_RM_CONTROL) (0x20800a4c 0x4).
[ 8123.456901] NVRM: GPU3 GSP RPC buffer contains function 76 (GSP_RM_CONTROL) and data 0x0000000020800a4c 0x0000000000000004.
[ 8124.000001] NVRM: Xid (PCI:0000:48:00): 154, GPU recovery action changed from 0x0 (None) to 0x1 (GPU Reset Required)
"""


async def test_kernel_log_explains_each_xid():
    r = await run_check(Canned(KLOG), "kernel-log", snap())
    assert r.command == ("dmesg 2>&1 | grep -E 'NVRM|^dmesg:|^No journal|ermission|not permitted|not found|not seeing' "
                         "| tail -n 50")
    assert r.summary == "Xid 119, 154; latest: Xid 154 on GPU 3 (recovery action: GPU Reset Required)"
    x119, x154 = r.data["xids"]
    assert x119["gpu"] == 3 and x119["pid"] == 72173 and "GSP" in x119["title"] and x119["action"] == "reset"
    assert x154["recovery"] == "GPU Reset Required" and x154["severity"] == "critical"
    assert len(r.data["nvrm"]) == 1
    j = render("kernel-log", reader="journalctl", lines=200)
    assert j.startswith("journalctl -k --no-pager 2>&1 |") and j.endswith("tail -n 200")


async def test_kernel_log_permission_denied_is_reported_clearly():
    r = await run_check(Canned("dmesg: read kernel buffer failed: Operation not permitted\n"), "kernel-log")
    assert r.data["permission_denied"] is True
    assert r.summary.startswith("dmesg not permitted: run as root")


@pytest.mark.skipif(os.geteuid() != 0 or not os.path.exists("/usr/bin/setpriv"), reason="needs root to drop privileges")
async def test_kernel_log_as_an_unprivileged_user_for_real():
    class Nobody(RealShell):
        async def run(self, command, timeout=30.0):
            import shlex
            return await super().run("setpriv --reuid=65534 --regid=65534 --clear-groups sh -c "
                                     + shlex.quote(command), timeout)
    restricted = open("/proc/sys/kernel/dmesg_restrict").read().strip() == "1"
    r = await run_check(Nobody(), "kernel-log")
    if restricted:
        assert r.data["permission_denied"] and "not permitted" in r.summary
    else:
        assert not r.data["permission_denied"]


async def test_kernel_log_without_xids():
    r = await run_check(Canned(""), "kernel-log")
    assert r.summary == "no NVRM line in the kernel log" and r.data["xids"] == []
    r = await run_check(Canned("No journal files were found.\n"), "kernel-log", reader="journalctl")
    assert r.summary == "kernel log unreadable: No journal files were found."


# ---------------------------------------------------------------- blockers

BLOCKERS_OUT = """0, Enabled
1, Enabled
2, Disabled
::ps::
      1 /sbin/init
   1400 /usr/bin/nvidia-persistenced --user nvidia-persistenced --persistence-mode --verbose
   1500 /usr/bin/nv-hostengine -n --service-account nvidia-dcgm
   2200 nvidia-cuda-mps-control -d
  72169 python3 -m sglang.launch_server --port 8000
::units::
active
inactive
inactive
inactive
active
"""


async def test_blockers_lists_persistence_and_daemons():
    r = await run_check(Canned(BLOCKERS_OUT), "blockers")
    assert r.data["persistence_on"] == [0, 1]
    assert [d["program"] for d in r.data["daemons"]] == ["nvidia-persistenced", "nv-hostengine",
                                                        "nvidia-cuda-mps-control"]
    assert r.data["units"] == {"nvidia-persistenced": "active", "nvidia-dcgm": "active",
                               "nvidia-fabricmanager": "inactive", "nvsm": "inactive", "nvidia-imex": "inactive"}
    assert r.summary == ("reset blockers: persistence mode on GPUs 0-1, nvidia-persistenced (PID 1400), "
                         "nv-hostengine (PID 1500), nvidia-cuda-mps-control (PID 2200)")


async def test_blockers_none_and_no_systemd():
    out = ("0, Disabled\n::ps::\n 1 /sbin/init\n::units::\nSystem has not been booted with systemd as init system "
           "(PID 1). Can't operate.\nFailed to connect to bus: Host is down\n")
    r = await run_check(Canned(out), "blockers")
    assert r.summary.startswith("no reset blocker") and r.data["systemd"] is False


# ---------------------------------------------------------------- port

SS_OUT = """State  Recv-Q Send-Q Local Address:Port  Peer Address:PortProcess
LISTEN 0      128          0.0.0.0:22         0.0.0.0:*    users:(("sshd",pid=812,fd=3))
LISTEN 0      4096       127.0.0.1:30000      0.0.0.0:*    users:(("python3",pid=72169,fd=41))
LISTEN 0      128             [::]:22            [::]:*    users:(("sshd",pid=812,fd=4))
"""


async def test_port_seed_server_never_listened_on_8000():
    r = await run_check(Canned(SS_OUT), "port", port=8000)
    assert r.command == "ss -ltnp 2>&1"
    assert r.summary == "nothing listens on TCP port 8000"
    r = await run_check(Canned(SS_OUT), "port", port=30000)
    assert r.summary == "TCP port 30000 is listening: python3 (PID 72169) on 127.0.0.1"
    r = await run_check(Canned(SS_OUT), "port", port=22)
    assert r.data["listeners"][1]["address"] == "[::]"


async def test_port_on_a_real_listener():
    code = ("import socket,sys,time; s=socket.socket(); s.bind(('127.0.0.1',0)); s.listen(); "
            "print(s.getsockname()[1], flush=True); time.sleep(30)")
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        port = int(child.stdout.readline())
        r = await run_check(RealShell(), "port", port=port)
        assert r.data["listeners"][0]["processes"][0]["pid"] == child.pid
        assert f"(PID {child.pid}) on 127.0.0.1" in r.summary
        with socket.socket() as free:
            free.bind(("127.0.0.1", 0))
            unused = free.getsockname()[1]
        r = await run_check(RealShell(), "port", port=unused)
        assert r.summary == f"nothing listens on TCP port {unused}"
    finally:
        child.kill()
        child.wait()


# ---------------------------------------------------------------- stack

STACK_OUT = """uvm_va_space_destroy
::stack::
[<0>] uvm_va_space_destroy+0x1a3/0x5b0 [nvidia_uvm]
[<0>] uvm_release+0x33/0x60 [nvidia_uvm]
[<0>] __fput+0xff/0x2d0
[<0>] do_exit+0x2f1/0xaf0
::py-spy::
py-spy not installed
"""


async def test_stack_in_the_driver():
    r = await run_check(Canned(STACK_OUT), "stack", pid=72170, tid=72210)
    assert r.summary == ("PID 72170 thread 72210 waits in uvm_va_space_destroy; kernel stack: 4 frames, top "
                         "uvm_va_space_destroy [nvidia_uvm]; py-spy not installed")
    assert "cat /proc/72170/task/72210/stack" in r.command and "py-spy dump --pid 72170" in r.command


async def test_stack_of_a_real_sleeper():
    child = subprocess.Popen(["sleep", "30"])
    try:
        r = await run_check(RealShell(), "stack", pid=asleep(child.pid))
        assert r.data["wchan"] == "hrtimer_nanosleep"
        if os.geteuid() == 0:
            assert r.data["frames"][0]["function"] == "hrtimer_nanosleep"
    finally:
        child.kill()
        child.wait()
    r = await run_check(RealShell(), "stack", pid=4_000_000)
    assert r.summary == "PID 4000000 is gone"


async def test_stack_unreadable_without_root():
    out = "do_epoll_wait\n::stack::\ncat: /proc/812/stack: Permission denied\n::py-spy::\npy-spy not installed\n"
    r = await run_check(Canned(out), "stack", pid=812)
    assert "kernel stack unreadable (cat: /proc/812/stack: Permission denied)" in r.summary
    assert r.summary.endswith("py-spy not installed")
    out = out.replace("py-spy not installed", "timeout: failed to run command ‘py-spy’: No such file or directory")
    assert (await run_check(Canned(out), "stack", pid=812)).data["py_spy"] is None


# ---------------------------------------------------------------- no exception escapes a parser

TEXT = st.text(alphabet=st.characters(codec="utf-8"), max_size=400) | st.sampled_from(
    [SEED_READ, HOLDERS_OUT, STATES_OUT, KLOG, BLOCKERS_OUT, SS_OUT, STACK_OUT]).flatmap(
        lambda s: st.integers(0, len(s)).map(lambda k: s[:k]))


@examples(200)
@given(TEXT)
def test_parsers_never_raise(text):
    cp.sections(text)
    cp.parse_reread(text)
    cp.parse_holders(text)
    cp.parse_tasks(text)
    cp.parse_kernel_log(text, {"00000000:48:00.0": 3})
    cp.parse_blockers(text, ("nvidia-persistenced",), ("nvidia-persistenced",))
    cp.parse_ss(text, 8000)
    cp.parse_ss(text)
    cp.parse_stack(text)


@examples(60)
@given(st.sampled_from(sorted(CHECKS)), TEXT)
async def test_checks_summarise_any_output_in_one_line(name, text):
    from console.clock import FakeClock
    params = {"states": {"pids": [72170]}, "stack": {"pid": 72170}, "mps-clients": {"server": 4188}}.get(name, {})
    node = Canned(text)
    node.clock = FakeClock()        # a wait's rereads on the node's clock: no real seconds per example
    r = await run_check(node, name, seed_stuck(), **params)
    assert r.summary and "\n" not in r.summary
    json.dumps(r.data)                       # goes into the timeline as it is


def test_smi_report_is_kept_whole_up_to_its_cap_and_says_how_many_gpus():
    from console.checks.registry import SMI_REPORT_BYTES, _smi_report, render
    assert render("smi-report") == f"timeout 20 nvidia-smi -q 2>&1 | head -c {SMI_REPORT_BYTES}"
    report = "\n==============NVSMI LOG==============\n\nDriver Version : 580.95\n\n" + "".join(
        f"GPU 00000000:{0x18 + i:02X}:00.0\n    Product Name : NVIDIA H100 80GB HBM3\n" for i in range(8))
    summary, data = _smi_report(report, {}, None)
    assert summary.startswith("nvidia-smi -q: the full report of 8 GPUs") and data["gpus"] == 8
    summary, _ = _smi_report("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\n", {}, None)
    assert summary == "nvidia-smi -q: NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver."
