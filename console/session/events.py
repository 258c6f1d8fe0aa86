"""What a Session tells its clients. Plain frozen dataclasses: a client matches on the type."""
from __future__ import annotations

from dataclasses import dataclass

from console.actions.plan import ActionPlan
from console.actions.run import ActionOutcome
from console.model import NodeSnapshot
from console.output.memory_series import MemorySeries


@dataclass(frozen=True)
class NodeUpdated:
    """A node's poll answered (diagnosed: its findings are in the snapshot), with what the screen
    draws of it beside: the rungs applied to it, oldest first, and — for the node in view — its
    memory trail (made on the engine's thread, where the trail and the actions live)."""
    snapshot: NodeSnapshot
    done: tuple[str, ...] = ()
    series: MemorySeries | None = None


@dataclass(frozen=True)
class ActionStarted:
    """A confirmed plan goes to the executor (``verifying``: it will re-read the node for that long)."""
    plan: ActionPlan
    verifying_s: float


@dataclass(frozen=True)
class ActionFinished:
    """The executor's outcome: sent or refused, verified or not, recorded (or why not)."""
    outcome: ActionOutcome


@dataclass(frozen=True)
class Said:
    """One line for the operator (severity: information, warning, error)."""
    text: str
    severity: str = "information"


Event = NodeUpdated | ActionStarted | ActionFinished | Said
