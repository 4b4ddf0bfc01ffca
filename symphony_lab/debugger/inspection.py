"""Inspection at a stop: processes and threads, the stopped call's source and stack, its input
tokens, its KV file in full, the distribution a stepped `pred` returned, and a check of a KV
file against a fresh recompute (`verify_kv`); and waiting for a stop (`wait_stopped`) or for a
process's end (`wait_process`). The views' JSON shapes are built in viewdata.py.

`Inspector` is a part of the debugger composed through an explicit interface: given the engine,
the stop table (it only reads stops) and the KV files the views have seen (`known_files`).
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from symphony_core.kvfs import KV
from symphony_core.model.dist import Dist

from . import viewdata as ins
from .errors import DebuggerError
from .stop_table import StopTable
from .stops import Stop


class Inspector:
    """The inspection commands of `Debugger`."""

    def __init__(
        self, engine, stop_table: StopTable, known_files: dict[int, dict], step_lost: Callable[[int], bool]
    ) -> None:
        self.engine = engine
        self.step_lost = step_lost
        self.runtime = engine.runtime
        self.tokenizer = engine.tokenizer
        self.stop_table = stop_table
        self.known_files = known_files

    def process(self, pid: int):
        """The `Process` object (in-process use only)."""
        proc = self.runtime.processes.get(pid)
        if proc is None:
            raise DebuggerError(f"no process {pid}")
        return proc

    def wait_stopped(
        self,
        pid: int | None = None,
        tid: int | None = None,
        timeout: float = 30.0,
        after: int | None = None,
        step: int | None = None,
    ) -> dict:
        """Block until a thread (matching pid/tid) is stopped; returns its stop, or
        `{"exited": ...}` when the process ends without stopping. Raises TimeoutError.

        With `after` and `step` (as a step answered), only a stop newer than the step that ends
        it, or that stopped for another reason than a step, counts: where the step landed, in
        whichever thread (docs/architecture.md, "Stepping and
        threads"). A step that found no thread left to carry it answers the oldest stop still held.

        Raises:
            TimeoutError: `no stop of process <pid> within <timeout>s`.
        """

        def ended(p: int) -> dict | None:
            proc = self.runtime.processes.get(p)
            return {"exited": True, "pid": p, "status": proc.status} if proc is not None and proc.done else None

        def lost(p: int) -> bool:
            return self.step_lost(p)

        found = self.stop_table.wait(pid, tid, timeout, ended, after=after, step=step, lost=lost)
        return self.stop_table.info(found) if isinstance(found, Stop) else found

    def wait_process(self, pid: int, timeout: float = 60.0) -> dict:
        """Wait for process `pid` to end; its status, result (as JSON) and error.

        Returns:
            `{"pid", "status", "result", "error"}` (`error` is the `LIPError`'s text, or None).

        Raises:
            DebuggerError: `no process <pid>`.
            TimeoutError: `process <pid> still running after <timeout>s`.
        """
        proc = self.process(pid)
        if not proc.wait(timeout):
            raise TimeoutError(f"process {pid} still running after {timeout}s")
        try:
            result, error = proc.result(timeout=0), None
        except Exception as e:
            result, error = None, str(e)
        return {"pid": pid, "status": proc.status, "result": ins.jsonable(result), "error": error}

    def threads(self, include_done: bool = False) -> dict:
        """`{"processes": [...]}`: every process with its threads' states and which are stopped."""
        stops = self.stop_table.by_thread()
        procs = [p for p in list(self.runtime.processes.values()) if include_done or not p.done]
        return {"processes": [ins.process_view(p, stops) for p in procs]}

    def stops(self) -> dict:
        """`{"stops": [...]}`: every stopped thread's stop (call, where, location, arguments, result)."""
        return {"stops": [self.stop_table.info(s) for s in self.stop_table.matching()]}

    def stack(self, pid: int | None = None, tid: int | None = None) -> dict:
        """The stopped thread's Python stack, innermost first, with each frame's locals.

        Raises:
            DebuggerError: no (or more than one) matching stopped thread.
        """
        s = self.stop_table.find(pid, tid)
        return {"pid": s.pid, "tid": s.tid, "frames": s.frames, "file": s.file, "line": s.line}

    def token_texts(self, ids: list) -> dict:
        """The printed text of each token id (for front-ends without the tokenizer, e.g. over WebSocket)."""
        vocab = self.engine.config.vocab_size
        if not isinstance(ids, list) or len(ids) > 4096:
            raise DebuggerError("token_texts: ids must be a list of at most 4096 token ids")
        bad = [t for t in ids if not isinstance(t, int) or isinstance(t, bool) or not 0 <= t < vocab]
        if bad:
            raise DebuggerError(f"token_texts: not token ids of this model (0..{vocab - 1}): {bad[:5]}")
        return {"texts": {str(t): self.tokenizer.token_text(t) for t in dict.fromkeys(ids)}}

    def tokens(self, pid: int | None = None, tid: int | None = None) -> dict:
        """The input tokens of the stopped call: `{pid, tid, ids, text, pieces}`.

        Raises:
            DebuggerError: `the stop of <pid>.<tid> at <call> has no input tokens`; no (or more
                than one) matching stopped thread.
        """
        s = self.stop_table.find(pid, tid)
        toks = s.tokens if s.tokens is not None else s.args.get("tokens")
        if toks is None:
            raise DebuggerError(f"the stop of {s.pid}.{s.tid} at {s.call or 'entry'} has no input tokens")
        return {"pid": s.pid, "tid": s.tid, **ins.tokens_view(toks, self.tokenizer)}

    def kv(self, fid: int | None = None, pid: int | None = None, tid: int | None = None) -> dict:
        """A KV file in full (by id, or the one the stopped call works on)."""
        if fid is None:
            fid = self.stop_table.find(pid, tid).kv_file
            if fid is None:
                raise DebuggerError("this stop's call has no KV file; pass fid")
        v = ins.kv_file(self.runtime, fid, self.tokenizer, self.known_files)
        if v is None:
            raise DebuggerError(f"no live KV file {fid}")
        return v

    def dist(self, pid: int | None = None, tid: int | None = None, k: int | None = None, position: int = -1) -> dict:
        """The top-k of the distribution a stopped thread's `pred` returned (after a step)."""
        s = self.stop_table.find(pid, tid)
        if not isinstance(s.result, Dist):
            raise DebuggerError(
                f"{s.pid}.{s.tid} is stopped {s.where} {s.call or 'entry'}: no distribution yet "
                "(step to stop after the pred returns)"
            )
        return {
            "pid": s.pid,
            "tid": s.tid,
            **ins.dist_view(
                s.result, self.tokenizer, k or self.stop_table.topk, position, chosen=s.overridden, original=s.original
            ),
        }

    def verify_kv(self, fid: int, probe: int | None = None, atol: float = 1e-2) -> dict:
        """Check a KV file against a fresh recompute of its tokens (call it while the file's owner
        is stopped): the K/V of every slot, and the logits after one more token fed to a fork vs
        to a fresh file holding the same tokens at the same positions."""
        eng, kvfs = self.engine, self.engine.kvfs
        with kvfs.lock:
            f = kvfs.files.get(fid)
            if f is None or f.evicted or f.swapped is not None:
                raise DebuggerError(f"no resident KV file {fid}")
            tokens, positions = list(f.tokens), list(f.positions)
            slots = kvfs.context_slots(f)
            handle = next(
                (
                    h
                    for p in list(self.runtime.processes.values())
                    for h in list(p.handles)
                    if h.file is f and not h.closed
                ),
                None,
            ) or KV(f, "r")
        if not tokens:
            raise DebuggerError(f"KV file {fid} is empty")
        probe = tokens[-1] if probe is None else probe
        nxt = positions[-1] + 1
        fork = eng.kv_fork(handle, user=f.owner)
        fresh = eng.kv_create(user=f.owner)
        try:
            a = eng.pred(fork, [probe], [nxt]).logits.float().cpu()
            b = eng.pred(fresh, tokens + [probe], positions + [nxt]).logits.float().cpu()
            with kvfs.lock:
                fslots = kvfs.context_slots(fresh.file)[: len(tokens)]
                pool = kvfs.pool
                idx_a = torch.as_tensor(slots, device=pool.k.device)
                idx_b = torch.as_tensor(fslots, device=pool.k.device)
                dk = float((pool.k[:, idx_a].float() - pool.k[:, idx_b].float()).abs().max())
                dv = float((pool.v[:, idx_a].float() - pool.v[:, idx_b].float()).abs().max())
        finally:
            eng.kv_close(fork)
            eng.kv_close(fresh)
        dl = float((a - b).abs().max())
        return {
            "file": fid,
            "tokens": len(tokens),
            "probe": probe,
            "max_abs_diff_logits": dl,
            "max_abs_diff_k": dk,
            "max_abs_diff_v": dv,
            "argmax_equal": int(a.argmax()) == int(b.argmax()),
            "consistent": dl <= atol and dk <= atol and dv <= atol and int(a.argmax()) == int(b.argmax()),
        }


__all__ = ["Inspector"]
