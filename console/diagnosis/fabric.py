"""GPUs whose NVLink fabric is not ready (causes from the field, 10). On an NVSwitch system the
fabric manager registers every GPU with the fabric; until a GPU's state is ``Completed`` with
status ``Success``, CUDA work on it fails or hangs (NVIDIA/NVSentinel#1382 treats ``Not Started``
and ``In Progress`` as a stuck fabric manager, Azure/azhpc-images#506 a ``Completed`` state with
``Insufficient Resources``). Memory is not the problem there and no process is the next step:
the fabric manager is.
"""
from __future__ import annotations

from console.diagnosis import text as t
from console.diagnosis.advice import Advice, finding
from console.diagnosis.context import Situation
from console.diagnosis.who import fabric_manager_running
from console.model import Finding
from console.sources.parse_fabric import not_ready


def fabric(sit: Situation) -> list[Finding]:
    groups: dict[str, list[int]] = {}
    for g in sit.snap.gpus:
        why = not_ready(g)
        if why is not None:
            groups.setdefault(why, []).append(g.index)
    out: list[Finding] = []
    if not groups:          # the usual case: no walk over a real-size node's 2,000 processes
        return out
    running = fabric_manager_running(sit.snap)
    for why, gpus in groups.items():
        summary = (f"{t.gpus(gpus)}: the NVLink fabric is not ready ({why}): the fabric manager has not set "
                   f"{t.verb(len(gpus), 'it', 'them')} up, and CUDA work there fails or hangs")
        first = ("nvidia-fabricmanager is not running here: start it (`systemctl start nvidia-fabricmanager`)"
                 if not running else
                 "look at the fabric manager (`systemctl status nvidia-fabricmanager`, "
                 "/var/log/fabricmanager.log) and restart it (`systemctl restart nvidia-fabricmanager`)")
        step = Advice(None, f"Nothing to kill: {first}, then wait for the state Completed / Success "
                          "(`nvidia-smi -q`, Fabric). A GPU reset does not bring the fabric up; if it stays "
                          "down, drain the node and reboot it.", (), tuple(gpus))
        out.append(finding("fabric-not-ready", "high", summary, step, (), gpus,
                           {"gpus": gpus, "why": why, "fabric_manager_running": running}))
    return out
