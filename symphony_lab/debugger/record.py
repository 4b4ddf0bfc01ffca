"""Record a process's system-call results; replay them to reproduce the run exactly.

What is recorded, per (thread id, syscall number): the call, its stable arguments (the input
tokens of a `pred` in full) and its result as the LIP received it — after any override the
debugger made. A `pred` keeps its whole logits row(s) and the engine's sampled token(s);
`recv` and `kv_list` keep the value; every other call keeps a summary to compare against.

How replay reproduces a run: the LIP is launched again with the same function and arguments;
each syscall really executes (so the KV cache is rebuilt for real and stays consistent), and
the debugger's `after` hook hands the LIP the *recorded* result instead of the fresh one. So
a temperature-1 run whose tokens were sampled in the engine (`pred(..., sampler=)`) replays
its exact tokens, and the LIP's own decisions see bit-identical logits. Messages the LIP
received with `recv` are queued for the replayed process before it starts.

What replay cannot substitute — randomness drawn inside the LIP outside any syscall
(`Dist.sample(seed=None)` and `SamplingParams(seed=None).pick` on the LIP side seed a fresh
generator from the operating system; Python's `random`; torch's global generator) — is
*detected*: before every call the replay compares the call and its inputs with the recording,
and at the first difference stops the thread with reason `"diverged"` and goes live. Seeded
samplers (`SamplingParams(seed=…)`, `Sampler(seed=…)`) replay exactly.

Thread ids are given in spawn order and syscall numbers per thread, so a multi-threaded LIP
replays as long as its spawns happen in the same order — which they do when every thread
sees the same syscall results.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import torch

from symphony_core.model.dist import Dist

from .viewdata import jsonable

SUBSTITUTED = ("pred", "recv", "kv_list")
_UNSTABLE_ARGS = ("kv", "file", "sampler")  # file ids and handle names differ between runs


def stable_args(args: dict) -> dict:
    return {k: v for k, v in args.items() if k not in _UNSTABLE_ARGS}


@dataclass
class Entry:
    tid: int
    seq: int
    call: str
    args: dict
    tokens: list[int] | None = None  # a pred's full input
    kind: str = "summary"  # "dist" | "value" | "summary" | "error"
    logits: torch.Tensor | None = None
    token: Any = None
    value: Any = None
    context: list[int] | None = None  # a thread's first pred on a file: the file's tokens before it (a fork's prefix)

    def result(self, like: Any = None) -> Any:
        """The recorded result, as a fresh object the LIP may keep (on the live result's device)."""
        if self.kind == "dist":
            lg = self.logits
            if isinstance(like, Dist):
                lg = lg.to(device=like.logits.device, dtype=like.logits.dtype)
            return Dist(lg.clone(), list(self.token) if isinstance(self.token, list) else self.token)
        return self.value

    def summary(self) -> dict:
        d = {"tid": self.tid, "seq": self.seq, "call": self.call, "args": jsonable(self.args), "kind": self.kind}
        if self.kind == "dist" and self.logits is not None:
            row = self.logits if self.logits.dim() == 1 else self.logits[-1]
            p, i = torch.softmax(row.float(), -1).topk(5)
            d["top5"] = [[int(t), round(float(q), 5)] for t, q in zip(i, p)]
            d["token"] = jsonable(self.token)
        elif self.kind != "dist":
            d["value"] = jsonable(self.value)
        return d


def _fn_ref(fn: Callable) -> str | None:
    mod, qual = getattr(fn, "__module__", None), getattr(fn, "__qualname__", None)
    if not mod or not qual or "<locals>" in qual:
        return None
    return f"{mod}:{qual}"


def resolve_fn(ref: str) -> Callable:
    """`"package.module:function"` → the function."""
    if ":" not in ref:
        raise ValueError(f"a LIP reference looks like 'module:function', got {ref!r}")
    mod, qual = ref.split(":", 1)
    obj: Any = importlib.import_module(mod)
    for part in qual.split("."):
        obj = getattr(obj, part)
    if not callable(obj):
        raise ValueError(f"{ref} is not callable")
    return obj


@dataclass
class Recording:
    """Everything needed to run a process again and hand it the same syscall results."""

    fn: Callable | None
    fn_ref: str | None
    args: tuple
    kwargs: dict
    user: str
    name: str
    priority: int = 0
    limits: Any = None
    source_pid: int | None = None
    complete: bool = True  # recorded from the process's first syscall
    entries: dict[tuple[int, int], Entry] = field(default_factory=dict)
    order: list[tuple[int, int]] = field(default_factory=list)

    @classmethod
    def of(cls, proc, complete: bool = True) -> Recording:
        return cls(
            proc.fn,
            _fn_ref(proc.fn),
            tuple(proc.args),
            dict(proc.kwargs),
            proc.user,
            proc.name,
            proc.priority,
            proc.limits,
            proc.pid,
            complete,
        )

    def add(self, e: Entry) -> None:
        key = (e.tid, e.seq)
        if key not in self.entries:
            self.order.append(key)
        self.entries[key] = e

    def get(self, tid: int, seq: int) -> Entry | None:
        return self.entries.get((tid, seq))

    def has_context(self, tid: int, fid: Any) -> bool:
        """Whether thread `tid` already has a pred on file `fid` that kept the file's context."""
        return any(e.context is not None and e.args.get("file") == fid for e in self.preds(tid))

    def preds(self, tid: int = 1) -> list[Entry]:
        return [self.entries[k] for k in self.order if k[0] == tid and self.entries[k].call == "pred"]

    def pred_seq(self, tid: int, k: int) -> int | None:
        """The syscall number of thread `tid`'s k-th pred (1-based)."""
        ps = self.preds(tid)
        return ps[k - 1].seq if 0 < k <= len(ps) else None

    def received(self) -> list[Any]:
        """Messages the process got with `recv`, in the order it got them."""
        return [
            self.entries[k].value
            for k in self.order
            if self.entries[k].call == "recv" and self.entries[k].kind == "value"
        ]

    def _empty_copy(self, complete: bool) -> Recording:
        """The same process to run again, with no entries yet."""
        return replace(self, complete=complete, entries={}, order=[])

    def upto(self, tid: int, seq: int) -> Recording:
        """A copy holding only thread `tid`'s calls up to `seq` (other threads: everything)."""
        r = self._empty_copy(self.complete)
        for k in self.order:
            if k[0] != tid or k[1] <= seq:
                r.add(self.entries[k])
        return r

    def merged(self, newer: Recording) -> Recording:
        """This recording's entries, overridden by `newer`'s (a replay of it that went further or
        was edited): the basis for stepping back inside a replay."""
        r = self._empty_copy(self.complete and newer.complete)
        for k in self.order:
            r.add(self.entries[k])
        for k in newer.order:
            r.add(newer.entries[k])
        return r

    def summary(self, with_entries: bool = False) -> dict:
        d = {
            "source_pid": self.source_pid,
            "fn": self.fn_ref or getattr(self.fn, "__qualname__", None),
            "args": jsonable(self.args),
            "kwargs": jsonable(self.kwargs),
            "user": self.user,
            "name": self.name,
            "complete": self.complete,
            "syscalls": len(self.order),
            "preds": sum(1 for e in self.entries.values() if e.call == "pred"),
            "threads": sorted({k[0] for k in self.order}),
        }
        if with_entries:
            d["entries"] = [self.entries[k].summary() for k in self.order]
        return d

    # --- files ------------------------------------------------------------------------------------
    def save(self, path: str) -> None:
        """Write the recording with torch.save (the LIP function is stored by reference)."""
        if self.fn_ref is None:
            raise ValueError(
                f"cannot save a recording of {self.name!r}: its function is not importable "
                "(define the LIP at module level)"
            )
        torch.save(
            {
                "version": 1,
                "fn_ref": self.fn_ref,
                "args": self.args,
                "kwargs": self.kwargs,
                "user": self.user,
                "name": self.name,
                "priority": self.priority,
                "source_pid": self.source_pid,
                "complete": self.complete,
                "entries": [self.entries[k].__dict__ for k in self.order],
            },
            path,
        )

    @classmethod
    def load(cls, path: str) -> Recording:
        d = torch.load(path, weights_only=False)
        r = cls(
            resolve_fn(d["fn_ref"]),
            d["fn_ref"],
            tuple(d["args"]),
            d["kwargs"],
            d["user"],
            d["name"],
            d.get("priority", 0),
            None,
            d.get("source_pid"),
            d.get("complete", True),
        )
        for e in d["entries"]:
            r.add(Entry(**e))
        return r


def entry_from(
    tid: int,
    seq: int,
    call: str,
    args: dict,
    tokens: list[int] | None,
    result: Any,
    summarize: Callable[[str, Any], Any],
) -> Entry:
    e = Entry(tid, seq, call, stable_args(args), tokens)
    if isinstance(result, Dist):
        e.kind = "dist"
        e.logits = result.logits.detach().to("cpu", copy=True)
        e.token = list(result.token) if isinstance(result.token, list) else result.token
    elif call in SUBSTITUTED:
        e.kind, e.value = "value", result
    else:
        e.value = summarize(call, result)
    return e


def same_inputs(e: Entry, call: str, args: dict, tokens: list[int] | None) -> str | None:
    """None when a replayed call matches the recording; else what differs."""
    if e.call != call:
        return f"expected {e.call}, the LIP called {call}"
    if e.tokens is not None and tokens is not None and e.tokens != tokens:
        return f"{call} input tokens differ (recorded {e.tokens[:8]}…, now {tokens[:8]}…)"
    sa = stable_args(args)
    if sa != e.args:
        diff = sorted(k for k in set(sa) | set(e.args) if sa.get(k) != e.args.get(k))
        return f"{call} arguments differ: {diff}"
    return None
