"""The in-engine twin of a sandboxed program: an ordinary LIP process whose threads execute, on
their real `sym`, the syscalls the worker's threads send.

So the kernel, the schedulers and the debugger see a normal process making normal calls, with
the worker's own file and line (`_at`). Each `_op_<name>` is the engine side of one syscall:
it checks the worker's arguments (nothing from a worker is trusted), makes the call and
returns (JSON result, binary payload). KV handles cross the boundary as integer ids; a `Dist`
crosses as float32 logits in a shared-memory slot the worker provided. `inprocess_lip` runs a
trusted user's program inside the engine instead, with no worker.
"""

from __future__ import annotations

import contextlib
import functools
import json
import linecache
import queue
import types
from collections.abc import Callable, Iterator
from typing import Any

import torch

from ..errors import KVError, KVPermissionError, PredError, SymphonyError
from ..model.sampling import Sampler
from ..sched.process import Cancelled, LimitExceeded, LIPError
from ..sched.thread_state import KILL_CHECK_S
from .job import SandboxJob
from .pool import SandboxManager
from .protocol import FrameTooLarge
from .worker_link import Worker, kv_handle_info


def _proc(sym):
    return sym._th.proc


_TRAMPOLINE = (lambda f: f()).__code__
_tramps: dict[tuple[str, int], types.FunctionType] = {}


def _at(loc: Any, fn: Callable[[], Any]) -> Any:
    """Call `fn` from a frame that carries the LIP's own file and line, so the kernel's trace
    and the debugger show where in the sandboxed program the call was made."""
    if not (
        isinstance(loc, list)
        and len(loc) == 2
        and isinstance(loc[0], str)
        and isinstance(loc[1], int)
        and 0 < loc[1] < 10_000_000
    ):
        return fn()
    key = (loc[0][:200], loc[1])
    t = _tramps.get(key)
    if t is None:
        if len(_tramps) > 4096:
            _tramps.clear()
        code = _TRAMPOLINE.replace(co_filename=key[0], co_firstlineno=key[1], co_name="<lip>")
        t = _tramps[key] = types.FunctionType(code, {})
    return t(fn)


def check_list_prefix(user: str, prefix: str | None) -> None:
    """Listing another user's private directory is refused (not silently empty)."""
    if isinstance(prefix, str) and prefix.startswith("/users/"):
        parts = prefix.split("/")
        if len(parts) > 2 and parts[2] and parts[2] != user:
            raise KVPermissionError(f"permission denied: {prefix} is private to user {parts[2]!r}")
    elif prefix is not None and not isinstance(prefix, str):
        raise KVError(f"kv_list prefix must be a string, got {type(prefix).__name__}")


def _sampler(w: Worker, spec: Any) -> Sampler | str | None:
    if spec is None or isinstance(spec, str):
        return spec
    if not isinstance(spec, dict):
        raise TypeError("sampler must be a Sampler")
    params: dict[str, Any] = {}
    for k, typ in (("temperature", (int, float)), ("top_k", int), ("top_p", (int, float)), ("min_p", (int, float))):
        v = spec.get(k)
        if not isinstance(v, typ) or isinstance(v, bool):
            raise TypeError(f"sampler {k} must be a number, got {v!r}")
        params[k] = v
    seed = spec.get("seed")
    if seed is not None and (not isinstance(seed, int) or isinstance(seed, bool)):
        raise TypeError(f"sampler seed must be an int or None, got {seed!r}")
    params["seed"] = seed
    key = spec.get("id")
    cached = w.samplers.get(key)
    if cached is not None and cached[0] == params:
        return cached[1]
    s = Sampler(**params)
    if len(w.samplers) < 1024:
        w.samplers[key] = (params, s)
    return s


def _mask(spec: Any, payload: bytes) -> Any:
    if spec is None:
        return None
    if isinstance(spec, dict) and "ids" in spec:
        return spec["ids"]
    if (
        isinstance(spec, dict)
        and isinstance(spec.get("shape"), list)
        and all(isinstance(s, int) and s >= 0 for s in spec["shape"])
    ):
        n = 1
        for s in spec["shape"]:
            n *= s
        if n != len(payload) or len(spec["shape"]) > 2:
            raise TypeError(f"mask of shape {spec['shape']} does not match its {len(payload)} bytes")
        return (
            torch.frombuffer(bytearray(payload), dtype=torch.uint8).reshape(spec["shape"]).bool()
            if n
            else torch.zeros(spec["shape"], dtype=torch.bool)
        )
    raise TypeError("mask must be a bool tensor or a list of token ids")


MAX_LOGITS_BYTES = 64 << 20  # one sandboxed pred's logits (outputs="all" over 4,096 tokens was 805 MB, held twice)


def _op_pred(sym, w: Worker, a: dict, payload: bytes):
    kv = w.kv(a.get("h"))
    toks = a.get("tokens")
    outputs = a.get("outputs", "last")
    rows = (
        len(outputs) if isinstance(outputs, list) else len(toks) if outputs == "all" and isinstance(toks, list) else 1
    )
    if rows * w.slot_floats * 4 > MAX_LOGITS_BYTES:  # the server holds them, then copies them to the worker
        raise PredError(
            f"pred: {rows} output positions are {rows * w.slot_floats * 4 / 2**20:.0f} MiB of logits; a sandboxed "
            f"pred may ask for at most {MAX_LOGITS_BYTES >> 20} MiB ({MAX_LOGITS_BYTES // (w.slot_floats * 4)} positions): "
            "ask for fewer outputs, or split the call"
        )
    w.job.before_pred(sym.user, len(toks) if isinstance(toks, list) else 1)
    release = w.job.hold_memory(sym.user, rows * w.slot_floats * 4, f"a pred's {rows} rows of logits")
    try:
        d = sym.pred(
            kv,
            toks,
            a.get("positions"),
            outputs=outputs,
            sampler=_sampler(w, a.get("sampler")),
            mask=_mask(a.get("mask"), payload),
        )
        logits = d.logits.detach().to(torch.float32).cpu().contiguous()
    finally:
        release()
    n = logits.numel()
    token = d.token
    r = {"shape": list(logits.shape), "token": token, "len": kv.len, "slot": None}
    slot = a.get("slot")
    if isinstance(slot, int) and not isinstance(slot, bool) and 0 <= slot < w.n_slots and n <= w.slot_floats:
        w.slot_views[slot][:n].copy_(logits.view(-1))
        r["slot"] = slot
        return r, b""
    return r, memoryview(logits.numpy()).cast("B")  # sent as it is: no copy of what may be many MiB


def _op_kv_create(sym, w, a, p):
    kv = sym.kv_create(a.get("path"))
    return w.add_kv(kv), b""


def _op_kv_open(sym, w, a, p):
    kv = sym.kv_open(a.get("path"), a.get("mode", "r"))
    return w.add_kv(kv), b""


def _op_kv_fork(sym, w, a, p):
    return w.add_kv(sym.kv_fork(w.kv(a.get("h")))), b""


def _op_kv_truncate(sym, w, a, p):
    kv = w.kv(a.get("h"))
    sym.kv_truncate(kv, a.get("n"))
    return kv_handle_info(kv, a["h"]), b""


def _op_kv_close(sym, w, a, p):
    kv = w.kv(a.get("h"))
    sym.kv_close(kv)
    w.close_handle(a["h"])
    return None, b""


def _op_kv_remove(sym, w, a, p):
    return sym.kv_remove(a.get("path")), b""


def _op_kv_hint(sym, w, a, p):
    return sym.kv_hint(w.kv(a.get("h")), a.get("keep_for"), a.get("priority")), b""


def _op_kv_list(sym, w, a, p):
    check_list_prefix(sym.user, a.get("prefix"))
    return sym.kv_list(a.get("prefix")), b""


def _op_kv_stat(sym, w, a, p):
    kv = w.kv(a.get("h"))
    return {
        "tokens": kv.tokens,
        "positions": kv.positions,
        "pages": kv.pages,
        "evicted": kv.evicted,
        **kv_handle_info(kv, a["h"]),
    }, b""


def _op_tokenize(sym, w, a, p):
    text = a.get("text")
    if not isinstance(text, str):
        raise TypeError(f"tokenize expects a str, got {type(text).__name__}")
    return sym.tokenize(text), b""


def _op_detokenize(sym, w, a, p):
    ids = a.get("ids")
    if not isinstance(ids, list) or not all(isinstance(i, int) and not isinstance(i, bool) for i in ids):
        raise TypeError("detokenize expects a list of ints")
    return sym.detokenize(ids), b""


def _op_chat_template(sym, w, a, p):
    msgs = a.get("messages")
    if not isinstance(msgs, list):
        raise TypeError("chat_template expects a list of messages")
    tools = a.get("tools")
    if tools is not None and not isinstance(tools, list):
        raise TypeError("chat_template: tools must be a list of JSON-schema dicts")
    return sym.chat_template(msgs, bool(a.get("add_generation_prompt", True)), tools=tools), b""


def _op_send(sym, w, a, p):
    v, limit = a.get("v"), w.job.max_message_bytes
    if limit is not None:
        n = len(json.dumps(v))
        if n > limit:
            raise LimitExceeded(
                f"send: a message of {n / (1 << 20):.1f} MiB; a message may be at most {limit / (1 << 20):.1f} MiB"
            )
    return sym.send(v), b""


def _op_recv(sym, w, a, p):
    t = a.get("timeout")
    if t is not None and (not isinstance(t, (int, float)) or isinstance(t, bool)):
        raise TypeError("recv timeout must be a number of seconds or None")
    return sym.recv(t), b""


def _op_spawn(sym, w, a, p):
    wtid = w.new_thread()
    try:
        h = sym.spawn(_thread_twin, w, wtid)
    except BaseException:
        w.queues.pop(wtid, None)
        raise
    w.threads[wtid] = h
    return {"t": wtid, "tid": h.tid}, b""


def _op_join(sym, w, a, p):
    h = w.threads.get(a.get("t"))
    if h is None:
        raise SymphonyError(f"join: no thread {a.get('t')!r} in this process")
    t = a.get("timeout")
    h.join(t if isinstance(t, (int, float)) and not isinstance(t, bool) else None)
    return None, b""


OPS: dict[str, Callable] = {name[4:]: fn for name, fn in globals().items() if name.startswith("_op_")}
_SAFE_ERRORS = (SymphonyError, TimeoutError, ValueError, TypeError, IndexError, KeyError, RuntimeError)


def _serve(sym, w: Worker, wtid: int) -> None:
    """Execute the requests of worker thread `wtid` on this in-engine thread's `sym`."""
    q = w.queues[wtid]
    proc = _proc(sym)
    while True:
        try:
            kind, h, payload = q.get(timeout=KILL_CHECK_S)  # a kill wakes it at once (sandboxed_lip)
        except queue.Empty:
            if proc.kill_reason is not None:
                raise proc.kill_reason from None
            continue
        if kind in ("exit", "thread_exit"):
            return
        if kind == "killed":
            if proc.kill_reason is not None:
                raise proc.kill_reason
            continue
        if kind == "ended":  # a request for one of the worker's threads that has ended (pool.py)
            msg = f"LIP thread {h['ended']} has ended: its calls cannot run any more"
            w.send({"id": h.get("id"), "err": {"type": "SymphonyError", "msg": msg}})
            continue
        if kind == "dead":
            if proc.kill_reason is not None:
                raise proc.kill_reason
            e = LIPError(f"process {proc.pid} ({proc.name}) failed: {w.death_message()}")
            e.error_type = "SandboxError"
            raise e
        op = h.get("op")
        fn = OPS.get(op) if isinstance(op, str) else None
        a = h.get("a")
        try:
            if fn is None:
                raise SymphonyError(f"unknown system call {op!r}")
            if not isinstance(a, dict):
                raise TypeError(f"{op}: arguments must be an object")
            result, data = _at(h.get("loc"), functools.partial(fn, sym, w, a, payload))
            reply = {"id": h.get("id"), "ok": result}
        except _SAFE_ERRORS as e:
            if proc.kill_reason is not None or isinstance(e, Cancelled):
                raise
            data = b""
            reply = {"id": h.get("id"), "err": {"type": type(e).__name__, "msg": str(e)}}
        try:
            w.send(reply, data)
        except FrameTooLarge as e:  # the worker would take it for a protocol violation: an error instead
            w.send({"id": h.get("id"), "err": {"type": "SymphonyError", "msg": f"{op}: the answer is too large: {e}"}})


@contextlib.contextmanager
def woken_on_kill(proc, w: Worker) -> Iterator[None]:
    """While the block runs, a kill of `proc` wakes every thread of it serving `w` at once (they
    sleep in `_serve` between the worker's requests, looking at the kill flag only every
    KILL_CHECK_S)."""

    def wake() -> None:
        w.push_all(("killed", {}, b""))

    proc.kill_wakers.append(wake)
    if proc.kill_reason is not None:  # killed before the line above
        wake()
    try:
        yield
    finally:
        proc.kill_wakers.remove(wake)


def _thread_twin(sym, w: Worker, wtid: int) -> None:
    _serve(sym, w, wtid)


def sandboxed_lip(sym, mgr: SandboxManager, job: SandboxJob) -> Any:
    """The in-engine process of a sandboxed program: start a worker, serve it, return its result."""
    proc = _proc(sym)
    th = sym._th
    th.enter_syscall(
        "sandbox_start"
    )  # waiting for a worker is not running LIP code: the batch policy should not wait for it
    try:
        w = mgr.spawn(job, proc)
    finally:
        th.leave_syscall()
    w.proc = proc
    try:
        info = {
            "pid": sym.pid,
            "tid": sym.tid,
            "user": sym.user,
            "name": job.name,
            "eos_token_ids": sorted(sym.eos_token_ids),
            "vocab_size": sym.vocab_size,
            "page_size": sym.page_size,
            "tokenizer_file": mgr.tokenizer_file,
        }
        w.send(
            {
                "op": "start",
                "source": job.source,
                "entry": job.entry,
                "args": job.args,
                "kwargs": job.kwargs,
                "info": info,
            }
        )
        with woken_on_kill(proc, w):
            _serve(sym, w, 0)
        ex = w.exit_frame or {}
        if "err" in ex and isinstance(ex["err"], dict):
            err = ex["err"]
            etype, emsg = str(err.get("type", "Error"))[:100], str(err.get("msg", ""))
            hint = ""
            if etype == "MemoryError":
                hint = f" (the sandbox's memory limit is {job.spec.memory_mb} MiB)"
            elif etype == "RuntimeError" and "new thread" in emsg:
                hint = f" (the sandbox's limit is {job.spec.max_threads} threads)"
            e = LIPError(f"process {proc.pid} ({proc.name}) failed: {etype}: {emsg}{hint}", str(err.get("tb", "")))
            e.error_type = etype
            raise e
        return ex.get("ok")
    finally:
        mgr.release(w)


def inprocess_lip(sym, job: SandboxJob) -> Any:
    """A trusted program, run inside the engine process (no sandbox): for trusted users only."""
    module = types.ModuleType("__lip__")
    filename = f"<lip {job.name}>"
    linecache.cache[filename] = (len(job.source), None, job.source.splitlines(True), filename)
    module.__file__ = filename
    exec(compile(job.source, filename, "exec"), module.__dict__)
    fn = module.__dict__.get(job.entry)
    if not callable(fn):
        raise NameError(f"the program defines no function {job.entry!r}")
    return fn(sym, *job.args, **job.kwargs)


__all__ = ["OPS", "check_list_prefix", "inprocess_lip", "sandboxed_lip"]
