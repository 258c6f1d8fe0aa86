"""Simulated GPU and system tools: nvidia-smi, systemctl, dmesg, journalctl, ss, reboot.

Every handler is ``async (shell, argv, stdin) -> (stdout, stderr, rc)``.
"""
from __future__ import annotations

import time

from console.sim import nvsmi, procfs
from console.sim.errors import Rebooting


async def c_nvidia_smi(sh, argv, stdin):
    if sh.node.nvsmi_hang:
        await sh.sleep(10 ** 9)
    return nvsmi.run(sh.node, argv[1:])


async def c_mps_control(sh, argv, stdin):
    """nvidia-cuda-mps-control: ``-d``/``-f`` start a daemon (not simulated), else one command per
    line of stdin, each answered in turn."""
    if any(a in ("-d", "-f") for a in argv[1:]):
        return "", "simulator: starting an MPS control daemon is not simulated\n", 1
    node = sh.node
    if node.mps is not None and node.mps.hang:
        await sh.sleep(10 ** 9)
    out, err, rc = [], [], 0
    for line in (stdin or "").splitlines():
        o, e, r = node.mps_control(line)
        out.append(o)
        err.append(e)
        rc = rc or r
    return "".join(out), "".join(err), rc


async def c_systemctl(sh, argv, stdin):
    args = [a for a in argv[1:] if not a.startswith("-")]
    if not args:
        return "", "Too few arguments.\n", 1
    action, units = args[0], args[1:]
    if action == "reboot":
        return await c_reboot(sh, ["reboot"], stdin)
    if action == "status":
        out, rc = [], 0
        for u in units:
            name = u.removesuffix(".service")
            running = [p for p in sh.node.visible_procs() if p.unit == name and p.alive]
            if name not in sh.node.units and not running:
                return "", f"Unit {name}.service could not be found.\n", 4
            if running:
                p = running[0]
                since = time.strftime("%a %Y-%m-%d %H:%M:%S UTC", time.gmtime(p.start))
                out.append(f"● {name}.service\n     Loaded: loaded (/usr/lib/systemd/system/{name}.service; enabled; "
                           f"preset: enabled)\n     Active: active (running) since {since}\n"
                           f"   Main PID: {p.pid} ({p.comm})\n")
            else:
                out.append(f"○ {name}.service\n     Loaded: loaded (/usr/lib/systemd/system/{name}.service; "
                           "enabled; preset: enabled)\n     Active: inactive (dead)\n")
                rc = 3
        return "".join(out), "", rc
    if not units:
        return "", "Too few arguments.\n", 1
    out, err, rc = [], [], 0
    for u in units:
        o, e, r = sh.node.systemctl(action, u)
        out.append(o)
        err.append(e)
        rc = rc or r
    return "".join(out), "".join(err), rc


async def c_dmesg(sh, argv, stdin):
    if not sh.node.dmesg_allowed:
        return "", "dmesg: read kernel buffer failed: Operation not permitted\n", 1
    human = any(a in ("-T", "--ctime") for a in argv[1:])
    return "".join(ln + "\n" for ln in procfs.dmesg_lines(sh.node, human)), "", 0


async def c_journalctl(sh, argv, stdin):
    if not sh.node.has_systemd:
        return "", "No journal files were found.\n", 1
    lines = procfs.journal_lines(sh.node)
    if "-n" in argv:
        i = argv.index("-n")
        if i + 1 < len(argv) and argv[i + 1].isdecimal():
            lines = lines[-int(argv[i + 1]):]
    if not lines:
        return "-- No entries --\n", "", 0
    return "".join(ln + "\n" for ln in lines), "", 0


async def c_ss(sh, argv, stdin):
    flags = "".join(a[1:] for a in argv[1:] if a.startswith("-") and not a.startswith("--"))
    if "l" not in flags:
        return "Netid State Recv-Q Send-Q Local Address:Port Peer Address:Port Process\n", "", 0
    return procfs.ss_listen(sh.node, "p" in flags), "", 0


async def c_reboot(sh, argv, stdin):
    if argv[0] == "shutdown" and "-r" not in argv:
        return "", "shutdown: only reboots are simulated (use -r)\n", 1
    if not sh.node.has_systemd:
        return "", ("System has not been booted with systemd as init system (PID 1). Can't operate.\n"
                    "Failed to connect to bus: Host is down\n"), 1
    sh.node.reboot()
    raise Rebooting()


NVIDIA_MODULES = ("nvidia_uvm", "nvidia_drm", "nvidia_modeset", "nvidia")


async def c_modprobe(sh, argv, stdin):
    """`modprobe -r nvidia_uvm … nvidia` refuses while anything holds the driver (as the kernel
    does); `modprobe nvidia` loads it fresh: stuck memory and reset-required states are gone."""
    node = sh.node
    node.settle()
    remove = "-r" in argv[1:] or "--remove" in argv[1:]
    modules = [a for a in argv[1:] if not a.startswith("-")]
    if not modules:
        return "", "modprobe: FATAL: Module name not given.\n", 1
    unknown = [m for m in modules if m not in NVIDIA_MODULES]
    if unknown:
        return "", f"modprobe: FATAL: Module {unknown[0]} not found in directory /lib/modules/6.8.0-sim\n", 1
    if remove:
        if node.driver_state == "not-loaded":
            return "", "", 0
        users = any(p.alive and any(f.startswith("/dev/nvidia") for f in p.fds) for p in node.procs.values())
        if users or node.contexts:
            return "", f"modprobe: FATAL: Module {modules[0]} is in use.\n", 1
        node.driver_state = "not-loaded"
        node.klog("nvidia-uvm: Unloaded the UVM driver.")
        return "", "", 0
    if node.driver_state == "not-loaded":
        node.driver_state = "ok"
        for g in node.gpus:
            g.stuck_mib = 0
            g.reset_required = False
        node.klog("NVRM: loading NVIDIA UNIX Open Kernel Module for x86_64  580.95.05")
    return "", "", 0
