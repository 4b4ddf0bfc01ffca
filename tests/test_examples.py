"""examples/lips — every reference program, run on the real model, checked for what it claims."""

from __future__ import annotations

import importlib.util
import json
import sys
import time
import uuid
from pathlib import Path

import pytest
import torch

EXAMPLES = Path(__file__).resolve().parent.parent / "examples" / "lips"


def load(name: str):
    """Import examples/lips/<name>.py as a module (the folder is not a package)."""
    key = f"_symphony_example_{name}"
    if key in sys.modules:
        return sys.modules[key]
    spec = importlib.util.spec_from_file_location(key, EXAMPLES / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[key] = mod
    spec.loader.exec_module(mod)
    return mod


def reference(engine, tokens, max_tokens, stop_at_eos=True):
    """Greedy decoding through the engine's synchronous pred: (tokens, total log-probability)."""
    kv = engine.kv_create()
    d = engine.pred(kv, list(tokens))
    out, total = [], 0.0
    for _ in range(max_tokens):
        t = d.argmax()
        total += d.logprob(t)
        if stop_at_eos and t in engine.eos_token_ids:
            break
        out.append(t)
        d = engine.pred(kv, [t])
    engine.kv_close(kv)
    return out, total


def settle(engine, free_before, timeout=5.0):
    """Wait for the pool to return to `free_before` pages (handles close as the process exits)."""
    deadline = time.time() + timeout
    while engine.pool.free_pages != free_before and time.time() < deadline:
        time.sleep(0.05)
    return engine.pool.free_pages


@pytest.fixture(scope="module")
def tok_path(engine):
    return engine.model_dir / "tokenizer.json"


# 1 -------------------------------------------------------------------------------------------------
def test_streaming_completion(engine):
    ex = load("streaming_completion")
    prompt = "The capital of France is"
    proc = engine.run(ex.complete, prompt, 12)
    chunks = list(proc.messages(timeout=120))
    res = proc.result(timeout=120)
    ref, _ = reference(engine, engine.tokenize(prompt), 12)
    assert res["tokens"] == ref  # greedy, token for token
    assert len(chunks) > 1 and "".join(chunks) == res["text"]  # streamed piece by piece, nothing lost
    assert "Paris" in res["text"]
    # A stop string spanning two tokens ends the text before it, and never reaches the stream.
    proc = engine.run(ex.complete, prompt, 12, stop=["aris."])
    chunks = list(proc.messages(timeout=120))
    res = proc.result(timeout=120)
    assert res["stop_reason"] == "stop" and res["text"] == " P" and "".join(chunks) == " P"


# 2 -------------------------------------------------------------------------------------------------
def test_prefix_parallel(engine):
    ex = load("prefix_parallel")
    path = f"/shared/sys-test-{uuid.uuid4().hex[:8]}.kv"
    questions = ex.QUESTIONS[:4]
    free = engine.pool.free_pages
    res = engine.run(ex.prefix_parallel, ex.SYSTEM_PROMPT, questions, 12, path).result(timeout=180)
    try:
        assert res["cached"] is False
        sys_msg = {"role": "system", "content": ex.SYSTEM_PROMPT}
        for q, a in zip(questions, res["answers"]):
            full = engine.tokenize(engine.chat_template([sys_msg, {"role": "user", "content": q}]))
            ref, _ = reference(engine, full, 12)
            assert a["tokens"] == ref, q  # a fork of the cached prefix answers exactly like a full prompt
        # N forks share the prefix: far fewer pages than N private copies.
        assert res["pages_held"] <= 0.6 * res["pages_if_copied"], res
        assert res["prefix_tokens"] > 150
        # A second program finds the named file and skips the prefill; same answers.
        again = engine.run(ex.prefix_parallel, ex.SYSTEM_PROMPT, questions, 12, path).result(timeout=180)
        assert again["cached"] is True
        assert [a["tokens"] for a in again["answers"]] == [a["tokens"] for a in res["answers"]]
    finally:
        engine.kv_remove(path)
    assert settle(engine, free) == free


# 3 -------------------------------------------------------------------------------------------------
def test_beam_search(engine):
    ex = load("beam_search")
    prompt = "The best way to learn a new language is"
    free = engine.pool.free_pages
    ref, ref_score = reference(engine, engine.tokenize(prompt), 10)
    b1 = engine.run(ex.beam_search, prompt, 1, 10).result(timeout=120)
    assert b1["best"]["tokens"] == ref  # width 1 is greedy
    assert b1["best"]["score"] == pytest.approx(ref_score, abs=1e-3)
    b3 = engine.run(ex.beam_search, prompt, 3, 10).result(timeout=180)
    assert b3["best"]["score"] >= ref_score - 1e-4
    assert b3["forks"] > 0 and len(b3["hypotheses"]) >= 3
    # Every fork was closed: the pool is whole again.
    assert settle(engine, free) == free


# 4 -------------------------------------------------------------------------------------------------
def test_graph_of_thought(engine):
    ex = load("graph_of_thought")
    free = engine.pool.free_pages
    res = engine.run(ex.graph_of_thought, "Name a good way to save money.", 3, 2, 12, 12).result(timeout=180)
    branches = res["branches"]
    assert len(branches) == 3 and len({b["first"] for b in branches}) == 3  # three different branches
    assert all(b["shares_root"] for b in branches)  # forks of one question cache
    yes, no = engine.tokenize("Yes")[0], engine.tokenize("No")[0]
    for b in branches:  # the score really is the model's verdict on that branch
        kv = engine.kv_create()
        d = engine.pred(kv, b["judge_tokens"])
        engine.kv_close(kv)
        assert b["score"] == pytest.approx(d.logprob(yes) - d.logprob(no), abs=1e-3)
    by_score = sorted(range(3), key=lambda i: -branches[i]["score"])
    assert sorted(res["kept"]) == sorted(by_score[:2])  # pruned the worst
    merge_text = engine.detokenize(res["merge_tokens"])
    for i, b in enumerate(branches):  # the merge KV holds the survivors' text, not the pruned one's
        assert (b["text"].strip() in merge_text) == (i in res["kept"])
    assert res["answer"].strip()
    assert settle(engine, free) == free


# 5 -------------------------------------------------------------------------------------------------
def test_react_calculator_is_safe():
    ex = load("react_agent")
    assert ex.calc("(1 + 2) * 3") == "9" and ex.calc("7/2") == "3.5" and ex.calc("-4 + 10 % 3") == "-3"
    for bad in ["__import__('os').system('true')", "open('x')", "a + 1", "2 ** 1000", "[1, 2]", "1/0"]:
        assert ex.run_tool("calc", bad).startswith("error:"), bad
    assert ex.run_tool("lookup", "Moon") == ex.DOCUMENTS["moon"]
    assert ex.run_tool("lookup", "mars").startswith("error:")
    assert ex.relevant_tools("What is 12 * 3?") == ["calc"]
    assert ex.relevant_tools("How tall is the Eiffel Tower?") == ["lookup"]


@pytest.mark.parametrize("question", ["What is 17 * 23?", "How tall is the Eiffel Tower?"])
def test_react_agent(engine, tok_path, question):
    ex = load("react_agent")
    res = engine.run(ex.react, question, tok_path, 2).result(timeout=180)
    steps = res["steps"]
    assert steps[0]["tool"] in ("calc", "lookup")  # the first turn must use a tool
    for s in steps:
        if s["tool"] == "finish":
            continue
        # The tool ran inside the LIP and its result is in the conversation the model reads.
        assert s["observation"] == ex.run_tool(s["tool"], s["arg"])
        assert not s["observation"].startswith("error:")  # the grammar only lets valid calls through
        assert f"Observation: {s['observation']}" in res["transcript"]
    if "17" in question:
        assert steps[0]["tool"] == "calc" and steps[0]["observation"] == ex.calc(steps[0]["arg"])
    else:
        assert steps[0]["tool"] == "lookup" and steps[0]["observation"] == ex.DOCUMENTS["eiffel tower"]
    assert steps[-1]["tool"] == "finish" and res["answer"]
    # One KV cache for the whole conversation: it only grew, and earlier tokens never changed.
    hist = res["kv_history"]
    assert len(hist) >= 2 and res["rebuilt_tokens"] == 0
    for a, b in zip(hist, hist[1:]):
        assert b["len"] > a["len"] and b["tokens"][: a["len"]] == a["tokens"]


# 6 -------------------------------------------------------------------------------------------------
@pytest.mark.slow
def test_watermark(engine):
    ex = load("watermark")
    n = 160
    runs = engine.run(ex.watermark_demo, "Write a short story about a lighthouse keeper.\n\n", n, 0).result(timeout=300)
    wm, plain, greedy = runs
    assert wm["watermarked"] and not plain["watermarked"] and not greedy["watermarked"]
    assert len(wm["tokens"]) == n
    assert wm["z"] > 4, wm["z"]
    assert abs(plain["z"]) < 2, plain["z"]
    assert abs(greedy["z"]) < 2, greedy["z"]
    # The detector is keyed: the same watermarked text scored with another key looks plain.
    other = ex.detect(wm["tokens"], wm["prev"], engine.config.vocab_size, key=ex.KEY + 1)
    assert abs(other["z"]) < 2, other["z"]


# 7 -------------------------------------------------------------------------------------------------
def _validate(value, schema):
    try:
        import jsonschema
    except ImportError:  # a hand check of the same schema
        assert set(value) == set(schema["properties"])
        assert isinstance(value["name"], str) and 1 <= len(value["name"]) <= 32
        assert isinstance(value["age"], int) and 0 <= value["age"] <= 130
        assert isinstance(value["city"], str) and 1 <= len(value["city"]) <= 32
        assert value["occupation"] in schema["properties"]["occupation"]["enum"]
        assert isinstance(value["skills"], list) and len(value["skills"]) <= 3
        assert all(isinstance(s, str) and 1 <= len(s) <= 20 for s in value["skills"])
    else:
        jsonschema.validate(value, schema)


def test_json_schema(engine, tok_path):
    ex = load("json_schema")
    texts = [
        "Marie Curie was a 66-year-old physicist and chemist living in Paris, skilled in radiochemistry.",
        "Bob is a carpenter from Oslo. He is 41 and good at woodwork, fishing and singing.",
        "The poet Li Bai lived in Chang'an.",
    ]
    procs = [engine.run(ex.extract, t, tok_path) for t in texts]  # three at once: batched
    for p in procs:
        res = p.result(timeout=180)
        value = json.loads(res["raw"])  # always parses...
        _validate(value, ex.PERSON)  # ...and validates
        assert value == res["value"] and res["stop_reason"] in ("grammar", "eos")


# 8 -------------------------------------------------------------------------------------------------
def test_speculative(engine):
    ex = load("speculative")
    res = engine.run(ex.speculative, ex.PROMPT, 40).result(timeout=180)
    ref, _ = reference(engine, engine.tokenize(ex.PROMPT), 40)
    assert res["tokens"] == ref  # exactly greedy
    assert res["preds"] < len(res["tokens"]) // 2  # the repetitive text is verified in big steps
    assert res["accepted"] > 0
    # On text that does not repeat, drafts are rejected (truncated away) and the output is still greedy.
    prompt = "My favourite fruit is"
    res = engine.run(ex.speculative, prompt, 16).result(timeout=120)
    assert res["tokens"] == reference(engine, engine.tokenize(prompt), 16)[0]


def test_ngram_drafter():
    ex = load("speculative")
    assert ex.ngram_draft([1, 2, 3, 4, 1, 2], k=3) == [3, 4, 1]
    assert ex.ngram_draft([5, 6, 7], k=3) == []
    assert ex.ngram_draft([1, 2, 9, 1, 2, 8, 1, 2], k=2) == [8, 1]  # the latest occurrence wins


# 9 -------------------------------------------------------------------------------------------------
def test_attention_sink(engine):
    ex = load("attention_sink")
    prompt = "Once upon a time, in a small village by the sea,"
    sink, window, n = 4, 24, 96  # 4x the window
    res = engine.run(ex.sink_generate, prompt, n, sink, window).result(timeout=300)
    ps = engine.pool.page_size
    p_len = res["prompt_tokens"]
    assert len(res["tokens"]) == n and res["slides"] >= 3
    bound = ex.page_bound(sink, window, ps)
    assert res["max_pages"] <= bound < -(-(p_len + n) // ps)  # bounded, and below the full context
    assert res["max_position"] < sink + window and res["positions_contiguous"]
    # Until the first slide the cache is the plain one: the output is plain greedy decoding.
    first = sink + window - p_len
    ref, _ = reference(engine, engine.tokenize(prompt), first, stop_at_eos=False)
    assert res["tokens"][:first] == ref


# 10 ------------------------------------------------------------------------------------------------
def test_undo(engine):
    ex = load("undo")
    free = engine.pool.free_pages
    log = engine.run(ex.editor, "Chapter 1.\n\n", ex.SCRIPT).result(timeout=180)
    ops = [e["op"] for e in log]
    assert ops == ["open", "type", "type", "undo", "delete", "undo", "undo"]
    # Each undo restores the earlier state's cache: the next-token logits are exactly equal.
    for now, before in [(3, 1), (5, 1), (6, 0)]:
        assert log[now]["doc"] == log[before]["doc"]
        assert torch.equal(log[now]["logits"], log[before]["logits"])
        assert log[now]["suggestion"] == log[before]["suggestion"] and not log[now]["recomputed"]
    assert not torch.equal(log[2]["logits"], log[1]["logits"])
    assert log[4]["doc"] != log[3]["doc"]
    assert settle(engine, free) == free


def test_undo_interactive_over_messages(engine):
    ex = load("undo")
    proc = engine.run(ex.editor, "Hello")
    msgs = proc.messages(timeout=60)
    first = next(msgs)
    proc.send({"op": "type", "text": " world"})
    assert next(msgs)["doc"] == "Hello world"
    proc.send({"op": "undo"})
    assert next(msgs)["doc"] == first["doc"] == "Hello"
    proc.send({"op": "quit"})
    log = proc.result(timeout=60)
    assert torch.equal(log[-1]["logits"], log[0]["logits"])


# 11 ------------------------------------------------------------------------------------------------
def test_select(engine):
    ex = load("select_option")
    prompt = "Q: Which planet is known as the Red Planet?\nA:"
    options = [" Mars", " Venus", " Jupiter", " the planet Saturn"]
    res = engine.run(ex.select, prompt, options).result(timeout=120)
    # Brute force: one pred over prompt + option, log-probabilities read off every position.
    p = engine.tokenize(prompt)
    brute = []
    for o in options:
        ot = engine.tokenize(o)
        kv = engine.kv_create()
        d = engine.pred(kv, p + ot, outputs="all")
        engine.kv_close(kv)
        lp = torch.log_softmax(d.logits.float(), -1)
        brute.append(sum(float(lp[len(p) - 1 + i, t]) for i, t in enumerate(ot)))
    assert res["scores"] == pytest.approx(brute, abs=1e-3)
    assert res["index"] == max(range(len(options)), key=lambda i: brute[i])
    assert res["choice"] == " Mars"
    mean = engine.run(ex.select, prompt, options, "mean").result(timeout=120)
    lens = [len(engine.tokenize(o)) for o in options]
    assert mean["scores"] == pytest.approx([b / n for b, n in zip(brute, lens)], abs=1e-3)


def test_undo_after_the_engine_reclaimed_the_snapshot(fresh_engine):
    """`kv_hint(keep_for=0)` lets the engine reclaim an undo snapshot under memory pressure;
    undo then recomputes it from its tokens and reaches the same state."""
    ex = load("undo")
    eng = fresh_engine(num_pages=64)
    try:
        proc = eng.run(ex.editor, "Chapter 1.\n\n", keep_for=0.0)
        msgs = proc.messages(timeout=60)
        first = next(msgs)
        proc.send({"op": "type", "text": "It was a dark and stormy night;"})
        next(msgs)
        time.sleep(0.05)

        def hog(sym, n_tokens):  # needs one page more than is free: the engine evicts what hints allow
            kv = sym.kv_create()
            sym.pred(kv, [100 + i % 1000 for i in range(n_tokens)])
            sym.kv_close(kv)

        eng.run(hog, eng.pool.free_pages * eng.pool.page_size + 1).result(timeout=120)
        proc.send({"op": "undo"})
        back = next(msgs)
        proc.send({"op": "quit"})
        log = proc.result(timeout=60)
        assert back["recomputed"] and back["doc"] == first["doc"]
        assert torch.allclose(log[-1]["logits"], log[0]["logits"], atol=1e-4)
        assert log[-1]["suggestion"] == log[0]["suggestion"]
    finally:
        eng.shutdown()


def test_no_example_shadows_the_standard_library():
    """Notebooks put examples/lips on sys.path: a file named like a stdlib module (select.py did)
    would replace that module for every import after it, e.g. inside an HTTP client."""
    clashes = sorted(p.name for p in EXAMPLES.glob("*.py") if p.stem in sys.stdlib_module_names)
    assert not clashes, f"rename these examples, they shadow the standard library: {clashes}"
