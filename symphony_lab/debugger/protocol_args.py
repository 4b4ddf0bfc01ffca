"""The arguments of each command (docs/protocol.md, "Commands"): `ARGUMENTS` maps every command
of protocol.COMMANDS to a TypedDict of what it takes. `handle_command` checks a request's
`arguments` against it (strictly: "3" is not a pid, an unknown name is an error) before the
Debugger method runs; an argument left out takes the method's default."""

from __future__ import annotations

from typing import Any, Literal, Required

from pydantic import ConfigDict, with_config
from typing_extensions import TypedDict

from .protocol_bodies import SamplerSettings

Args = ConfigDict(extra="forbid", strict=True)


@with_config(Args)
class NoArgs(TypedDict, total=False):
    pass


@with_config(Args)
class ProcessArg(TypedDict, total=False):
    pid: int | None  # None: every process


@with_config(Args)
class ThreadArgs(TypedDict, total=False):
    """The stopped thread; either may be left out when only one thread matches."""

    pid: int | None
    tid: int | None


@with_config(Args)
class ContinueArgs(ThreadArgs, total=False):
    """`keep_step`: one thread goes on as if it had not stopped, and a step it carries goes on."""

    keep_step: bool


@with_config(Args)
class LaunchArgs(TypedDict, total=False):
    fn: Required[str]  # "module:function"
    args: list[Any]  # the LIP's positional arguments
    kwargs: dict[str, Any]  # and its keyword arguments
    stop_on_entry: bool | None
    record: bool | None
    name: str | None
    priority: int
    user: str


@with_config(Args)
class RestartArgs(TypedDict, total=False):
    pid: Required[int]
    stop_on_entry: bool | None


@with_config(Args)
class StepArgs(ThreadArgs, total=False):
    granularity: Literal["pred", "syscall"]


@with_config(Args)
class EnabledArg(TypedDict, total=False):
    enabled: bool


@with_config(Args)
class BreakpointArgs(TypedDict, total=False):
    """Conditions, ANDed; `where` (a Python predicate) is in-process only."""

    call: str  # a syscall name, or "*"
    pid: int | None
    tid: int | None
    hit_count: int | None
    hit_mode: Literal["==", ">=", "%"]
    file: int | str | None  # a KV file id, or a named file's path
    tokens_contain: list[int] | None
    text_contains: str | None
    when: Literal["before", "after"]
    enabled: bool
    temporary: bool


@with_config(Args)
class BreakpointIdArg(TypedDict, total=False):
    id: Required[int]


@with_config(Args)
class EnableBreakpointArgs(BreakpointIdArg, total=False):
    enabled: bool


@with_config(Args)
class ThreadsArgs(TypedDict, total=False):
    include_done: bool


@with_config(Args)
class TokenTextsArgs(TypedDict, total=False):
    ids: Required[list[int]]  # at most 4096


@with_config(Args)
class KVArgs(ThreadArgs, total=False):
    fid: int | None  # None: the file the stopped call works on


@with_config(Args)
class DistArgs(ThreadArgs, total=False):
    k: int | None
    position: int


@with_config(Args)
class OverrideArgs(ThreadArgs, total=False):
    token: int | None
    text: str | None  # one token
    token_only: bool
    position: int


@with_config(Args)
class EditDistArgs(ThreadArgs, total=False):
    ban: list[int] | None
    force: int | None
    bias: dict[int | str, float] | None  # token id -> logit delta
    position: int


@with_config(Args)
class VerifyKVArgs(TypedDict, total=False):
    fid: Required[int]
    probe: int | None
    atol: float


@with_config(Args)
class KVTreeArgs(TypedDict, total=False):
    with_text: bool


@with_config(Args)
class TimelineArgs(TypedDict, total=False):
    since: int  # a batch id
    limit: int


@with_config(Args)
class TraceArgs(TypedDict, total=False):
    path: str | None


@with_config(Args)
class WatchArgs(TypedDict, total=False):
    view: Required[str]  # kv_tree | timeline
    interval: float


@with_config(Args)
class UnwatchArgs(TypedDict, total=False):
    view: str | None


@with_config(Args)
class RecordArgs(ProcessArg, total=False):
    enabled: bool


@with_config(Args)
class RecordingArgs(TypedDict, total=False):
    pid: Required[int]
    entries: bool


@with_config(Args)
class SaveRecordingArgs(TypedDict, total=False):
    pid: Required[int]
    path: Required[str]


@with_config(Args)
class ReplayArgs(TypedDict, total=False):
    source: Required[int | str]  # a recorded pid, or a saved recording's path
    stop_at: int | None
    tid: int
    stop_on_entry: bool | None
    verify: bool
    record: bool


@with_config(Args)
class PidArg(TypedDict, total=False):
    pid: Required[int]


@with_config(Args)
class StepBackArgs(PidArg, total=False):
    tid: int
    steps: int


@with_config(Args)
class TimeoutArg(TypedDict, total=False):
    timeout: float


@with_config(Args)
class StepBatchArgs(TimeoutArg, total=False):
    wait: bool


@with_config(Args)
class WaitStoppedArgs(ThreadArgs, total=False):
    timeout: float
    after: int | None  # a step's `after` and `step`: the stop that step landed on
    step: int | None


@with_config(Args)
class WaitProcessArgs(PidArg, total=False):
    timeout: float


@with_config(Args)
class ProfileStartArgs(ProcessArg, total=False):
    interval: float


@with_config(Args)
class ProfileArgs(ProcessArg, total=False):
    top: int


@with_config(Args)
class WhatIfArgs(TypedDict, total=False):
    pid: Required[int]
    position: Required[int]
    tid: int
    token: int | None
    text: str | None
    sampler: SamplerSettings | None
    max_tokens: int
    source: str | None
    timeout: float


ARGUMENTS: dict[str, Any] = {
    "initialize": NoArgs,
    "detach": NoArgs,
    "launch": LaunchArgs,
    "restart": RestartArgs,
    "continue": ContinueArgs,
    "step": StepArgs,
    "step_over": ThreadArgs,
    "step_out": ThreadArgs,
    "pause": ProcessArg,
    "set_stop_on_entry": EnabledArg,
    "set_breakpoint": BreakpointArgs,
    "remove_breakpoint": BreakpointIdArg,
    "enable_breakpoint": EnableBreakpointArgs,
    "clear_breakpoints": NoArgs,
    "breakpoints": NoArgs,
    "threads": ThreadsArgs,
    "stops": NoArgs,
    "stack": ThreadArgs,
    "tokens": ThreadArgs,
    "token_texts": TokenTextsArgs,
    "kv": KVArgs,
    "dist": DistArgs,
    "override": OverrideArgs,
    "edit_dist": EditDistArgs,
    "verify_kv": VerifyKVArgs,
    "kv_tree": KVTreeArgs,
    "timeline": TimelineArgs,
    "trace": TraceArgs,
    "watch": WatchArgs,
    "unwatch": UnwatchArgs,
    "record": RecordArgs,
    "recording": RecordingArgs,
    "save_recording": SaveRecordingArgs,
    "replay": ReplayArgs,
    "replay_status": PidArg,
    "step_back": StepBackArgs,
    "scheduler_step_mode": EnabledArg,
    "pending_batch": NoArgs,
    "wait_batch_pending": TimeoutArg,
    "step_batch": StepBatchArgs,
    "wait_stopped": WaitStoppedArgs,
    "wait_process": WaitProcessArgs,
    "profile_start": ProfileStartArgs,
    "profile": ProfileArgs,
    "profile_stop": ProfileArgs,
    "what_if": WhatIfArgs,
}

__all__ = [
    "ARGUMENTS",
    "BreakpointArgs",
    "BreakpointIdArg",
    "ContinueArgs",
    "DistArgs",
    "EditDistArgs",
    "EnableBreakpointArgs",
    "EnabledArg",
    "KVArgs",
    "KVTreeArgs",
    "LaunchArgs",
    "NoArgs",
    "OverrideArgs",
    "PidArg",
    "ProcessArg",
    "ProfileArgs",
    "ProfileStartArgs",
    "RecordArgs",
    "RecordingArgs",
    "ReplayArgs",
    "RestartArgs",
    "SaveRecordingArgs",
    "StepArgs",
    "StepBackArgs",
    "StepBatchArgs",
    "ThreadArgs",
    "ThreadsArgs",
    "TimelineArgs",
    "TimeoutArg",
    "TokenTextsArgs",
    "TraceArgs",
    "UnwatchArgs",
    "VerifyKVArgs",
    "WaitProcessArgs",
    "WaitStoppedArgs",
    "WatchArgs",
    "WhatIfArgs",
]
