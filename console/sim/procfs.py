"""What the simulated kernel shows: /proc files, ps, ss, fuser and dmesg, in their real layouts."""
from __future__ import annotations

import time

from console.sim.host import SimHost
from console.sim.signals import SIGNALS
from console.sim.state import ALIVE, CLK_TCK, EXITING, ZOMBIE, SimProc

_PAGE_KB = 4
_FLAGS_USER = 4194560          # PF_RANDOMIZE | PF_SUPERPRIV-ish value seen on ordinary tasks
_FLAGS_KTHREAD = 2129984       # PF_KTHREAD | PF_NOFREEZE | PF_WQ_WORKER
_FLAGS_EXITING = 4195340       # + PF_EXITING | PF_SIGNALED
_TTY_NR = {"?": 0}


def tty_nr(tty: str) -> int:
    if tty.startswith("pts/") and tty[4:].isdecimal():
        return (136 << 8) | int(tty[4:])
    return _TTY_NR.get(tty, 0)


def sigmask(names) -> int:
    m = 0
    for n in names:
        if n in SIGNALS:
            m |= 1 << (SIGNALS[n] - 1)
    return m


def cpu_ticks(node: SimHost, p: SimProc) -> int:
    end = p.died_at if p.died_at is not None else node.now
    return p.utime0 + int(max(0.0, end - p.start) * p.cpu * CLK_TCK)


def stat_line(node: SimHost, p: SimProc, tid: int | None = None) -> str:
    """/proc/PID/stat (or /proc/PID/task/TID/stat): 52 fields, comm in parentheses."""
    threads = node.threads(p)
    me = next((t for t in threads if t[0] == tid), threads[0]) if threads else (p.pid, p.comm, "X", "0")
    tid_, name, state, _w = me
    dead_mm = p.phase in (ZOMBIE, EXITING) or p.kthread
    utime = cpu_ticks(node, p)
    stime = utime // 12
    if p.kthread:
        flags = _FLAGS_KTHREAD
    elif p.phase != ALIVE:
        flags = _FLAGS_EXITING
    else:
        flags = _FLAGS_USER
    vsize = 0 if dead_mm else p.vsz_kb * 1024
    rss = 0 if dead_mm else p.rss_kb // _PAGE_KB
    code = (0, 0, 0) if dead_mm else (94000000000000 + p.pid * 4096, 94000002000000 + p.pid * 4096,
                                      140720000000000 + p.pid * 16)
    tnr = tty_nr(p.tty)
    fields = [
        str(tid_), f"({name})", state, str(p.ppid), str(p.pgrp), str(p.sid), str(tnr),
        str(p.pgrp if tnr else -1), str(flags),
        str(1200 + p.pid % 977), "0", str(p.pid % 13), "0",
        str(utime), str(stime), "0", "0",
        "20", "0", str(len(threads)), "0", str(node.ticks(p.start)),
        str(vsize), str(rss), "18446744073709551615",
        str(code[0]), str(code[1]), str(code[2]), "0", "0",
        "0", "0", str(sigmask(p.ignored)), str(sigmask(p.caught)),
        "0", "0", "0", "17", str(p.pid % node.ncpu), "0", "0", "0", "0", "0",
    ]
    if dead_mm:
        fields += ["0"] * 7
    else:
        base = 94000003000000 + p.pid * 4096
        fields += [str(base), str(base + 8192), str(base + 65536), str(code[2] + 100),
                   str(code[2] + 100 + len(p.args)), str(code[2] + 200), str(code[2] + 4000)]
    fields.append("0" if p.exit_signal is None or p.phase == ALIVE else str(SIGNALS.get(p.exit_signal, 0)))
    return " ".join(fields)


_STATE_WORDS = {"R": "R (running)", "S": "S (sleeping)", "D": "D (disk sleep)", "Z": "Z (zombie)",
                "T": "T (stopped)", "I": "I (idle)", "X": "X (dead)"}


def status_text(node: SimHost, p: SimProc) -> str:
    st = node.leader_state(p)
    lines = [
        f"Name:\t{p.comm}", "Umask:\t0022", f"State:\t{_STATE_WORDS.get(st, st)}",
        f"Tgid:\t{p.pid}", "Ngid:\t0", f"Pid:\t{p.pid}", f"PPid:\t{p.ppid}", "TracerPid:\t0",
        f"Uid:\t{p.uid}\t{p.uid}\t{p.uid}\t{p.uid}", f"Gid:\t{p.uid}\t{p.uid}\t{p.uid}\t{p.uid}",
        f"FDSize:\t{0 if p.phase != ALIVE else 256}", "Groups:\t",
        f"NStgid:\t{p.pid}", f"NSpid:\t{p.pid}", f"NSpgid:\t{p.pgrp}", f"NSsid:\t{p.sid}",
        f"Kthread:\t{1 if p.kthread else 0}",
    ]
    if p.phase == ALIVE and not p.kthread:
        lines += [f"VmPeak:\t{p.vsz_kb + 2048:>8} kB", f"VmSize:\t{p.vsz_kb:>8} kB",
                  f"VmRSS:\t{p.rss_kb:>8} kB"]
    kill = f"{SIGKILL_MASK:016x}"
    pending = p.sigkill_pending and p.phase != ZOMBIE
    lines += [f"Threads:\t{node.num_threads(p)}", "SigQ:\t0/2063355",
              f"SigPnd:\t{kill if pending else '0000000000000000'}",
              f"ShdPnd:\t{kill if pending or p.phase == EXITING else '0000000000000000'}",
              "SigBlk:\t0000000000000000", f"SigIgn:\t{sigmask(p.ignored):016x}",
              f"SigCgt:\t{sigmask(p.caught):016x}",
              "CapInh:\t0000000000000000",
              f"CapPrm:\t{'000001ffffffffff' if p.uid == 0 else '0000000000000000'}",
              f"CapEff:\t{'000001ffffffffff' if p.uid == 0 else '0000000000000000'}",
              "voluntary_ctxt_switches:\t" + str(1000 + cpu_ticks(node, p) * 3),
              "nonvoluntary_ctxt_switches:\t" + str(20 + p.pid % 300)]
    return "\n".join(lines) + "\n"


#: SIGKILL (signal 9) in a pending mask: bit 8
SIGKILL_MASK = 1 << (SIGNALS["KILL"] - 1)
#: what a command's first word runs as (/proc/PID/exe: the interpreter a symlink leads to)
_EXECUTABLES = {"python3": "/usr/bin/python3.10", "python": "/usr/bin/python3.10",
                "/usr/bin/python3": "/usr/bin/python3.10", "/usr/bin/python": "/usr/bin/python3.10",
                "-bash": "/usr/bin/bash", "bash": "/usr/bin/bash", "sh": "/usr/bin/dash",
                "sshd:": "/usr/sbin/sshd", "sshd": "/usr/sbin/sshd", "/sbin/init": "/usr/lib/systemd/systemd"}


def exe_path(p: SimProc) -> str | None:
    """readlink /proc/PID/exe: None for a kernel thread and a process that has exited (no memory
    map: the link cannot be read); its own when the scenario gave one; else from its command line:
    an absolute path is itself, python the interpreter (/usr/bin/python3.10, also for a worker
    that renamed itself "sglang::scheduler_TP0", "VLLM::Worker_TP1"), a bare name /usr/bin/NAME."""
    if p.kthread or p.phase != ALIVE:
        return None
    if p.exe is not None:
        return p.exe
    word = p.args.split(" ")[0] if p.args else p.comm
    if word in _EXECUTABLES:
        return _EXECUTABLES[word]
    if word.rsplit("/", 1)[-1].startswith("python3") or "::" in word:
        return "/usr/bin/python3.10"      # "::": a Python worker that renamed itself (setproctitle)
    return word if word.startswith("/") else f"/usr/bin/{word}"


def ps_args(p: SimProc) -> str:
    if p.phase in (ZOMBIE, EXITING):
        return f"[{p.comm}] <defunct>"
    return p.args if p.args else f"[{p.comm}]"


def stack_text(wchan: str, state: str) -> str:
    """/proc/PID/stack for a thread sleeping in ``wchan``."""
    if state == "R":
        return ""
    frames = {
        "uvm_va_space_destroy": ["uvm_va_space_destroy+0x3c7/0x6a0 [nvidia_uvm]",
                                 "uvm_release.constprop.0+0x8e/0xd0 [nvidia_uvm]",
                                 "uvm_release_entry+0x39/0x80 [nvidia_uvm]", "__fput+0xe6/0x2b0",
                                 "task_work_run+0x5d/0xa0", "do_exit+0x2ad/0xab0",
                                 "do_group_exit+0x34/0x90", "get_signal+0x8f3/0x930"],
        "futex_wait_queue": ["futex_wait_queue+0x69/0xa0", "__futex_wait+0x156/0x1c0",
                             "futex_wait+0x79/0x120", "do_futex+0x117/0x1b0", "__x64_sys_futex+0x127/0x200"],
        "do_epoll_wait": ["do_epoll_wait+0x5f0/0x7a0", "__x64_sys_epoll_wait+0x6f/0x110"],
        "do_select": ["do_select+0x6a4/0x7f0", "core_sys_select+0x1c9/0x3b0", "do_pselect.constprop.0+0xbd/0x180"],
        "do_wait": ["do_wait+0x5e/0xf0", "kernel_wait4+0xbe/0x160", "__do_sys_wait4+0xa1/0xb0"],
        "pipe_read": ["pipe_read+0x373/0x4a0", "vfs_read+0x2fc/0x340", "ksys_read+0x6f/0xf0"],
        "hrtimer_nanosleep": ["hrtimer_nanosleep+0xc2/0x1b0", "common_nsleep+0x44/0x60",
                              "__x64_sys_clock_nanosleep+0xbc/0x130"],
        "os_unlock_user_pages": ["os_unlock_user_pages+0x66/0x110 [nvidia]", "_nv041117rm+0x2a/0x50 [nvidia]",
                                 "rm_free_unused_clients+0xd0/0x160 [nvidia]", "nvidia_close+0x148/0x2e0 [nvidia]",
                                 "__fput+0xe6/0x2b0", "task_work_run+0x5d/0xa0", "do_exit+0x2ad/0xab0",
                                 "do_group_exit+0x34/0x90", "get_signal+0x8f3/0x930"],
    }.get(wchan)
    if frames is None and wchan.startswith("_nv") and wchan.endswith("rm"):
        frames = [f"{wchan}+0x1d/0x30 [nvidia]", "_nv012936rm+0x59/0x120 [nvidia]",
                  "_nv049621rm+0x1a3/0x3a0 [nvidia]", "rm_cleanup_file_private+0xe6/0x1e0 [nvidia]",
                  "nvidia_close+0x148/0x2e0 [nvidia]", "__fput+0xe6/0x2b0", "task_work_run+0x5d/0xa0",
                  "do_exit+0x2ad/0xab0", "do_group_exit+0x34/0x90", "get_signal+0x8f3/0x930"]
    if frames is None:
        frames = [f"{wchan}+0x4c/0x120"] if wchan not in ("", "0") else []
    frames = frames + ["arch_do_signal_or_restart+0x3e/0x250" if "get_signal" in " ".join(frames) else
                       "do_syscall_64+0x82/0x170", "entry_SYSCALL_64_after_hwframe+0x76/0x7e"]
    return "".join(f"[<0>] {f}\n" for f in frames)


def ls_time(epoch: float) -> str:
    return time.strftime("%b %e %H:%M", time.gmtime(epoch))


def ls_task(node: SimHost, p: SimProc) -> str:
    ts = ls_time(p.start)
    threads = node.threads(p)
    lines = ["total 0"] + [f"dr-xr-xr-x 7 {p.user} {p.user} 0 {ts} {tid}" for tid, *_ in threads]
    return "\n".join(lines) + "\n"


def ls_fd(node: SimHost, p: SimProc) -> str:
    ts = ls_time(p.start)
    entries = [(0, "/dev/null"), (1, "/dev/null"), (2, "/dev/null")] if p.phase == ALIVE and not p.kthread else []
    fd = 3
    for f in p.fds:
        entries.append((fd, f))
        fd += 1
    lines = [f"total {len(entries)}"]
    lines += [f"lrwx------ 1 {p.user} {p.user} 64 {ts} {n} -> {target}" for n, target in entries]
    return "\n".join(lines) + "\n"


def dmesg_lines(node: SimHost, human: bool = False) -> list[str]:
    out = []
    for when, text in node.kernel_log:
        if when > node.now:
            continue
        if human:
            stamp = time.strftime("%a %b %e %H:%M:%S %Y", time.gmtime(when))
            out.append(f"[{stamp}] {text}")
        else:
            up = max(0.0, when - node.btime)
            out.append(f"[{up:12.6f}] {text}")
    return out


def journal_lines(node: SimHost) -> list[str]:
    out = []
    for when, text in node.kernel_log:
        if when <= node.now:
            out.append(f"{time.strftime('%b %d %H:%M:%S', time.gmtime(when))} {node.name} kernel: {text}")
    return out


def ss_listen(node: SimHost, with_process: bool) -> str:
    rows = [("State", "Recv-Q", "Send-Q", "Local Address:Port", "Peer Address:Port", "Process")]
    entries = []
    fdn = 3
    for p in node.visible_procs():
        if not p.alive:
            continue
        for addr, port in p.ports:
            peer = "[::]:*" if addr.startswith("[") else "0.0.0.0:*"
            proc = f'users:(("{p.comm}",pid={p.pid},fd={fdn + p.ports.index((addr, port))}))' if with_process else ""
            entries.append((port, ("LISTEN", "0", "4096" if p.comm != "sshd" else "128",
                                   f"{addr}:{port}", peer, proc)))
    rows += [e for _, e in sorted(entries, key=lambda e: e[0])]
    w = [max(len(r[i]) for r in rows) for i in range(5)]
    lines = []
    for r in rows:
        lines.append(f"{r[0]:<{w[0]}} {r[1]:<{w[1]}} {r[2]:<{w[2]}} {r[3]:>{w[3]}} {r[4]:>{w[4]}} {r[5]}".rstrip())
    return "\n".join(lines) + "\n"


def fuser_report(node: SimHost, paths: list[str], verbose: bool) -> tuple[str, str, list[SimProc]]:
    """(stdout, stderr, holders). PIDs go to stdout; names and the -v table to stderr."""
    out, err = [], []
    holders: list[SimProc] = []
    if verbose:
        err.append(f"{'':<20} {'USER':<10} {'PID':>6} ACCESS COMMAND")
    for path in paths:
        procs = node.holders_of(path)
        for p in procs:
            if p not in holders:
                holders.append(p)
        if verbose:
            if not procs:
                continue
            for i, p in enumerate(procs):
                label = f"{path}:" if i == 0 else ""
                access = "F...m" if p.unit is None else "F...."
                err.append(f"{label:<20} {p.user[:10]:<10} {p.pid:>6} {access} {p.comm}")
        elif procs:
            err.append(f"{path}:")
        if procs:
            out.append("".join(f"{p.pid:>6}" for p in procs))
    stdout = " ".join(out)
    show_err = (verbose and len(err) > 1) or (not verbose and bool(err))
    return stdout + ("\n" if stdout else ""), ("\n".join(err) + "\n") if show_err else "", holders
