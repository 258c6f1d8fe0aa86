"""The simulated nodes `gpu-incident bench` polls over SSH, served from a child process.

``python -m console.bench.simserver STATE_DIR NODES [SCENARIO]`` starts NODES
simulated nodes (sim.server.start_sim_servers) on free 127.0.0.1 ports with
their keys in STATE_DIR, prints ``ready PORT ...`` on stdout, and serves until
its stdin reaches EOF (the bench closes it, or the bench died) or SIGTERM.
A child process keeps the servers' CPU out of the figures of the console
process being measured, and gives them a core of their own.
"""
from __future__ import annotations

import asyncio
import signal
import sys

from console.sim.server import start_sim_servers


async def _serve(state_dir: str, nodes: int, scenario: str) -> int:
    servers = await start_sim_servers(scenario, nodes, None, state_dir)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    reader = asyncio.StreamReader()
    transport, _ = await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)

    async def until_eof() -> None:
        while await reader.read(4096):
            pass
        stop.set()

    watcher = asyncio.create_task(until_eof())
    print("ready " + " ".join(str(p) for p in servers.ports), flush=True)
    try:
        await stop.wait()
    finally:
        watcher.cancel()
        transport.close()
        servers.close()
        await servers.wait_closed()
    return 0


def main(argv: list[str]) -> int:
    if len(argv) not in (2, 3) or not argv[1].isdecimal():
        print("usage: python -m console.bench.simserver STATE_DIR NODES [SCENARIO]", file=sys.stderr)
        return 2
    try:
        return asyncio.run(_serve(argv[0], int(argv[1]), argv[2] if len(argv) == 3 else "seed"))
    except (ValueError, OSError) as exc:
        print(f"bench simulator: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
