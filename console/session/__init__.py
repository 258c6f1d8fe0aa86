"""The incident session: the engine of the console, with no idea what draws it.

A Session holds the nodes (their sources and monitors), the incident (its timeline and
reasoning log), the action policy and the actions in flight, and each node's memory over the
incident with the live state a follower reads. It takes commands (plan, execute, read every
process, note, add a node) and publishes typed events (console/session/events.py) to whoever
subscribed: the TUI (console/ui/app.py), and headless callers — scripts, the tests, and the
coming `watch`/`gate` modes — run the very same executor. No Textual here (import-linter).
"""
from console.session.core import Session
from console.session.events import ActionFinished, ActionStarted, Event, NodeUpdated, Said

__all__ = ["Session", "Event", "NodeUpdated", "ActionStarted", "ActionFinished", "Said"]
