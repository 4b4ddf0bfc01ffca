"""`IncrementalText` (lib/incremental_text.py) gives the text a full decode gives, token by token, for the
decoders Symphony meets: SmolLM2's byte-level BPE, a family's random byte-level tokenizer with its special
tokens, a SentencePiece-style one (Metaspace, byte fallback), and the server's detokenizer with special
tokens skipped or spaced; `generate` streams and returns the same text as before, one short decode a token."""

from __future__ import annotations

import random

import pytest
from tokenizers import Tokenizer, decoders, models, normalizers

from symphony_core.lib.generate import generate
from symphony_core.lib.incremental_text import IncrementalText
from symphony_core.model.random_tokenizer import train_tokenizer
from symphony_core.server.openai.text import TextCodec


def _sentencepiece_like() -> Tokenizer:
    """A Llama-2 / Mistral style tokenizer: '▁' for spaces, byte fallback for what the vocabulary lacks."""
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2}
    vocab.update({f"<0x{b:02X}>": 3 + b for b in range(256)})
    for piece in ["▁", "▁the", "▁cat", "▁sat", "▁on", "▁mat", "t", "h", "e", "a", "s", "▁a", "é", "▁caf", "é!"]:
        vocab.setdefault(piece, len(vocab))
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token="<unk>", byte_fallback=True))
    tok.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
    tok.pre_tokenizer = None
    tok.decoder = decoders.Sequence(
        [decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(), decoders.Strip(" ", 1, 0)]
    )
    return tok


def _texts():
    return [
        "The cat sat on the mat.",
        "café au lait — naïve 東京 🚀 done",
        "  leading spaces and\nnew lines\n\n",
        "emoji 👩‍💻 split over many tokens, then ascii",
    ]


def _streams(tok: Tokenizer, specials: list[int], garbage: bool = True) -> list[list[int]]:
    rng = random.Random(7)
    out = [tok.encode(t, add_special_tokens=False).ids for t in _texts()]
    vocab = tok.get_vocab_size(with_added_tokens=True)
    if garbage:  # anything at all, halves of characters included (byte-level decoders only: see below)
        out.append([rng.randrange(vocab) for _ in range(300)])
    mixed = list(out[1])
    for s in specials:
        mixed.insert(rng.randrange(len(mixed) + 1), s)
    out.append(mixed)
    return out


def _check(decode, ids: list[int]) -> None:
    inc = IncrementalText(decode)
    whole = decode(ids)
    for k, t in enumerate(ids, 1):
        got = inc.add(t)
        # what is shown at any step is the start of the final text, and at most a few characters
        # (an incomplete one held back, or a window's undecided bytes) behind a decode so far
        assert whole.startswith(got), (k, got, whole)
        assert len(decode(ids[:k])) - len(got) <= 8, (k, got)
    assert inc.finish() == whole


@pytest.mark.parametrize("family", ["llama", "qwen2", "mistral", "gemma3", "phi3"])
def test_family_tokenizers_decode_incrementally_as_a_whole(family):
    tok = train_tokenizer(family)
    added = sorted(tok.get_added_tokens_decoder())
    codec = TextCodec(tok)
    for ids in _streams(tok, added[:3]):
        _check(lambda x: tok.decode(x, skip_special_tokens=False), ids)
        for skip, spaced in ((True, True), (False, True), (False, False)):
            _check(codec.detokenizer(skip, spaced), ids)


def test_sentencepiece_style_decoder_keeps_its_spaces():
    """Text, not random ids: a byte-fallback decoder turns a run of byte tokens that is not UTF-8 into
    U+FFFDs as a whole, so a window can decode a byte (a random id) that the whole run would not."""
    tok = _sentencepiece_like()
    for ids in _streams(tok, [1, 2], garbage=False):
        _check(lambda x: tok.decode(x, skip_special_tokens=False), ids)
    ids = tok.encode("the cat sat on a mat", add_special_tokens=False).ids
    inc = IncrementalText(lambda x: tok.decode(x))
    assert [inc.add(t) for t in ids][-1] == "the cat sat on a mat"


def test_smollm2_tokenizer(engine):
    tok = engine.tokenizer.fast
    specials = sorted(engine.tokenizer.fast.get_added_tokens_decoder())[:3]
    for ids in _streams(tok, specials):
        _check(engine.detokenize, ids)


class _CountingSym:
    """What generate needs from `sym`, over the engine, counting how many ids each detokenize decodes."""

    def __init__(self, engine) -> None:
        self.engine, self.decoded = engine, []
        self.eos_token_ids = engine.tokenizer.eos_token_ids if hasattr(engine.tokenizer, "eos_token_ids") else set()

    def pred(self, kv, tokens, **kw):
        return self.engine.pred(kv, tokens, **{k: v for k, v in kw.items() if v is not None})

    def detokenize(self, ids):
        self.decoded.append(len(ids))
        return self.engine.detokenize(ids)

    def __getattr__(self, name):
        return getattr(self.engine, name)


def test_generate_streams_the_full_decode_with_short_decodes(engine):
    sym = _CountingSym(engine)
    sym.eos_token_ids = frozenset()
    kv = engine.kv_create()
    pieces: list[str] = []
    try:
        g = generate(sym, kv, engine.tokenize("Once upon a time"), 48, stream=pieces.append, stop_tokens=())
    finally:
        engine.kv_close(kv)
    assert len(g.tokens) == 48 and g.stop_reason == "max_tokens"
    assert g.text == engine.detokenize(g.tokens) == "".join(pieces)
    assert len(g.logprobs) == 48
    assert max(sym.decoded) < 16, "every decode is a short window, not the reply so far"


def test_generate_without_logprobs_keeps_none(engine):
    kv = engine.kv_create()
    try:
        g = generate(engine, kv, engine.tokenize("Hello"), 6, stop_tokens=(), keep_logprobs=False)
    finally:
        engine.kv_close(kv)
    assert len(g.tokens) == 6 and g.logprobs == []
