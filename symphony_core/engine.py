"""The engine: a loaded model, its page pool and KV file system, and the synchronous `pred`.

`Engine.pred` / `Engine.pred_batch` run forward passes directly on the executor; the LIP
runtime (`Engine.run`) sends every `pred` through the batch scheduler, which calls the same
executor (one forward pass at a time: the executor holds the lock).
"""

from __future__ import annotations

import threading

import torch

from .errors import SymphonyError
from .events import EventBus
from .executor import Executor, PredCall
from .kvfs import KV, KVFS, PagePool
from .lip.runtime import Runtime
from .model import DEFAULT_MODEL, Dist, ModelConfig, PagedLlama, Sampler, load_model

DEFAULT_USER = "local"


def _default_device() -> torch.device:
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


class Engine:
    def __init__(
        self,
        model: str = DEFAULT_MODEL,
        *,
        device: str | None = None,
        dtype: torch.dtype | None = None,
        page_size: int = 16,
        num_pages: int | None = None,
        kv_cache_gb: float = 2.0,
        threads: int | None = None,
    ) -> None:
        self.device = torch.device(device) if device else _default_device()
        self.dtype = dtype or (torch.bfloat16 if self.device.type == "cuda" else torch.float32)
        if threads:
            torch.set_num_threads(threads)
        loaded = load_model(model, dtype=self.dtype, device=str(self.device))
        self.model_name = loaded.name
        self.model_dir = loaded.directory
        self.config = ModelConfig.from_hf(loaded.config)
        cfg = self.config
        self.tokenizer = loaded.tokenizer
        self.model = PagedLlama(cfg, loaded.weights, self.device, self.dtype)
        if num_pages is None:
            per_page = PagePool.bytes_per_page(page_size, cfg.n_layers, cfg.n_kv_heads, cfg.head_dim, self.dtype)
            num_pages = max(16, int(kv_cache_gb * 1e9) // per_page)
        self.pool = PagePool(num_pages, page_size, cfg.n_layers, cfg.n_kv_heads, cfg.head_dim, self.dtype, self.device)
        self.kvfs = KVFS(self.pool)
        self.executor = Executor(self.model, self.kvfs)
        self._runtime: Runtime | None = None
        self._runtime_lock = threading.Lock()
        self.scheduler_options: dict = {}

    # --- programs -----------------------------------------------------------------------------
    @property
    def runtime(self) -> Runtime:
        """The LIP runtime (schedulers, kernel, event bus), started on first use."""
        with self._runtime_lock:
            if self._runtime is None:
                self._runtime = Runtime(self.executor, self.tokenizer, str(self.model_dir / "tokenizer.json"),
                                        **self.scheduler_options)
            return self._runtime

    def run(self, fn, *args, **kwargs):
        """Launch the LIP `fn(sym, *args, **kwargs)` as a process; returns its `Process` at once."""
        return self.runtime.launch(fn, args, kwargs)

    def launch(self, fn, *args, user: str = DEFAULT_USER, name: str | None = None, priority: int = 0,
               limits=None, kwargs: dict | None = None):
        """`run` with options: the user it runs as, a name, its priority and its `Limits`."""
        return self.runtime.launch(fn, args, kwargs, user=user, name=name, priority=priority, limits=limits)

    @property
    def bus(self) -> EventBus:
        return self.runtime.bus

    def shutdown(self) -> None:
        if self._runtime is not None:
            self._runtime.shutdown()

    # --- text ---------------------------------------------------------------------------------
    @property
    def eos_token_ids(self) -> frozenset[int]:
        return self.tokenizer.eos_token_ids

    def tokenize(self, text: str) -> list[int]:
        return self.tokenizer.tokenize(text)

    def detokenize(self, ids) -> str:
        return self.tokenizer.detokenize(ids)

    def chat_template(self, messages: list[dict], add_generation_prompt: bool = True) -> str:
        return self.tokenizer.chat_template(messages, add_generation_prompt)

    # --- KV files (as the local user) ------------------------------------------------------------
    def kv_create(self, path: str | None = None, *, user: str = DEFAULT_USER) -> KV:
        return self.kvfs.create(user, path)

    def kv_open(self, path: str, mode: str = "r", *, user: str = DEFAULT_USER) -> KV:
        return self.kvfs.open(user, path, mode)

    def kv_fork(self, kv: KV, *, user: str = DEFAULT_USER) -> KV:
        return self.kvfs.fork(kv, user)

    def kv_truncate(self, kv: KV, n: int) -> None:
        self.kvfs.truncate(kv, n)

    def kv_close(self, kv: KV) -> None:
        self.kvfs.close(kv)

    def kv_remove(self, path: str, *, user: str = DEFAULT_USER) -> None:
        self.kvfs.remove(user, path)

    def kv_hint(self, kv: KV, keep_for: float | None = None, priority: int | None = None) -> None:
        self.kvfs.hint(kv, keep_for, priority)

    # --- forward passes ------------------------------------------------------------------------
    def pred(self, kv: KV, token_ids, positions=None, *, outputs="last", sampler: Sampler | str | None = None, mask=None) -> Dist:
        """Append `token_ids` to `kv` and return next-token distributions (see DESIGN.md)."""
        res = self.pred_batch([PredCall(kv, token_ids, positions, outputs, sampler, mask)])[0]
        if isinstance(res, SymphonyError):
            raise res
        return res

    def pred_batch(self, calls: list[PredCall]) -> list[Dist | SymphonyError]:
        """Run many calls in one forward pass; each result is a Dist or that call's error."""
        return self.executor.run(calls)

    def stats(self) -> dict:
        return {"model": self.model_name, "device": str(self.device), "dtype": str(self.dtype), **self.kvfs.stats()}
