"""A bare GPU poller, the floor the console's fan-out is measured against (`bench`).

What gpustat-web and similar dashboards do: one kept asyncssh connection per node, asking
``nvidia-smi --query-gpu=index,memory.used`` every second and parsing the CSV; no process
table, no diagnosis, no screen. Run as its own process (``python -m console.bench.bare
TARGETS KNOWN_HOSTS KEY``) so its CPU is measured apart; it prints "ready N" once every node
answered, then polls until it is ended.
"""
from __future__ import annotations

import asyncio
import csv
import sys

import asyncssh

COMMAND = "nvidia-smi --query-gpu=index,memory.used --format=csv,noheader,nounits"
INTERVAL_S = 1.0


def _dest(line: str) -> tuple[str, str, int]:
    user, _, rest = line.strip().rpartition("@")
    host, _, port = rest.rpartition(":")
    return user, host, int(port)


async def _node(target: str, known_hosts: str, key: str, ready: asyncio.Queue) -> None:
    user, host, port = _dest(target)
    conn = await asyncssh.connect(host, port=port, username=user, known_hosts=known_hosts,
                                  client_keys=[key], config=[])
    first = True
    loop = asyncio.get_running_loop()
    while True:
        due = loop.time() + INTERVAL_S
        result = await conn.run(COMMAND, check=False)
        rows = [r for r in csv.reader(str(result.stdout or "").splitlines()) if len(r) >= 2]
        _used = {int(r[0]): r[1].strip() for r in rows if r[0].strip().isdecimal()}
        if first:
            first = False
            await ready.put(target)
        await asyncio.sleep(max(0.0, due - loop.time()))


async def main(argv: list[str]) -> int:
    targets_file, known_hosts, key = argv
    targets = [t for t in open(targets_file).read().split() if t and not t.startswith("#")]
    ready: asyncio.Queue = asyncio.Queue()
    tasks = []
    for i, target in enumerate(targets):
        tasks.append(asyncio.create_task(_node(target, known_hosts, key, ready)))
        if i % 8 == 7:
            await asyncio.sleep(0.05)             # sshd's MaxStartups: connect in small waves
    for _ in targets:
        await ready.get()
    print(f"ready {len(targets)}", flush=True)
    await asyncio.gather(*tasks)
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main(sys.argv[1:])))
