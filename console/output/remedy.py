"""What to do about a node's error, said first: a host key not trusted or changed, a failed
authentication, a key or settings file that cannot be used. The error line itself (the
snapshot's ``error``, console/sources/ssh/) names the cause; the screen shows the remedy before
it, whole, so a narrow terminal never cuts off the part the operator must act on."""
from __future__ import annotations

#: (words the error starts with or holds, what to do), the first that matches wins
_REMEDIES: tuple[tuple[str, str], ...] = (
    ("host key CHANGED", "do not connect until the change is explained; if it is expected, remove the old "
                         "entry (ssh-keygen -R HOST -f KNOWN_HOSTS) and the console connects again"),
    ("host key not trusted", "check the key's fingerprint, then add it to known_hosts (--known-hosts FILE), "
                             "or rerun with --accept-new-host-keys to record keys of hosts not yet known"),
    ("host key check impossible", "fix or replace the known_hosts file the error names (--known-hosts FILE), "
                                  "then rerun"),
    ("authentication failed", "give a key this node accepts: rerun with -i KEY (or ssh-add it), and check "
                              "the user name (USER@HOST or User in the ssh config)"),
    ("cannot use the SSH settings", "check the key files (-i KEY) and the ssh config (--ssh-config FILE) given: "
                                    "one cannot be used (unreadable, not a private key, a bad line); fix it and "
                                    "rerun"),
)

#: the contract's words for the cause of a node's error (README, snapshot JSON), in the order tried
#: (the first an error holds): what the node table's State column shows
KINDS = ("host key", "authentication", "unreachable", "timed out", "refused", "mismatch", "no devices",
         "nvidia-smi not found", "driver")


def remedy_of(error: str | None) -> str | None:
    """What to do about this error, or None where the error says all there is."""
    if not error:
        return None
    for words, remedy in _REMEDIES:
        if words in error:
            return remedy
    return None


def error_kind(error: str) -> str:
    """"host key", "authentication", "unreachable" …: the cause in a word or two."""
    if error.startswith("cannot use the SSH settings"):
        return "ssh settings"
    for kind in KINDS:
        if kind in error:
            return kind
    return error.partition(": ")[0]


def remedy_first(error: str) -> str:
    """One line, the remedy first: "rerun with … — host key not trusted for …"."""
    remedy = remedy_of(error)
    return f"{remedy} — {error}" if remedy else error
