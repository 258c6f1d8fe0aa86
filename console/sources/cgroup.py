"""Pure parser of /proc/PID/cgroup: which container, Kubernetes pod or systemd service a process
runs in. Never raises; a path it does not recognise gives a Cgroup with only its ``path``.

The file has one line per hierarchy, ``ID:CONTROLLERS:PATH`` (cgroup v1: ``12:devices:/docker/…``,
``1:name=systemd:/…``; cgroup v2: one line ``0::/…``). The formats recognised (the last path
component that names a container wins, the pod is the component above it):

- docker, cgroupfs driver:  ``/docker/<64 hex>``
- docker, systemd driver:   ``/system.slice/docker-<64 hex>.scope``
- containerd (CRI), systemd: ``…/cri-containerd-<id>.scope``; CRI-O ``…/crio-<id>.scope``;
  podman ``…/libpod-<id>.scope``
- Kubernetes, systemd driver: ``/kubepods.slice/kubepods-burstable.slice/
  kubepods-burstable-pod<uid with _>.slice/cri-containerd-<id>.scope``
- Kubernetes, cgroupfs driver: ``/kubepods/burstable/pod<uid>/<64 hex>``
- a systemd service: ``/system.slice/<name>.service`` (its unit; not inside a container)

A Kubernetes path carries the pod's UID, never its name or namespace. Inside a container with
its own cgroup namespace the file says ``0::/``: nothing to tell.

Only where the runtimes put them: a runtime's scope directly under ``system.slice`` or
``machine.slice``, or anywhere under a ``kubepods`` hierarchy; a bare ID under ``/docker`` or
``/kubepods`` at the root. Any user may create cgroups named like that in a delegated subtree
(``user.slice/…/user@65534.service/app.slice/docker-<another container's id>.scope``; container
IDs are world-readable in /proc/*/cgroup): such a path names no container, so nothing stops a
container because a process of a user's own cgroup asked for it.
"""
from __future__ import annotations

import re

from console.model import Cgroup

#: lines of one /proc/PID/cgroup read (a kernel has a dozen hierarchies at most)
MAX_LINES = 64
#: the longest path kept (PATH_MAX)
MAX_PATH = 4096

_SCOPE = re.compile(r"(docker|cri-containerd|crio|libpod|containerd)-([0-9a-f]{12,64})\.scope")
# the systemd cgroup driver's "SLICE:PREFIX:ID" when a runtime writes it as the path itself
_SYSTEMD_CRI = re.compile(r"(.*):(docker|cri-containerd|crio|containerd):([0-9a-f]{12,64})")
_BARE_ID = re.compile(r"[0-9a-f]{64}")
_POD_CGROUPFS = re.compile(r"pod([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})")
_POD_SLICE = re.compile(r"kubepods(?:-[a-z]+)?-pod([0-9a-f]{8}_[0-9a-f]{4}_[0-9a-f]{4}_[0-9a-f]{4}_"
                        r"[0-9a-f]{12}|[0-9a-f]{32})\.slice")
_UNIT = re.compile(r"[A-Za-z0-9:_.\\@-]{1,200}\.service")
_RUNTIME_SERVICES = ("containerd.service", "docker.service", "crio.service", "cri-o.service")
_RUNTIMES = {"docker": "docker", "cri-containerd": "containerd", "containerd": "containerd",
             "crio": "cri-o", "libpod": "podman"}


def _pod_uid(part: str) -> str | None:
    m = _POD_CGROUPFS.fullmatch(part)
    if m:
        return m.group(1)
    m = _POD_SLICE.fullmatch(part)
    if m:
        uid = m.group(1).replace("_", "-")
        if "-" not in uid:      # 32 hex without dashes (some kubelets): write it the usual way
            uid = f"{uid[:8]}-{uid[8:12]}-{uid[12:16]}-{uid[16:20]}-{uid[20:]}"
        return uid
    return None


def parse_path(path: str) -> Cgroup:
    """One cgroup path -> what it says (see the module's doc)."""
    path = str(path)[:MAX_PATH]
    parts = [p for p in path.split("/") if p]
    runtime = container = pod = unit = None
    at = -1
    # where runtimes put containers: under kubepods, or a runtime's own service (the systemd
    # CRI form under containerd.service), both only root's to create
    kube = bool(parts) and (parts[0].startswith("kubepods") or (
        len(parts) >= 2 and parts[0] == "system.slice" and parts[1] in _RUNTIME_SERVICES))
    for i in range(len(parts) - 1, -1, -1):
        part = parts[i]
        if not (kube or (i == 1 and parts[0] in ("system.slice", "machine.slice", "docker"))):
            continue                 # not where a runtime puts its containers (a user's own cgroup)
        m = _SCOPE.fullmatch(part)
        if m:
            runtime, container, at = _RUNTIMES[m.group(1)], m.group(2), i
            break
        m = _SYSTEMD_CRI.fullmatch(part)
        if m:
            runtime, container, at = _RUNTIMES[m.group(2)], m.group(3), i
            pod = _pod_uid(m.group(1))
            break
        if _BARE_ID.fullmatch(part):
            container, at = part, i
            if i > 0 and parts[i - 1] == "docker":
                runtime = "docker"
            break
    for part in (parts[:at] if at >= 0 else parts) if kube else ():
        pod = _pod_uid(part) or pod
    if container is None and pod is None and len(parts) >= 2 and parts[0] == "system.slice" \
            and _UNIT.fullmatch(parts[1]):
        unit = parts[1]
    return Cgroup(path=path, runtime=runtime, container_id=container, pod_uid=pod, unit=unit)


def parse_cgroup(text: str) -> Cgroup | None:
    """The whole /proc/PID/cgroup file -> the most telling line's Cgroup; None when empty.

    A line that names a container wins, then one that names a systemd service; else the
    cgroup v2 line (or the first line) with its path only."""
    best: Cgroup | None = None
    fallback: Cgroup | None = None
    for n, line in enumerate(str(text).split("\n")):
        if n >= MAX_LINES:
            break
        fields = line.rstrip("\r").split(":", 2)
        if len(fields) != 3 or not fields[2].startswith("/"):
            continue
        cg = parse_path(fields[2])
        if cg.in_container:
            return cg
        if cg.unit and best is None:
            best = cg
        if fallback is None or (fields[0] == "0" and fields[1] == ""):
            fallback = cg          # the first line, or the cgroup v2 line where there is one
    return best or fallback


def parse_cgroup_records(text: str) -> dict[int, Cgroup]:
    """The probe's cgroup section: lines "/proc/PID/cgroup:LINE" (grep -H names the file of
    every line, so a line a cgroup's name broke in two still belongs to its PID) -> {pid:
    Cgroup}; or (older probes, and checks) NUL-terminated records "PID CONTENT" (the file as it
    is, lines and all), the first record of a PID winning. An empty file says nothing."""
    text = str(text)
    if "\0" not in text:
        return _cgroup_lines(text)
    out: dict[int, Cgroup] = {}
    for rec in text.split("\0")[:-1]:
        pid_text, sep, body = rec.lstrip("\n").partition(" ")
        if not sep or not (pid_text.isascii() and pid_text.isdecimal()) or len(pid_text) > 10:
            continue
        pid = int(pid_text)
        if pid in out:
            continue
        cg = parse_cgroup(body)
        if cg is not None:
            out[pid] = cg
    return out


def _cgroup_lines(text: str) -> dict[int, Cgroup]:
    files: dict[int, list[str]] = {}
    for line in text.split("\n"):
        path, sep, rest = line.partition(":")
        parts = path.split("/")
        if not sep or len(parts) != 4 or parts[0] or parts[1] != "proc" or parts[3] != "cgroup" \
                or not (parts[2].isascii() and parts[2].isdecimal()) or len(parts[2]) > 10:
            continue
        files.setdefault(int(parts[2]), []).append(rest)
    out: dict[int, Cgroup] = {}
    for pid, lines in files.items():
        cg = parse_cgroup("\n".join(lines))
        if cg is not None:
            out[pid] = cg
    return out
