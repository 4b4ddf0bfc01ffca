"""The built-in LIP behind every OpenAI-compatible endpoint: `n` choices from one prompt.

The prompt is prefilled once into one KV file; each choice is a `kv_fork` of it (its pages
shared copy-on-write) that feeds the prompt's last token and decodes on its own, up to
`MAX_PARALLEL` choices at a time in LIP threads so their `pred`s share forward passes. What it
measures is reported as it happened: `usage.shared_prompt_pages` is the number of the prompt's
pages every choice's file still held when it finished.

Sampling is `lib.generate` with the request's temperature / top_p / top_k / min_p / seed (choice
`i` uses `seed + i`), repetition, presence and frequency penalties and `logit_bias` as logits
processors, stop strings, and the request's grammar (JSON schema or tool calls). Text is
detokenized as the request asks (text.py: special tokens skipped by default). Tool calls are
read as the reply grows (tool_parse.py). Streaming sends `Delta` pieces, `ToolDelta`s, a
`ChoiceEnd` per choice and one `UsageReport` last; the return value is `Outcome`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Protocol, TypedDict

import torch

from ...errors import SymphonyError
from ...lib.generate import Generation, generate
from ...lib.grammar import Grammar
from ...lib.samplers import SamplingParams
from .logprobs import TokenLogprob, token_logprob
from .params import GenerationParams
from .text import TextCodec
from .tool_parse import CallStream, parse_reply

MAX_PARALLEL = 4  # a built-in LIP may run 4 threads (server/app.py's launch_builtin)
_FINISH = {
    "eos": "stop",
    "stop": "stop",
    "stop_token": "stop",
    "grammar": "stop",
    "max_tokens": "length",
    "callback": "stop",
}


class ToolCallOut(TypedDict):
    name: str
    arguments: str


class Delta(TypedDict):
    kind: str  # "delta"
    choice: int
    text: str
    logprobs: list[TokenLogprob]


class ToolDelta(TypedDict):
    kind: str  # "tool"
    choice: int
    index: int  # which call of the reply
    name: str | None  # set once, in the call's first delta
    arguments: str  # the next piece of the arguments' JSON text


class ChoiceEnd(TypedDict):
    kind: str  # "end"
    choice: int
    finish_reason: str
    tool_calls: list[ToolCallOut]
    logprobs: list[TokenLogprob]  # streaming: those not sent with a Delta yet; else all of them


class PromptDetails(TypedDict):
    cached_tokens: int  # prompt tokens whose K/V came from the prefix cache (or a stored response)


class Usage(TypedDict):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int
    prompt_tokens_details: PromptDetails
    prompt_prefills: int  # how many times the prompt ran through the model (1, whatever n is)
    shared_prompt_pages: int  # KV pages of the prompt held by every choice's file (0 when n == 1)


class UsageReport(TypedDict):
    kind: str  # "usage"
    usage: Usage


class ChoiceOut(TypedDict):
    index: int
    text: str | None  # None when the reply is tool calls
    finish_reason: str
    tool_calls: list[ToolCallOut]
    logprobs: list[TokenLogprob]


class Outcome(TypedDict):
    choices: list[ChoiceOut]
    usage: Usage


class Timer(Protocol):
    """What the server's metrics learn from a request (metrics.RequestTimer)."""

    def started(self) -> None: ...

    def token(self, choice: int) -> None: ...

    def finished(self, reasons: list[str], prompt_tokens: int, completion_tokens: int) -> None: ...


class _Charged:
    """`sym` whose `pred` first charges the user's token-rate quota, and whose `detokenize`
    renders text as the request asks (special tokens skipped or not)."""

    def __init__(self, sym, before_pred: Callable[[int], None] | None, detok: Callable | None = None) -> None:
        self._sym, self._before, self._detok = sym, before_pred, detok

    def pred(self, kv, tokens, *args, **kw):
        if self._before is not None:
            self._before(len(tokens))
        return self._sym.pred(kv, tokens, *args, **kw)

    def detokenize(self, ids) -> str:
        return self._sym.detokenize(ids) if self._detok is None else self._detok(ids)

    def __getattr__(self, name: str):
        return getattr(self._sym, name)


def penalties(presence: float, frequency: float):
    """OpenAI's presence/frequency penalties over the tokens generated so far."""

    def apply(logits: torch.Tensor, generated) -> torch.Tensor:
        if not generated:
            return logits
        ids, counts = torch.unique(torch.as_tensor(list(generated), dtype=torch.long), return_counts=True)
        out = logits.clone()
        out[ids] -= presence + frequency * counts.to(out.dtype)
        return out

    return apply


def logit_bias(bias: dict[int, float]):
    """OpenAI's `logit_bias`: added to the logits of the named tokens at every step."""
    ids = torch.tensor(list(bias), dtype=torch.long)
    vals = torch.tensor(list(bias.values()), dtype=torch.float32)

    def apply(logits: torch.Tensor, generated) -> torch.Tensor:
        out = logits.clone()
        out[ids] += vals.to(out.dtype)
        return out

    return apply


def _one_choice(
    sym,
    i: int,
    kv,
    feed: list[int],
    p: GenerationParams,
    grammar: Grammar | None,
    stream: bool,
    timer: Timer | None,
    codec: TextCodec | None,
) -> tuple[ChoiceOut, Generation]:
    procs = [penalties(p.presence_penalty, p.frequency_penalty)] if p.presence_penalty or p.frequency_penalty else []
    if p.logit_bias:
        procs.append(logit_bias(p.logit_bias))
    sampling = SamplingParams(
        temperature=p.temperature,
        top_p=p.top_p,
        top_k=p.top_k,
        min_p=p.min_p,
        repetition_penalty=p.repetition_penalty,
        seed=None if p.seed is None else p.seed + i,
        processors=procs,
    )
    eos = sym.eos_token_ids
    lps: list[TokenLogprob] = []
    sent = [0]

    def on_token(t: int, d) -> None:
        if timer is not None:
            timer.token(i)
        if p.logprobs and (t not in eos or p.ignore_eos):
            lps.append(token_logprob(sym, d, t, p.top_logprobs, codec))

    def send_text(text: str) -> None:
        sym.send(Delta(kind="delta", choice=i, text=text, logprobs=lps[sent[0] :]))
        sent[0] = len(lps)

    tools = p.tool_choice.active
    calls = CallStream(p.call_format, may_be_text=p.tool_choice.mode == "auto")
    shown = [""]

    def emit(piece: str) -> None:
        if not tools:
            send_text(piece)
            return
        shown[0] += piece
        text, deltas = calls.update(shown[0])
        if text:
            send_text(text)
        for k, name, args in deltas:
            sym.send(ToolDelta(kind="tool", choice=i, index=k, name=name, arguments=args))

    g = generate(
        sym,
        kv,
        feed,
        p.max_tokens,
        sampling=sampling,
        stop=p.stop or None,
        stop_tokens=() if p.ignore_eos else None,
        grammar=grammar.matcher() if grammar is not None else None,
        stream=emit if stream else None,
        on_token=on_token,
        history=[],
        keep_logprobs=False,  # the reply's logprobs are on_token's, when the request asks for them
    )
    reply = parse_reply(g.text, p.call_format, may_be_text=p.tool_choice.mode == "auto") if tools else None
    finish = _FINISH[g.stop_reason]
    text: str | None = g.text
    out_calls: list[ToolCallOut] = []
    if reply is not None and reply.text is None:  # calls (a cut one among them when max_tokens ran out)
        text = None
        out_calls = [ToolCallOut(name=c.name, arguments=c.arguments) for c in reply.calls]
        if finish != "length":
            finish = "tool_calls"
    if stream:
        sym.send(ChoiceEnd(kind="end", choice=i, finish_reason=finish, tool_calls=out_calls, logprobs=lps[sent[0] :]))
    return ChoiceOut(index=i, text=text, finish_reason=finish, tool_calls=out_calls, logprobs=lps), g


def _open_base(sym, toks: list[int], conv_path: str | None, resume: bool) -> tuple:
    """The file the prompt goes into, what is left to feed, and how many of the prompt's tokens it
    already held (None for a new file: the prefix cache may have given it some)."""
    if conv_path is None:
        return sym.kv_create(), toks, None
    if resume:
        try:
            kv = sym.kv_open(conv_path, "w")
        except SymphonyError:  # gone (evicted, removed): compute the conversation again
            pass
        else:
            have = kv.tokens
            common = 0
            limit = min(len(have), len(toks) - 1)  # at least one token must be fed
            while common < limit and have[common] == toks[common]:
                common += 1
            if common < len(have):
                sym.kv_truncate(kv, common)
            return kv, toks[common:], common
        with contextlib.suppress(SymphonyError):
            sym.kv_remove(conv_path)
    return sym.kv_create(conv_path), toks, None


def openai_generate(
    sym,
    prompt: str,
    params: GenerationParams,
    grammar: Grammar | None = None,
    stream: bool = False,
    timer: Timer | None = None,
    before_pred: Callable[[int], None] | None = None,
    codec: TextCodec | None = None,
    conv_path: str | None = None,
    resume: bool = False,
) -> Outcome:
    """`conv_path`: keep the conversation's K/V in that named KV file (store.py); with `resume` the
    file holds an earlier turn's, and only what the prompt adds past their common start is fed."""
    if timer is not None:
        timer.started()
    detok = None
    if codec is not None:  # a tool-call format's special-token markers stay in the text its parser reads
        keep = codec.token_ids(params.call_format.markers) if params.tool_choice.active else frozenset()
        detok = codec.detokenizer(params.skip_special_tokens, params.spaces_between_special_tokens, keep)
    charged = _Charged(sym, before_pred, detok)
    toks = sym.tokenize(prompt)
    n = params.n
    outs: list[tuple[ChoiceOut, Generation] | None] = [None] * n
    fork_pages: list[set[int]] = []
    base, feed, resumed = _open_base(sym, toks, conv_path, resume)
    try:
        if n == 1:
            outs[0] = _one_choice(charged, 0, base, feed, params, grammar, stream, timer, codec)
        else:
            if len(feed) > 1:
                charged.pred(base, feed[:-1])  # the prompt, once; every choice forks it

            def worker(s, w: int) -> None:
                cs = _Charged(s, before_pred, detok)
                for i in range(w, n, MAX_PARALLEL):
                    kv = s.kv_fork(base)
                    try:
                        outs[i] = _one_choice(cs, i, kv, feed[-1:], params, grammar, stream, timer, codec)
                        fork_pages.append(set(kv.pages))
                    finally:
                        s.kv_close(kv)

            handles = [sym.spawn(worker, w) for w in range(1, min(n, MAX_PARALLEL))]
            worker(sym, 0)
            for h in handles:
                h.join()
        shared = len(set(base.pages).intersection(*fork_pages)) if fork_pages else 0
        cached = base.file.cached_tokens if resumed is None else resumed
    finally:
        sym.kv_close(base)
    done = [o for o in outs if o is not None]
    completion = sum(len(g.tokens) for _, g in done)
    usage = Usage(
        prompt_tokens=len(toks),
        completion_tokens=completion,
        total_tokens=len(toks) + completion,
        prompt_tokens_details=PromptDetails(cached_tokens=cached),
        prompt_prefills=1,
        shared_prompt_pages=shared,
    )
    if timer is not None:
        timer.finished([c["finish_reason"] for c, _ in done], len(toks), completion)
    if stream:
        sym.send(UsageReport(kind="usage", usage=usage))
    return Outcome(choices=[c for c, _ in done], usage=usage)
