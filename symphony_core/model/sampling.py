"""Samplers: greedy, temperature, top-k, top-p, min-p, seeded — applied to a whole batch at once.

A `Sampler` object carries its own random generator, so a LIP that passes the same sampler to
every `pred` gets a reproducible stream of picks for a given seed (replay relies on this).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from ..errors import PredError


@dataclass(eq=False)
class Sampler:
    """How the engine picks a token inside the batch: `pred(kv, toks, sampler=Sampler(...))`.

    Temperature scales the logits; top-k, top-p and min-p each drop tokens from that
    distribution (the most likely token always stays). One seeded generator per Sampler
    object: reuse the same object across steps for a reproducible stream.

    Raises:
        PredError: at construction, an out-of-range field: `sampler temperature must be >= 0,
            got <t>`, `sampler top_k must be >= 0 (0 = off), got <k>`, `sampler top_p must be
            in (0, 1], got <p>`, `sampler min_p must be in [0, 1), got <m>`.
    """

    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0
    min_p: float = 0.0
    seed: int | None = None
    _gen: torch.Generator | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if self.temperature < 0:
            raise PredError(f"sampler temperature must be >= 0, got {self.temperature}")
        if self.top_k < 0:
            raise PredError(f"sampler top_k must be >= 0 (0 = off), got {self.top_k}")
        if not 0.0 < self.top_p <= 1.0:
            raise PredError(f"sampler top_p must be in (0, 1], got {self.top_p}")
        if not 0.0 <= self.min_p < 1.0:
            raise PredError(f"sampler min_p must be in [0, 1), got {self.min_p}")

    @classmethod
    def greedy(cls) -> Sampler:
        """A sampler that always picks the most likely token (`pred(sampler="greedy")` is the same)."""
        return cls(temperature=0.0)

    @property
    def is_greedy(self) -> bool:
        """True when the pick is the argmax (temperature 0 or top_k 1)."""
        return self.temperature == 0.0 or self.top_k == 1

    def generator(self) -> torch.Generator:
        if self._gen is None:
            self._gen = torch.Generator()
            if self.seed is None:
                self._gen.seed()
            else:
                self._gen.manual_seed(self.seed)
        return self._gen


def filtered_probs(logits: torch.Tensor, temperature, top_k, top_p, min_p) -> torch.Tensor:
    """Probabilities after temperature and the three truncations; rows of [R, V], per-row params.

    Parameters are 1-D tensors of length R (or scalars).
    """
    r, v = logits.shape
    temp = torch.as_tensor(temperature, dtype=torch.float32).expand(r).clamp_min(1e-6)
    probs = torch.softmax(logits.float() / temp[:, None], dim=-1)
    sorted_p, order = probs.sort(dim=-1, descending=True)
    rank = torch.arange(v).expand(r, v)
    k = torch.as_tensor(top_k).expand(r)
    drop = (k[:, None] > 0) & (rank >= k[:, None])
    p = torch.as_tensor(top_p, dtype=torch.float32).expand(r)
    drop |= (sorted_p.cumsum(-1) - sorted_p) >= p[:, None]  # keep the smallest prefix reaching top_p
    mp = torch.as_tensor(min_p, dtype=torch.float32).expand(r)
    drop |= sorted_p < (mp * sorted_p[:, 0])[:, None]
    drop[:, 0] = False  # the most likely token always survives
    sorted_p = sorted_p.masked_fill(drop, 0.0)
    out = torch.zeros_like(probs).scatter_(-1, order, sorted_p)
    return out / out.sum(-1, keepdim=True)


def sample_rows(logits: torch.Tensor, samplers: list[Sampler]) -> list[int]:
    """One token per row of `logits` [R, V] (any device and dtype), each row with its own sampler."""
    picks = logits.argmax(-1).tolist()  # where the logits are: from a GPU only the R picks come back
    rows = [i for i, s in enumerate(samplers) if not s.is_greedy]
    if not rows:
        return picks
    sub = [samplers[i] for i in rows]
    # The samplers' generators, and so their noise, live on the CPU: the rows they sample go there.
    probs = filtered_probs(
        logits[rows].float().cpu(),
        torch.tensor([s.temperature for s in sub]),
        torch.tensor([s.top_k for s in sub]),
        torch.tensor([s.top_p for s in sub]),
        torch.tensor([s.min_p for s in sub]),
    )
    # Exponential race (= Gumbel-max): argmax p/E with E ~ Exp(1) samples from p, and lets
    # every row draw its noise from its own generator.
    for j, (i, s) in enumerate(zip(rows, sub)):
        noise = torch.empty(probs.shape[1]).exponential_(generator=s.generator())
        picks[i] = int((probs[j] / noise).argmax())
    return picks
