"""The engine: a loaded model, its page pool and KV file system, and the synchronous `pred`.

`Engine.pred` / `Engine.pred_batch` run forward passes directly on the executor; the LIP
runtime (`Engine.run`) sends every `pred` through the batch scheduler, which calls the same
executor (one forward pass at a time: the executor holds the lock).
"""

from __future__ import annotations

import threading

import torch

from . import openmp_waits
from .errors import SymphonyError
from .events import EventBus
from .executor import Executor, PredCall
from .kvfs import KV, KVFS, PagePool
from .lip.runtime import Runtime, check_lip_runner
from .model import DEFAULT_MODEL, Dist, ModelConfig, PagedLlama, Sampler, load_model
from .model.attention import for_pool
from .model.weight_formats import apply_weight_format, check_weight_format

DEFAULT_USER = "local"


def _default_device() -> torch.device:
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


KV_CACHE_DTYPES = {"auto": None, "fp32": torch.float32, "fp16": torch.float16}


def choose_kv_dtype(choice: str, device: torch.device, dtype: torch.dtype) -> torch.dtype:
    """The pool's dtype: "auto" is the engine's dtype; "fp16" under fp32 activations halves the
    pool's bytes (CPU only: there the compiled kernels write and read it)."""
    if choice not in KV_CACHE_DTYPES:
        raise SymphonyError(f"kv_cache_dtype={choice!r}: choose one of {', '.join(KV_CACHE_DTYPES)}")
    chosen = KV_CACHE_DTYPES[choice] or dtype
    if chosen != dtype and not (device.type == "cpu" and dtype == torch.float32):
        raise SymphonyError(
            f"kv_cache_dtype={choice!r} with {str(dtype).replace('torch.', '')} activations on {device.type}: "
            "a cache of another dtype than the activations runs on the CPU with float32 activations only"
        )
    return chosen


class Engine:
    """A loaded model with its KV page pool, KV file system, executor and (on first use) the
    LIP runtime: the two schedulers, the kernel and the event bus.

    ```text
    eng = Engine()                                  # the built-in SmolLM2-135M-Instruct
    eng = Engine("path/to/model.gguf")              # or a directory (safetensors + config.json)
    proc = eng.run(lip, "some prompt", max_tokens=16)
    ```

    Args:
        model: a built-in name (`"smollm2"`, the default), a GGUF file, a model directory
            (safetensors + config.json) or a hub name where there is internet. Llama-family
            architectures only.
        device: `"cpu"`, `"cuda"`, `"cuda:1"`, …; default CUDA when available.
        dtype: default float32 on CPU, bfloat16 on CUDA.
        page_size: tokens per KV page.
        num_pages: pages in the pool; default: as many as `kv_cache_gb` holds (at least 16).
        kv_cache_gb: the pool's size when `num_pages` is not given.
        threads: torch's CPU threads (`torch.set_num_threads`).
        weights: "fp32" (exact), or on CPU "q8" / "q4" (quantised, faster; see
            model/weight_formats.py).
        kv_cache_dtype: the KV pool's dtype, as vLLM names the option: "auto" (the engine's dtype),
            "fp32", or "fp16" (CPU): twice the pages in the same memory; K and V are rounded to
            fp16 as they are written, so tokens may differ from an fp32 cache's.
        lip_runner: how LIP threads run: "threads" (OS threads, the default) or "greenlets" (all
            programs on the batch scheduler's thread, resumed once per batch: less host time per
            `pred`, but a program that computes or blocks in its own code holds up the others and
            the forward passes until its next wait, and the debugger does not stop them; see
            sched/hub.py).
        prefix_cache: keep the K/V of prompts (a `pred` into an empty file at positions 0..) after
            their files close, and give a later prompt of the same user that starts alike those K/V
            instead of computing them (kvfs/prefix_cache.py). Reused K/V were computed in another
            batch, so logits may differ from a recompute in the last bits.

    Raises:
        ModelError: the model cannot be found, converted or loaded (the message says which
            and why).

    The `kv_*` methods act on the KV file system directly, as `user` (default `"local"`),
    outside any process; they raise what the `sym.kv_*` calls of the same name raise.
    """

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
        weights: str = "fp32",
        kv_cache_dtype: str = "auto",
        lip_runner: str = "threads",
        prefix_cache: bool = True,
    ) -> None:
        check_lip_runner(lip_runner)  # before the model loads: a bad name fails at once
        self.device = torch.device(device) if device else _default_device()
        self.dtype = dtype or (torch.bfloat16 if self.device.type == "cuda" else torch.float32)
        self.weight_format = check_weight_format(weights, self.device)
        self.kv_dtype = choose_kv_dtype(kv_cache_dtype, self.device, self.dtype)
        if threads:
            torch.set_num_threads(threads)
        if self.device.type == "cpu":
            openmp_waits.note_if_missed()
        loaded = load_model(model, dtype=self.dtype, device=str(self.device))
        self.model_name = loaded.name
        self.model_dir = loaded.directory
        self.config = ModelConfig.from_hf(loaded.config)
        cfg = self.config
        self.tokenizer = loaded.tokenizer
        self.model = PagedLlama(cfg, loaded.weights, self.device, self.dtype)
        apply_weight_format(self.model, weights, loaded.gguf_path, loaded.directory if loaded.gguf_path else None)
        if num_pages is None:
            per_page = PagePool.bytes_per_page(page_size, cfg.n_layers, cfg.n_kv_heads, cfg.head_dim, self.kv_dtype)
            num_pages = max(16, int(kv_cache_gb * 1e9) // per_page)
        self.pool = PagePool(
            num_pages, page_size, cfg.n_layers, cfg.n_kv_heads, cfg.head_dim, self.kv_dtype, self.device
        )
        self.kvfs = KVFS(self.pool, prefix_cache=prefix_cache)
        self.model.attention = for_pool(self.model.attention, page_size)
        self.executor = Executor(self.model, self.kvfs)
        if self.device.type == "cuda":  # decode steps as CUDA graphs (model/cuda_graphs.py), captured now
            from .model.cuda_graphs import decode_graphs_for

            self.executor.decode_graphs = decode_graphs_for(self.model, self.pool.k, self.pool.v, page_size)
        self._runtime: Runtime | None = None
        self._runtime_lock = threading.Lock()
        self.scheduler_options: dict = {}
        self.lip_runner = lip_runner

    # --- programs -----------------------------------------------------------------------------
    @property
    def runtime(self) -> Runtime:
        """The LIP runtime (schedulers, kernel, event bus), started on first use."""
        with self._runtime_lock:
            if self._runtime is None:
                self._runtime = Runtime(
                    self.executor,
                    self.tokenizer,
                    str(self.model_dir / "tokenizer.json"),
                    lip_runner=self.lip_runner,
                    **self.scheduler_options,
                )
            return self._runtime

    def run(self, fn, *args, **kwargs):
        """Launch the LIP `fn(sym, *args, **kwargs)` as a process; returns its `Process` at once.

        The process runs as user `"local"` with default `Limits`; use `launch` for options.

        Raises:
            SymphonyError: `run expects a LIP function, got <type>`.
        """
        return self.runtime.launch(fn, args, kwargs)

    def launch(
        self,
        fn,
        *args,
        user: str = DEFAULT_USER,
        name: str | None = None,
        priority: int = 0,
        limits=None,
        kwargs: dict | None = None,
    ):
        """`run` with options: the user it runs as, a name, its priority and its `Limits`.

        Args:
            fn: the LIP function; `fn(sym, *args, **kwargs)` runs on a new thread.
            user: the user it runs as (its KV namespace is `/users/<user>/`).
            name: the process's name in views and errors (default: the function's name).
            priority: higher is scheduled first (batch order and admission).
            limits: a `Limits` (threads, wall time, tokens, pages); default: 64 threads, no
                other bound.
            kwargs: the LIP's keyword arguments (given apart, so that they cannot collide with
                these options).

        Returns:
            The `Process`, at once (it may wait in the admission queue while the pool is full).

        Raises:
            SymphonyError: `run expects a LIP function, got <type>`.
        """
        return self.runtime.launch(fn, args, kwargs, user=user, name=name, priority=priority, limits=limits)

    @property
    def bus(self) -> EventBus:
        """The runtime's event bus: syscall, process and batch events for views and debuggers."""
        return self.runtime.bus

    def shutdown(self) -> None:
        """Cancel every live process and stop the schedulers' threads."""
        if self._runtime is not None:
            self._runtime.shutdown()

    # --- text ---------------------------------------------------------------------------------
    @property
    def eos_token_ids(self) -> frozenset[int]:
        """The model's end-of-sequence token ids."""
        return self.tokenizer.eos_token_ids

    def tokenize(self, text: str) -> list[int]:
        """Token ids of `text` (no special tokens added).

        Raises:
            PredError: `tokenize expects a str, got <type>`.
        """
        return self.tokenizer.tokenize(text)

    def detokenize(self, ids) -> str:
        """The text of a list of token ids."""
        return self.tokenizer.detokenize(ids)

    def chat_template(
        self, messages: list[dict], add_generation_prompt: bool = True, *, tools: list[dict] | None = None
    ) -> str:
        """Render a conversation with the model's chat template (see `Sym.chat_template`)."""
        return self.tokenizer.chat_template(messages, add_generation_prompt, tools=tools)

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
    def pred(
        self, kv: KV, token_ids, positions=None, *, outputs="last", sampler: Sampler | str | None = None, mask=None
    ) -> Dist:
        """Append `token_ids` to `kv` and return next-token distributions, synchronously.

        The same call as `Sym.pred` (same arguments, same errors) but outside any process: it
        runs its own forward pass at once instead of waiting for a batch. For tests,
        benchmarks and scripts; LIPs use `sym.pred`.

        Raises:
            KVError: see `Sym.pred`.
            PredError: see `Sym.pred`.
            OutOfPages: `out of KV pages: need <n>, <f> free of <N> (page size <s> tokens)`.
        """
        res = self.pred_batch([PredCall(kv, token_ids, positions, outputs, sampler, mask)])[0]
        if isinstance(res, SymphonyError):
            raise res
        return res

    def pred_batch(self, calls: list[PredCall]) -> list[Dist | SymphonyError]:
        """Run many calls in one forward pass; each result is a Dist or that call's error.

        A bad call gets its own error in its slot (it is returned, not raised) and the others
        still run. While someone watches the event stream, each row's argmax is taken once for
        the whole batch (the pred summaries name it), as the batch scheduler does.
        """
        watched = self._runtime is not None and self._runtime.bus.active
        return self.executor.run(calls, argmax=watched)

    def stats(self) -> dict:
        """The model, device, dtype, weight format, the KV cache's dtype and the page pool's counts (`pages_total`, `pages_used`, …)."""
        return {
            "model": self.model_name,
            "device": str(self.device),
            "dtype": str(self.dtype),
            "weights": self.weight_format,
            "kv_cache_dtype": str(self.kv_dtype).replace("torch.", ""),
            **self.kvfs.stats(),
        }
