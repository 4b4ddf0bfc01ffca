"""`sym`: the system-call handle a LIP receives as its first argument.

Each LIP thread has its own handle, so every call is attributed to a (process, thread). Every
method passes the kernel's one dispatch point (`Kernel.syscall`), where it is traced and where
a debugger may stop it.
"""

from __future__ import annotations

from typing import Any, Callable, Protocol

from ..errors import SymphonyError
from ..kvfs import KV, KVFS
from ..model.dist import Dist
from ..model.sampling import Sampler
from ..model.tokenizer import Tokenizer
from ..sched.batch_scheduler import BatchScheduler
from ..sched.process import LIPThread, Process
from .kernel import Kernel


class SyscallHost(Protocol):
    """What a `Sym` calls into: the runtime (lip/runtime.py), which creates one `Sym` per thread."""

    kernel: Kernel
    kvfs: KVFS
    batch: BatchScheduler
    tokenizer: Tokenizer
    tokenizer_file: str
    vocab_size: int

    def pred(self, th: LIPThread, kv, token_ids, positions, outputs, sampler, mask) -> Dist: ...
    def track(self, th: LIPThread, kv: KV) -> KV: ...
    def close(self, th: LIPThread, kv: KV) -> None: ...
    def freeing(self, fn: Callable, *args) -> Any: ...
    def start_thread(self, proc: Process, fn: Callable, args: tuple, kwargs: dict) -> LIPThread: ...


def _kv_args(kv) -> dict:
    if isinstance(kv, KV):
        return {"kv": kv.describe(), "file": kv.file.fid, "kv_len": kv.len}
    return {"kv": repr(kv)}


class ThreadHandle:
    """What `sym.spawn` returns: `join()` waits for the thread and gives its return value."""

    def __init__(self, sym: "Sym", th: LIPThread) -> None:
        self._sym, self._th = sym, th
        self.tid = th.tid

    def join(self, timeout: float | None = None) -> Any:
        def impl() -> Any:
            self._sym._rt.batch.wake()  # this thread stops being runnable: the batch policy may fire now
            return self._th.join(timeout)

        return self._sym._call("join", impl, lambda: {"tid": self._th.tid})

    @property
    def done(self) -> bool:
        return self._th.done.is_set()


class Sym:
    def __init__(self, rt: SyscallHost, th: LIPThread) -> None:
        self._rt = rt
        self._th = th
        self._k = rt.kernel

    def _call(self, name: str, impl: Callable[[], Any], args: Callable[[], dict]) -> Any:
        return self._k.syscall(self._th, name, impl, args)

    # --- identity ------------------------------------------------------------------------------
    @property
    def pid(self) -> int:
        return self._th.proc.pid

    @property
    def tid(self) -> int:
        return self._th.tid

    @property
    def user(self) -> str:
        return self._th.proc.user

    @property
    def eos_token_ids(self) -> frozenset[int]:
        return self._rt.tokenizer.eos_token_ids

    @property
    def vocab_size(self) -> int:
        return self._rt.vocab_size

    @property
    def tokenizer_file(self) -> str:
        """Path of the model's tokenizer.json, read-only: grammar libraries build token masks from it."""
        return self._rt.tokenizer_file

    @property
    def page_size(self) -> int:
        return self._rt.kvfs.pool.page_size

    # --- the model -----------------------------------------------------------------------------
    def pred(self, kv: KV, token_ids, positions=None, *, outputs="last", sampler: Sampler | str | None = None, mask=None) -> Dist:
        """Append `token_ids` to `kv` (at `positions`, default: continuing) and return distributions."""

        def args() -> dict:
            toks = list(token_ids) if not isinstance(token_ids, int) else [token_ids]
            return {**_kv_args(kv), "n_tokens": len(toks), "tokens": toks[:64], "outputs": str(outputs)[:40],
                    "sampler": None if sampler is None else repr(sampler)}

        return self._call("pred", lambda: self._rt.pred(self._th, kv, token_ids, positions, outputs, sampler, mask), args)

    # --- KV files ------------------------------------------------------------------------------
    def kv_create(self, path: str | None = None) -> KV:
        return self._call("kv_create", lambda: self._rt.track(self._th, self._rt.kvfs.create(self.user, path)),
                          lambda: {"path": path})

    def kv_open(self, path: str, mode: str = "r") -> KV:
        return self._call("kv_open", lambda: self._rt.track(self._th, self._rt.kvfs.open(self.user, path, mode)),
                          lambda: {"path": path, "mode": mode})

    def kv_fork(self, kv: KV) -> KV:
        return self._call("kv_fork", lambda: self._rt.track(self._th, self._rt.kvfs.fork(kv, self.user)),
                          lambda: _kv_args(kv))

    def kv_truncate(self, kv: KV, n: int) -> None:
        return self._call("kv_truncate", lambda: self._rt.freeing(self._rt.kvfs.truncate, kv, n),
                          lambda: {**_kv_args(kv), "n": n})

    def kv_close(self, kv: KV) -> None:
        return self._call("kv_close", lambda: self._rt.close(self._th, kv), lambda: _kv_args(kv))

    def kv_remove(self, path: str) -> None:
        return self._call("kv_remove", lambda: self._rt.freeing(self._rt.kvfs.remove, self.user, path),
                          lambda: {"path": path})

    def kv_hint(self, kv: KV, keep_for: float | None = None, priority: int | None = None) -> None:
        return self._call("kv_hint", lambda: self._rt.kvfs.hint(kv, keep_for, priority),
                          lambda: {**_kv_args(kv), "keep_for": keep_for, "priority": priority})

    def kv_list(self, prefix: str | None = None) -> list[str]:
        return self._call("kv_list", lambda: self._rt.kvfs.listdir(self.user, prefix), lambda: {"prefix": prefix})

    # --- text --------------------------------------------------------------------------------
    def tokenize(self, text: str) -> list[int]:
        return self._call("tokenize", lambda: self._rt.tokenizer.tokenize(text), lambda: {"chars": len(str(text))})

    def detokenize(self, ids) -> str:
        return self._call("detokenize", lambda: self._rt.tokenizer.detokenize(ids), lambda: {"n_tokens": len(ids)})

    def chat_template(self, messages: list[dict], add_generation_prompt: bool = True) -> str:
        return self._call("chat_template", lambda: self._rt.tokenizer.chat_template(messages, add_generation_prompt),
                          lambda: {"messages": len(messages)})

    # --- the user ----------------------------------------------------------------------------
    def send(self, obj: Any) -> None:
        return self._call("send", lambda: self._th.proc.outbox_put(obj), lambda: {"value": repr(obj)[:200]})

    def recv(self, timeout: float | None = None) -> Any:
        def impl() -> Any:
            # This thread stops being runnable: the batch policy, which sleeps until enough calls
            # are queued (sched/batch_scheduler.py), may fire now with the others.
            self._rt.batch.wake()
            return self._th.proc.inbox_get(timeout)

        return self._call("recv", impl, lambda: {"timeout": timeout})

    # --- threads -------------------------------------------------------------------------------
    def spawn(self, fn: Callable, *args: Any, **kwargs: Any) -> ThreadHandle:
        """Run `fn(sym, *args)` on a new thread of this process (the paper's pthread_create)."""
        if not callable(fn):
            raise SymphonyError(f"spawn expects a callable, got {type(fn).__name__}")
        th = self._call("spawn", lambda: self._rt.start_thread(self._th.proc, fn, args, kwargs),
                        lambda: {"fn": getattr(fn, "__name__", repr(fn))})
        return ThreadHandle(self, th)
