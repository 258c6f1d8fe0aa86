"""Fleet mixes: ``simulate --scenario NAME`` where NAME gives each node its own scenario.

A real fleet is mostly healthy: busy nodes (training at 100 %, an inference server at a few
per cent) with, here and there, a node whose memory is held by nobody at 0 % and one that logged
an Xid. A mix says which scenario node i of n runs (node order is the order of names and ports).
The first nodes carry the interesting cases so that a handful of nodes (the tests) has each.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

BUSY = "slow-teardown"            # four training ranks at 100 % (healthy until someone kills them)
SERVING = "graceful"              # an inference server on two GPUs, a few per cent
STUCK_TERM = "renamed-workers"    # orphaned vLLM workers hold 4 GPUs at 0 %; SIGTERM frees them
STUCK_HUNG = "seed"               # SGLang hung: 8 GPUs held at 0 %, only SIGKILL + waiting frees them
XID = "reset-required"            # Xid 119 then 154 on GPU 3, its memory held until a reset


@dataclass(frozen=True)
class Mix:
    name: str
    title: str
    pick: Callable[[int, int], str]      # (node index, node count) -> scenario name


def _fleet(i: int, n: int) -> str:
    # the first nodes: busy, stuck (SIGTERM frees), Xid, stuck (hung); then one in 64 stuck,
    # one in 512 hung, one in 1024 an Xid, every fifth serving, the rest busy
    head = (BUSY, STUCK_TERM, XID, STUCK_HUNG)
    if i < len(head):
        return head[i]
    if i % 1024 == 700:
        return XID
    if i % 512 == 300:
        return STUCK_HUNG
    if i % 64 == 33:
        return STUCK_TERM
    return SERVING if i % 5 == 0 else BUSY


def _healthy(i: int, n: int) -> str:
    return SERVING if i % 5 == 0 else BUSY


MIXES: dict[str, Mix] = {m.name: m for m in (
    Mix("fleet", "a fleet: most nodes busy, a few hold memory at 0 % (stuck), one logged an Xid", _fleet),
    Mix("fleet-healthy", "a fleet with nothing wrong: training and serving nodes only", _healthy),
)}


def is_mix(name: str) -> bool:
    return name in MIXES


def scenario_of(mix: str, index: int, count: int) -> str:
    return MIXES[mix].pick(index, count)
