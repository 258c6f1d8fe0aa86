"""A key holds the engine from the moment Textual's input thread reads it (console/turns.py).

The screen's loop takes a key only between two of its own steps: when one is drawing the node
table (10–45 ms at 256 real-size nodes), the key's hold began after it, and meanwhile the
engine's thread took the interpreter from that step half the time. Holding where the key is read
stops the engine at its next step, so the screen's thread finishes what it does and answers the
key with the interpreter to itself. The App's ``post_message`` still holds (keys a test posts,
a driver this does not wrap).
"""
from __future__ import annotations

import asyncio

from textual import events
from textual.driver import Driver
from textual.message import Message

from console.turns import KEYS_FIRST

def holding_driver(base: type[Driver]) -> type[Driver]:
    """``base`` whose input thread holds the engine for every key and click it reads."""

    class KeysFirstDriver(base):  # type: ignore[valid-type,misc]
        def process_message(self, message: Message) -> None:
            # the App's screen loop while its engine runs in a thread of its own (IncidentApp.keys_loop,
            # set on mount, None after): the engine is held only then
            loop: asyncio.AbstractEventLoop | None = getattr(self._app, "keys_loop", None)
            if loop is not None and isinstance(message, (events.Key, events.MouseDown)):
                KEYS_FIRST.hold(loop)
            super().process_message(message)

    KeysFirstDriver.__name__ = KeysFirstDriver.__qualname__ = f"KeysFirst{base.__name__}"
    return KeysFirstDriver
