"""A simulated GPU node as the console reaches it: a SimHost (host.py) built from a named scenario
(scenarios.py), optionally inside a real-size process table (crowd.py), that boots back into the
ordinary machine (machine.py) and runs shell text through the fake shell (shell.py)."""
from __future__ import annotations

from console.model import CommandResult
from console.sim.crowd import fill
from console.sim.host import SimHost
from console.sim.machine import add_boot_log, add_console_session, add_host_background
from console.sim.scenarios import get_scenario
from console.sim.shell import run_script
from console.sim.state import DEFAULT_SCENARIO


class SimNode(SimHost):
    """One simulated machine, built from its scenario, that ``exec`` runs command lines on."""

    def __init__(self, scenario_name: str = DEFAULT_SCENARIO, clock=None, name: str = "demo", seed: int = 0,
                 size: tuple[int, int] | None = None) -> None:
        """``size``: (processes, threads) of a real-size table around the scenario's (sim/crowd.py)."""
        scenario = get_scenario(scenario_name)

        def build(host: SimHost) -> None:
            scenario.build(host)
            if size is not None:
                fill(host, *size)
        super().__init__(scenario, clock=clock, name=name, seed=seed, build=build)

    def start_after_boot(self) -> None:
        add_boot_log(self)
        add_host_background(self, mlops_login=False)
        add_console_session(self)

    async def exec(self, script: str, timeout: float, env: dict[str, str] | None = None) -> CommandResult:
        """Run shell text; ``env`` keeps the variables of a long-lived shell across calls."""
        return await run_script(self, script, timeout, env)
