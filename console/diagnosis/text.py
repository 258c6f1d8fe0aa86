"""Short human renderings used in finding summaries and next steps (one line each)."""
from __future__ import annotations

import re
from typing import Callable, Iterable, Sequence

from console.diagnosis.who import label
from console.model import Proc
from console.sources.parse import clip


def mib(value: int | None) -> str:
    if value is None:
        return "? MiB"
    if abs(value) >= 10240:
        return f"{value / 1024:.1f} GiB"
    return f"{value} MiB"


def ranges(numbers: Iterable[int]) -> str:
    """[0,1,2,3,5] -> '0-3, 5'."""
    nums = sorted(set(numbers))
    parts: list[str] = []
    i = 0
    while i < len(nums):
        j = i
        while j + 1 < len(nums) and nums[j + 1] == nums[j] + 1:
            j += 1
        parts.append(str(nums[i]) if i == j else f"{nums[i]}-{nums[j]}")
        i = j + 1
    return ", ".join(parts)


def gpus(indices: Iterable[int]) -> str:
    nums = sorted(set(indices))
    if not nums:
        return "no GPU"
    return ("GPU " if len(nums) == 1 else "GPUs ") + ranges(nums)


def pids(numbers: Sequence[int], limit: int = 8) -> str:
    nums = list(dict.fromkeys(numbers))
    head = ", ".join(str(p) for p in nums[:limit])
    return head + (f" (+{len(nums) - limit} more)" if len(nums) > limit else "")


def names(procs: Sequence[Proc], namer: Callable[[Proc], str] = label) -> str:
    """'sglang::scheduler_TP0 … sglang::scheduler_TP7', 'VLLM::EngineCore, VLLM::Worker_TP0 … VLLM::Worker_TP3'."""
    labels = list(dict.fromkeys(clip(namer(p), 60) or "?" for p in procs))
    groups: dict[str, list[str]] = {}
    for lb in labels:                      # numbered siblings (TP0, TP1, …) form one group
        groups.setdefault(re.sub(r"\d+$", "", lb), []).append(lb)
    parts = [g[0] if len(g) == 1 else f"{g[0]} … {g[-1]}" for g in groups.values()]
    if len(parts) > 3:
        return ", ".join(parts[:2]) + f" +{len(labels) - sum(len(g) for g in list(groups.values())[:2])} more"
    return ", ".join(parts)


def plural(n: int, word: str, many: str | None = None) -> str:
    return f"{n} {word if n == 1 else (many or word + 's')}"


def seconds(value: float) -> str:
    if value < 90:
        return f"{value:.0f} s"
    if value < 5400:
        return f"{value / 60:.0f} min"
    return f"{value / 3600:.1f} h"


def ago(value: float) -> str:
    return "just now" if value < 1 else f"{seconds(value)} ago"


def pid_list(numbers: Sequence[int]) -> str:
    """'PID 41388' / 'PIDs 39021, 39024'."""
    return ("PID " if len(set(numbers)) == 1 else "PIDs ") + pids(numbers)


def verb(n: int, one: str, many: str) -> str:
    return one if n == 1 else many


def wchans(procs: Sequence[Proc]) -> str:
    seen = list(dict.fromkeys(t.wchan for p in procs for t in p.d_threads if t.wchan))
    if not seen:
        return "wchan unknown"
    return ", ".join(seen[:3]) + (" …" if len(seen) > 3 else "")


def containers(procs: Sequence[Proc], short: bool = True) -> str:
    """Where these processes run, when /proc/PID/cgroup says they are in a container:
    ' in container 4f2a0c1e9b7d… (docker)', ' in pod 7c5d1f2e…, container 2b3c… (containerd)' (the
    pod's whole UID unless ``short``), ' in 2 containers (…; …)'; '' when none is."""
    places = list(dict.fromkeys(p.cgroup.describe(short) for p in procs
                                if p.cgroup is not None and p.cgroup.in_container))
    if not places:
        return ""
    if len(places) == 1:
        return f" in {clip(places[0], 120)}"
    shown = "; ".join(clip(pl, 80) for pl in places[:3])
    return f" in {len(places)} containers ({shown}{' …' if len(places) > 3 else ''})"


def container_places(procs: Sequence[Proc]) -> list[dict]:
    """The containers of these processes, for a finding's evidence."""
    out: dict[tuple, dict] = {}
    for p in procs:
        cg = p.cgroup
        if cg is not None and cg.in_container:
            key = (cg.runtime, cg.container_id, cg.pod_uid)
            out.setdefault(key, {"runtime": cg.runtime, "container_id": cg.container_id,
                                 "pod_uid": cg.pod_uid, "pids": []})["pids"].append(p.pid)
    return list(out.values())
