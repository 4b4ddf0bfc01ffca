"""A stop: one LIP thread held by the debugger, and how the protocol shows it."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from symphony_core.model.dist import Dist

from . import viewdata as ins


@dataclass(eq=False)
class Stop:
    """One LIP thread held by the debugger."""

    id: int
    thread: Any  # LIPThread
    reason: str
    reasons: list[str]
    where: str  # "entry" | "before" | "after"
    call: str | None
    seq: int
    args: dict
    file: str | None
    line: int | None
    breakpoints: list[int]
    ts: float
    frames: list[dict]
    tokens: list[int] | None
    depth: int = 1  # frames of the LIP's own code on the stack (what step over / out compare)
    result: Any = None
    overridden: int | None = None  # the token forced by an override
    original: Any = None  # the model's own result before the first override edited it
    edits: list[dict] = field(default_factory=list)
    action: str | None = None
    step: int | None = None  # the step this stop ends (None: it stopped for another reason)
    next_step: int = 0  # the step a step command resumes it as
    resumed: threading.Event = field(default_factory=threading.Event)
    _info: dict | None = None

    @property
    def pid(self) -> int:
        return self.thread.proc.pid

    @property
    def tid(self) -> int:
        return self.thread.tid

    @property
    def kv_file(self) -> int | None:
        f = self.args.get("file")
        return f if isinstance(f, int) else None

    def lands(self, step: int | None) -> None:
        """Step `step` lands on this stop, already held (the thread a stepping thread joins); None: two
        steps ended here (stepping.py)."""
        self.step = step
        self._info = None

    def edited(self, result: Any, edit: dict) -> None:
        """An override replaced the result the thread is about to receive."""
        if self.original is None:
            self.original = self.result
        self.result = result
        if edit.get("force") is not None:
            self.overridden = edit["force"]
        self.edits.append(edit)
        self._info = None


def stop_view(stop: Stop, tokenizer, topk: int, summarize_result: Callable[[str, Any], Any]) -> dict:
    """A stop as the protocol shows it (the `stopped` event's body, `stops`): where, why, the
    input tokens and the result (a distribution's top `topk`); computed once per stop."""
    if stop._info is not None:
        return stop._info
    proc = stop.thread.proc
    d = {
        "stop_id": stop.id,
        "pid": stop.pid,
        "tid": stop.tid,
        "process": proc.name,
        "reason": stop.reason,
        "reasons": stop.reasons,
        "where": stop.where,
        "call": stop.call,
        "seq": stop.seq,
        "file": stop.file,
        "line": stop.line,
        "args": ins.jsonable(stop.args),
        "breakpoints": stop.breakpoints,
        "ts": stop.ts,
        "preds": stop.thread.preds,
        "step": stop.step,
        "kv_file": stop.kv_file,
        "input": None,
        "result": None,
    }
    if stop.tokens is not None:
        d["input"] = ins.tokens_view(stop.tokens[-256:], tokenizer)
        d["input"]["n_tokens"] = len(stop.tokens)
    if isinstance(stop.result, Dist):
        d["result"] = {
            "kind": "dist",
            **ins.dist_view(stop.result, tokenizer, topk, chosen=stop.overridden, original=stop.original),
        }
    elif stop.where == "after":
        d["result"] = ins.jsonable(summarize_result(stop.call or "", stop.result))
    if stop.edits:
        d["edits"] = stop.edits
    stop._info = ins.jsonable(d)
    return stop._info


__all__ = ["Stop", "stop_view"]
