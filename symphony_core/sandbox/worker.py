"""The sandboxed worker's side: a proxy `sym` that forwards every syscall to the engine.

A LIP received over the network runs here, in its own confined process, unchanged: its
`sym.pred` returns a real `Dist` (logits arrive through shared memory), its KV handles are
`RemoteKV` objects that cross the boundary as integer ids, its threads are real threads whose
twins inside the engine make the same calls. There is no engine in this process — nothing to
reach with `import symphony_core...` but this proxy.

This module runs inside the sandbox: it imports no engine internals.
"""

from __future__ import annotations

import itertools
import linecache
import math
import operator
import os
import sys
import threading
import traceback
import types
import weakref
from collections.abc import Callable
from typing import Any

import torch

from .. import errors as _errors
from ..model.dist import Dist
from ..model.sampling import Sampler
from ..sched import process as _process
from ..syscall_surface import no_such_member
from .protocol import FrameTooLarge, jsonable, recv_frame, send_frame
from .remote_handles import RemoteKV, RemoteThreadHandle

# Exceptions the engine may answer with, rebuilt here under their own class so that
# `except KVNotFound:` in a LIP works the same in and out of the sandbox.
_ERRORS: dict[str, type[BaseException]] = {
    **{
        n: getattr(_errors, n)
        for n in (
            "SymphonyError",
            "KVError",
            "KVPermissionError",
            "KVNotFound",
            "OutOfPages",
            "PredError",
            "ModelError",
        )
    },
    "LimitExceeded": _process.LimitExceeded,
    "Cancelled": _process.Cancelled,
    "LIPError": _process.LIPError,
    **{
        e.__name__: e
        for e in (TimeoutError, ValueError, TypeError, IndexError, KeyError, RuntimeError, PermissionError)
    },
}


_tls = threading.local()  # .wtid: the worker thread id of the LIP thread running here


def _current(default: int) -> int:
    """Calls go through the *calling* LIP thread's twin in the engine (a KV handle or a `sym`
    made by a thread that has since ended still works from the thread that holds it)."""
    return getattr(_tls, "wtid", default)


def remote_error(err: dict) -> BaseException:
    cls = _ERRORS.get(str(err.get("type")))
    msg = str(err.get("msg", ""))
    return cls(msg) if cls is not None else _errors.SymphonyError(f"{err.get('type')}: {msg}")


class Channel:
    """Request/reply over the worker's socket. Whichever waiting thread is free reads the next
    reply and hands it to its owner (leader/follower), so a single-threaded LIP pays no
    thread hand-off per syscall."""

    def __init__(self, sock, shm, slot_bytes: int, n_slots: int) -> None:
        self.sock, self.shm, self.slot_bytes = sock, shm, slot_bytes
        self._ids = itertools.count(1)
        self._wlock = threading.Lock()
        self._cv = threading.Condition()
        self._reading = False
        self._replies: dict[int | None, tuple[dict, bytearray]] = {}  # a reply with no id: under None
        self._slots = list(range(n_slots))
        self._slot_lock = threading.Lock()

    def notify(self, header: dict) -> None:
        with self._wlock:
            send_frame(self.sock, header)

    def call(self, wtid: int, op: str, args: dict, payload: bytes = b"", loc=None) -> tuple[Any, bytearray]:
        rid = next(self._ids)
        h = {"id": rid, "t": wtid, "op": op, "a": args}
        if loc is not None:
            h["loc"] = loc
        try:
            with self._wlock:
                send_frame(self.sock, h, payload)
        except FrameTooLarge as e:  # the server would end the worker for it: refuse the call instead
            raise _errors.SymphonyError(f"{op}: the call is too large to send to the engine: {e}") from None
        reply, data = self._wait(rid)
        if "err" in reply:
            raise remote_error(reply["err"])
        return reply.get("ok"), data

    def _wait(self, rid: int) -> tuple[dict, bytearray]:
        while True:
            with self._cv:
                while rid not in self._replies and self._reading:
                    self._cv.wait()
                if rid in self._replies:
                    return self._replies.pop(rid)
                self._reading = True
            try:
                h, p = recv_frame(self.sock)
            except BaseException:
                with self._cv:
                    self._reading = False
                    self._cv.notify_all()
                os._exit(3)  # the server is gone: nothing left to do
            with self._cv:
                self._reading = False
                self._replies[h.get("id")] = (h, p)
                self._cv.notify_all()

    def take_slot(self) -> int | None:
        with self._slot_lock:
            return self._slots.pop() if self._slots else None

    def give_slot(self, k: int) -> None:
        with self._slot_lock:
            self._slots.append(k)


def _ids(x: Any, what: str) -> Any:
    if isinstance(x, torch.Tensor):
        return x.tolist()
    if isinstance(x, (int, str, float)) or x is None:
        return x
    out = []
    for t in x:
        if isinstance(t, (bool, float, str)) or t is None:
            out.append(t)  # the engine refuses it with its own clear message
            continue
        try:
            out.append(operator.index(t))
        except TypeError:
            raise _errors.PredError(f"pred: {what} must be ints, got {t!r} ({type(t).__name__})") from None
    return out


_PKG_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _caller_loc() -> list | None:
    """File and line of the innermost frame outside symphony_core (as the kernel reports it
    for an in-process LIP): the LIP's own code, even when it calls through symphony_core.lib."""
    f: types.FrameType | None = sys._getframe(2)
    while f is not None and f.f_code.co_filename.startswith(_PKG_DIR):
        f = f.f_back
    return None if f is None else [f.f_code.co_filename, f.f_lineno]


class RemoteSym:
    """The `sym` of a sandboxed LIP: same methods, each one a round trip to the engine."""

    def __init__(self, ch: Channel, wtid: int, info: dict, tid: int) -> None:
        self._ch, self._wtid, self._info, self._tid = ch, wtid, info, tid
        self._samplers: weakref.WeakKeyDictionary = info.setdefault("_samplers", weakref.WeakKeyDictionary())
        self._sids = info.setdefault("_sids", itertools.count(1))
        info.setdefault("_eos", frozenset(info["eos_token_ids"]))

    def _call(self, op: str, args: dict, payload: bytes = b"") -> Any:
        return self._ch.call(_current(self._wtid), op, args, payload, _caller_loc())[0]

    # --- identity ------------------------------------------------------------------------------
    pid = property(lambda self: self._info["pid"])
    tid = property(lambda self: self._tid)
    user = property(lambda self: self._info["user"])
    eos_token_ids = property(lambda self: self._info["_eos"])
    vocab_size = property(lambda self: self._info["vocab_size"])
    page_size = property(lambda self: self._info["page_size"])

    @property
    def tokenizer_file(self) -> str:
        path = self._info.get("tokenizer_file")
        if not path:  # the server bound none into this sandbox (sandbox/pool.py)
            raise _errors.SymphonyError(
                "sym.tokenizer_file: this sandbox was given no tokenizer file (the server found no "
                "tokenizer.json to share read-only); pass the tokenizer another way"
            )
        return path

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        raise no_such_member(name)

    # --- the model -----------------------------------------------------------------------------
    def pred(self, kv: RemoteKV, token_ids, positions=None, *, outputs="last", sampler=None, mask=None) -> Dist:
        if not isinstance(kv, RemoteKV):
            raise _errors.KVError(f"pred expects a KV handle, got {type(kv).__name__}")
        a: dict = {"h": kv.hid, "tokens": _ids(token_ids, "token_ids")}
        if positions is not None:
            a["positions"] = _ids(positions, "positions")
        a["outputs"] = outputs if isinstance(outputs, str) else _ids(outputs, "outputs")
        if isinstance(sampler, Sampler):
            for k in ("temperature", "top_p", "min_p"):  # JSON has no inf or nan: the engine's words for them
                v = getattr(sampler, k)
                if isinstance(v, float) and not math.isfinite(v):
                    raise _errors.PredError(f"pred: sampler {k} must be finite, got {v}")
            sid = self._samplers.get(sampler)
            if sid is None:
                sid = self._samplers[sampler] = next(self._sids)
            a["sampler"] = {
                "id": sid,
                "temperature": sampler.temperature,
                "top_k": sampler.top_k,
                "top_p": sampler.top_p,
                "min_p": sampler.min_p,
                "seed": sampler.seed,
            }
        elif sampler is not None:
            a["sampler"] = sampler if isinstance(sampler, str) else repr(sampler)
        payload = b""
        if mask is not None:
            if isinstance(mask, torch.Tensor) and mask.dtype == torch.bool:
                a["mask"] = {"shape": list(mask.shape)}
                payload = mask.to(torch.uint8).contiguous().numpy().tobytes()
            else:
                a["mask"] = {"ids": _ids(mask, "mask (allowed token ids)")}
        slot = self._ch.take_slot()
        a["slot"] = slot
        try:
            r, data = self._ch.call(_current(self._wtid), "pred", a, payload, _caller_loc())
            shape = r["shape"]
            n = 1
            for s in shape:
                n *= s
            if r.get("slot") is not None:
                off = r["slot"] * self._ch.slot_bytes
                logits = torch.frombuffer(self._ch.shm, dtype=torch.float32, count=n, offset=off).clone()
            else:
                logits = torch.frombuffer(data, dtype=torch.float32, count=n) if n else torch.empty(0)
        finally:
            if slot is not None:
                self._ch.give_slot(slot)
        kv.len = r["len"]
        return Dist(logits.reshape(shape), r.get("token"))

    # --- KV files ------------------------------------------------------------------------------
    def _kv(self, op: str, args: dict) -> RemoteKV:
        return RemoteKV(self, self._call(op, args))

    @staticmethod
    def _h(kv: Any, call: str) -> int:
        if not isinstance(kv, RemoteKV):
            raise _errors.KVError(f"{call} expects a KV handle, got {type(kv).__name__}")
        return kv.hid

    def kv_create(self, path: str | None = None) -> RemoteKV:
        return self._kv("kv_create", {"path": path})

    def kv_open(self, path: str, mode: str = "r") -> RemoteKV:
        return self._kv("kv_open", {"path": path, "mode": mode})

    def kv_fork(self, kv: RemoteKV) -> RemoteKV:
        return self._kv("kv_fork", {"h": self._h(kv, "kv_fork")})

    def kv_truncate(self, kv: RemoteKV, n: int) -> None:
        info = self._call("kv_truncate", {"h": self._h(kv, "kv_truncate"), "n": n})
        kv._update(info)

    def kv_close(self, kv: RemoteKV) -> None:
        self._call("kv_close", {"h": self._h(kv, "kv_close")})
        kv.closed = True

    def kv_remove(self, path: str) -> None:
        self._call("kv_remove", {"path": path})

    def kv_hint(self, kv: RemoteKV, keep_for: float | None = None, priority: int | None = None) -> None:
        self._call("kv_hint", {"h": self._h(kv, "kv_hint"), "keep_for": keep_for, "priority": priority})

    def kv_list(self, prefix: str | None = None) -> list[str]:
        return self._call("kv_list", {"prefix": prefix})

    # --- text --------------------------------------------------------------------------------
    def tokenize(self, text: str) -> list[int]:
        return self._call("tokenize", {"text": text})

    def detokenize(self, ids) -> str:
        return self._call("detokenize", {"ids": _ids(ids, "ids")})

    def chat_template(
        self, messages: list[dict], add_generation_prompt: bool = True, *, tools: list[dict] | None = None
    ) -> str:
        args = {"messages": jsonable(messages, "chat messages"), "add_generation_prompt": add_generation_prompt}
        if tools is not None:
            args["tools"] = jsonable(tools, "chat template tools")
        return self._call("chat_template", args)

    # --- the user ----------------------------------------------------------------------------
    def send(self, obj: Any) -> None:
        self._call("send", {"v": jsonable(obj, "a message sent from a sandboxed LIP")})

    def recv(self, timeout: float | None = None) -> Any:
        return self._call("recv", {"timeout": timeout})

    # --- threads -------------------------------------------------------------------------------
    def spawn(self, fn: Callable, *args: Any, **kwargs: Any) -> RemoteThreadHandle:
        if not callable(fn):
            raise _errors.SymphonyError(f"spawn expects a callable, got {type(fn).__name__}")
        r = self._call("spawn", {"fn": getattr(fn, "__name__", "thread")})
        wtid, tid = r["t"], r["tid"]
        box: dict = {}
        child = RemoteSym(self._ch, wtid, self._info, tid)

        def body() -> None:
            _tls.wtid = wtid
            err = None
            try:
                box["result"] = fn(child, *args, **kwargs)
            except BaseException as e:  # the thread's failure is reported at join
                box["error"] = err = e
            finally:
                self._ch.notify({"op": "thread_exit", "t": wtid, "error": None if err is None else repr(err)[:500]})

        t = threading.Thread(target=body, name=f"lip-thread-{wtid}", daemon=True)
        try:
            t.start()
        except RuntimeError:
            self._ch.notify({"op": "thread_exit", "t": wtid, "error": "could not start"})
            raise
        return RemoteThreadHandle(self, wtid, tid, t, box)


class _Forward:
    """`print` inside the sandbox: forwarded to the server (bounded there), never to a terminal."""

    def __init__(self, ch: Channel, stream: str) -> None:
        self._ch, self._stream = ch, stream

    def write(self, s: str) -> int:
        if s:
            try:
                self._ch.notify({"op": "stdout", "stream": self._stream, "text": str(s)[:65536]})
            except OSError:
                pass
        return len(s)

    def flush(self) -> None:
        pass

    def isatty(self) -> bool:
        return False


def run(sock, shm, slot_bytes: int, n_slots: int, confinement: dict, hooks: Callable[[dict], None]) -> int:
    """Receive the program, run it, report its result. Returns the exit code."""
    start, _ = recv_frame(sock)
    ch = Channel(sock, shm, slot_bytes, n_slots)
    if start.get("op") == "probe":
        ch.notify({"op": "exit", "ok": confinement})
        return 0
    info = start["info"]
    hooks(info)
    _tls.wtid = 0
    sym = RemoteSym(ch, 0, info, info.get("tid", 1))
    sys.stdout, sys.stderr = _Forward(ch, "stdout"), _Forward(ch, "stderr")
    filename = f"<lip {info.get('name', 'program')}>"
    try:
        source = start["source"]
        linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
        module = types.ModuleType("__lip__")
        module.__file__ = filename
        sys.modules["__lip__"] = module
        exec(compile(source, filename, "exec"), module.__dict__)
        fn = module.__dict__.get(start["entry"])
        if not callable(fn):
            raise NameError(f"the program defines no function {start['entry']!r}")
        result = fn(sym, *start.get("args", []), **start.get("kwargs", {}))
        ch.notify({"op": "exit", "ok": jsonable(result, "the return value of a sandboxed LIP")})
    except BaseException as e:
        tb = traceback.format_exc()
        try:
            ch.notify({"op": "exit", "err": {"type": type(e).__name__, "msg": str(e)[:4000], "tb": tb[-20000:]}})
        except Exception:
            pass
    return 0
