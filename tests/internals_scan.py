"""What in a module's source reaches into CPython's or Textual's internals (tests/test_no_internals.py).

``violations(source, module, ancestry)`` reads the source's syntax tree, nothing else: it names
what it finds, one line each. ``ancestry(module, name)`` tells it what a class it subclasses
derives from outside the console (the test answers it by importing the class); it may say None
(not a class, or not known).

- ``._ready``: asyncio's private queue of due callbacks (an attribute, or its name in getattr);
- ``gc.disable()``: the collector off for the whole process;
- a method of a subclass, named with one underscore, that a Textual or asyncio class it derives
  from defines: an override of their private method;
- a subclass of Textual's Driver, an override of ``get_driver_class``, or ``driver_class=``
  given: a wrapper of Textual's driver;
- an App subclass that overrides ``post_message`` or ``run_action``.
"""
from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import Callable


@dataclass(frozen=True)
class Ancestry:
    external: frozenset[str]    # the Textual and asyncio classes it derives from, "textual.app.App"
    privates: dict[str, str]    # each name with one underscore those classes define: the first that does


Lookup = Callable[[str, str], "Ancestry | None"]
DRIVER = "textual.driver.Driver"
APP = "textual.app.App"


def single_underscore(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def imported_names(tree: ast.Module, module: str) -> dict[str, tuple[str, str]]:
    """Name -> (module, attribute): ``from m import X as N``; ``import m as N`` is (m, "")."""
    names: dict[str, tuple[str, str]] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = module.split(".")[:-node.level]
                base = ".".join(parent + ([base] if base else []))
            for a in node.names:
                names[a.asname or a.name] = (base, a.name)
        elif isinstance(node, ast.Import):
            for a in node.names:
                names[a.asname or a.name.split(".")[0]] = (a.name if a.asname else a.name.split(".")[0], "")
    return names


def base_ref(expr: ast.expr, names: dict[str, tuple[str, str]], module: str) -> tuple[str, str] | None:
    """Where a base class expression comes from: (module, name)."""
    if isinstance(expr, ast.Subscript):            # App[int], ModalScreen[str | None]
        expr = expr.value
    if isinstance(expr, ast.Name):
        return names.get(expr.id, (module, expr.id))
    parts: list[str] = []
    while isinstance(expr, ast.Attribute):         # textual.app.App, app.App
        parts.insert(0, expr.attr)
        expr = expr.value
    if not isinstance(expr, ast.Name) or not parts:
        return None
    mod, attr = names.get(expr.id, (expr.id, ""))
    return ".".join([mod] + ([attr] if attr else []) + parts[:-1]), parts[-1]


def violations(source: str, module: str, ancestry: Lookup) -> list[str]:
    tree = ast.parse(source)
    names = imported_names(tree, module)
    found: list[str] = []
    for node in ast.walk(tree):
        where = f"{module}:{getattr(node, 'lineno', 0)}"
        if isinstance(node, ast.Attribute) and node.attr == "_ready":
            found.append(f"{where} asyncio's private loop._ready")
        elif isinstance(node, ast.Call):
            func = node.func
            if (isinstance(func, ast.Name) and func.id in ("getattr", "setattr", "hasattr")
                    and len(node.args) > 1 and isinstance(node.args[1], ast.Constant)
                    and node.args[1].value == "_ready"):
                found.append(f"{where} asyncio's private loop._ready")
            if (isinstance(func, ast.Attribute) and func.attr == "disable" and isinstance(func.value, ast.Name)
                    and names.get(func.value.id) == ("gc", "")
                    or isinstance(func, ast.Name) and names.get(func.id) == ("gc", "disable")):
                found.append(f"{where} gc.disable(): the collector off for the whole process")
            if any(k.arg == "driver_class" for k in node.keywords):
                found.append(f"{where} driver_class=: a driver of one's own")
        elif isinstance(node, ast.ClassDef):
            found += class_violations(node, where, names, module, ancestry)
    return found


def class_violations(node: ast.ClassDef, where: str, names: dict[str, tuple[str, str]], module: str,
                     ancestry: Lookup) -> list[str]:
    external: set[str] = set()
    privates: dict[str, str] = {}
    for base in node.bases:
        ref = base_ref(base, names, module)
        known = ancestry(*ref) if ref is not None else None
        if known is not None:
            external |= known.external
            privates = {**known.privates, **privates}
    methods = [f.name for f in node.body if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))]
    found = [f"{where} {node.name}.{m} overrides a private method of {privates[m]}"
             for m in methods if single_underscore(m) and m in privates]
    if DRIVER in external:
        found.append(f"{where} {node.name} subclasses Textual's Driver")
    if "get_driver_class" in methods:
        found.append(f"{where} {node.name}.get_driver_class: a driver of one's own")
    if APP in external:
        found += [f"{where} {node.name}.{m} overrides the App's {m}"
                  for m in methods if m in ("post_message", "run_action")]
    return found
