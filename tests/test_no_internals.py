"""The console keeps its keys first without CPython's or Textual's internals (issue 35): no
``loop._ready``, no ``gc.disable``, no override of a private method of a Textual or asyncio
class, no wrapper of Textual's driver, no App override of ``post_message`` or ``run_action``
(tests/internals_scan.py reads the sources). Each rule is shown to catch a deliberate one."""
from __future__ import annotations

import functools
import importlib
import inspect
from pathlib import Path

import pytest

from tests.internals_scan import Ancestry, single_underscore, violations

ROOT = Path(__file__).resolve().parent.parent
EXTERNAL = ("textual", "asyncio")


@functools.lru_cache(maxsize=None)
def ancestry(module: str, name: str) -> Ancestry | None:
    """What the class ``module.name`` derives from in Textual and asyncio (imported to know)."""
    try:
        cls = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError):
        return None
    if not inspect.isclass(cls):
        return None
    outside = [k for k in cls.__mro__ if k.__module__.split(".")[0] in EXTERNAL]
    privates: dict[str, str] = {}
    for k in outside:
        for n in vars(k):
            if single_underscore(n):
                privates.setdefault(n, f"{k.__module__}.{k.__qualname__}")
    return Ancestry(frozenset(f"{k.__module__}.{k.__qualname__}" for k in outside), privates)


def scan(source: str, module: str = "probe_module") -> list[str]:
    return violations(source, module, ancestry)


def test_the_console_touches_no_internals():
    found = []
    for path in sorted((ROOT / "console").rglob("*.py")):
        module = ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
        found += violations(path.read_text(encoding="utf-8"), module, ancestry)
    assert found == []


@pytest.mark.parametrize("source", [
    "def gate(loop):\n    loop._ready = list(loop._ready)\n",
    "def gated(loop):\n    return getattr(loop, '_ready', None)\n",
])
def test_asyncios_private_ready_queue_is_caught(source):
    assert scan(source) and all("_ready" in v for v in scan(source))


@pytest.mark.parametrize("source", [
    "import gc\ngc.disable()\n",
    "import gc as collector\ncollector.disable()\n",
    "from gc import disable\ndisable()\n",
])
def test_the_collector_off_is_caught(source):
    assert len(scan(source)) == 1 and "gc.disable" in scan(source)[0]


def test_an_override_of_a_private_textual_or_asyncio_method_is_caught():
    assert scan("from textual.widgets import DataTable\n"
                "class T(DataTable):\n"
                "    def _update_dimensions(self, rows): ...\n"
                "    def _widths(self): ...\n")[0].endswith("T._update_dimensions overrides a private "
                                                          "method of textual.widgets._data_table.DataTable"), "direct"
    assert scan("from console.ui.text import LiteralTable\n"
                "class T(LiteralTable):\n"
                "    def _clear_caches(self): ...\n"), "through a console class"
    assert scan("import asyncio\n"
                "class Loop(asyncio.SelectorEventLoop):\n"
                "    def _run_once(self): ...\n"), "asyncio's"
    assert scan("import textual.widgets\n"
                "class T(textual.widgets.DataTable):\n"
                "    async def _on_idle(self, event): ...\n"), "a dotted base"


def test_a_private_helper_of_ones_own_is_not_an_override():
    assert scan("from textual.widgets import DataTable\n"
                "class T(DataTable):\n"
                "    def _widths(self): ...\n"
                "    def __init__(self): ...\n"
                "    def on_click(self, event): ...\n") == []


@pytest.mark.parametrize("source", [
    "from textual.driver import Driver\nclass D(Driver):\n    def process_message(self, m): ...\n",
    "from textual.drivers.linux_driver import LinuxDriver\nclass D(LinuxDriver): ...\n",
    # the early hold's shape: a wrapper of whatever driver the App would use, installed by it
    "from textual.app import App\n"
    "def holding(base):\n"
    "    class KeysFirstDriver(base):\n"
    "        def process_message(self, m): ...\n"
    "    return KeysFirstDriver\n"
    "class A(App):\n"
    "    def get_driver_class(self):\n"
    "        return holding(super().get_driver_class())\n",
    "from textual.app import App\nA = App(driver_class=object)\n",
])
def test_a_driver_wrapper_is_caught(source):
    assert any("river" in v for v in scan(source)), scan(source)


def test_an_app_that_overrides_post_message_or_run_action_is_caught():
    found = scan("from textual.app import App\n"
                 "class A(App[int]):\n"
                 "    def post_message(self, message): ...\n"
                 "    async def run_action(self, action, default_namespace=None, namespaces=None): ...\n"
                 "    async def on_event(self, event): ...\n")
    assert [v.split()[1] for v in found] == ["A.post_message", "A.run_action"], found
