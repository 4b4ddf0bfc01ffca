"""The body of each command's success response (docs/protocol.md, "Commands"): `RESPONSES` maps
every command of protocol.COMMANDS to its type. The shared shapes (a stop, a KV file, a batch)
are in protocol_views.py; the profiler's and the what-if's in protocol_bodies.py."""

from __future__ import annotations

from typing import Any, Literal, NotRequired

from pydantic import with_config
from typing_extensions import TypedDict

from .protocol_bodies import ProfileBody, ProfilingBody, WhatIfBody
from .protocol_views import (
    BatchPlan,
    BatchRecord,
    Breakpoint,
    Closed,
    DistView,
    Exited,
    Frame,
    JsonFloat,
    KVFileView,
    KVTree,
    ProcessView,
    Stop,
    Timeline,
    TokensView,
)

PidTid = tuple[int, int]


@with_config(Closed)
class Capabilities(TypedDict):
    non_stop: bool
    stop_scope: Literal["thread", "process"]
    scheduler_step_mode: bool
    record_replay: bool
    step_back: bool
    overrides: list[str]
    trace_format: str
    profile: bool
    what_if: bool


@with_config(Closed)
class InitializeBody(TypedDict):
    protocol_version: int
    commands: list[str]
    events: list[str]
    capabilities: Capabilities


@with_config(Closed)
class DetachBody(TypedDict):
    attached: bool
    released: NotRequired[list[PidTid]]  # the threads that were stopped (absent: it was not attached)


@with_config(Closed)
class LaunchBody(TypedDict):
    pid: int
    name: str


@with_config(Closed)
class RestartBody(TypedDict):
    pid: int  # the new process
    restarted: int  # the old one


@with_config(Closed)
class ContinueBody(TypedDict):
    resumed: list[PidTid]


@with_config(Closed)
class StepBody(TypedDict):
    """`step_over` / `step_out`; `wait_stopped(pid, after=, step=)` answers where it landed."""

    resumed: list[PidTid]
    after: int  # the stop it stepped from
    step: int  # the step's id: the stop that ends it carries it


@with_config(Closed)
class StepIntoBody(StepBody):
    granularity: Literal["pred", "syscall"]


@with_config(Closed)
class PauseBody(TypedDict):
    pausing: list[PidTid]


@with_config(Closed)
class StopOnEntryBody(TypedDict):
    stop_on_entry: bool


@with_config(Closed)
class RemovedBody(TypedDict):
    removed: int  # remove_breakpoint: the id; clear_breakpoints: how many


@with_config(Closed)
class BreakpointsBody(TypedDict):
    breakpoints: list[Breakpoint]


@with_config(Closed)
class ThreadsBody(TypedDict):
    processes: list[ProcessView]


@with_config(Closed)
class StopsBody(TypedDict):
    stops: list[Stop]


@with_config(Closed)
class StackBody(TypedDict):
    pid: int
    tid: int
    file: str | None
    line: int | None
    frames: list[Frame]  # innermost first


@with_config(Closed)
class TokensBody(TokensView):
    pid: int
    tid: int


@with_config(Closed)
class TokenTextsBody(TypedDict):
    texts: dict[str, str]  # "<id>" -> how the token prints


@with_config(Closed)
class DistBody(DistView):
    pid: int
    tid: int


@with_config(Closed)
class OverrideBody(TypedDict):
    """At an after-stop: applied, with the stop as it is now; at a before-stop of a pred: pending."""

    applied: bool
    stop: NotRequired[Stop]
    pending: NotRequired[bool]
    edit: NotRequired[dict[str, Any]]


@with_config(Closed)
class VerifyKVBody(TypedDict):
    file: int
    tokens: int
    probe: int | None
    max_abs_diff_logits: JsonFloat
    max_abs_diff_k: JsonFloat
    max_abs_diff_v: JsonFloat
    argmax_equal: bool
    consistent: bool


@with_config(Closed)
class WatchingBody(TypedDict):
    watching: list[str]


@with_config(Closed)
class RecordAllBody(TypedDict):
    record_all: bool


@with_config(Closed)
class RecordPidBody(TypedDict):
    pid: int
    recording: bool


@with_config(Closed)
class RecordingEntry(TypedDict):
    tid: int
    seq: int
    call: str
    args: dict[str, Any]
    kind: str
    top5: NotRequired[list[tuple[int, float]]]  # a pred's: [token, p]
    token: NotRequired[Any]  # a pred's engine-sampled token(s)
    value: NotRequired[Any]  # another call's result, summarised


@with_config(Closed)
class RecordingBody(TypedDict):
    source_pid: int
    fn: str | None
    args: list[Any]
    kwargs: dict[str, Any]
    user: str
    name: str
    complete: bool
    syscalls: int
    preds: int
    threads: list[int]
    entries: NotRequired[list[RecordingEntry]]


@with_config(Closed)
class SavedBody(TypedDict):
    pid: int
    path: str


@with_config(Closed)
class ReplayBody(TypedDict):
    pid: int
    source_pid: int
    stop_at: int | None
    tid: int


@with_config(Closed)
class Divergence(TypedDict):
    tid: int
    seq: int
    call: str
    why: str


@with_config(Closed)
class ReplayStatusBody(TypedDict):
    pid: int
    source_pid: int
    substituted: int
    diverged: list[Divergence]
    live_threads: list[int]
    max_logit_diff: JsonFloat
    done: bool


@with_config(Closed)
class StepBackBody(ReplayBody):
    from_pid: int
    target_pred: int


@with_config(Closed)
class SchedulerStepModeBody(TypedDict):
    scheduler_step_mode: bool


@with_config(Closed)
class PendingBatchBody(TypedDict):
    pending: BatchPlan | None
    scheduler_step_mode: bool


@with_config(Closed)
class StepBatchBody(TypedDict):
    shown: BatchPlan | None
    fired: BatchRecord | None


@with_config(Closed)
class ProcessResult(TypedDict):
    pid: int
    status: str
    result: Any
    error: str | None


# A Chrome trace-event object (docs/protocol.md, "Trace export"), checked by validate_trace
ChromeTrace = dict[str, Any]

RESPONSES: dict[str, Any] = {
    "initialize": InitializeBody,
    "detach": DetachBody,
    "launch": LaunchBody,
    "restart": RestartBody,
    "continue": ContinueBody,
    "step": StepIntoBody,
    "step_over": StepBody,
    "step_out": StepBody,
    "pause": PauseBody,
    "set_stop_on_entry": StopOnEntryBody,
    "set_breakpoint": Breakpoint,
    "remove_breakpoint": RemovedBody,
    "enable_breakpoint": Breakpoint,
    "clear_breakpoints": RemovedBody,
    "breakpoints": BreakpointsBody,
    "threads": ThreadsBody,
    "stops": StopsBody,
    "stack": StackBody,
    "tokens": TokensBody,
    "token_texts": TokenTextsBody,
    "kv": KVFileView,
    "dist": DistBody,
    "override": OverrideBody,
    "edit_dist": OverrideBody,
    "verify_kv": VerifyKVBody,
    "kv_tree": KVTree,
    "timeline": Timeline,
    "trace": ChromeTrace,
    "watch": WatchingBody,
    "unwatch": WatchingBody,
    "record": RecordAllBody | RecordPidBody,
    "recording": RecordingBody,
    "save_recording": SavedBody,
    "replay": ReplayBody,
    "replay_status": ReplayStatusBody,
    "step_back": StepBackBody,
    "scheduler_step_mode": SchedulerStepModeBody,
    "pending_batch": PendingBatchBody,
    "wait_batch_pending": PendingBatchBody,
    "step_batch": StepBatchBody,
    "wait_stopped": Stop | Exited,
    "wait_process": ProcessResult,
    "profile_start": ProfilingBody,
    "profile": ProfileBody,
    "profile_stop": ProfileBody,
    "what_if": WhatIfBody,
}

__all__ = [
    "RESPONSES",
    "Capabilities",
    "ContinueBody",
    "DetachBody",
    "DistBody",
    "Divergence",
    "InitializeBody",
    "LaunchBody",
    "OverrideBody",
    "PauseBody",
    "PendingBatchBody",
    "ProcessResult",
    "RecordAllBody",
    "RecordPidBody",
    "RecordingBody",
    "RecordingEntry",
    "RemovedBody",
    "ReplayBody",
    "ReplayStatusBody",
    "RestartBody",
    "SavedBody",
    "SchedulerStepModeBody",
    "BreakpointsBody",
    "StackBody",
    "StepBackBody",
    "StepBatchBody",
    "StepBody",
    "StepIntoBody",
    "StopOnEntryBody",
    "StopsBody",
    "ThreadsBody",
    "TokenTextsBody",
    "TokensBody",
    "VerifyKVBody",
    "WatchingBody",
]
