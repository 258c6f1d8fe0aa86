"""Which processes on a node are the console's own SSH session (never signalled by it)."""
from __future__ import annotations

from console.model import NodeSnapshot


def _is_sshd(proc) -> bool:
    return proc.name.startswith("sshd")


def _is_sshd_session(proc) -> bool:
    """``sshd: root@notty`` / ``sshd: root [priv]`` / ``sshd-session: …``, not the listener."""
    cmd = proc.cmdline
    return (_is_sshd(proc) and "[listener]" not in cmd
            and (cmd.startswith("sshd: ") or cmd.startswith("sshd-session")))


def session_pids(snap: NodeSnapshot) -> tuple[int, ...]:
    """The console's own processes on the node: the probe shell (``$$``, which the parser
    puts in ``own_pids``), its children (the probe's commands), and its ancestors up to
    but excluding the sshd listener -- the sshd session processes of this connection.
    A shell not under sshd (a simulator, a local shell) keeps only itself and its children."""
    if not snap.own_pids:
        return snap.own_pids
    shell = snap.own_pids[0]
    by_pid = {p.pid: p for p in snap.processes}
    own = list(snap.own_pids)
    chain: list[int] = []
    last_sshd = -1
    cur = by_pid.get(shell)
    for _ in range(8):
        if cur is None or cur.ppid <= 1:
            break
        parent = by_pid.get(cur.ppid)
        if parent is None or (_is_sshd(parent) and not _is_sshd_session(parent)):
            break
        if _is_sshd_session(parent):
            chain.append(parent.pid)
            last_sshd = len(chain)
        elif last_sshd > 0:
            break
        else:
            chain.append(parent.pid)
        cur = parent
    own += chain[:max(last_sshd, 0)]
    children: dict[int, list[int]] = {}
    for p in snap.processes:
        children.setdefault(p.ppid, []).append(p.pid)
    todo = list(children.get(shell, ()))
    while todo:
        pid = todo.pop()
        if pid not in own:
            own.append(pid)
            todo.extend(children.get(pid, ()))
    return tuple(own)
