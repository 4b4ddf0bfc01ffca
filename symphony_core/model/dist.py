"""`Dist`: the next-token distributions a `pred` returns, one row per requested position."""

from __future__ import annotations

from typing import Protocol

import torch

from ..errors import PredError
from .sampling import Sampler, sample_rows

_NUMPY_DTYPES = (torch.float32, torch.float64, torch.float16)


def fast_argmax(logits: torch.Tensor) -> int | list[int]:
    """`logits.argmax(-1)` as an int (one row) or a list (several), through numpy on CPU:
    torch's CPU argmax over a 50k vocabulary takes ~55 us a row, numpy's a few (same answer:
    the first maximum, NaN wins)."""
    if logits.is_cpu and logits.dtype in _NUMPY_DTYPES and not logits.requires_grad:
        try:
            a = logits.numpy().argmax(-1)
            return int(a) if logits.dim() == 1 else a.tolist()
        except RuntimeError:  # a tensor numpy cannot view (e.g. a lazy negation bit)
            pass
    a = logits.argmax(-1)
    return int(a) if a.dim() == 0 else a.tolist()


def version_of(t: torch.Tensor) -> int:
    """How many in-place torch writes `t` (or a view sharing its storage) has seen; -1 for an
    inference tensor, which keeps no count (torch refuses its writes outside `inference_mode`).
    Writes that bypass torch's autograd bookkeeping (`.data`, `.numpy()`) are not counted."""
    return -1 if t.is_inference() else t._version


class ArgmaxReader(Protocol):
    """Where a batch row's `Dist` notes that its argmax was read (the row's KV file): the executor
    takes the next batch's argmax, in one call while the logits are still in cache, for the rows
    whose last distribution had it read (a greedy loop), and for no other row."""

    argmax_read: bool


class Dist:
    """Logits for one position (`.logits` is [V]) or several (`[n, V]`; index to get one).

    What `pred` returns. With `outputs="last"` (the default) it holds one position; with
    `outputs="all"` or a list of indices it holds one row per requested position, in order:
    `len(d)` counts them, `d[i]` (negative indices too) is the one-position `Dist` of row `i`,
    and iterating yields each row. `d.argmax()` gives one id or a list of ids; `topk`,
    `logprob`, `entropy` and `sample` need one position (index first).

    Attributes:
        logits: the raw logits, `[V]` or `[n, V]` (after `pred(mask=)`, masked ones are `-inf`).
        token: the engine's pick when `pred(..., sampler=)` was given (an int, or a list of
            ints for several positions), else `None`.

    Treat `.logits` as read-only: to change a distribution, build a new one
    (`Dist(d.logits.clone())`, then edit) or assign new logits. `probs` and `argmax()` are
    computed once and kept while `.logits` is the same tensor and torch has counted no in-place
    write to it; a write through `.numpy()` or `.data` goes uncounted and leaves them stale.
    (A decode batch's logits are inference tensors: torch refuses writes to them outside
    `torch.inference_mode`.)
    """

    __slots__ = ("_logits", "_batch", "_row", "token", "_probs", "_argmax", "_reader")

    def __init__(self, logits: torch.Tensor, token: int | list[int] | None = None) -> None:
        self._logits: torch.Tensor | None = logits
        self._batch: torch.Tensor | None = None  # set by `row_of` until the row view is taken
        self._row = 0
        self.token = token  # the engine's pick when `pred(..., sampler=)` was used
        # Memos of (value, the tensor it was computed from, that tensor's version): valid while
        # `logits` is that same tensor and nothing has written into it since.
        self._probs: tuple | None = None
        self._argmax: tuple | None = None
        self._reader: ArgmaxReader | None = None

    @classmethod
    def row_of(
        cls, batch: torch.Tensor, row: int, argmax: tuple | None = None, reader: ArgmaxReader | None = None
    ) -> Dist:
        """Row `row` of a batch's logits [B, V]. The row view is taken on the first read of
        `.logits`, on the reading LIP's thread: completing a batch then makes no tensor call per
        member (the scheduler's thread is the bottleneck), and a caller that only wants `.token`
        never makes one. `argmax`: (this row's argmax, batch, version_of(batch)) when the
        executor took it with the batch's; `reader`: told when this row's argmax is read."""
        d = cls.__new__(cls)
        d._logits = None
        d._batch = batch
        d._row = row
        d.token = None
        d._probs = None
        d._argmax = argmax
        d._reader = reader
        return d

    @property
    def logits(self) -> torch.Tensor:
        lg = self._logits
        if lg is None:  # a `row_of` Dist read for the first time
            b = self._batch
            assert b is not None  # a Dist holds either its logits or the batch they are a row of
            lg = self._logits = b[self._row]  # a view: shares the batch's version counter
            self._batch = None
            memo = self._argmax
            if memo is not None and memo[1] is b:
                self._argmax = (memo[0], lg, memo[2])
        return lg

    @logits.setter
    def logits(self, value: torch.Tensor) -> None:
        self._logits = value
        self._batch = None

    def _kept(self, slot: str, compute):
        """`compute(logits)`, remembered in `slot` until the logits are replaced or written to."""
        lg = self.logits
        version = version_of(lg)
        memo = getattr(self, slot)
        if memo is None or memo[1] is not lg or memo[2] != version:
            memo = (compute(lg), lg, version)
            setattr(self, slot, memo)
        return memo[0]

    @property
    def probs(self) -> torch.Tensor:
        """The softmax of the logits (float32), `[V]` or `[n, V]`; computed once and kept."""
        return self._kept("_probs", lambda lg: torch.softmax(lg.float(), dim=-1))

    @property
    def vocab_size(self) -> int:
        """The number of logits per position."""
        return self.logits.shape[-1]

    def __len__(self) -> int:
        return 1 if self.logits.dim() == 1 else self.logits.shape[0]

    def __getitem__(self, i: int) -> Dist:
        if self.logits.dim() == 1:
            if i in (0, -1):
                return self
            raise IndexError(f"Dist holds one position; index {i} is out of range")
        tok = self.token[i] if isinstance(self.token, list) else None
        return Dist(self.logits[i], tok)

    def __iter__(self):
        return (self[i] for i in range(len(self)))

    def argmax(self) -> int | list[int]:
        """The most likely token id (one position) or a list of one id per position.

        Ties go to the lowest id. Computed once and kept while the logits are unchanged.
        """
        memo, batch = self._argmax, self._batch
        if memo is not None and batch is not None and memo[1] is batch and version_of(batch) == memo[2]:
            best = memo[0]  # taken with the batch's, and the row not read yet: no row view to make
        else:
            best = self._kept("_argmax", fast_argmax)
        reader = self._reader
        if reader is not None:
            reader.argmax_read = True
        return best if isinstance(best, int) else list(best)

    def topk(self, k: int = 5) -> list[tuple[int, float]]:
        """The `k` most likely tokens, most likely first, as `(token id, probability)` pairs.

        Raises:
            PredError: on a multi-position Dist: `Dist.topk needs one position; this Dist
                has <n> — index it first`.
        """
        row = self._single("topk")
        p, i = row.probs.topk(min(k, row.vocab_size))
        return list(zip(i.tolist(), p.tolist()))

    def logprob(self, tok: int) -> float:
        """The natural-log probability of token `tok` at this position.

        Raises:
            PredError: `logprob of token <t>: outside the vocabulary [0, <V>)`; on a
                multi-position Dist, `Dist.logprob needs one position; this Dist has <n> — index
                it first`.
        """
        row = self._single("logprob")
        if not 0 <= tok < row.vocab_size:
            raise PredError(f"logprob of token {tok}: outside the vocabulary [0, {row.vocab_size})")
        return float(torch.log_softmax(row.logits.float(), -1)[tok])

    def entropy(self) -> float:
        """The entropy of the distribution, in nats.

        Raises:
            PredError: on a multi-position Dist: `Dist.entropy needs one position; …`.
        """
        row = self._single("entropy")
        p = row.probs
        return float(-(p * torch.log(p.clamp_min(1e-30))).sum())

    def sample(
        self, temperature: float = 1.0, top_p: float = 1.0, top_k: int = 0, min_p: float = 0.0, seed: int | None = None
    ) -> int:
        """Sample one token id in the LIP (the engine does it in the batch with `pred(sampler=)`).

        Args:
            temperature: 0 is greedy; higher flattens the distribution.
            top_p: keep the smallest set of tokens whose probability reaches `top_p`.
            top_k: keep the `k` most likely tokens (0: off).
            min_p: drop tokens below `min_p` times the top probability.
            seed: a seed for a reproducible pick.

        Raises:
            PredError: an out-of-range parameter (`sampler temperature must be >= 0, got <t>`,
                `sampler top_p must be in (0, 1], got <p>`, `sampler top_k must be >= 0 (0 =
                off), got <k>`, `sampler min_p must be in [0, 1), got <m>`); on a
                multi-position Dist, `Dist.sample needs one position; …`.
        """
        row = self._single("sample")
        s = Sampler(temperature=temperature, top_p=top_p, top_k=top_k, min_p=min_p, seed=seed)
        return sample_rows(row.logits[None], [s])[0]

    def _single(self, what: str) -> Dist:
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
