"""Helpers the workloads share: where their numbers go, the transformers peer on our weights,
peak KV pages, medians."""

from __future__ import annotations

import statistics
import time

import torch

_published: dict[str, dict] = {}


def publish(workload: str, numbers: dict) -> None:
    """Leave a workload's numbers (its module's `__name__`) for `python -m bench`, which writes
    them to bench/results.json for the plots and the targets table."""
    _published[workload] = dict(numbers)


def take_published(workload: str) -> dict | None:
    """The numbers `workload` published in its last run (once), or None."""
    return _published.pop(workload, None)


def load_hf(eng):
    """transformers' model on the same weights as `eng` (fp32, eval) and its pad token id."""
    from transformers import AutoModelForCausalLM

    hf = AutoModelForCausalLM.from_pretrained(str(eng.model_dir), dtype=torch.float32).eval()
    pad_id = hf.generation_config.pad_token_id
    if pad_id is None:
        pad_id = hf.config.pad_token_id if hf.config.pad_token_id is not None else min(eng.eos_token_ids)
    return hf, pad_id


def hf_generate(model, prompts: list[list[int]], new: int, pad_id: int) -> tuple[float, list[list[int]]]:
    """transformers `generate` on a left-padded batch, greedy, exactly `new` tokens each
    (no stop at EOS); returns (seconds, new tokens per prompt)."""
    width = max(len(p) for p in prompts)
    ids = torch.tensor([[pad_id] * (width - len(p)) + p for p in prompts])
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])
    t0 = time.perf_counter()
    with torch.inference_mode():
        out = model.generate(
            input_ids=ids,
            attention_mask=mask,
            max_new_tokens=new,
            eos_token_id=None,
            do_sample=False,
            use_cache=True,
            pad_token_id=pad_id,
        )
    return time.perf_counter() - t0, out[:, width:].tolist()


class PeakPages:
    """Highest `pages_used` of the engine's KVFS while the block runs, above what was in use
    when it began. Every page allocation goes through `PagePool.alloc` or, for a decode's new
    page, `PagePool.take_free`, so the peak is read right after each one (the hooks wrap the pool
    instance's methods and are removed on exit)."""

    def __init__(self, eng) -> None:
        self.eng = eng
        self.pool = eng.kvfs.pool
        self.base = self.peak = 0
        self.allocated = 0  # pages handed out during the block, in all (freed ones counted too)

    def _taken(self, n: int) -> None:
        self.allocated += n
        used = self.pool.used_pages
        if used > self.peak:
            self.peak = used

    def __enter__(self) -> PeakPages:
        self.base = self.eng.kvfs.stats()["pages_used"]
        self.peak = self.base
        alloc, take_free = self.pool.alloc, self.pool.take_free

        def hooked_alloc(n: int) -> list[int]:
            pages = alloc(n)
            self._taken(n)
            return pages

        def hooked_take_free() -> int:
            page = take_free()
            if page >= 0:
                self._taken(1)
            return page

        self.pool.alloc = hooked_alloc
        self.pool.take_free = hooked_take_free
        return self

    def __exit__(self, *exc) -> None:
        del self.pool.alloc, self.pool.take_free  # back to the class's methods

    @property
    def pages(self) -> int:
        return self.peak - self.base


def pages_for(tokens: int, page_size: int) -> int:
    return -(-tokens // page_size)


def med(xs) -> float:
    return statistics.median(xs)


def busy(share: float | None) -> int:
    """1 when a timed run began while other processes used >= 10% of the CPUs."""
    return int(share is not None and share >= 0.1)
