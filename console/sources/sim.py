"""The built-in simulated node (TARGET ``demo`` / ``demo:SCENARIO``), reached through a fake shell.

It shares everything with the SSH source (probe script, parsers, guarded
signals); only the transport differs: ``_exec`` hands the shell text to the
in-process SimNode.
"""
from __future__ import annotations

from console.model import CommandResult
from console.sim.node import SimNode
from console.sim.scenarios import scenario_names
from console.sim.state import DEFAULT_SCENARIO
from console import probe
from console.probe import DEFAULT_LIMITS, DEFAULT_PROBE_TIMEOUT_S, ProbeLimits
from console.sources.shell import ShellSource

def parse_demo_target(target: str) -> str | None:
    """``demo`` -> "seed", ``demo:NAME`` -> NAME; None when the target is not a demo target.

    Raises ValueError (one line naming the valid scenarios) for an unknown scenario.
    """
    text = target.strip()
    if text == "demo":
        return DEFAULT_SCENARIO
    if not text.startswith("demo:"):
        return None
    typed = text[len("demo:"):]
    # a scenario's name whatever its case (demo:Seed is the seed scenario)
    name = next((n for n in scenario_names() if n.lower() == typed.lower()), typed)
    if name not in scenario_names():
        raise ValueError(f"unknown demo scenario {typed!r} in target {target!r}; "
                         f"valid scenarios: {', '.join(scenario_names())}")
    return name


class SimSource(ShellSource):
    kind = "sim"

    def __init__(self, name: str = "demo", scenario: str = DEFAULT_SCENARIO, clock=None,
                 node: SimNode | None = None, device_glob: str = probe.DEFAULT_DEVICE_GLOB,
                 probe_timeout: float = DEFAULT_PROBE_TIMEOUT_S, limits: ProbeLimits = DEFAULT_LIMITS) -> None:
        super().__init__(name, device_glob=device_glob, probe_timeout=probe_timeout, limits=limits)
        self._node = node if node is not None else SimNode(scenario, clock=clock, name=name)
        self.clock = self._node.clock      # snapshots are stamped with the simulated time

    @property
    def node(self) -> SimNode:
        return self._node

    async def _exec(self, script: str, timeout: float) -> CommandResult:
        try:
            return await self._node.exec(script, timeout)
        except Exception as exc:  # noqa: BLE001 - the simulator must never take the console down
            return CommandResult(command=script, rc=None, error=f"simulator error: {exc!r}"[:200])
