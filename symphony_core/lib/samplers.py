"""Sampler helpers for LIPs: greedy, temperature / top-k / top-p / min-p, repetition penalty.

Two ways to pick a token, both built on what `pred` returns:

* in the engine — pass `SamplingParams(...).engine_sampler()` as `pred(..., sampler=)`; the pick is
  made inside the batch and arrives as `Dist.token` (no logits cross into the LIP);
* in the LIP — `SamplingParams.pick(dist, history)` works on `dist.logits`, which is what you need
  as soon as the logits are changed first (repetition penalty, a watermark, any processor).

Both use the engine's `Sampler` (same filtering, one seeded generator per `SamplingParams`), so a
seeded run picks the same tokens whichever side samples when no processor changes the logits.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import cast

import torch

from ..model import Dist, Sampler
from ..model.dist import fast_argmax
from ..model.sampling import sample_rows

# A logits processor: (logits [V], tokens so far) -> new logits [V]. Pure functions keep replay exact.
LogitsProcessor = Callable[[torch.Tensor, Sequence[int]], torch.Tensor]


def greedy(dist: Dist) -> int:
    """The most likely token of a one-position Dist."""
    return cast(int, dist.argmax() if dist.logits.dim() == 1 else dist[-1].argmax())  # one position


def log_softmax(dist_or_logits) -> torch.Tensor:
    """Log-probabilities of a Dist (or a logits tensor), in float32."""
    logits = dist_or_logits.logits if isinstance(dist_or_logits, Dist) else dist_or_logits
    return torch.log_softmax(logits.float(), dim=-1)


def apply_repetition_penalty(logits: torch.Tensor, history: Iterable[int], penalty: float) -> torch.Tensor:
    """CTRL's repetition penalty: divide positive logits (multiply negative ones) of seen tokens.

    `penalty > 1` discourages repeats; 1.0 returns `logits` unchanged. Returns a new tensor.
    """
    if penalty <= 0:
        raise ValueError(f"repetition penalty must be > 0, got {penalty}")
    if penalty == 1.0:
        return logits
    seen = sorted(set(int(t) for t in history))
    if not seen:
        return logits
    out = logits.clone()
    idx = torch.tensor(seen, dtype=torch.long, device=logits.device)
    vals = out.index_select(-1, idx)
    out.index_copy_(-1, idx, torch.where(vals > 0, vals / penalty, vals * penalty))
    return out


def apply_mask(logits: torch.Tensor, allowed) -> torch.Tensor:
    """Set every token outside `allowed` (bool tensor [V] or a list of ids) to -inf."""
    if not isinstance(allowed, torch.Tensor) or allowed.dtype != torch.bool:
        ids = torch.as_tensor(list(allowed), dtype=torch.long)
        allowed = torch.zeros(logits.shape[-1], dtype=torch.bool)
        allowed[ids] = True
    return logits.masked_fill(~allowed.to(logits.device), float("-inf"))


@dataclass
class SamplingParams:
    """How a LIP picks tokens (vLLM's name for the same recipe). `temperature=0` is greedy;
    `seed` makes a run reproducible.

    Not to be confused with the engine's `Sampler` (`symphony_core.model.sampling`), the object
    `pred(sampler=)` takes to pick inside the batch: `engine_sampler()` hands one over when no
    logits processor is set.

    `repetition_penalty` and `processors` change the logits before the pick, which then
    happens in the LIP (`needs_logits` is True); otherwise the engine can sample in the batch.
    """

    temperature: float = 0.0
    top_k: int = 0
    top_p: float = 1.0
    min_p: float = 0.0
    seed: int | None = None
    repetition_penalty: float = 1.0
    processors: list[LogitsProcessor] = field(default_factory=list)
    _sampler: Sampler | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        # The engine's Sampler validates the numbers and owns the seeded generator.
        self._sampler = Sampler(
            temperature=self.temperature, top_k=self.top_k, top_p=self.top_p, min_p=self.min_p, seed=self.seed
        )
        if self.repetition_penalty <= 0:
            raise ValueError(f"repetition_penalty must be > 0, got {self.repetition_penalty}")

    @property
    def is_greedy(self) -> bool:
        assert self._sampler is not None  # built in __post_init__
        return self._sampler.is_greedy

    @property
    def needs_logits(self) -> bool:
        """True when the pick must be made in the LIP (a processor changes the logits first)."""
        return self.repetition_penalty != 1.0 or bool(self.processors)

    def engine_sampler(self) -> Sampler | None:
        """What to pass as `pred(..., sampler=)`: None for greedy (use `Dist.argmax`)."""
        return None if self.is_greedy or self.needs_logits else self._sampler

    def process(self, logits: torch.Tensor, history: Sequence[int]) -> torch.Tensor:
        """The logits after the repetition penalty and every processor, in order."""
        logits = apply_repetition_penalty(logits, history, self.repetition_penalty)
        for p in self.processors:
            logits = p(logits, history)
        return logits

    def pick(self, dist: Dist, history: Sequence[int] = ()) -> int:
        """Choose the next token from a one-position Dist (uses `dist.token` if the engine picked)."""
        if dist.token is not None and not self.needs_logits and not isinstance(dist.token, list):
            return int(dist.token)
        logits = dist.logits if dist.logits.dim() == 1 else dist[-1].logits
        logits = self.process(logits, history)
        if self.is_greedy:
            return cast(int, fast_argmax(logits))  # one row: an int
        assert self._sampler is not None  # built in __post_init__
        return sample_rows(logits[None], [self._sampler])[0]


def sample(
    dist: Dist,
    temperature: float = 1.0,
    top_k: int = 0,
    top_p: float = 1.0,
    min_p: float = 0.0,
    seed: int | None = None,
) -> int:
    """One pick from a one-position Dist (a fresh generator each call; keep a `SamplingParams` for a stream)."""
    return SamplingParams(temperature=temperature, top_k=top_k, top_p=top_p, min_p=min_p, seed=seed).pick(dist)


__all__ = [
    "LogitsProcessor",
    "SamplingParams",
    "apply_mask",
    "apply_repetition_penalty",
    "greedy",
    "log_softmax",
    "sample",
]
