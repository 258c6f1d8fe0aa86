"""The commands the simulated node's shell knows, each answering in the real tool's format.

Every handler is ``async (shell, argv, stdin) -> (stdout, stderr, rc)``; they live by family in
cmd_basic (builtins, sleep, timeout, date, id, ...), cmd_text (cat, grep, sed, ...), cmd_proc
(kill, pgrep, pkill, ps, fuser) and cmd_system (nvidia-smi, systemctl, dmesg, ss, reboot).
"""
from __future__ import annotations

from console.sim.cmd_basic import (c_date, c_echo, c_exit, c_false, c_getconf, c_hostname, c_id, c_nproc,
                        c_printf, c_sleep, c_timeout, c_true, c_uname, c_uptime, c_whoami)
from console.sim.cmd_proc import c_fuser, c_kill, c_pgrep, c_pkill, c_ps
from console.sim.cmd_system import (c_dmesg, c_journalctl, c_modprobe, c_mps_control, c_nvidia_smi, c_reboot, c_ss,
                                   c_systemctl)
from console.sim.cmd_text import (c_cat, c_cut, c_grep, c_head, c_ls, c_readlink, c_sed, c_sort, c_tail,
                       c_uniq, c_wc)

COMMANDS = {
    "true": c_true, ":": c_true, "false": c_false, "exit": c_exit, "echo": c_echo, "printf": c_printf,
    "sleep": c_sleep, "timeout": c_timeout, "date": c_date, "getconf": c_getconf, "id": c_id,
    "whoami": c_whoami, "hostname": c_hostname, "uname": c_uname, "nproc": c_nproc, "uptime": c_uptime,
    "cat": c_cat, "head": c_head, "tail": c_tail, "grep": c_grep, "wc": c_wc, "sort": c_sort,
    "uniq": c_uniq, "cut": c_cut, "sed": c_sed, "ls": c_ls, "readlink": c_readlink,
    "kill": c_kill, "pgrep": c_pgrep, "pkill": c_pkill, "ps": c_ps, "fuser": c_fuser,
    "nvidia-smi": c_nvidia_smi, "systemctl": c_systemctl, "dmesg": c_dmesg, "journalctl": c_journalctl,
    "ss": c_ss, "reboot": c_reboot, "shutdown": c_reboot, "modprobe": c_modprobe,
    "nvidia-cuda-mps-control": c_mps_control,
}
