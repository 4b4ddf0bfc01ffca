"""A `pred` call's arguments checked where it enters the engine, before it joins a batch: ids as
ints, and the sampler's fields.

`Sampler` checks its fields when it is built, but it is a plain mutable object: a program can
change `top_k`, `seed` or its generator afterwards, or pass numbers no tensor holds
(`top_k=2**63`, `seed=2**64`, `temperature=1e400`). Any of them reaching the batch's sampling
would fail every member of the batch, so each call's sampler is checked on its own first.
"""

from __future__ import annotations

import math
import operator

import torch

from .errors import PredError
from .model.sampling import Sampler

MAX_TEMPERATURE = 1e4  # far past any useful temperature; keeps logits / temperature finite
MAX_TOP_K = 2**31 - 1  # any value past the vocabulary means "off"; this one still fits every index type
SEED_RANGE = (-(2**63), 2**64 - 1)  # what torch.Generator.manual_seed takes


def as_int_list(x, what: str) -> list[int]:
    """Ids as a list of Python ints; floats, booleans and strings are refused, not rounded."""
    if isinstance(x, torch.Tensor):
        if x.is_floating_point() or x.is_complex() or x.dtype == torch.bool:
            raise PredError(f"pred: {what} must be integers, got a {x.dtype} tensor")
        x = x.tolist()
    if isinstance(x, str):
        raise PredError(
            f"pred: {what} must be a list of ints, got a str" + (" (tokenize it first)" if what == "token_ids" else "")
        )
    if isinstance(x, bool):
        raise PredError(f"pred: {what} must be ints, not booleans")
    if isinstance(x, int):
        return [x]
    try:
        items = list(x)
    except TypeError as e:
        raise PredError(f"pred: {what} must be a list of ints, got {type(x).__name__}") from e
    out = []
    for t in items:
        if isinstance(t, bool):
            raise PredError(f"pred: {what} must be ints, not booleans")
        try:
            out.append(operator.index(t))
        except TypeError:
            raise PredError(f"pred: {what} must be ints, got {t!r} ({type(t).__name__})") from None
    return out


def _real(name: str, v: object) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise PredError(f"pred: sampler {name} must be a number, got {v!r} ({type(v).__name__})")
    try:
        x = float(v)
    except OverflowError:
        raise PredError(f"pred: sampler {name} must be finite, got an int of {int(v).bit_length()} bits") from None
    if not math.isfinite(x):
        raise PredError(f"pred: sampler {name} must be finite, got {x}")
    return x


def _int(name: str, v: object) -> int:
    if isinstance(v, bool):
        raise PredError(f"pred: sampler {name} must be an int, not a boolean")
    try:
        return operator.index(v)  # type: ignore[arg-type]
    except TypeError:
        raise PredError(f"pred: sampler {name} must be an int, got {v!r} ({type(v).__name__})") from None


def check_sampler(s: Sampler) -> None:
    """Raise PredError naming the first field of `s` the batch's sampling could not use."""
    t = _real("temperature", s.temperature)
    if not 0.0 <= t <= MAX_TEMPERATURE:
        raise PredError(f"pred: sampler temperature must be in [0, {MAX_TEMPERATURE:g}], got {t}")
    k = _int("top_k", s.top_k)
    if not 0 <= k <= MAX_TOP_K:
        raise PredError(f"pred: sampler top_k must be in [0, 2**31 - 1] (0 = off), got {k}")
    p = _real("top_p", s.top_p)
    if not 0.0 < p <= 1.0:
        raise PredError(f"pred: sampler top_p must be in (0, 1], got {p}")
    m = _real("min_p", s.min_p)
    if not 0.0 <= m < 1.0:
        raise PredError(f"pred: sampler min_p must be in [0, 1), got {m}")
    gen = s._gen
    if gen is None:
        if s.seed is not None:
            seed = _int("seed", s.seed)
            if not SEED_RANGE[0] <= seed <= SEED_RANGE[1]:
                raise PredError(f"pred: sampler seed must be in [-2**63, 2**64 - 1], got {seed}")
    elif not isinstance(gen, torch.Generator) or gen.device.type != "cpu":
        raise PredError("pred: sampler's generator was replaced by something other than a CPU torch.Generator")
