"""The what-if explorer: at a token position of a recorded thread, feed another token (or decode
with another sampler) and see the alternative continuation beside the original.

Both continuations run as one LIP on the engine, each in a KV fork of the same prefix file: the
prefix's pages are shared by the two forks (only the tails are new). The prefix comes from a
live KV file when one is given (`source`: a named file, opened read-only, forked and truncated
at the position — nothing is recomputed), or else is computed once from the recorded tokens.
The prefix is the thread's whole context — what its file held before the thread's own tokens (a
forked system prompt, a beam's history: `thread_context`, kept by the recording) and then its own
tokens — so with the original token and greedy decoding the "original" branch reproduces the
recorded run.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from symphony_core.model.sampling import Sampler

WHATIF_PROCESS = "what-if"  # the name of the LIP a what-if runs as


@dataclass
class WhatIf:
    position: int  # tokens[:position] is the shared prefix
    original: list[int]  # from the original token on, as decoded in its fork
    alternative: list[int]  # from the chosen token on
    recorded: list[int]  # the recorded run's tokens from `position` on (as far as it went)
    diverge_at: int | None  # first index where original and alternative differ (None: identical)
    shared_pages: list[int]  # pages both forks hold (the prefix's)
    prefix_pages: int
    files: dict[str, dict] = field(default_factory=dict)  # base/original/alternative: fid, parent, len
    recomputed_prefix: bool = False
    texts: dict[str, str] = field(default_factory=dict)

    def reproduces_recording(self) -> bool:
        n = min(len(self.recorded), len(self.original))
        return n > 0 and self.original[:n] == self.recorded[:n]

    def side_by_side(self, width: int = 40) -> str:
        o, a = self.texts.get("original", ""), self.texts.get("alternative", "")
        mark = "identical" if self.diverge_at is None else f"diverge at +{self.diverge_at}"
        return (
            f"position {self.position} ({mark}; {len(self.shared_pages)} prefix pages shared)\n"
            f"{'original':<{width}} | alternative\n{o[:width]:<{width}} | {a[:width]}"
        )

    def _repr_html_(self) -> str:
        """The notebook view: both continuations side by side, the divergence marked."""
        d = self.diverge_at
        head = "identical" if d is None else f"diverge at +{d}"
        cells = []
        for name in ("original", "alternative"):
            cells.append(
                f"<td style='vertical-align:top'><b>{name}</b><br><pre>"
                f"{html.escape(self.texts.get(name, ''))}</pre></td>"
            )
        return (
            f"<div class='symphony-whatif'>position {self.position}: {head}; "
            f"{len(self.shared_pages)} prefix pages shared<table><tr>{''.join(cells)}</tr></table></div>"
        )

    def to_dict(self) -> dict:
        return {
            k: getattr(self, k)
            for k in (
                "position",
                "original",
                "alternative",
                "recorded",
                "diverge_at",
                "shared_pages",
                "prefix_pages",
                "files",
                "recomputed_prefix",
                "texts",
            )
        }


def thread_tokens(recording: Any, tid: int = 1) -> list[int]:
    """The token stream of a recorded thread: the inputs of its preds in order, plus the token its
    last pred sampled in the engine, or else that pred's argmax (a greedy loop's next token).
    Assumes the thread decodes one KV file, as a generation loop does."""
    preds = recording.preds(tid)
    if not preds:
        raise ValueError(f"thread {tid} made no pred in this recording")
    out: list[int] = []
    for e in preds:
        out.extend(int(t) for t in (e.tokens or []))
    last = preds[-1].token
    if isinstance(last, list):
        last = last[-1] if last else None
    if last is None and preds[-1].logits is not None:
        lg = preds[-1].logits
        last = int((lg[-1] if lg.dim() == 2 else lg).argmax())
    if last is not None:
        out.append(int(last))
    return out


def thread_context(recording: Any, tid: int = 1) -> list[int]:
    """What the file of thread `tid`'s first pred held before it: the prefix the thread's own
    tokens follow (a forked system prompt, a beam's history, an opened named file), as the
    recording kept it. Empty for a thread that fed a new file itself, or an older recording."""
    preds = recording.preds(tid)
    if not preds:
        raise ValueError(f"thread {tid} made no pred in this recording")
    return [int(t) for t in (preds[0].context or [])]


def _info(kv) -> dict:
    return {"fid": kv.file.fid, "parent": kv.file.parent, "len": kv.len}


def _decode(sym, kv, first: int, max_tokens: int, sampler: Sampler | None, eos: frozenset) -> list[int]:
    out, tok = [], first
    for _ in range(max_tokens):
        out.append(tok)
        if tok in eos:
            break
        d = sym.pred(kv, [tok], sampler=sampler)
        tok = d.token if sampler is not None else d.argmax()
    return out


def explore(
    sym,
    prefix: list[int],
    original: int,
    alternative: int,
    max_tokens: int,
    sampler: Sampler | None = None,
    source: str | None = None,
) -> dict:
    """The LIP: a base file holding `prefix`, two forks of it, one continuation in each."""
    recomputed = source is None
    if source is not None:
        src = sym.kv_open(source, "r")
        if src.tokens[: len(prefix)] != list(prefix):
            raise ValueError(f"KV file {source} does not start with the recorded prefix")
        base = sym.kv_fork(src)
        sym.kv_truncate(base, len(prefix))
        sym.kv_close(src)
    else:
        base = sym.kv_create()
        sym.pred(base, list(prefix))
    forks = {"original": sym.kv_fork(base), "alternative": sym.kv_fork(base)}
    shared = sorted(set(base.pages) & set(forks["original"].pages) & set(forks["alternative"].pages))
    eos = sym.eos_token_ids
    other = sym.spawn(_decode, forks["alternative"], alternative, max_tokens, sampler, eos)
    got = {"original": _decode(sym, forks["original"], original, max_tokens, None, eos)}
    got["alternative"] = other.join()
    files = {"base": _info(base), **{k: _info(kv) for k, kv in forks.items()}}
    still_shared = set(shared) & set(forks["original"].pages) & set(forks["alternative"].pages)
    for kv in (*forks.values(), base):
        sym.kv_close(kv)
    return {
        "tokens": got,
        "shared": shared,
        "still_shared": sorted(still_shared),
        "files": files,
        "prefix_pages": -(-len(prefix) // sym.page_size),
        "recomputed": recomputed,
        "texts": {k: sym.detokenize(v) for k, v in got.items()},
    }


def what_if(
    engine: Any,
    tokens: Sequence[int],
    position: int,
    token: int | str,
    max_tokens: int = 16,
    sampler: Sampler | None = None,
    source: str | None = None,
    timeout: float = 600,
    context: Sequence[int] = (),
) -> WhatIf:
    """Run the alternative continuation at `position` of `tokens` (a thread's token stream) with
    `token` (an id, or a text of exactly one token) beside the original's, in KV forks of the
    shared prefix: `context` (what the thread's file held before its own tokens, `thread_context`)
    then `tokens[:position]`. `sampler` decodes the alternative with another sampler (the original
    stays greedy)."""
    tokens = [int(t) for t in tokens]
    if not isinstance(position, int) or not 1 <= position < len(tokens):
        raise ValueError(
            f"position must be in [1, {len(tokens) - 1}] (the recorded stream has {len(tokens)} "
            f"tokens), got {position!r}"
        )
    if isinstance(token, str):
        ids = engine.tokenize(token)
        if len(ids) != 1:
            raise ValueError(f"{token!r} is {len(ids)} tokens; give a token id or a text of one token")
        token = ids[0]
    if max_tokens < 1:
        raise ValueError(f"max_tokens must be >= 1, got {max_tokens}")
    r = engine.launch(
        explore,
        [int(t) for t in context] + tokens[:position],
        tokens[position],
        int(token),
        max_tokens,
        sampler,
        source,
        name=WHATIF_PROCESS,
    ).result(timeout=timeout)
    o, a = r["tokens"]["original"], r["tokens"]["alternative"]
    diverge = next((i for i, (x, y) in enumerate(zip(o, a)) if x != y), None)
    if diverge is None and len(o) != len(a):
        diverge = min(len(o), len(a))
    return WhatIf(
        position,
        o,
        a,
        tokens[position : position + max_tokens],
        diverge,
        r["still_shared"],
        r["prefix_pages"],
        r["files"],
        r["recomputed"],
        r["texts"],
    )
