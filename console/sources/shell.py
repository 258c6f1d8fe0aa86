"""A node reached through a POSIX shell: the SSH source and the simulator share this.

``poll`` sends the whole probe (probe.py) in one round trip and parses it with
the pure parsers in parse.py; ``run`` sends one command line. Subclasses only
provide the transport, ``_exec``.
"""
from __future__ import annotations

import abc
import time

from console.model import CommandResult, NodeSnapshot
from console import probe
from console.probe import DEFAULT_COMMAND_TIMEOUT_S, DEFAULT_PROBE_TIMEOUT_S
from console.sources.base import Source, logged


class ShellSource(Source):
    def __init__(self, name: str, *, device_glob: str = probe.DEFAULT_DEVICE_GLOB,
                 probe_timeout: float = DEFAULT_PROBE_TIMEOUT_S) -> None:
        super().__init__(name)
        self.device_glob = device_glob
        self.probe_timeout = probe_timeout

    @abc.abstractmethod
    async def _exec(self, script: str, timeout: float) -> CommandResult:
        """Run shell text on the node; never raises. On failure ``error`` holds one
        human line using the words of the README's snapshot contract (unreachable, refused, authentication,
        host key, timed out)."""

    async def _exec_probe(self, script: str, mark: str, timeout: float) -> CommandResult:
        """Run the probe script; a transport with a long-lived shell overrides this
        (``mark`` tells it where the output ends)."""
        return await self._exec(script, timeout)

    async def poll(self) -> NodeSnapshot:
        from console.sources.parse import parse_probe
        mark = probe.new_mark()
        started = time.monotonic()
        result = await self._exec_probe(probe.build_script(mark, self.device_glob), mark,
                                        self.probe_timeout)
        probe_ms = round((time.monotonic() - started) * 1000, 1)
        if result.error is not None:
            return NodeSnapshot(name=self.name, taken_at=self.clock.now(), error=result.error,
                                probe_ms=probe_ms)
        return parse_probe(self.name, result.stdout, mark, taken_at=self.clock.now(), probe_ms=probe_ms)

    async def run(self, command: str, timeout: float = DEFAULT_COMMAND_TIMEOUT_S) -> CommandResult:
        return logged(self.name, await self._exec(command, timeout))
