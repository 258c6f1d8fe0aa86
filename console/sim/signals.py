"""Signal names and numbers as Linux has them (x86), shared by the simulated node and its commands."""
from __future__ import annotations

SIGNALS = {
    "HUP": 1, "INT": 2, "QUIT": 3, "ILL": 4, "TRAP": 5, "ABRT": 6, "BUS": 7, "FPE": 8, "KILL": 9,
    "USR1": 10, "SEGV": 11, "USR2": 12, "PIPE": 13, "ALRM": 14, "TERM": 15, "STKFLT": 16,
    "CHLD": 17, "CONT": 18, "STOP": 19, "TSTP": 20, "TTIN": 21, "TTOU": 22, "URG": 23, "XCPU": 24,
    "XFSZ": 25, "VTALRM": 26, "PROF": 27, "WINCH": 28, "IO": 29, "PWR": 30, "SYS": 31,
}
SIGNAL_NAMES = {v: k for k, v in SIGNALS.items()}


def signal_name(text: str) -> str | None:
    """'9', 'KILL', 'SIGKILL', 'kill' -> 'KILL'; '0' -> '0'; unknown -> None."""
    t = text.strip().upper()
    if t.isdecimal():
        n = int(t)
        return "0" if n == 0 else SIGNAL_NAMES.get(n)
    t = t.removeprefix("SIG")
    if t == "IOT":
        t = "ABRT"
    if t == "POLL":
        t = "IO"
    if t == "CLD":
        t = "CHLD"
    return t if t in SIGNALS else None
