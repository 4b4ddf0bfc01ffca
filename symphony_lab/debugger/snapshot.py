"""One snapshot of the debugger's state for every front-end: the TUI (tui/debug_session.py), the
notebook's sidebar and run views (notebook/views.py) read the debugger through `build_snapshot`,
so they show the same processes, stops, breakpoints, KV tree and scheduler timeline, under the
same names.

The builder only speaks the protocol (docs/protocol.md): it is given `request(command,
**arguments) -> body`, which is the debugger's `handle_command` in-process (`local_request`)
or a `RemoteDebugger.request` over WebSocket. What a front-end adds of its own (the TUI's token
history per thread, the notebook's engine and runs) goes beside the snapshot's keys, never
under another name for one of them.

The types are plain JSON shapes (TypedDicts), documented field by field, so a schema for the
TypeScript side can be read from them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pydantic import with_config
from typing_extensions import TypedDict

from symphony_core.events import now

from .errors import DebuggerError
from .protocol_views import Breakpoint, Closed, KVTree, PlannedCall, ProcessView, Stop, Timeline

Request = Callable[..., Any]  # request(command, **arguments) -> the response's body

KEEP_DONE = 50  # finished processes a snapshot keeps (the newest); live ones are always kept
TIMELINE_LIMIT = 200  # batches a snapshot's timeline carries (the newest)


@with_config(Closed)
class DebuggerSnapshot(TypedDict):
    """The debugger's state at one moment, as every front-end reads it."""

    processes: list[ProcessView]  # the `threads` command's process views (live, then newest finished)
    stops: list[Stop]  # the `stops` command's stops: every stopped thread
    breakpoints: list[Breakpoint]  # the `breakpoints` command's, with hit counts
    kv_tree: KVTree
    timeline: Timeline
    step_mode: bool  # scheduler step mode is on
    next_batch: list[PlannedCall] | None  # the batch waiting at the gate in step mode
    ts: float  # the events' clock (symphony_core.events.now) when the snapshot began, in-process


def local_request(dbg) -> Request:
    """`request` for an in-process `Debugger`: its own command handler, so the bodies are the
    same JSON a remote front-end gets; a failed command raises `DebuggerError` with its message."""

    def request(command: str, **arguments: Any) -> Any:
        resp = dbg.handle_command({"type": "request", "seq": 0, "command": command, "arguments": arguments})
        if not resp.get("success"):
            raise DebuggerError(f"{command}: {resp.get('message')}")
        return resp.get("body")

    return request


def keep_processes(processes: list[dict[str, Any]], keep_done: int = KEEP_DONE) -> list[dict[str, Any]]:
    """Every live process, and the newest `keep_done` finished ones, in their order."""
    done = [i for i, p in enumerate(processes) if p.get("done")]
    dropped = set(done[: max(0, len(done) - keep_done)])
    return [p for i, p in enumerate(processes) if i not in dropped]


def build_snapshot(request: Request, since: int = 0) -> DebuggerSnapshot:
    """The snapshot, asked of the debugger through `request`; the timeline from batch `since` on."""
    ts = now()  # taken first: an event newer than this may be missing from the snapshot
    procs = request("threads", include_done=True)["processes"]
    pend = request("pending_batch") or {}
    pending = pend.get("pending")
    return {
        "processes": keep_processes(procs, KEEP_DONE),
        "stops": request("stops")["stops"],
        "breakpoints": request("breakpoints")["breakpoints"],
        "kv_tree": request("kv_tree", with_text=True),
        "timeline": request("timeline", since=since, limit=TIMELINE_LIMIT),
        "step_mode": bool(pend.get("scheduler_step_mode")),
        "next_batch": pending.get("members") if pending else None,
        "ts": ts,
    }


SNAPSHOT_KEYS = tuple(DebuggerSnapshot.__annotations__)

__all__ = ["SNAPSHOT_KEYS", "DebuggerSnapshot", "build_snapshot", "keep_processes", "local_request"]
