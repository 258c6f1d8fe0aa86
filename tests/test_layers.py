"""The architecture holds: import-linter's contracts (pyproject.toml) pass on the tree, and a
deliberate violation of each kind is caught; every package ships in the wheel."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
LINT = Path(sys.executable).with_name("lint-imports")


def lint(tree: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    return subprocess.run([str(LINT), "--config", str(tree / "pyproject.toml"), "--no-cache"], cwd=tree,
                          env=env, capture_output=True, text=True, timeout=120)


@pytest.fixture(scope="module")
def linter():
    if not LINT.exists():
        pytest.fail(f"lint-imports is not installed next to {sys.executable} (pip install -e '.[test]')")
    return lint


def test_the_layer_contracts_hold(linter):
    res = linter(ROOT)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "0 broken" in res.stdout


@pytest.mark.parametrize("module, line, contract", [
    ("console/model.py", "import console.diagnosis.who", "Layers"),
    ("console/diagnosis/who.py", "import console.actions.ladder", "Layers"),
    ("console/sources/parse.py", "import console.incident.timeline", "Layers"),
    ("console/diagnosis/text.py", "import textual.widgets", "Textual lives only under console.ui"),
    ("console/sources/shell.py", "import console.sim.node", "The simulator is reached only"),
    ("console/sources/slurm.py", "import console.sim.node", "The simulator is reached only"),
    ("console/sim/vfs.py", "import console.turns", "The simulator imports only"),
    ("console/sim/host.py", "import console.sim.shell", "Simulator layers"),
])
def test_a_deliberate_violation_is_caught(linter, tmp_path, module, line, contract):
    tree = tmp_path / "tree"
    shutil.copytree(ROOT / "console", tree / "console", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(ROOT / "themes", tree / "themes")
    shutil.copy(ROOT / "pyproject.toml", tree / "pyproject.toml")
    target = tree / module
    target.write_text(target.read_text() + f"\n{line}  # a deliberate violation\n")
    res = linter(tree)
    assert res.returncode != 0, res.stdout
    text = " ".join(res.stdout.split())        # contract names wrap in the report
    assert re.search(re.escape(contract) + r".{0,200}? BROKEN", text), res.stdout


def test_a_new_module_outside_every_layer_is_caught(linter, tmp_path):
    """The layers are exhaustive: a module nobody placed in a layer breaks the contract."""
    tree = tmp_path / "tree"
    shutil.copytree(ROOT / "console", tree / "console", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(ROOT / "themes", tree / "themes")
    shutil.copy(ROOT / "pyproject.toml", tree / "pyproject.toml")
    (tree / "console" / "stray.py").write_text("import console.model\n")
    res = linter(tree)
    assert res.returncode != 0, res.stdout
    assert "console.stray" in res.stdout


def test_every_package_is_in_the_wheel():
    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    found = {".".join(p.parent.relative_to(ROOT).parts) for p in (ROOT / "console").rglob("__init__.py")}
    assert found - listed == set(), f"add to [tool.setuptools] packages: {sorted(found - listed)}"
    assert "console.themes" in listed


def textual_private_imports(tree: Path) -> list[str]:
    """Imports of a Textual module whose name says it is private (``textual._x``,
    ``textual.widgets._footer``), as ``path:line module``."""
    import ast
    found = []
    for path in sorted(tree.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = ([node.module or ""] if isinstance(node, ast.ImportFrom)
                     else [a.name for a in node.names] if isinstance(node, ast.Import) else [])
            for name in names:
                parts = name.split(".")
                if parts[0] == "textual" and any(p.startswith("_") for p in parts[1:]):
                    found.append(f"{path.relative_to(tree.parent)}:{node.lineno} {name}")
    return found


def test_no_module_imports_a_private_textual_module(tmp_path):
    """Textual's private modules change without notice: the console uses its public names only
    (the one shim over DataTable's private caches, ui/widening_table.py, subclasses a public
    widget). A deliberate private import is caught."""
    assert textual_private_imports(ROOT / "console") == []
    stray = tmp_path / "console"
    stray.mkdir()
    (stray / "footer.py").write_text("from textual.widgets._footer import FooterKey\n")
    assert textual_private_imports(stray) == ["console/footer.py:1 textual.widgets._footer"]
