"""A small fake POSIX shell (dash-like) that runs on a SimHost (host.py).

It understands exactly the probe lines of ``probe.build_script`` (each line is
recognised against probe.py's own commands; the loop sections and the driver sections'
skip-after-a-timeout are answered directly by probe_answers.py and _driver_section, the rest
run through the ordinary machinery below), the
guarded kill line of ``probe.guarded_kill_command``, and simple command lines: ``;``, ``&&``,
``||``, pipes, ``2>&1``/``2>/dev/null``/``>/dev/null``, quotes, ``$?``, ``$$``,
``$VAR``, ``$(...)`` and globs over the simulated /proc and /dev.
"""
from __future__ import annotations

import fnmatch
import re

from console.model import CommandResult
from console import probe, probe_loop
from console.sim import probe_answers, vfs
from console.sim.commands import COMMANDS
from console.sim.errors import Deadline, Rebooting, ShellExit

_PROBE_LINE = re.compile(r"^echo '(?P<mark>[^']*) begin (?P<name>\w+)'; ")
_LOOP_STOP = re.compile(r"</proc/(?P<pid>\d+)/cmdline ")
_GUARD = re.compile(r"/proc/(?P<pid>\d+)/stat .*\[ \"\$s\" = (?P<ticks>-?\d+) \]; then kill -s (?P<sig>\w+) ")
_REDIR = re.compile(r"^(\d?)(>>|>|<)(&?)(.*)$")
_ASSIGN = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")


def split_list(line: str) -> list[tuple[str, str]]:
    """Cut a command line at top-level operators: [(text, operator after it)]."""
    items: list[tuple[str, str]] = []
    buf: list[str] = []
    i, n = 0, len(line)
    quote: str | None = None
    depth = 0
    while i < n:
        c = line[i]
        if quote == "'":
            buf.append(c)
            if c == "'":
                quote = None
            i += 1
            continue
        if c == "\\" and i + 1 < n:
            buf.append(line[i:i + 2])
            i += 2
            continue
        if quote == '"':
            if line.startswith("$(", i):
                depth += 1
                buf.append("$(")
                i += 2
                continue
            if c == ")" and depth:
                depth -= 1
            elif c == '"':
                quote = None
            buf.append(c)
            i += 1
            continue
        if c in "'\"":
            quote = c
            buf.append(c)
            i += 1
            continue
        if line.startswith("$(", i):
            depth += 1
            buf.append("$(")
            i += 2
            continue
        if depth:
            if c == "(":
                depth += 1
            elif c == ")":
                depth -= 1
            buf.append(c)
            i += 1
            continue
        if c == "#" and (not buf or buf[-1] in " \t"):
            break
        op = next((o for o in ("&&", "||", ";", "|", "&") if line.startswith(o, i)), None)
        if op == "&" and ((buf and buf[-1] in "<>") or line.startswith("&>", i)):
            op = None
        if op is not None:
            items.append(("".join(buf), op))
            buf = []
            i += len(op)
            continue
        buf.append(c)
        i += 1
    items.append(("".join(buf), ""))
    return items


def _matching_paren(text: str, start: int) -> int:
    """Index of the ')' closing the '(' at ``start - 1``; len(text) if none."""
    depth, i, quote = 1, start, None
    while i < len(text):
        c = text[i]
        if quote:
            if c == quote:
                quote = None
            elif c == "\\" and quote == '"':
                i += 1
        elif c in "'\"":
            quote = c
        elif c == "\\":
            i += 1
        elif c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
            if depth == 0:
                return i
        i += 1
    return len(text)


class Shell:
    def __init__(self, node, deadline: float, env: dict[str, str] | None = None) -> None:
        """``env``: the variables of a long-lived shell, kept across calls (the SSH server's
        ``exec sh`` runs one line per call)."""
        self.node = node
        self.deadlines = [deadline]
        self.out: list[str] = []
        self.err: list[str] = []
        self.status = 0
        self.vars: dict[str, str] = env if env is not None else {}
        self.lineno = 1
        self.chain: list[tuple[str, str]] = []     # (comm, args) of commands running above the current one

    # ------------------------------------------------------------------ time

    def knows(self, command: str) -> bool:
        """A command this shell can run (what `timeout CMD` checks before it starts)."""
        return command in COMMANDS

    async def sleep(self, seconds: float) -> None:
        clock = self.node.clock
        now = clock.now()
        limit = min(self.deadlines)
        if now + seconds > limit:
            await clock.sleep(max(0.0, limit - now))
            raise Deadline(limit)
        await clock.sleep(seconds)

    # ------------------------------------------------------------------ running

    async def run(self, script: str) -> int:
        for lineno, line in enumerate(script.split("\n"), 1):
            self.lineno = lineno
            if not line.strip() or probe.coalesce_line(line):
                continue
            if await self._probe_line(line):
                continue
            if await self._guarded_kill(line):
                continue
            if self._loop_stop(line):
                continue
            loop = probe_answers.loop_command(line.strip())
            if loop is not None:
                answer, glob = loop
                self.out.append(answer(self.node, glob, self.vars))
                self.status = 0
                continue
            await self.run_line(line)
        return self.status

    async def run_line(self, line: str) -> int:
        pipes: list[tuple[list[str], str]] = []
        stages: list[str] = []
        for text, op in split_list(line):
            stages.append(text)
            if op != "|":
                pipes.append((stages, op))
                stages = []
        prev = ";"
        for stages, op in pipes:
            if all(not s.strip() for s in stages):
                prev = op or prev
                continue
            if prev == "&&" and self.status != 0 or prev == "||" and self.status == 0:
                pass
            else:
                self.status = await self.run_pipeline(stages)
            prev = op
        return self.status

    async def run_pipeline(self, stages: list[str]) -> int:
        data = ""
        rc = 0
        for text in stages:
            words, redirs = await self.expand(text)
            stdin = data
            for fd, target in redirs:
                if fd == 0 and not target.startswith("&"):
                    stdin = vfs.read_file(self.node, target) or ""
            out, err, rc = await self.run_simple(words, stdin)
            sinks = {1: "out", 2: "err"}
            for fd, target in redirs:
                if fd == 0:
                    continue
                if target.startswith("&"):
                    sinks[fd] = sinks.get(int(target[1:]) if target[1:].isdecimal() else 1, "null")
                else:
                    sinks[fd] = "null"          # files (and /dev/null) are not kept
            routed = []
            for fd, chunk in ((1, out), (2, err)):
                if sinks[fd] == "out":
                    routed.append(chunk)
                elif sinks[fd] == "err":
                    self.err.append(chunk)
            data = "".join(routed)
        self.out.append(data)
        return rc

    async def capture(self, script: str) -> str:
        saved = self.out
        self.out = []
        try:
            for line in script.split("\n"):
                if line.strip():
                    await self.run_line(line)
            return "".join(self.out)
        finally:
            self.out = saved

    async def run_simple(self, words: list[str], stdin: str) -> tuple[str, str, int]:
        while words and _ASSIGN.match(words[0]):
            name, _, value = words[0].partition("=")
            if len(words) == 1:
                self.vars[name] = value
            words = words[1:]
        if not words:
            return "", "", self.status if self.vars else 0
        name = words[0]
        base = name.rsplit("/", 1)[-1] if name.startswith(("/usr/bin/", "/bin/", "/usr/sbin/", "/sbin/")) else name
        handler = COMMANDS.get(base)
        if handler is None:
            return "", f"sh: {self.lineno}: {name}: not found\n", 127
        self.chain.append((base[:15], " ".join(words)))
        try:
            return await handler(self, words, stdin)
        except (ValueError, IndexError, KeyError, StopIteration, re.error) as exc:
            # a tool given arguments it cannot use says so and fails, as real tools do
            return "", f"{base}: invalid argument: {exc}\n", 2
        finally:
            self.chain.pop()

    # ------------------------------------------------------------------ words

    async def dollar(self, text: str, i: int) -> tuple[str, int]:
        nxt = text[i + 1:i + 2]
        if nxt == "?":
            return str(self.status), i + 2
        if nxt == "$":
            return str(self.node.shell_pid), i + 2
        if nxt == "#":
            return "0", i + 2
        if nxt == "(":
            end = _matching_paren(text, i + 2)
            inner = text[i + 2:end]
            return (await self.capture(inner)).rstrip("\n"), end + 1
        if nxt == "{":
            end = text.find("}", i + 2)
            if end < 0:
                return "", len(text)
            return self._param(text[i + 2:end]), end + 1
        m = re.match(r"[A-Za-z_][A-Za-z0-9_]*|\d", text[i + 1:])
        if m:
            name = m.group(0)
            return ("sh" if name == "0" else self.vars.get(name, "")), i + 1 + len(name)
        return "$", i + 1

    def _param(self, expr: str) -> str:
        m = re.match(r"([A-Za-z_][A-Za-z0-9_]*)(:-|-|%%|%|##|#)?(.*)$", expr)
        if not m:
            return ""
        name, op, word = m.groups()
        val = self.vars.get(name)
        if op in (":-", "-"):
            return (val if (val or (op == "-" and val is not None)) else word)
        val = val or ""
        if op in ("%", "%%"):
            rng = range(len(val), -1, -1) if op == "%" else range(0, len(val) + 1)
            for k in rng:
                if fnmatch.fnmatchcase(val[k:], word):
                    return val[:k]
            return val
        if op in ("#", "##"):
            rng = range(0, len(val) + 1) if op == "#" else range(len(val), -1, -1)
            for k in rng:
                if fnmatch.fnmatchcase(val[:k], word):
                    return val[k:]
            return val
        return val

    async def expand(self, text: str) -> tuple[list[str], list[tuple[int, str]]]:
        """Words (quotes removed, $ expanded, globs matched) and redirections [(fd, target)]."""
        words: list[list] = []          # [text, glob, quoted]
        cur: list | None = None
        i, n = 0, len(text)
        while i < n:
            c = text[i]
            if c in " \t\n":
                if cur is not None:
                    words.append(cur)
                    cur = None
                i += 1
                continue
            if cur is None:
                cur = ["", False, False]
            if c == "'":
                j = text.find("'", i + 1)
                j = n if j < 0 else j
                cur[0] += text[i + 1:j]
                cur[2] = True
                i = j + 1
                continue
            if c == '"':
                cur[2] = True
                i += 1
                while i < n and text[i] != '"':
                    if text[i] == "\\" and i + 1 < n and text[i + 1] in '"\\$`':
                        cur[0] += text[i + 1]
                        i += 2
                    elif text[i] == "$":
                        val, i = await self.dollar(text, i)
                        cur[0] += val
                    else:
                        cur[0] += text[i]
                        i += 1
                i += 1
                continue
            if c == "\\":
                cur[0] += text[i + 1:i + 2]
                cur[2] = True
                i += 2
                continue
            if c == "$":
                val, i = await self.dollar(text, i)
                pieces = val.split()
                if not pieces:
                    if not cur[0] and not cur[2]:
                        cur = None
                    continue
                if val[:1].isspace() and cur[0]:
                    words.append(cur)
                    cur = ["", False, False]
                cur[0] += pieces[0]
                for piece in pieces[1:]:
                    words.append(cur)
                    cur = [piece, False, False]
                if val[-1:].isspace():
                    words.append(cur)
                    cur = None
                continue
            if c in "*?[":
                cur[1] = True
            cur[0] += c
            i += 1
        if cur is not None:
            words.append(cur)
        out: list[str] = []
        redirs: list[tuple[int, str]] = []
        k = 0
        while k < len(words):
            word, globbed, quoted = words[k]
            m = _REDIR.match(word) if not quoted else None
            amp = word.startswith("&>") and not quoted
            if amp:
                redirs += [(1, word[2:] or "/dev/null"), (2, "&1")]
            elif m and (m.group(1) or word[:1] in "<>"):
                fd = int(m.group(1)) if m.group(1) else (0 if m.group(2) == "<" else 1)
                target = m.group(3) + m.group(4)
                if not m.group(4) and k + 1 < len(words):
                    k += 1
                    target = m.group(3) + words[k][0]
                redirs.append((fd, target))
            elif globbed and not quoted:
                matches = vfs.glob(self.node, word)
                out.extend(matches or [word])
            else:
                out.append(word)
            k += 1
        return out, redirs

    # ------------------------------------------------------------------ probe lines

    async def _probe_line(self, line: str) -> bool:
        m = _PROBE_LINE.match(line)
        if not m:
            return False
        mark, name = m.group("mark"), m.group("name")
        command = probe.section_command(line, mark, name)
        if command is None:
            return False
        glob = probe_answers.device_glob(line)
        if glob is None:
            return False
        answer = probe_answers.recognise(name, command, glob)
        if answer is None and not (name in probe.DRIVER_SECTIONS and command == probe.driver_call(name)):
            return False                 # an ordinary command line: run it the ordinary way
        self.out.append(f"{mark} begin {name}\n")
        if answer is not None:
            self.out.append(answer(self.node, glob, self.vars))
            self.status = 0
        else:
            await self._driver_section(name)
        self.out.append(f"{mark} end {name} {self.status}\n")
        return True

    async def _driver_section(self, name: str) -> None:
        """What probe.driver_call does: run the call under timeout, keep its status in NV_RC,
        skip it once an earlier call of the probe timed out; the gpu section asks for the
        recovery action unless the driver is old or this shell's nvidia-smi rejected it
        (probe.gpu_call)."""
        first = name == next(iter(probe.DRIVER_SECTIONS))
        if name == "remap":                  # probe.remap_call
            if self.vars.get(probe.NV_RC, "") != "0":
                self.out.append(probe.REMAP_SKIPPED + "\n")
                self.status = int(self.vars.get(probe.NV_RC) or 0)
                return
            await self.run_line(f"{probe.timed(probe.QUERY_REPAIR)} 2>&1")
            if self.status == 2:
                await self.run_line(f"{probe.timed(probe.QUERY_RETIRED)} 2>&1")
            rc = self.status
            if probe.NVSWITCH_CTL in self.node.device_paths():      # an NVSwitch system: the fabric too
                self.out.append(probe.FABRIC_MARK + "\n")
                await self.run_line(f"{probe.timed(probe.QUERY_FABRIC)} 2>&1")
            self.vars[probe.NV_RC] = str(rc)
            self.status = rc
            return
        if name == "pmon":                   # probe.pmon_call: as remap, only after answers
            if self.vars.get(probe.NV_RC, "") != "0":
                self.out.append(probe.REMAP_SKIPPED + "\n")
                self.status = int(self.vars.get(probe.NV_RC) or 0)
                return
            await self.run_line(f"{probe.timed(probe.QUERY_PMON)} 2>&1")
            self.vars[probe.NV_RC] = str(self.status)
            return
        if not first and self.vars.get(probe.NV_RC) == "124":
            self.out.append(probe.SKIPPED + "\n")
            self.status = 124
            return
        if name == "gpu":
            version = (vfs.read_file(self.node, probe.DRIVER_VERSION_FILE) or "").split("\n", 1)[0]
            if self.vars.get(probe.RF, "1") != "0" and not probe.old_driver(version):
                await self.run_line(f"{probe.timed(probe.QUERY_GPU_RECOVERY)} 2>&1")
                self.vars[probe.NV_RC] = str(self.status)
                if self.status != 2:
                    return
                self.vars[probe.RF] = "0"
        await self.run_line(f"{probe.timed(probe.DRIVER_SECTIONS[name])} 2>&1")
        self.vars[probe.NV_RC] = str(self.status)

    def _loop_stop(self, line: str) -> bool:
        """probe_loop.guarded_stop_command: the loop stops while it is one of this node's
        console loops (sim/probe_answers.py), else the refusal the real command prints."""
        m = _LOOP_STOP.search(line)
        if not m or probe_loop.guarded_stop_command(int(m.group("pid"))) != line:
            return False
        pid = int(m.group("pid"))
        if pid in self.node.smi_loops:
            del self.node.smi_loops[pid]
            self.status = 0
            return True
        self.err.append(f"refused: PID {pid} is no longer an nvidia-smi loop of this console\n")
        raise ShellExit(3)

    async def _guarded_kill(self, line: str) -> bool:
        m = _GUARD.search(line)
        if not m:
            return False
        pid, ticks, sig = int(m.group("pid")), int(m.group("ticks")), m.group("sig")
        try:
            if probe.guarded_kill_command(pid, sig, ticks) != line:
                return False
        except ValueError:
            return False
        p = self.node.proc(pid)
        current = str(self.node.ticks(p.start)) if p is not None else ""
        if current == str(ticks):
            await self.run_line(f"kill -s {sig} {pid}")
            return True
        self.err.append(f"refused: PID {pid} is no longer the same process (start time changed)\n")
        raise ShellExit(3)


async def run_script(node, script: str, timeout: float, env: dict[str, str] | None = None) -> CommandResult:
    clock = node.clock
    started = clock.now()
    node.settle()
    node.history.append((started, script))
    if node.down_until is not None:
        return CommandResult(command=script, rc=None, error="unreachable: the node is rebooting (no route to host)")
    sh = Shell(node, started + max(0.0, timeout), env)
    rc: int | None
    error = None
    try:
        rc = await sh.run(script)
    except ShellExit as exc:
        rc = exc.code
    except Deadline:
        rc = None
        error = f"timed out after {timeout:g}s"
    except Rebooting:
        rc = None
        error = "unreachable: connection closed by the node (rebooting)"
    node.settle()
    return CommandResult(command=script, rc=rc, stdout="".join(sh.out), stderr="".join(sh.err),
                         duration_s=round(clock.now() - started, 6), error=error)
