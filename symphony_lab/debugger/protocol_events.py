"""The body of each event (docs/protocol.md, "Events"): `EVENT_BODIES` maps every name of
protocol.EVENTS to its type. The debugger's own events carry its views (protocol_views.py); the
engine's are its event bus's `Event.to_dict()` (symphony_core/events.py)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import with_config
from typing_extensions import TypedDict

from .protocol_views import BatchPlan, BatchRecord, Closed, DistResult, KVTree, Stop, Timeline


@with_config(Closed)
class ContinuedEvent(TypedDict):
    pid: int
    tid: int
    stop_id: int
    action: Literal["continue", "step", "step_over", "step_out", "step_syscall", "killed", "detach"]
    stopped_for: float  # seconds the thread was held


@with_config(Closed)
class OverriddenEvent(TypedDict):
    pid: int
    tid: int
    stop_id: int
    edit: dict[str, Any]
    result: DistResult  # the distribution the LIP receives now


@with_config(Closed)
class TakenEvent(TypedDict):
    """The token a program took after a stop whose `taken` was not known then (it sampled itself)."""

    pid: int
    tid: int
    stop_id: int
    seq: int
    token: int
    text: str
    by: Literal["fed"]


@with_config(Closed)
class ReplayDivergedEvent(TypedDict):
    pid: int
    tid: int
    seq: int
    call: str
    why: str


@with_config(Closed)
class KVTreeView(TypedDict):
    view: Literal["kv_tree"]
    data: KVTree


@with_config(Closed)
class TimelineView(TypedDict):
    view: Literal["timeline"]
    data: Timeline


ViewEvent = KVTreeView | TimelineView


@with_config(Closed)
class KernelEvent(TypedDict):
    """A syscall's entry or exit, a process's or thread's start or exit, from the engine's bus."""

    kind: str
    ts: float
    pid: int | None
    tid: int | None
    call: str | None
    args: dict[str, Any]
    result: Any
    error: str | None
    file: str | None
    line: int | None
    seq: int
    duration: float | None


@with_config(Closed)
class BatchEvent(TypedDict):
    """A batch the scheduler fired: the kernel event with the batch record as `args`."""

    kind: Literal["batch"]
    ts: float
    pid: None
    tid: None
    call: None
    args: BatchRecord
    result: None
    error: str | None
    file: None
    line: None
    seq: int
    duration: float | None


@with_config(Closed)
class EventsDropped(TypedDict):
    """A WebSocket client fell too far behind: this many events were dropped."""

    dropped: int


EVENT_BODIES: dict[str, Any] = {
    "stopped": Stop,
    "continued": ContinuedEvent,
    "overridden": OverriddenEvent,
    "taken": TakenEvent,
    "batch_pending": BatchPlan,
    "replay_diverged": ReplayDivergedEvent,
    "view": ViewEvent,
    "syscall_enter": KernelEvent,
    "syscall_exit": KernelEvent,
    "process_start": KernelEvent,
    "process_exit": KernelEvent,
    "thread_start": KernelEvent,
    "thread_exit": KernelEvent,
    "batch": BatchEvent,
}

# events of a connection, not of the debugger (transport.py)
CONNECTION_EVENTS: dict[str, Any] = {"events_dropped": EventsDropped}

__all__ = [
    "CONNECTION_EVENTS",
    "EVENT_BODIES",
    "BatchEvent",
    "ContinuedEvent",
    "EventsDropped",
    "KVTreeView",
    "KernelEvent",
    "OverriddenEvent",
    "ReplayDivergedEvent",
    "TakenEvent",
    "TimelineView",
]
