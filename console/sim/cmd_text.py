"""Simulated file and text tools: cat, head, tail, grep, wc, sort, uniq, cut, sed, ls, readlink.

Every handler is ``async (shell, argv, stdin) -> (stdout, stderr, rc)``.
"""
from __future__ import annotations

import re
from typing import Callable

from console.sim import procfs, vfs


async def c_cat(sh, argv, stdin):
    files = [a for a in argv[1:] if not a.startswith("-") or a == "-"]
    if not files:
        return stdin, "", 0
    out, err, rc = [], [], 0
    for f in files:
        if f == "-":
            out.append(stdin)
            continue
        text = vfs.read_file(sh.node, f)
        if text is None:
            if vfs.listdir(sh.node, f) is not None:
                err.append(f"cat: {f}: Is a directory\n")
            else:
                err.append(f"cat: {f}: No such file or directory\n")
            rc = 1
            continue
        out.append(text)
    return "".join(out), "".join(err), rc


def _read_files(sh, files: list[str], complaint: Callable[[str], str],
                failed_rc: int) -> tuple[list[str], str, int]:
    """(texts of the files that exist, a complaint per missing one, ``failed_rc`` if any was missing)."""
    texts, err, rc = [], "", 0
    for f in files:
        t = vfs.read_file(sh.node, f)
        if t is None:
            err += complaint(f)
            rc = failed_rc
        else:
            texts.append(t)
    return texts, err, rc


def _lines_arg(argv, default=10):
    n, files = default, []
    it = iter(argv[1:])
    for a in it:
        if a == "-n":
            n = int(next(it, str(default)).lstrip("+-") or default)
        elif a.startswith("-n"):
            n = int(a[2:].lstrip("+-") or default)
        elif a.startswith("-") and a[1:].isdecimal():
            n = int(a[1:])
        elif a in ("-q", "-v"):
            continue
        else:
            files.append(a)
    return n, files


async def _head_tail(sh, argv, stdin, tail: bool):
    name = "tail" if tail else "head"
    try:
        n, files = _lines_arg(argv)
    except ValueError:
        return "", f"{name}: invalid number of lines\n", 1
    if not files:
        texts, err, rc = [stdin], "", 0
    else:
        texts, err, rc = _read_files(
            sh, files, lambda f: f"{name}: cannot open '{f}' for reading: No such file or directory\n", 1)
    out = []
    for t in texts:
        lines = t.splitlines(keepends=True)
        out += (lines[-n:] if n else []) if tail else lines[:n]
    return "".join(out), err, rc


async def c_head(sh, argv, stdin):
    return await _head_tail(sh, argv, stdin, False)


async def c_tail(sh, argv, stdin):
    return await _head_tail(sh, argv, stdin, True)


def _bre_to_re(pattern: str) -> str:
    """A basic regular expression (grep, sed) as a Python one."""
    out, i = [], 0
    while i < len(pattern):
        c = pattern[i]
        if c == "\\" and i + 1 < len(pattern):
            nxt = pattern[i + 1]
            out.append(nxt if nxt in "(){}|+?" else "\\" + nxt)
            i += 2
            continue
        out.append("\\" + c if c in "(){}|+?" else c)
        i += 1
    return "".join(out)


async def c_grep(sh, argv, stdin):
    ext = fixed = invert = icase = count = listing = quiet = silent = word = False
    patterns, files = [], []
    it = iter(argv[1:])
    for a in it:
        if a == "-e":
            patterns.append(next(it, ""))
        elif a.startswith("-") and len(a) > 1 and not patterns and a != "--":
            for ch in a[1:]:
                ext |= ch == "E"
                fixed |= ch == "F"
                invert |= ch == "v"
                icase |= ch == "i"
                count |= ch == "c"
                listing |= ch == "l"
                quiet |= ch == "q"
                silent |= ch == "s"
                word |= ch == "w"
        elif not patterns:
            patterns.append(a)
        else:
            files.append(a)
    if not patterns:
        return "", "Usage: grep [OPTION]... PATTERNS [FILE]...\nTry 'grep --help' for more information.\n", 2
    rx = []
    for p in patterns:
        src = re.escape(p) if fixed else (p if ext else _bre_to_re(p))
        if word:
            src = rf"\b(?:{src})\b"
        try:
            rx.append(re.compile(src, re.IGNORECASE if icase else 0))
        except re.error:
            return "", "grep: Unmatched ( or \\(\n", 2
    sources = [(None, stdin)] if not files else []
    err, missing = [], False
    for f in files:
        t = vfs.read_file(sh.node, f)
        if t is None:
            missing = True
            if not silent:
                err.append(f"grep: {f}: No such file or directory\n")
            continue
        sources.append((f, t))
    out, found = [], False
    for name, text in sources:
        hits = [ln for ln in text.splitlines() if any(r.search(ln) for r in rx) != invert]
        found |= bool(hits)
        if listing:
            if hits:
                out.append(f"{name or '(standard input)'}\n")
        elif count:
            out.append((f"{name}:" if len(files) > 1 else "") + f"{len(hits)}\n")
        else:
            prefix = f"{name}:" if len(files) > 1 else ""
            out += [prefix + h + "\n" for h in hits]
    if quiet:
        out = []
    rc = 0 if found else (2 if missing else 1)
    return "".join(out), "".join(err), rc


async def c_wc(sh, argv, stdin):
    lines = stdin.count("\n")
    if "-l" in argv:
        return f"{lines}\n", "", 0
    return f"{lines:7d} {len(stdin.split()):7d} {len(stdin.encode()):7d}\n", "", 0


async def c_sort(sh, argv, stdin):
    lines = stdin.splitlines()
    flags = "".join(a[1:] for a in argv[1:] if a.startswith("-"))
    if "n" in flags:
        def key(s):
            m = re.match(r"\s*(-?\d+(?:\.\d+)?)", s)
            return (float(m.group(1)) if m else 0.0, s)
        lines.sort(key=key)
    else:
        lines.sort()
    if "r" in flags:
        lines.reverse()
    if "u" in flags:
        lines = list(dict.fromkeys(lines))
    return "".join(ln + "\n" for ln in lines), "", 0


async def c_uniq(sh, argv, stdin):
    out, prev, n = [], None, 0
    for ln in stdin.splitlines() + [None]:
        if ln == prev:
            n += 1
            continue
        if prev is not None:
            out.append((f"{n:7d} " if "-c" in argv else "") + prev + "\n")
        prev, n = ln, 1
    return "".join(out), "", 0


def _fields_spec(spec: str) -> list[tuple[int, int]]:
    out = []
    for part in spec.split(","):
        a, dash, b = part.partition("-")
        lo = int(a) if a else 1
        hi = (int(b) if b else 10 ** 9) if dash else lo
        out.append((lo, hi))
    return out


def _merged(ranges: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Ranges sorted and merged: cut prints each selected position once, in order."""
    out: list[tuple[int, int]] = []
    for lo, hi in sorted(ranges):
        if out and lo <= out[-1][1] + 1:
            out[-1] = (out[-1][0], max(out[-1][1], hi))
        else:
            out.append((lo, hi))
    return out


async def c_cut(sh, argv, stdin):
    delim, spec, chars, files = "\t", None, None, []
    it = iter(argv[1:])
    for a in it:
        if a == "-d":
            delim = next(it, "\t")
        elif a.startswith("-d"):
            delim = a[2:]
        elif a == "-f":
            spec = next(it, "")
        elif a.startswith("-f"):
            spec = a[2:]
        elif a in ("-c", "-b"):
            chars = next(it, "")
        elif a.startswith(("-c", "-b")):
            chars = a[2:]
        else:
            files.append(a)
    if spec is None and chars is None:
        return "", "cut: you must specify a list of bytes, characters, or fields\n", 1
    text = stdin if not files else "".join(vfs.read_file(sh.node, f) or "" for f in files)
    if chars is not None:            # GNU cut: -c is -b, counted per line ("\n" ends a line)
        spans = _merged(_fields_spec(chars))
        lines = text.split("\n")[:-1] if text.endswith("\n") else text.split("\n") if text else []
        return "".join("".join(ln[lo - 1:hi] for lo, hi in spans) + "\n" for ln in lines), "", 0
    ranges = _fields_spec(spec)
    out = []
    for ln in text.splitlines():
        if delim not in ln:
            out.append(ln)
            continue
        parts = ln.split(delim)
        keep = [p for i, p in enumerate(parts, 1) if any(lo <= i <= hi for lo, hi in ranges)]
        out.append(delim.join(keep))
    return "".join(ln + "\n" for ln in out), "", 0


async def c_sed(sh, argv, stdin):
    exprs, files = [], []
    it = iter(argv[1:])
    for a in it:
        if a == "-e":
            exprs.append(next(it, ""))
        elif a in ("-E", "-r"):
            continue
        elif not exprs:
            exprs.append(a)
        else:
            files.append(a)
    text = stdin
    err, rc = "", 0
    if files:
        chunks, err, rc = _read_files(
            sh, files, lambda f: f"sed: can't read {f}: No such file or directory\n", 2)
        text = "".join(chunks)
    for e in exprs:
        m = re.match(r"^s(.)(.*?)\1(.*?)\1(g?)$", e)
        if not m:
            return "", f"sed: -e expression #1, char {len(e)}: unknown command: `{e[:1]}'\n", 1
        rx = re.compile(_bre_to_re(m.group(2)))
        repl = m.group(3).replace("\\", "\\\\").replace("&", r"\g<0>")
        count = 0 if m.group(4) else 1
        text = "".join(rx.sub(repl, ln, count=count) + "\n" for ln in text.splitlines())
    return text, err, rc


async def c_ls(sh, argv, stdin):
    long = any(a.startswith("-") and "l" in a for a in argv[1:])
    paths = [a for a in argv[1:] if not a.startswith("-")] or ["."]
    out, err, rc = [], [], 0
    for path in paths:
        parts = path.strip("/").split("/")
        p = sh.node.proc(int(parts[1])) if len(parts) >= 2 and parts[0] == "proc" and parts[1].isdecimal() else None
        names = vfs.listdir(sh.node, path)
        if names is None:
            if vfs.exists(sh.node, path):
                out.append(path + "\n")
            else:
                err.append(f"ls: cannot access '{path}': No such file or directory\n")
                rc = 2
            continue
        if len(paths) > 1:
            out.append(f"{path}:\n")
        if long and p is not None and parts[2:] == ["task"]:
            out.append(procfs.ls_task(sh.node, p))
        elif long and p is not None and parts[2:] == ["fd"]:
            out.append(procfs.ls_fd(sh.node, p))
        else:
            key = (lambda s: (0, int(s)) if s.isdecimal() else (1, s)) if path.rstrip("/") != "/proc" else \
                (lambda s: (0, int(s)) if s.isdecimal() else (1, s))
            out.append("".join(n + "\n" for n in sorted(names, key=key)))
    return "".join(out), "".join(err), rc


async def c_readlink(sh, argv, stdin):
    paths = [a for a in argv[1:] if not a.startswith("-")]
    out, rc = [], 0
    for path in paths:
        target = vfs.readlink(sh.node, path)
        if target is None:
            rc = 1
        else:
            out.append(target + "\n")
    return "".join(out), "", rc
