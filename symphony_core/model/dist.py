"""`Dist`: the next-token distributions a `pred` returns, one row per requested position."""

from __future__ import annotations

import torch

from ..errors import PredError
from .sampling import Sampler, sample_rows


class Dist:
    """Logits for one position (`.logits` is [V]) or several (`[n, V]`; index to get one)."""

    __slots__ = ("logits", "token", "_probs")

    def __init__(self, logits: torch.Tensor, token: int | list[int] | None = None) -> None:
        self.logits = logits
        self.token = token  # the engine's pick when `pred(..., sampler=)` was used
        self._probs: torch.Tensor | None = None

    @property
    def probs(self) -> torch.Tensor:
        if self._probs is None:
            self._probs = torch.softmax(self.logits.float(), dim=-1)
        return self._probs

    @property
    def vocab_size(self) -> int:
        return self.logits.shape[-1]

    def __len__(self) -> int:
        return 1 if self.logits.dim() == 1 else self.logits.shape[0]

    def __getitem__(self, i: int) -> "Dist":
        if self.logits.dim() == 1:
            if i in (0, -1):
                return self
            raise IndexError(f"Dist holds one position; index {i} is out of range")
        tok = self.token[i] if isinstance(self.token, list) else None
        return Dist(self.logits[i], tok)

    def __iter__(self):
        return (self[i] for i in range(len(self)))

    def argmax(self):
        a = self.logits.argmax(-1)
        return int(a) if a.dim() == 0 else a.tolist()

    def topk(self, k: int = 5) -> list[tuple[int, float]]:
        """The k most likely tokens of a single-position Dist, as (token id, probability)."""
        row = self._single("topk")
        p, i = row.probs.topk(min(k, row.vocab_size))
        return list(zip(i.tolist(), p.tolist()))

    def logprob(self, tok: int) -> float:
        row = self._single("logprob")
        if not 0 <= tok < row.vocab_size:
            raise PredError(f"logprob of token {tok}: outside the vocabulary [0, {row.vocab_size})")
        return float(torch.log_softmax(row.logits.float(), -1)[tok])

    def entropy(self) -> float:
        row = self._single("entropy")
        p = row.probs
        return float(-(p * torch.log(p.clamp_min(1e-30))).sum())

    def sample(
        self, temperature: float = 1.0, top_p: float = 1.0, top_k: int = 0, min_p: float = 0.0, seed: int | None = None
    ) -> int:
        row = self._single("sample")
        s = Sampler(temperature=temperature, top_p=top_p, top_k=top_k, min_p=min_p, seed=seed)
        return sample_rows(row.logits[None], [s])[0]

    def _single(self, what: str) -> "Dist":
        if self.logits.dim() == 1:
            return self
        if self.logits.shape[0] == 1:
            return self[0]
        raise PredError(f"Dist.{what} needs one position; this Dist has {len(self)} — index it first")

    def __repr__(self) -> str:
        if self.logits.dim() == 1:
            t, p = self.topk(1)[0]
            return f"Dist(argmax={t}, p={p:.3f})"
        return f"Dist({len(self)} positions)"
