"""Probe answers computed once per tick for a fleet of identical simulated nodes.

`gpu-incident simulate --nodes 256` serves many nodes of one scenario, built at one instant
with the same clock: until a command other than the probe runs on one of them, they are the
same machine but for their identity (host name, GPU UUIDs and serial numbers). So each probe
line is answered once per tick (one second of the nodes' clock) by a template node, and every
node gets that answer with its own identity put back (and its own probe mark). A node on
which anything else runs (a signal, a reset, a check) leaves the fleet for good and answers
from its own state from then on; so does a node whose answer differs from the template's in
anything but its identity when the fleet is formed (checked then, on one probe each).

The cost: one simulated probe per tick for the whole fleet, plus a text substitution per
node and line, instead of one simulated probe per node and poll (console/bench: the
simulator must not be the bottleneck of the console it serves).
"""
from __future__ import annotations

import re
from typing import Iterable

from console import probe
from console.clock import REAL_CLOCK, FakeClock
from console.model import CommandResult
from console.sim.node import SimNode

#: the probe mark the template answers with (a node's own mark is put back per answer)
TEMPLATE_MARK = "::gi-fleet0template::"
_PROBE_LINE = re.compile(r"^echo '(?P<mark>::gi-[0-9a-f]+::) begin (?P<name>\w+)'; ")
TICK_S = 1.0
#: lines a long-lived shell may read that change nothing
HARMLESS = {"", "exit"}


def identity(node: SimNode) -> list[str]:
    """What tells this node apart from its twins in the probe's output."""
    out = [node.name]
    for g in node.gpus:
        out += [g.uuid, g.serial]
    return [s for s in out if s]


class Fleet:
    def __init__(self, template: SimNode, nodes: Iterable[SimNode]) -> None:
        self.template = template
        self.clock = template.clock
        theirs = identity(template)
        self._rx = re.compile("|".join(re.escape(s) for s in sorted(set(theirs), key=len, reverse=True)))
        self._swap: dict[int, dict[str, str]] = {}
        for node in nodes:
            mine = identity(node)
            if len(mine) == len(theirs):
                self._swap[id(node)] = dict(zip(theirs, mine))
        self._env: dict[str, str] = {}
        self._tick: int | None = None
        self._cache: dict[str, CommandResult] = {}
        self._known: dict[str, bool] = {}     # template-marked line -> is it a probe line
        self.shared_answers = 0          # answers served from the cache (tests, bench)

    def member(self, node: SimNode) -> bool:
        return id(node) in self._swap

    def leave(self, node: SimNode) -> None:
        self._swap.pop(id(node), None)

    def _put_back(self, node: SimNode, text: str, mark: str) -> str:
        swap = self._swap[id(node)]
        return self._rx.sub(lambda m: swap[m.group(0)], text.replace(TEMPLATE_MARK, mark))

    async def answer(self, node: SimNode, line: str, env: dict[str, str] | None = None) -> CommandResult | None:
        """The answer to a line of the node's long-lived shell, or None when the node must
        run it itself (then it has left the fleet, unless the line changes nothing). ``env``:
        that shell's variables (its scope and listing: the template answers in that state)."""
        env = self._env if env is None else env
        if id(node) not in self._swap:
            return None
        m = _PROBE_LINE.match(line)
        key = line.rstrip("\n").replace(m.group("mark"), TEMPLATE_MARK) if m else None
        if key is not None and key not in self._known:
            if len(self._known) > 64:
                self._known.clear()
            self._known[key] = _is_probe_line(key, m.group("name"))
        if key is None or not self._known[key]:
            if line.strip() not in HARMLESS:
                self.leave(node)
            return None
        now = self.clock.now()
        tick = int(now // TICK_S)
        if tick != self._tick:
            self._tick, self._cache = tick, {}
        # the probe's sections read and set the shell's variables (its scope, its listing): the
        # same line in another state is another answer, and an answer served from the cache
        # leaves the variables as running it did
        state = (key, tuple(sorted(env.items())))
        cached = self._cache.get(state)
        if cached is None:
            try:
                hit = await self.template.exec(key, 3600.0, env)
            except Exception:  # noqa: BLE001 - the node answers for itself (its own errors)
                self.leave(node)
                return None
            self._cache[state] = (hit, dict(env))
            self.template.history.clear()
        else:
            hit, after = cached
            env.clear()
            env.update(after)
            self.shared_answers += 1
        node.history.append((now, line))
        return CommandResult(line, rc=hit.rc, stdout=self._put_back(node, hit.stdout, m.group("mark")),
                             stderr=self._put_back(node, hit.stderr, m.group("mark")), duration_s=0.0)


def _is_probe_line(line: str, name: str) -> bool:
    from console.sim.probe_answers import device_glob, recognise
    glob = device_glob(line)
    if glob is None:
        return False
    command = probe.section_command(line, TEMPLATE_MARK, name)
    if command is None:
        return False
    if name in probe.DRIVER_SECTIONS:
        return command == probe.driver_call(name)
    return recognise(name, command, glob) is not None or command == dict(probe.sections(glob)).get(name)


async def build_fleet(scenario: str, names: list[str], clock=None,
                      size: tuple[int, int] | None = None) -> tuple[list[SimNode], Fleet]:
    """``names`` nodes of ``scenario`` built at one instant, and the fleet that answers for
    those that are the template's twins (checked on one probe each, at that instant).
    KeyError/ValueError for an unknown scenario."""
    real = clock if clock is not None else REAL_CLOCK
    start = real.now()
    frozen = FakeClock(start)
    template = SimNode(scenario, clock=frozen, name=names[0] if names else "template", size=size)
    nodes = [SimNode(scenario, clock=frozen, name=n, size=size) for n in names]
    fleet = Fleet(template, nodes)
    script = probe.build_script(TEMPLATE_MARK)

    want = await template.exec(script, 60.0, {})
    for node in nodes:
        if fleet.member(node):
            got = await node.exec(script, 60.0, {})
            if got.stdout != fleet._put_back(node, want.stdout, TEMPLATE_MARK) or got.rc != want.rc:
                fleet.leave(node)
        node.history.clear()
    template.history.clear()
    for n in [template, *nodes]:
        n.clock = real
    fleet.clock = real
    return nodes, fleet
