"""symphony_core.lib — libc for LIPs: generate, stop strings, samplers, chat, grammars (issue 4)."""

from __future__ import annotations

import json
import re

import pytest
import torch

from symphony_core.lib import (
    Chat,
    Generation,
    SamplingParams,
    StopStrings,
    apply_repetition_penalty,
    generate,
    pred_parallel,
)
from symphony_core.lib.grammar import Grammar, GrammarError, generate_constrained, load_tokenizer, tokenizer_for


def run(engine, fn, *args, **kw):
    return engine.run(fn, *args, **kw).result(timeout=120)


def reference_greedy(engine, tokens, max_tokens):
    """Greedy tokens through the engine's synchronous pred (no runtime, no lib)."""
    kv = engine.kv_create()
    d = engine.pred(kv, tokens)
    out = []
    for _ in range(max_tokens):
        t = d.argmax()
        if t in engine.eos_token_ids:
            break
        out.append(t)
        d = engine.pred(kv, [t])
    engine.kv_close(kv)
    return out


@pytest.fixture(scope="module")
def tok_path(engine):
    return engine.model_dir / "tokenizer.json"


# --- stop strings (pure) -------------------------------------------------------------------------
def test_stop_strings_find_and_hold_back():
    s = StopStrings(["\n\n", "END"])
    assert s.find("abc\n", 0) is None
    assert s.find("abc\n\nxyz", 4) == (3, "\n\n")  # found even though the first "\n" was already checked
    assert s.find("xxEN", 0) is None and s.find("xxEND", 4) == (2, "END")
    assert s.safe_end("hello E") == 6  # "E" may start "END": held back
    assert s.safe_end("hello EN") == 6
    assert s.safe_end("hello\n") == 5
    assert s.safe_end("hello") == 5
    assert s.safe_end("caf\ufffd") == 3  # an incomplete UTF-8 sequence is not shown yet
    assert StopStrings(None).safe_end("abc") == 3


# --- samplers ----------------------------------------------------------------------------------
def test_repetition_penalty_math():
    logits = torch.tensor([2.0, -2.0, 1.0, 0.5])
    out = apply_repetition_penalty(logits, [0, 1, 1], 2.0)
    assert out.tolist() == [1.0, -4.0, 1.0, 0.5]
    assert apply_repetition_penalty(logits, [0], 1.0) is logits
    with pytest.raises(ValueError):
        SamplingParams(repetition_penalty=0)


def test_seeded_sampling_is_reproducible_and_same_on_either_side(engine):
    """A seeded SamplingParams picks the same tokens whether the engine samples in the batch or the
    LIP samples from the logits (forced by a no-op processor)."""

    def lip(sym, in_engine: bool, seed: int):
        kv = sym.kv_create()
        procs = [] if in_engine else [lambda logits, hist: logits]
        g = generate(
            sym,
            kv,
            sym.tokenize("Once upon a time"),
            12,
            sampling=SamplingParams(temperature=1.0, top_p=0.9, seed=seed, processors=procs),
        )
        return g.tokens

    a = run(engine, lip, True, 7)
    b = run(engine, lip, True, 7)
    c = run(engine, lip, False, 7)
    d = run(engine, lip, True, 8)
    assert a == b == c
    assert a != d


def test_repetition_penalty_reduces_repeats(engine):
    def lip(sym, penalty):
        kv = sym.kv_create()
        return generate(
            sym, kv, sym.tokenize("one one one one one one"), 16, repetition_penalty=penalty, stop_tokens=[]
        ).tokens

    plain, penalized = run(engine, lip, 1.0), run(engine, lip, 1.8)
    repeats = lambda toks: len(toks) - len(set(toks))  # noqa: E731
    assert repeats(penalized) < repeats(plain)


# --- generate --------------------------------------------------------------------------------
def test_generate_greedy_matches_reference_and_kv_convention(engine):
    prompt = "The capital of France is"

    def lip(sym):
        kv = sym.kv_create()
        toks = sym.tokenize(prompt)
        g = generate(sym, kv, toks, 10)
        return g, kv.tokens, toks

    g, kv_tokens, toks = run(engine, lip)
    assert isinstance(g, Generation)
    assert g.tokens == reference_greedy(engine, engine.tokenize(prompt), 10)
    assert g.stop_reason == "max_tokens" and g.n_preds == 10 and len(g.logprobs) == 10
    assert all(lp <= 0 for lp in g.logprobs)
    # The KV holds the prompt and every generated token but the last, which is pending.
    assert kv_tokens + g.pending == toks + g.tokens
    assert g.text == engine.detokenize(g.tokens)


def test_generate_stops_at_eos_and_at_stop_tokens(engine):
    def lip(sym, stop_tokens):
        kv = sym.kv_create()
        p = sym.chat_template([{"role": "user", "content": "Say hi."}])
        return generate(sym, kv, sym.tokenize(p), 64, stop_tokens=stop_tokens)

    g = run(engine, lip, None)
    assert g.stop_reason == "eos" and g.stop_match in engine.eos_token_ids
    assert g.pending == [g.stop_match] and g.stop_match not in g.tokens
    assert len(g.logprobs) == len(g.tokens) + 1
    first = g.tokens[0]
    g2 = run(engine, lip, [first])
    assert g2.stop_reason == "stop_token" and g2.tokens == [] and g2.stop_match == first


def test_generate_stop_string_across_tokens_and_streaming(engine):
    prompt = "The capital of France is"
    ref = reference_greedy(engine, engine.tokenize(prompt), 12)
    ref_text = engine.detokenize(ref)
    # A stop string that begins inside one token and ends in the next.
    stop = "aris."
    assert stop in ref_text and not any(stop in engine.detokenize([t]) for t in ref)

    def lip(sym):
        chunks = []
        kv = sym.kv_create()
        g = generate(sym, kv, sym.tokenize(prompt), 12, stop=[stop, "zzz-never"], stream=chunks.append)
        return g, chunks

    g, chunks = run(engine, lip)
    assert g.stop_reason == "stop" and g.stop_match == stop
    assert g.text == ref_text[: ref_text.index(stop)]
    assert "".join(chunks) == g.text  # nothing of the stop string ever leaked into the stream
    assert g.tokens == ref[: len(g.tokens)]


def test_generate_stream_true_sends_and_on_token_can_stop(engine):
    seen = []

    def lip(sym):
        kv = sym.kv_create()

        def on_token(t, d):
            seen.append((t, d.argmax()))
            return len(seen) < 4

        return generate(sym, kv, sym.tokenize("Water boils at"), 20, stream=True, on_token=on_token)

    proc = engine.run(lip)
    streamed = "".join(proc.messages(timeout=60))
    g = proc.result(timeout=60)
    assert g.stop_reason == "callback" and len(g.tokens) == 4
    assert streamed == g.text
    assert all(t == a for t, a in seen)


def test_generate_mask_restricts_tokens(engine):
    digits = [i for i in range(engine.config.vocab_size) if engine.detokenize([i]).strip().isdigit()]

    def lip(sym):
        kv = sym.kv_create()
        return generate(sym, kv, sym.tokenize("My favourite word is"), 6, mask=digits)

    g = run(engine, lip)
    assert g.tokens and all(t in set(digits) for t in g.tokens)


def test_pred_parallel_batches_and_matches_sequential(engine):
    prompts = ["Hello", "The sky is", "1, 2, 3,"]

    def lip(sym):
        kvs = [sym.kv_create() for _ in prompts]
        ds = pred_parallel(sym, [(kv, sym.tokenize(p)) for kv, p in zip(kvs, prompts)])
        return [d.argmax() for d in ds]

    got = run(engine, lip)
    assert got == [reference_greedy(engine, engine.tokenize(p), 1)[0] for p in prompts]


# --- chat ------------------------------------------------------------------------------------
def test_chat_keeps_the_cache_across_turns(engine):
    def lip(sym):
        chat = Chat(sym, system="You are a terse assistant.")
        chat.add("user", "Name a colour.")
        snaps = []
        r1 = chat.reply(8)
        snaps.append(chat.kv.tokens)
        chat.add("user", "Name an animal.")
        chat.flush()
        snaps.append(chat.kv.tokens)
        r2 = chat.reply(8)
        snaps.append(chat.kv.tokens)
        return r1, r2, snaps, chat.text(), chat.messages, chat.rebuilt_tokens

    r1, r2, snaps, text, messages, rebuilt = run(engine, lip)
    assert rebuilt == 0
    for a, b in zip(snaps, snaps[1:]):
        assert len(b) > len(a) and b[: len(a)] == a  # extended, never rebuilt
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "user", "assistant"]
    assert messages[2]["content"] == r1.text and messages[4]["content"] == r2.text
    assert text == engine.chat_template(messages, add_generation_prompt=False)


def test_chat_reply_cut_by_stop_string_is_repaired(engine):
    """A stop string ends the reply inside a token: the text the template renders differs from
    what the cache holds, so the cache is cut back to the common prefix and extended."""

    def lip(sym):
        chat = Chat(sym)
        chat.add("user", "Count from 1 to 10, separated by commas.")
        g = chat.reply(24, stop=[","])
        return g, chat.text(), chat.messages, chat.kv.len + len(chat.pending)

    g, text, messages, n = run(engine, lip)
    assert g.stop_reason == "stop" and "," not in g.text
    assert text == engine.chat_template(messages, add_generation_prompt=False)


# --- grammars --------------------------------------------------------------------------------
def test_tokenizer_is_cached(engine, tok_path):
    a = load_tokenizer(tok_path, engine.config.vocab_size, sorted(engine.eos_token_ids))
    b = load_tokenizer(tok_path.parent, engine.config.vocab_size, sorted(engine.eos_token_ids))
    assert a is b and a.vocab_size == engine.config.vocab_size
    with pytest.raises(GrammarError, match="no tokenizer file"):
        load_tokenizer(tok_path.parent / "missing.json")


def test_regex_and_choice_constraints(engine, tok_path):
    pattern = r"\d{3}-\d{4}"

    def lip(sym):
        tok = tokenizer_for(sym, tok_path)
        out = {}
        g = generate_constrained(sym, sym.kv_create(), sym.tokenize("Call me at"), Grammar.regex(pattern, tok), 16)
        out["regex"] = g
        ch = Grammar.choice(["yes", "no", "maybe"], tok)
        out["choice"] = generate_constrained(sym, sym.kv_create(), sym.tokenize("Is the sky blue? Answer:"), ch, 8)
        m = Grammar.regex(r"[0-9]+", tok).matcher()
        out["digits_only"] = all(sym.detokenize([t]).isdigit() for t in m.allowed_tokens())
        return out

    out = run(engine, lip)
    assert re.fullmatch(pattern, out["regex"].text), out["regex"].text
    assert out["regex"].stop_reason in ("grammar", "eos")
    assert out["choice"].text in ("yes", "no", "maybe")
    assert out["digits_only"]


def test_json_schema_constraint_and_errors(engine, tok_path):
    schema = {
        "type": "object",
        "properties": {"city": {"type": "string", "maxLength": 20}, "population": {"type": "integer", "minimum": 0}},
        "required": ["city", "population"],
        "additionalProperties": False,
    }

    def lip(sym):
        tok = tokenizer_for(sym, tok_path)
        p = sym.tokenize(sym.chat_template([{"role": "user", "content": "Give a city and its population as JSON."}]))
        g = generate_constrained(sym, sym.kv_create(), p, Grammar.json_schema(schema, tok), 64)
        try:
            generate_constrained(sym, sym.kv_create(), p, Grammar.json_schema(schema, tok), 3)
            short = None
        except GrammarError as e:
            short = str(e)
        try:
            Grammar.regex("(unclosed", tok)
            bad = None
        except GrammarError as e:
            bad = str(e)
        return g, short, bad

    g, short, bad = run(engine, lip)
    value = json.loads(g.text)
    assert set(value) == {"city", "population"} and isinstance(value["city"], str)
    assert isinstance(value["population"], int) and value["population"] >= 0 and len(value["city"]) <= 20
    assert short is not None and "incomplete" in short
    assert bad is not None and "does not compile" in bad


def test_grammar_matcher_rejects_disallowed_tokens(engine, tok_path):
    tok = load_tokenizer(tok_path, engine.config.vocab_size, sorted(engine.eos_token_ids))
    m = Grammar.regex("ab", tok).matcher()
    with pytest.raises(GrammarError, match="not allowed"):
        m.advance(engine.tokenize("z")[0])
