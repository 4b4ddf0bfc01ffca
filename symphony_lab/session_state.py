"""`SessionState`: the client-side session model every Python front-end shares (the TUI, the
notebook widgets), folded from the debugger's typed event stream (docs/protocol.md, "Events").

Feed it every event message (`apply(msg)`); it keeps, with no command sent:

- `processes`: pid -> `ProcessState` (name, status, error, threads: tid -> `ThreadState`);
- per-thread token lanes: every `pred` a thread made (`PredRecord`: what it fed, the argmax and
  the token the engine sampled, what was forced, what the program took) — `lane(pid, tid)`
  turns them into the prompt and the generated tokens with their probabilities;
- `stop_log`: every stop in the order it happened; `stops`: the ones still held;
- where each thread was last seen (file, line, call);
- the KV fork tree: the newest one a `view` event (or `note_kv_tree`) brought, kept after the
  run ends, and the trees before it (`kv_trees`) so a view can scrub back through the run;
- batches (from `batch` events), replay divergences, the values each process `send`s.

The TypeScript sidebar mirrors the same schema (extension/src/state.ts).
"""

from __future__ import annotations

import ast
import logging
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

# EVENTS, re-exported: the events the model folds (a front-end subscribes to these) are the protocol's
from .debugger.protocol import EVENTS

log = logging.getLogger(__name__)


@dataclass
class ThreadState:
    tid: int
    name: str = ""
    done: bool = False
    error: str | None = None


@dataclass
class ProcessState:
    pid: int
    name: str = ""
    status: str = "running"
    done: bool = False
    error: str | None = None
    threads: dict[int, ThreadState] = field(default_factory=dict)


@dataclass
class PredRecord:
    """One `pred` of one thread, as the events told it."""

    seq: int
    tokens: list[int]
    n: int
    file: int | None
    argmax: int | None = None
    sampled: int | None = None  # Dist.token: the engine's pick (pred(sampler=))
    forced: int | None = None  # an override
    fed: int | None = None  # the token the program fed to its next pred (a `taken` event)
    dist: dict | None = None  # the distribution view of the first stop after it (before any override)
    topk: list | None = None  # [[token, p], ...] from another source (a recording, a token tap)
    error: str | None = None

    @property
    def taken(self) -> int | None:
        """What the program took: forced, else sampled by the engine, else what it fed next."""
        for t in (self.forced, self.sampled, self.fed):
            if isinstance(t, int):
                return t
        return None


def message_value(v: Any) -> Any:
    """A `send` event carries `repr(obj)`; give back the object when it is a plain literal."""
    if isinstance(v, str):
        try:
            return ast.literal_eval(v)
        except (ValueError, SyntaxError, MemoryError, RecursionError):
            return v
    return v


class SessionState:
    """The model. Thread-safe: events may arrive on any thread."""

    def __init__(self, kv_history: int = 200, batches: int = 500) -> None:
        self._lock = threading.RLock()
        self.version = 0  # bumped by every event (a front-end may skip a redraw when it has not moved)
        self.processes: dict[int, ProcessState] = {}
        self.preds: dict[tuple[int, int], dict[int, PredRecord]] = {}
        self.locations: dict[tuple[int, int], dict] = {}
        self.stops: dict[int, dict] = {}  # stop_id -> stop, while held
        self.stop_log: list[dict] = []
        self.kv_trees: deque = deque(maxlen=kv_history)  # (ts, tree)
        self.batches: deque = deque(maxlen=batches)
        self.diverged: list[dict] = []
        self.messages: dict[int, list] = {}
        self.texts: dict[int, str] = {}  # token text met in stops and events
        self.listeners: list[Callable[[str, dict], None]] = []

    # --- folding ---------------------------------------------------------------------------
    def apply(self, msg: dict) -> None:
        name, b = msg.get("event"), msg.get("body") or {}
        with self._lock:
            self.version += 1
            pid, tid = b.get("pid"), b.get("tid")
            key = (pid, tid)
            if name == "syscall_enter":
                call = b.get("call")
                if b.get("file"):
                    self.locations[key] = {"file": b.get("file"), "line": b.get("line"), "call": call}
                if call == "pred":
                    a = b.get("args") or {}
                    self.preds.setdefault(key, {})[b.get("seq", 0)] = PredRecord(
                        b.get("seq", 0), list(a.get("tokens") or []), a.get("n_tokens", 0), a.get("file")
                    )
                elif call == "send" and isinstance(pid, int):
                    self.messages.setdefault(pid, []).append(message_value((b.get("args") or {}).get("value")))
            elif name == "syscall_exit" and b.get("call") == "pred":
                rec = self.preds.get(key, {}).get(b.get("seq", 0))
                r = b.get("result")
                if rec is not None and isinstance(r, dict):
                    rec.argmax = r.get("argmax")
                    rec.sampled = r.get("token") if isinstance(r.get("token"), int) else None
                if rec is not None and b.get("error"):
                    rec.error = b.get("error")
            elif name == "stopped":
                self._on_stopped(b)
            elif name == "continued":
                self.stops.pop(b.get("stop_id"), None)
            elif name == "overridden":
                stop = self.stops.get(b.get("stop_id"))
                force = (b.get("edit") or {}).get("force")
                if stop is not None and force is not None:
                    self.note_forced(stop["pid"], stop["tid"], stop["seq"], force)
                if stop is not None and isinstance(b.get("result"), dict):
                    stop["result"] = b["result"]
            elif name == "taken":
                rec = self.preds.get(key, {}).get(b.get("seq"))
                if rec is not None:
                    rec.fed = b.get("token")
                if isinstance(b.get("token"), int) and b.get("text") is not None:
                    self.texts.setdefault(b["token"], b["text"])
            elif name in ("process_start", "thread_start"):
                p = self.processes.get(pid)
                if p is None:
                    p = self.processes[pid] = ProcessState(pid, (b.get("args") or {}).get("name", ""))
                p.threads.setdefault(tid, ThreadState(tid, (b.get("args") or {}).get("name", "")))
            elif name == "thread_exit":
                t = self.processes.get(pid, ProcessState(pid)).threads.get(tid)
                if t is not None:
                    t.done, t.error = True, b.get("error")
            elif name == "process_exit":
                p = self.processes.setdefault(pid, ProcessState(pid))
                p.done, p.error = True, b.get("error")
                p.status = (b.get("args") or {}).get("status") or ("failed" if b.get("error") else "finished")
                for t in p.threads.values():
                    t.done = True
                for sid in [s for s, st in self.stops.items() if st["pid"] == pid]:
                    del self.stops[sid]
            elif name == "replay_diverged":
                self.diverged.append(b)
            elif name == "batch":
                self.batches.append(b.get("args") or b)
            elif name == "view" and b.get("view") == "kv_tree":
                self.note_kv_tree(b.get("data") or {}, msg.get("ts"))
            listeners = list(self.listeners)
        for fn in listeners:
            try:
                fn(name, b)
            except Exception:  # one front-end's listener failing must not keep the event from the others
                log.warning("a session-state listener failed on a %r event", name, exc_info=True)

    def _on_stopped(self, b: dict) -> None:
        self.remember_texts(b)
        self.stops[b["stop_id"]] = b
        self.stop_log.append(b)
        res = b.get("result")
        if (
            b.get("where") == "after"
            and b.get("call") == "pred"
            and isinstance(res, dict)
            and res.get("kind") == "dist"
        ):
            rec = self.preds.get((b["pid"], b["tid"]), {}).get(b.get("seq"))
            if rec is not None and rec.dist is None:
                rec.dist = {**res, "stop_id": b.get("stop_id")}

    def remember_texts(self, info: dict) -> None:
        inp = info.get("input") or {}
        for i, piece in zip(inp.get("ids", []), inp.get("pieces", [])):
            self.texts.setdefault(i, piece)
        res = info.get("result")
        if not isinstance(res, dict):  # a syscall's own result (a join's return value, …): no tokens to name
            return
        for row in res.get("topk", []) or []:
            self.texts.setdefault(row["token"], row.get("text", ""))

    # --- what a front-end adds from elsewhere --------------------------------------------------
    def note_forced(self, pid: int, tid: int, seq: int, token: int) -> None:
        with self._lock:
            rec = self.preds.get((pid, tid), {}).get(seq)
            if rec is not None:
                rec.forced = token

    def note_topk(self, pid: int, tid: int, seq: int, topk: list) -> None:
        """[[token, p], ...] for one pred (from a recording or a token tap)."""
        with self._lock:
            rec = self.preds.get((pid, tid), {}).get(seq)
            if rec is not None:
                rec.topk = topk

    def note_kv_tree(self, tree: dict, ts: float | None = None) -> None:
        """A KV tree snapshot (a `view` event, or one a front-end pulled): kept, in order; a
        tree that differs in nothing but its timestamp is not kept twice."""
        with self._lock:
            if self.kv_trees and self.kv_trees[-1][1] == tree:
                return
            self.kv_trees.append((ts, tree))

    # --- reading --------------------------------------------------------------------------------
    def kv_tree(self, index: int = -1) -> dict | None:
        """The newest KV tree seen (or the `index`-th kept one): still there after the run ends."""
        with self._lock:
            if not self.kv_trees:
                return None
            return self.kv_trees[index][1]

    def last_tree_with_files(self, pid: int | None = None) -> dict | None:
        """The newest kept tree that shows files (of process `pid`, when given): what a view
        shows once the run has closed its files."""
        with self._lock:
            for _, t in reversed(self.kv_trees):
                files = t.get("files") or []
                if pid is not None:
                    files = [f for f in files if pid in (f.get("held_by") or [])]
                if files:
                    return t
        return None

    def threads_of(self, pid: int) -> list[int]:
        with self._lock:
            tids = set(self.processes.get(pid, ProcessState(pid)).threads) | {t for p, t in self.preds if p == pid}
        return sorted(t for t in tids if isinstance(t, int))

    def lane(self, pid: int, tid: int, text_of: Callable[[int], str] | None = None) -> dict:
        """What thread `tid` of `pid` fed and generated: the prompt text, then each generated
        token with its probability (`p`), whether it was overridden, and — for the newest pred
        whose pick the program has not fed yet — the pick shown as `pending`."""
        text_of = text_of or (lambda t: self.texts.get(t, f"⟨{t}⟩"))
        with self._lock:
            preds = [self.preds[(pid, tid)][s] for s in sorted(self.preds.get((pid, tid), {}))]
        if not preds:
            return {"prompt": "", "tokens": []}

        def prob(rec: PredRecord, tok: int) -> float | None:
            if rec.dist is not None:
                for row in rec.dist.get("topk", []):
                    if row["token"] == tok:
                        return row["p"]
                for k in ("taken", "chosen", "preferred"):
                    v = rec.dist.get(k) or {}
                    if v.get("token") == tok and rec.forced is None:
                        return v.get("p")
            if rec.topk is not None and rec.forced is None:
                for t, q in rec.topk:
                    if t == tok:
                        return q
                return 0.0 if rec.topk else None  # outside the top k: unlikely
            return None

        prompt_parts: list[str] = []
        tokens: list[dict] = []
        prev: PredRecord | None = None
        for pr in preds:
            if prev is not None and pr.n == 1 and pr.tokens:
                tok = pr.tokens[0]
                tokens.append(
                    {
                        "token": tok,
                        "text": text_of(tok),
                        "p": prob(prev, tok),
                        "overridden": prev.forced is not None and prev.forced == tok,
                        "seq": prev.seq,
                    }
                )
            elif not tokens:
                prompt_parts.append("".join(text_of(t) for t in pr.tokens) + ("…" if pr.n > len(pr.tokens) else ""))
            else:  # fed text in the middle (a tool result, a re-prompt): dim, no probability
                tokens.append({"token": None, "text": "".join(text_of(t) for t in pr.tokens), "p": None, "fed": True})
            prev = pr
        last = preds[-1]
        pick = last.taken
        if pick is None and last.dist is not None:
            pick = (last.dist.get("chosen") or {}).get("token")
        if pick is None:
            pick = last.argmax
        if isinstance(pick, int):
            tokens.append(
                {
                    "token": pick,
                    "text": text_of(pick),
                    "p": prob(last, pick),
                    "overridden": last.forced is not None and last.forced == pick,
                    "pending": True,
                    "seq": last.seq,
                }
            )
        prompt = "".join(prompt_parts)
        return {"prompt": prompt[-600:], "tokens": tokens[-2000:]}

    def lanes(self, pid: int, text_of: Callable[[int], str] | None = None) -> dict[int, dict]:
        """One lane per thread of process `pid` (threads that made no pred have none)."""
        return {tid: self.lane(pid, tid, text_of) for tid in self.threads_of(pid) if self.preds.get((pid, tid))}


def scope_kv_tree(tree: dict, pids: set[int] | list[int]) -> dict:
    """The part of a KV tree (the `kv_tree` view) that processes `pids` hold, with the files they
    forked from, so the tree keeps its shape."""
    pids = set(pids)
    files = tree.get("files") or []
    by_id = {f["file"]: f for f in files}
    keep = {f["file"] for f in files if pids & set(f.get("held_by") or [])}
    for fid in list(keep):
        for a in by_id[fid].get("ancestry") or []:
            if a in by_id:
                keep.add(a)
    out = dict(tree)
    out["files"] = [f for f in files if f["file"] in keep]
    out["edges"] = [e for e in tree.get("edges") or [] if e[1] in keep]
    out["roots"] = [r for r in tree.get("roots") or [] if r in keep]
    out["scope"] = sorted(pids)
    return out


def scope_timeline(tl: dict, pids: set[int] | list[int]) -> dict:
    """The scheduler timeline with only the batches and queued calls that involve `pids`
    (each batch still counts every member, so its fill is the real one)."""
    pids = set(pids)
    out = dict(tl)
    out["batches"] = [b for b in tl.get("batches") or [] if any(m.get("pid") in pids for m in b.get("members") or [])]
    out["queue"] = [q for q in tl.get("queue") or [] if q.get("pid") in pids]
    out["scope"] = sorted(pids)
    return out


__all__ = [
    "EVENTS",
    "PredRecord",
    "message_value",
    "ProcessState",
    "SessionState",
    "ThreadState",
    "scope_kv_tree",
    "scope_timeline",
]
