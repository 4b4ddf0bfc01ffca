"""The typed shapes the debugger shows: a stop, a distribution, a KV file and the fork tree, the
scheduler's batches and queue, threads, breakpoints (docs/protocol.md). The command bodies
(protocol_responses.py) and the event bodies (protocol_events.py) are made of these.

They are TypedDicts: the Debugger builds plain dicts (viewdata.py, stops.py, ...), and these say
what those dicts hold; pydantic validates a dict against them (protocol_schema.py) and the
TypeScript types are generated from them (schema_ts.py). A view that gains a field adds it here.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, NotRequired

from pydantic import ConfigDict, Discriminator, Tag, with_config
from typing_extensions import TypedDict

# JSON has no infinities: the protocol writes a non-finite float "inf" / "-inf" (NaN: null).
JsonFloat = float | Literal["inf", "-inf"] | None

Closed = ConfigDict(extra="forbid")


# --- tokens and distributions ---------------------------------------------------------------------


@with_config(Closed)
class TokenPick(TypedDict):
    """One token of a distribution: what the model preferred, or what the program took (`by`)."""

    token: int
    text: str
    p: float  # the model's probability (an override's too: the edited one's is p_edited)
    by: NotRequired[Literal["override", "engine", "fed", "argmax"]]
    p_edited: NotRequired[float]


@with_config(Closed)
class TopToken(TypedDict):
    token: int
    text: str
    p: float
    logit: JsonFloat


@with_config(Closed)
class DistView(TypedDict):
    """One position of a `pred`'s distribution: the top k, the preferred, taken and chosen token."""

    positions: int
    position: int
    topk: list[TopToken]
    preferred: TokenPick
    taken: TokenPick | None
    chosen: TokenPick
    entropy: JsonFloat


@with_config(Closed)
class DistResult(DistView):
    """A stop's result after a `pred` (its `kind` tells it from other calls' results)."""

    kind: Literal["dist"]


@with_config(Closed)
class TokensView(TypedDict):
    ids: list[int]
    text: str
    pieces: list[str]


@with_config(Closed)
class StopInput(TokensView):
    """The stopped call's input tokens (the last 256 of them; `n_tokens` counts them all)."""

    n_tokens: int


def _result_kind(v: Any) -> str:
    return "dist" if isinstance(v, dict) and v.get("kind") == "dist" else "other"


# after a pred: a distribution; after any other call: a summary of what it returned (any JSON)
StopResult = Annotated[
    Annotated[DistResult, Tag("dist")] | Annotated[Any, Tag("other")],
    Discriminator(_result_kind),
]


# --- stops and threads ------------------------------------------------------------------------------


@with_config(Closed)
class Stop(TypedDict):
    """A thread held by the debugger: the `stopped` event's body, an entry of `stops`."""

    stop_id: int
    pid: int
    tid: int
    process: str
    reason: str  # entry | breakpoint | step | pause | diverged | step_back | replay
    reasons: list[str]  # every reason, e.g. ["step", "follow"] (a step into a spawned thread)
    where: Literal["entry", "before", "after"]
    call: str | None
    seq: int
    file: str | None
    line: int | None
    args: dict[str, Any]
    breakpoints: list[int]
    ts: float
    preds: int
    step: int | None  # the step this stop ends
    kv_file: int | None
    input: StopInput | None
    result: StopResult
    edits: NotRequired[list[dict[str, Any]]]


@with_config(Closed)
class Exited(TypedDict):
    """`wait_stopped` when the process ended instead of stopping."""

    exited: Literal[True]
    pid: int
    status: str


@with_config(Closed)
class StopRef(TypedDict):
    stop_id: int
    reason: str
    where: Literal["entry", "before", "after"]


@with_config(Closed)
class ThreadView(TypedDict):
    tid: int
    name: str
    state: str
    call: str | None
    preds: int
    stopped: StopRef | None


@with_config(Closed)
class ProcessView(TypedDict):
    pid: int
    name: str
    user: str
    status: str
    priority: int
    threads: list[ThreadView]
    tokens: int
    error: str | None
    done: bool
    traceback: NotRequired[str | None]  # a failed process's


@with_config(ConfigDict(extra="allow"))
class LocalValue(TypedDict):
    """One local variable at a stop: its type and a bounded repr (a KV handle or a Dist add
    their own fields)."""

    type: str
    value: str


@with_config(Closed)
class Frame(TypedDict):
    function: str
    file: str
    line: int
    library: bool  # a frame in symphony_core (e.g. lib.generate)
    locals: dict[str, LocalValue]


# --- breakpoints -------------------------------------------------------------------------------------


@with_config(Closed)
class Breakpoint(TypedDict):
    id: int
    call: str  # a syscall name or "*"
    pid: int | None
    tid: int | None
    hit_count: int | None
    hit_mode: Literal["==", ">=", "%"]
    file: int | str | None
    tokens_contain: list[int] | None
    text_contains: str | None
    where: str | None  # an in-process predicate's name
    when: Literal["before", "after"]
    enabled: bool
    temporary: bool
    hits: int
    where_error: str | None  # the last exception the `where` predicate raised (it then does not stop)


# --- the KV file system ------------------------------------------------------------------------------


@with_config(Closed)
class KVPage(TypedDict):
    index: int
    page: int  # negative: swapped out
    slots: tuple[int, int]
    refcount: int
    shared_with: list[int]
    swapped: bool
    tokens: NotRequired[list[int]]
    text: NotRequired[str]


@with_config(Closed)
class KVFileView(TypedDict):
    """A KV file in full (the `kv` command; an entry of the fork tree)."""

    file: int
    path: str | None
    owner: str | None
    parent: int | None
    ancestry: list[int]
    children: list[int]
    length: int
    n_pages: int
    shared_pages: int
    open_handles: int
    held_by: list[int]
    evicted: bool
    swapped: bool
    pages: list[KVPage]


@with_config(Closed)
class KVTree(TypedDict):
    """The KV fork tree: every live file, fork edges, the closed ancestors (`gone`)."""

    page_size: int
    pages_total: int
    pages_used: int
    files: list[KVFileView]
    edges: list[tuple[int, int]]
    roots: list[int]
    gone: list[int]
    shared_pages: list[int]


# --- the scheduler ------------------------------------------------------------------------------------


@with_config(Closed)
class BatchMember(TypedDict):
    pid: int
    tid: int
    user: str
    file: int
    tokens: int
    kind: Literal["prefill", "decode"]
    chunk: tuple[int, int, int]  # [from, to, total]


@with_config(Closed)
class BatchRecord(TypedDict):
    """One batch the scheduler fired (the `batch` event's args, `timeline`'s batches)."""

    bid: int
    t_start: float
    t_end: float
    members: list[BatchMember]
    tokens: int
    queue_depth: int
    pages_used: int
    pages_total: int
    policy: str
    errors: int
    size: int


@with_config(Closed)
class PendingCall(TypedDict):
    """One queued `pred` call as the scheduler sees it."""

    pid: int
    tid: int
    user: str
    file: int
    remaining: int
    total: int
    done: int
    kind: Literal["prefill", "decode"]
    tokens: int
    waiting_pages: int
    parked: bool


@with_config(Closed)
class PlannedCall(PendingCall):
    chunk: tuple[int, int, int]  # [from, to, total]: what this batch feeds


@with_config(Closed)
class BatchPlan(TypedDict):
    """The batch waiting at the gate in scheduler step mode."""

    gate_id: int
    members: list[PlannedCall]
    queue: list[PendingCall]
    queue_depth: int
    pages_used: int
    batches_so_far: int


@with_config(Closed)
class TimelineTotals(TypedDict):
    batches: int
    tokens: int
    members: int


@with_config(Closed)
class Timeline(TypedDict):
    batches: list[BatchRecord]
    queue: list[PendingCall]
    queue_depth: int
    pages_used: int
    pages_total: int
    policy: str
    token_budget: int
    totals: TimelineTotals


__all__ = [
    "BatchMember",
    "BatchPlan",
    "BatchRecord",
    "Breakpoint",
    "DistResult",
    "DistView",
    "Exited",
    "Frame",
    "JsonFloat",
    "KVFileView",
    "KVPage",
    "KVTree",
    "LocalValue",
    "PendingCall",
    "PlannedCall",
    "ProcessView",
    "Stop",
    "StopInput",
    "StopRef",
    "StopResult",
    "ThreadView",
    "Timeline",
    "TimelineTotals",
    "TokenPick",
    "TokensView",
    "TopToken",
]
