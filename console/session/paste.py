"""The command `gate` and `watch` print for the operator to paste: the console on the incident
they opened, with the options they ran with (the SSH files, the incident dir), quoted as a
shell reads it (``shlex``), so the nodes open as they did for the check that printed it."""
from __future__ import annotations

import os
import shlex
from typing import Sequence

from console.probe import DEFAULT_DEVICE_GLOB
from console.sources.ssh.options import SshOptions


def console_options(ssh: SshOptions | None = None, *, incident_dir: str | os.PathLike[str] | None = None,
                    device_glob: str = DEFAULT_DEVICE_GLOB) -> list[str]:
    """The console's options that reach the nodes and the incident as this run did; file paths
    made absolute (the command may be pasted in another directory)."""
    words: list[str] = []
    if incident_dir is not None:
        words += ["--incident-dir", os.path.abspath(incident_dir)]
    if ssh is not None:
        if ssh.known_hosts:
            words += ["--known-hosts", os.path.abspath(ssh.known_hosts)]
        for key in ssh.identity:
            words += ["-i", os.path.abspath(key)]
        if ssh.ssh_config:
            words += ["--ssh-config", os.path.abspath(ssh.ssh_config)]
        if ssh.accept_new_host_keys:
            words.append("--accept-new-host-keys")
    if device_glob != DEFAULT_DEVICE_GLOB:
        words += ["--device-glob", device_glob]
    return words


def continue_command(incident_id: str, nodes: Sequence[str], options: Sequence[str] = ()) -> str:
    """``gpu-incident --incident ID [options] NODE ...`` as a shell reads it."""
    return shlex.join(["gpu-incident", "--incident", incident_id, *options, *nodes])
