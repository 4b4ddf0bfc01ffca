"""The contract between the `sym` syscall layer (lip/syscalls.py, lip/thread_handle.py) and the
runtime that implements the calls (lip/runtime.py)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from ..kvfs import KV, KVFS
from ..model.dist import Dist
from ..model.tokenizer import Tokenizer
from ..sched.process import LIPThread, Process
from .kernel import Kernel


class SyscallHost(Protocol):
    """What a `Sym` calls: the runtime (lip/runtime.py), which creates one `Sym` per thread."""

    kernel: Kernel
    kvfs: KVFS
    tokenizer: Tokenizer
    tokenizer_file: str
    vocab_size: int

    def pred(self, th: LIPThread, kv, token_ids, positions, outputs, sampler, mask) -> Dist: ...
    def kv_create(self, th: LIPThread, path: str | None) -> KV: ...
    def kv_open(self, th: LIPThread, path: str, mode: str) -> KV: ...
    def kv_fork(self, th: LIPThread, kv: KV) -> KV: ...
    def kv_close(self, th: LIPThread, kv: KV) -> None: ...
    def kv_truncate(self, kv: KV, n: int) -> None: ...
    def kv_remove(self, user: str, path: str) -> None: ...
    def recv(self, th: LIPThread, timeout: float | None) -> Any: ...
    def join(self, target: LIPThread, timeout: float | None) -> Any: ...
    def start_thread(self, proc: Process, fn: Callable, args: tuple, kwargs: dict) -> LIPThread: ...
