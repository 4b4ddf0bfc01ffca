"""`generate`: the decoding loop every LIP writes, written once — stop conditions, streaming, grammars.

The KV convention used throughout `symphony_core.lib`: a KV file holds the tokens whose K/V
are written; the tokens still to feed travel beside it ("pending"). `pred` needs at least one
token to return a distribution, so a loop always ends with the last picked token pending:
`Generation.pending` says what to feed next to continue the same file.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch

from ..model import Dist
from .incremental_text import IncrementalText
from .samplers import SamplingParams


class Constraint(Protocol):
    """A decoding constraint (grammar.py's `Matcher` is one): which tokens may come next."""

    def mask(self) -> torch.Tensor: ...  # bool [V], True = allowed

    def advance(self, token: int) -> None: ...

    def is_stopped(self) -> bool: ...  # nothing but EOS may follow


@dataclass
class Generation:
    """What `generate` returns.

    `text` is the generated text (cut before a stop string unless `include_stop`); `tokens`
    every generated token except a final stop token; `stop_reason` one of "eos", "stop_token",
    "stop", "grammar", "max_tokens", "callback"; `stop_match` the string or token that stopped
    it; `logprobs[i]` the log-probability of `tokens[i]` (and of the stop token, last, when one
    ended the run) under the distribution it was picked from; `pending` the tokens picked but
    not yet written into the KV; `n_preds` how many `pred` calls the loop made.
    """

    text: str
    tokens: list[int]
    stop_reason: str
    stop_match: str | int | None = None
    logprobs: list[float] = field(default_factory=list)
    pending: list[int] = field(default_factory=list)
    n_preds: int = 0

    @property
    def total_logprob(self) -> float:
        return float(sum(self.logprobs))

    def __str__(self) -> str:
        return self.text


def _partial_stop_suffix(text: str, stops: Sequence[str]) -> int:
    """Length of the longest suffix of `text` that is a proper prefix of some stop string."""
    best = 0
    for s in stops:
        for k in range(min(len(s) - 1, len(text)), best, -1):
            if text.endswith(s[:k]):
                best = k
                break
    return best


class StopStrings:
    """Finds stop strings in growing text, even when one spans several tokens, and says which
    part of the text is safe to stream (cannot turn out to be the start of a stop string)."""

    def __init__(self, stops: Iterable[str] | str | None) -> None:
        if isinstance(stops, str):
            stops = [stops]
        self.stops = [s for s in (stops or []) if s]
        self._longest = max((len(s) for s in self.stops), default=0)

    def find(self, text: str, checked: int) -> tuple[int, str] | None:
        """The earliest stop string ending after `checked` (the text length already searched)."""
        if not self.stops:
            return None
        start = max(0, checked - self._longest + 1)
        hits = [(i, s) for s in self.stops if (i := text.find(s, start)) >= 0]
        return min(hits) if hits else None

    def safe_end(self, text: str) -> int:
        """How much of `text` may be shown: hold back a possible stop-string start and any
        trailing incomplete UTF-8 sequence (decoded as U+FFFD until its last byte arrives)."""
        end = len(text) - _partial_stop_suffix(text, self.stops)
        while end > 0 and text[end - 1] == "\ufffd":
            end -= 1
        return end


def generate(
    sym,
    kv,
    prompt_tokens: Sequence[int],
    max_tokens: int = 64,
    *,
    sampling: SamplingParams | None = None,
    temperature: float = 0.0,
    top_k: int = 0,
    top_p: float = 1.0,
    min_p: float = 0.0,
    seed: int | None = None,
    repetition_penalty: float = 1.0,
    processors: Sequence[Callable] = (),
    stop: Iterable[str] | str | None = None,
    stop_tokens: Iterable[int] | None = None,
    include_stop: bool = False,
    grammar: Constraint | None = None,
    mask=None,
    stream: bool | Callable[[str], Any] | None = None,
    on_token: Callable[[int, Dist], Any] | None = None,
    history: Sequence[int] | None = None,
    keep_logprobs: bool = True,
) -> Generation:
    """Decode up to `max_tokens` tokens into `kv`, starting by feeding `prompt_tokens`.

    Sampling: pass a `Sampling`, or its fields (`temperature=0` is greedy). Stops at a token of
    `stop_tokens` (default: the model's EOS tokens; reason "eos" for those, else
    "stop_token"), at a string of `stop` (found across token boundaries), when the `grammar`
    allows nothing more ("grammar"), after `max_tokens` ("max_tokens"), or when `on_token`
    returns False ("callback"). `mask` (allowed ids or a bool tensor) restricts every step;
    `grammar` restricts step by step. `stream=True` sends text chunks with `sym.send`, a
    callable receives them instead; chunks never contain a (partial) stop string. `history`
    is the context that logits processors and the repetition penalty see before the new
    tokens (default: everything in `kv` plus `prompt_tokens`). `keep_logprobs=False` leaves
    `Generation.logprobs` empty (a log-softmax over the vocabulary a token saved).
    """
    if max_tokens < 0:
        raise ValueError(f"max_tokens must be >= 0, got {max_tokens}")
    toks = list(prompt_tokens)
    if not toks:
        raise ValueError(
            "generate needs at least one prompt token to feed (pred returns the next-token "
            "distribution after the tokens it is given)"
        )
    sampling = sampling or SamplingParams(
        temperature=temperature,
        top_k=top_k,
        top_p=top_p,
        min_p=min_p,
        seed=seed,
        repetition_penalty=repetition_penalty,
        processors=list(processors),
    )
    eos = frozenset(sym.eos_token_ids)
    stop_set = frozenset(eos if stop_tokens is None else (int(t) for t in stop_tokens))
    stops = StopStrings(stop)
    emit: Callable[[str], Any] | None = sym.send if stream is True else (stream or None)
    engine_sampler = sampling.engine_sampler()
    hist = (kv.tokens + toks) if history is None else list(history)
    processed = sampling.needs_logits  # only a processor or the penalty reads the history
    decoded = IncrementalText(sym.detokenize)

    out: list[int] = []
    logprobs: list[float] = []
    text, shown, checked = "", 0, 0
    match: str | int | None
    reason, match = "max_tokens", None
    n_preds = 0
    pending = toks
    for _ in range(max_tokens):
        step_mask = mask
        if grammar is not None:
            gm = grammar.mask()
            step_mask = gm if mask is None else gm & _as_bool_mask(mask, gm.shape[-1])
        d = sym.pred(kv, pending, sampler=engine_sampler, mask=step_mask)
        n_preds += 1
        t = sampling.pick(d, hist + out if processed else ())
        if keep_logprobs:
            logprobs.append(d.logprob(t))
        pending = [t]
        if grammar is not None:
            grammar.advance(t)
        if on_token is not None and on_token(t, d) is False:
            out.append(t)
            decoded.add(t)
            text = decoded.finish()
            reason = "callback"
            break
        if t in stop_set:
            reason, match = ("eos" if t in eos else "stop_token"), t
            break
        out.append(t)
        text = decoded.add(t)
        hit = stops.find(text, checked)
        checked = len(text)
        if hit is not None:
            i, s = hit
            text = text[: i + len(s)] if include_stop else text[:i]
            reason, match = "stop", s
            break
        if emit is not None:
            end = stops.safe_end(text)
            if end > shown:
                emit(text[shown:end])
                shown = end
        if grammar is not None and grammar.is_stopped():
            reason = "grammar"
            break
    if reason not in ("stop", "callback"):
        text = decoded.finish()
    if emit is not None and len(text) > shown:
        emit(text[shown:])
    return Generation(text, out, reason, match, logprobs, list(pending), n_preds)


def _as_bool_mask(mask, vocab: int) -> torch.Tensor:
    if isinstance(mask, torch.Tensor) and mask.dtype == torch.bool:
        return mask
    m = torch.zeros(vocab, dtype=torch.bool)
    m[torch.as_tensor(list(mask), dtype=torch.long)] = True
    return m


def feed(sym, kv, tokens: Sequence[int], **pred_kw) -> Dist:
    """Write `tokens` into `kv` and return the distribution after the last one."""
    return sym.pred(kv, list(tokens), **pred_kw)


def pred_parallel(sym, calls: Sequence[tuple], **pred_kw) -> list[Dist]:
    """Run several `pred(kv, tokens)` calls at once, one LIP thread each, so the engine batches
    them into one forward pass; results in order. Each call is `(kv, tokens)` or
    `(kv, tokens, {pred keyword options})`."""

    def one(s, kv, tokens, kw):
        return s.pred(kv, tokens, **{**pred_kw, **kw})

    if len(calls) == 1:
        c = calls[0]
        return [one(sym, c[0], c[1], c[2] if len(c) > 2 else {})]
    handles = [sym.spawn(one, c[0], c[1], c[2] if len(c) > 2 else {}) for c in calls]
    return [h.join() for h in handles]


def parallel_map(sym, fn: Callable, items: Sequence) -> list:
    """`[fn(sym_i, item) for item in items]`, one LIP thread per item (their preds batch together)."""
    handles = [sym.spawn(fn, item) for item in items]
    return [h.join() for h in handles]


__all__ = ["Constraint", "Generation", "StopStrings", "feed", "generate", "parallel_map", "pred_parallel"]
