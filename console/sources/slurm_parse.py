"""Pure parsers of Slurm's client output, and the rules for what the console sends to Slurm.

Never raises on output (garbage gives None or nothing); the builders of what goes *to* Slurm
(node name, drain reason) raise ValueError instead of sending anything doubtful.

- ``squeue -w NODE -h -o SQUEUE_FORMAT``: one job per line, ``JOBID|USER|STATE|ELAPSED|NODES|NAME``.
  The name is the user's own text and comes last: it may hold ``|`` and even newlines (Slurm
  accepts ``sbatch -J $'a\\nb'``), so a line that does not start like a record continues the
  previous job's name. A name can still *forge* a whole record line; ``jobs_on_node``
  callers mark the jobs that the kernel's cgroups confirm (``job_of_cgroup``).
- ``scontrol show job -o JOBID``: ``JobId=N JobName=… UserId=user(uid) … JobState=… RunTime=…``
  on one line (more when the name holds newlines). The name comes before every field Slurm
  owns and can imitate them (``JobName=x UserId=root(0) JobState=RUNNING``): a record in which
  a field Slurm owns appears twice is reported as ambiguous, never read either way.
- ``scontrol show node -o NODE``: ``NodeName=N … State=IDLE+DRAIN … Reason=… [user@time]``.
- ``/proc/PID/cgroup`` paths of Slurm's job steps: cgroup v2 ``/system.slice/slurmstepd.scope/
  job_1392969/step_0/user/task_0`` (``<node>_slurmstepd.scope`` with several slurmd on a host),
  cgroup v1 ``/slurm/uid_2101171/job_280678/step_interactive/task_0`` (``/slurm_<node>/…``).
"""
from __future__ import annotations

import re
from dataclasses import dataclass

#: squeue's -o format: job id (an array task's own id), user, state, elapsed, nodes, name last
SQUEUE_FORMAT = "%A|%u|%T|%M|%N|%j"
#: the most jobs one listing yields (a node runs a few; garbage never grows without bound)
MAX_JOBS = 256
#: a job name as the console keeps it
MAX_NAME = 200
#: what the console sends as a Slurm node name: a plain host name (no hostlist: no ``,`` or
#: ``[``, which would make one update touch several nodes)
NODE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
#: an incident ID as it may appear in a drain reason (console/incident/timeline.py makes
#: ``20261130-101500-ab12``; ``--incident ID`` may name others)
INCIDENT_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,63}")
#: a finding kind (the snapshot contract's words: ``zombie``, ``ghost-memory``, …)
FINDING_KIND = re.compile(r"[a-z][a-z0-9-]{0,31}")
REASON_PREFIX = "gpu-incident"

_RECORD = re.compile(r"(?P<id>[0-9]{1,10})\|(?P<user>[^|\n]{0,64})\|(?P<state>[A-Z_]{1,32})\|"
                     r"(?P<elapsed>[0-9:-]{1,20}|INVALID)\|(?P<nodes>[^|\n]{0,512})\|(?P<name>.*)")
_KEY = re.compile(r"(?:^| )([A-Za-z_][A-Za-z0-9_:/]*)=")
#: fields of ``scontrol show job`` that Slurm writes (after the name); one repeated = forged
_JOB_FIELDS = ("UserId", "GroupId", "JobState", "RunTime", "NodeList", "Partition")
_STEP_SCOPE = re.compile(r"(?:[A-Za-z0-9._-]+_)?slurmstepd\.scope")
_V1_ROOT = re.compile(r"slurm(?:_[A-Za-z0-9._-]+)?")
_JOB_DIR = re.compile(r"job_([0-9]{1,10})")


@dataclass(frozen=True)
class SlurmJob:
    job_id: str
    user: str | None = None
    name: str | None = None
    state: str | None = None          # RUNNING, COMPLETING, COMPLETED, CANCELLED, …
    elapsed: str | None = None        # as Slurm prints it: 1-02:03:04, 3:04
    nodes: str | None = None
    ambiguous: bool = False           # scontrol's record repeats a field Slurm owns: not read


@dataclass(frozen=True)
class SlurmNode:
    name: str
    state: str                        # IDLE, MIXED, IDLE+DRAIN, DOWN+DRAIN, ALLOCATED, …
    reason: str | None = None
    error: str | None = None          # (the action layer's readers carry errors the same way)

    @property
    def drained(self) -> bool:
        """DRAIN set: draining (jobs still run) or drained; no new job starts here."""
        return "DRAIN" in self.state.split("+")

    @property
    def flags(self) -> tuple[str, ...]:
        return tuple(self.state.split("+"))


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit] + "…"


def parse_squeue(text: str) -> tuple[SlurmJob, ...]:
    """``squeue -h -o SQUEUE_FORMAT`` -> jobs, in order; a repeated job id keeps its first record
    (a name that imitates a record line cannot replace the real one)."""
    jobs: list[SlurmJob] = []
    seen: set[str] = set()
    last: SlurmJob | None = None
    for line in str(text).rstrip("\n").split("\n"):
        m = _RECORD.fullmatch(line.rstrip("\r"))
        if m is None:
            if last is not None and jobs and jobs[-1] is last:     # the name went on over a newline
                last = SlurmJob(last.job_id, last.user, _clip(f"{last.name}\n{line}", MAX_NAME),
                                last.state, last.elapsed, last.nodes)
                jobs[-1] = last
            continue
        if m["id"] in seen:
            last = None
            continue
        if len(jobs) >= MAX_JOBS:
            break
        seen.add(m["id"])
        last = SlurmJob(m["id"], m["user"] or None, _clip(m["name"], MAX_NAME), m["state"], m["elapsed"],
                        m["nodes"] or None)
        jobs.append(last)
    return tuple(jobs)


def _fields(record: str) -> list[tuple[str, str]]:
    """``Key=value Key=value …`` -> pairs in order (a value runs up to the next `` Key=``)."""
    marks = list(_KEY.finditer(record))
    out = []
    for i, m in enumerate(marks):
        end = marks[i + 1].start() if i + 1 < len(marks) else len(record)
        out.append((m.group(1), record[m.end():end]))
    return out


def _user_name(value: str) -> str:
    """``alice(1000)`` -> ``alice``."""
    return value.split("(", 1)[0] if value.endswith(")") else value


def parse_show_job(text: str, job_id: str) -> SlurmJob | None:
    """``scontrol show job -o JOBID`` -> that job; None when Slurm does not know it ("Invalid job
    id specified": it ended longer than MinJobAge ago) or the output is not a job record."""
    text = str(text)
    start = re.search(rf"(?:^|\n)JobId={re.escape(str(job_id))} JobName=", text)
    if start is None:
        return None
    rest = text[start.end() - len("JobName="):]
    nxt = re.search(r"\nJobId=[0-9]+ JobName=", rest)       # a het/array job lists more records
    record = rest[:nxt.start()] if nxt else rest
    record = record.rstrip("\n")
    pairs = _fields(record.replace("\n", " \x00"))
    counts: dict[str, int] = {}
    for key, _ in pairs:
        counts[key] = counts.get(key, 0) + 1
    if any(counts.get(k, 0) > 1 for k in _JOB_FIELDS):
        return SlurmJob(str(job_id), ambiguous=True)
    got = {k: v.replace(" \x00", "\n").strip() for k, v in pairs}
    name_end = record.find(" UserId=")
    name = record[len("JobName="):name_end] if name_end >= 0 else got.get("JobName")
    nodes = got.get("NodeList")
    return SlurmJob(str(job_id), user=_user_name(got["UserId"]) if got.get("UserId") else None,
                    name=_clip(name, MAX_NAME) if name is not None else None,
                    state=got.get("JobState") or None, elapsed=got.get("RunTime") or None,
                    nodes=nodes if nodes and nodes != "(null)" else None)


def on_node(job: SlurmJob, node: str) -> bool:
    """Does the job's node list (a hostlist, ``gpu[01-04]``) name ``node``?"""
    if not job.nodes:
        return False
    import hostlist
    try:
        return node in hostlist.expand_hostlist(job.nodes)
    except Exception:  # noqa: BLE001 - python-hostlist raises its own and RecursionError on garbage
        return False


def confirmed(listed: SlurmJob, shown: SlurmJob | None, node: str) -> SlurmJob | None:
    """A job squeue listed on ``node``, checked against ``scontrol show job``: None when Slurm
    does not know it or places it elsewhere (a line forged inside another job's name); Slurm's
    own record when it reads unambiguously; squeue's, marked ambiguous, when it does not."""
    if shown is None:
        return None
    if shown.ambiguous:
        return SlurmJob(listed.job_id, ambiguous=True)
    if not on_node(shown, node):
        return None
    return shown


def parse_show_node(text: str) -> SlurmNode | None:
    """``scontrol show node -o NODE`` -> its name, state and reason; None when not a node record."""
    line = str(text).split("\n", 1)[0].rstrip("\r")
    if not line.startswith("NodeName="):
        return None
    got: dict[str, str] = {}
    for key, value in _fields(line):
        got.setdefault(key, value.strip())
    name, state = got.get("NodeName"), got.get("State")
    if not name or not state or not re.fullmatch(r"[A-Z_*~#!%$@^-]+(?:\+[A-Z_*~#!%$@^-]+)*", state):
        return None
    reason = got.get("Reason")
    return SlurmNode(name=name.split(" ", 1)[0], state=state.rstrip("*~#!%$@^-") or state,
                     reason=_clip(reason, 400) if reason else None)


def job_of_cgroup(path: str | None) -> str | None:
    """The Slurm job ID a cgroup path belongs to, or None (not a job step's cgroup)."""
    if not path:
        return None
    parts = [p for p in str(path)[:4096].split("/") if p]
    for i, part in enumerate(parts):
        m = _JOB_DIR.fullmatch(part)
        if m is None or i == 0:
            continue
        above = parts[i - 1]
        if _STEP_SCOPE.fullmatch(above) or (i >= 2 and above.startswith("uid_")
                                            and above[4:].isdecimal() and _V1_ROOT.fullmatch(parts[i - 2])):
            return m.group(1)
    return None


# ---------------------------------------------------------------- what goes to Slurm

def node_name(name: str) -> str:
    """A Slurm node name the console may send; ValueError (one line) for anything else."""
    text = str(name)
    if not NODE_NAME.fullmatch(text):
        raise ValueError(f"not a Slurm node name the console sends: {text[:80]!r} "
                         "(letters, digits, '.', '_', '-'; no hostlist)")
    return text


def short_host(host: str) -> str:
    """``gpu01.cluster.example`` -> ``gpu01`` (an IP address stays whole)."""
    text = str(host).strip()
    if re.fullmatch(r"[0-9.]+", text) or ":" in text:
        return text
    return text.split(".", 1)[0]


def drain_reason(incident_id: str, finding_kind: str) -> str:
    """``gpu-incident <incident-id>: <finding kind>``, from these two only, each checked against
    a narrow charset; ValueError rather than a reason that holds anything else."""
    ident, kind = str(incident_id), str(finding_kind)
    if not INCIDENT_ID.fullmatch(ident):
        raise ValueError(f"incident ID {ident[:80]!r} cannot go into a Slurm reason "
                         "(letters, digits, '.', '_', ':', '-')")
    if not FINDING_KIND.fullmatch(kind):
        raise ValueError(f"finding kind {kind[:80]!r} cannot go into a Slurm reason (a-z, 0-9, '-')")
    return f"{REASON_PREFIX} {ident}: {kind}"


def drain_argv(node: str, reason: str) -> tuple[str, ...]:
    """The drain command as argv: the reason is one argument (``Reason=…``), never split."""
    return ("scontrol", "update", f"NodeName={node_name(node)}", "State=DRAIN", f"Reason={reason}")


def resume_argv(node: str) -> tuple[str, ...]:
    return ("scontrol", "update", f"NodeName={node_name(node)}", "State=RESUME")


_PLAIN = re.compile(r"[A-Za-z0-9._:/=+,@%-]+")
_PLAIN_WITH_SPACES = re.compile(r"[A-Za-z0-9._:/=+,@% -]+")


def shell_line(argv: tuple[str, ...] | list[str]) -> str:
    """argv as a shell reads it, the way an operator writes it: plain words bare, a word of plain
    characters and spaces in double quotes after its ``=`` (``Reason="gpu-incident x: zombie"``),
    anything else through shlex.quote. ``shlex.split`` of the result gives ``argv`` back."""
    import shlex
    out = []
    for word in argv:
        if _PLAIN.fullmatch(word):
            out.append(word)
        elif _PLAIN_WITH_SPACES.fullmatch(word) and "=" in word:
            key, _, value = word.partition("=")
            out.append(f'{key}="{value}"' if _PLAIN.fullmatch(key) else shlex.quote(word))
        else:
            out.append(shlex.quote(word))
    return " ".join(out)


def show_node_argv(node: str) -> tuple[str, ...]:
    return ("scontrol", "show", "node", "-o", node_name(node))


def squeue_argv(node: str) -> tuple[str, ...]:
    return ("squeue", "-w", node_name(node), "-h", "-o", SQUEUE_FORMAT)


def show_job_argv(job_id: str) -> tuple[str, ...]:
    if not str(job_id).isdecimal():
        raise ValueError(f"not a job ID: {str(job_id)[:40]!r}")
    return ("scontrol", "show", "job", "-o", str(job_id))
