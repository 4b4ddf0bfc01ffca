"""Every supported family, exact against transformers' own forward (fp32), on tiny random-weight models made
here with transformers' own classes, each with its family's quirks switched on (random_models.QUIRKS names
them: biases, q/k norms, sliding windows shorter than the prompts, Gemma's norms and soft-capping, llama3 /
linear / longrope RoPE, partial rotary, odd head and MLP sizes, tied and untied heads, GQA and MQA).

Every comparison is against `hf(ids).logits` over the whole token sequence, so prefill in one pass or in
chunks, decoding token by token, after a fork, after a truncate, and in one batch with other files of other
lengths must all leave no trace in the numbers."""

from __future__ import annotations

import json

import pytest
import torch

from symphony_core.model.exact_blocks import BlocksLinear
from symphony_core.model.random_models import FAMILIES, QUIRKS, make_random_model
from tests.exact_blocks_helpers import dense_only
from tests.lips_for_tests import greedy

pytestmark = pytest.mark.slow  # six engines and six transformers models: ~1.5 min alone, several under load

TOL = 1e-4  # max |logit difference|; fp32 on both sides, only summation order differs
PROMPT = 80  # longer than the sliding windows (24 tokens) of Mistral and Gemma 3's local layers


@pytest.fixture(scope="module", autouse=True)
def _fixed_kernel_tiers():
    """No per-model timing of the fp32 tiers at every load (they change which kernel runs, never a result)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SYMPHONY_ONEDNN_FROM_ROWS", "off")
        mp.setenv("SYMPHONY_F32_ONE_ROW", "blocked")
        yield


@pytest.fixture(scope="module", params=FAMILIES)
def family(request, tmp_path_factory):
    """(family, model directory, transformers' model, the engine)."""
    from transformers import AutoModelForCausalLM

    from symphony_core import Engine

    fam = request.param
    out = make_random_model(fam, tmp_path_factory.mktemp(fam), shard=fam == "qwen3")
    hf = AutoModelForCausalLM.from_pretrained(str(out), dtype=torch.float32).eval()
    eng = Engine(str(out), num_pages=256, page_size=16)
    yield fam, out, hf, eng
    eng.shutdown()


def _ids(n: int, seed: int, vocab: int) -> list[int]:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(8, vocab, (n,), generator=g).tolist()


def _hf_logits(hf, ids: list[int]) -> torch.Tensor:
    with torch.inference_mode():
        return hf(torch.tensor([ids])).logits[0].float()


def _close(ours: torch.Tensor, ref: torch.Tensor, what: str) -> None:
    diff = (ours.float() - ref).abs().max().item()
    assert diff <= TOL, f"{what}: max |logit diff| {diff:.2e} > {TOL}"


def test_logits_match_transformers_through_every_kv_path(family):
    fam, _, hf, eng = family
    print(f"{fam}: quirks on: {'; '.join(QUIRKS[fam])}")
    vocab = eng.tokenizer.vocab_size
    ids = _ids(PROMPT, 1, vocab)
    want = _hf_logits(hf, ids)

    kv = eng.kv_create()  # one pass, every position
    _close(eng.pred(kv, ids, outputs="all").logits, want, f"{fam} prefill")
    eng.kv_close(kv)

    kv = eng.kv_create()  # chunked prefill (a chunk crossing a page and the window), then token by token
    got = [eng.pred(kv, ids[:30], outputs="all").logits, eng.pred(kv, ids[30:50], outputs="all").logits]
    got += [eng.pred(kv, [t]).logits[None] for t in ids[50:]]
    _close(torch.cat(got), want, f"{fam} chunks then decode")

    fork = eng.kv_fork(kv)  # a fork decodes on from the shared pages; the parent is untouched
    more = _ids(12, 2, vocab)
    want_fork = _hf_logits(hf, ids + more)
    _close(torch.stack([eng.pred(fork, [t]).logits for t in more]), want_fork[PROMPT:], f"{fam} after a fork")
    _close(eng.pred(kv, more[:3], outputs="all").logits, want_fork[PROMPT : PROMPT + 3], f"{fam} the parent")

    eng.kv_truncate(kv, 40)  # back into the window's past: the kept tokens' K/V are all still there
    other = _ids(30, 3, vocab)
    _close(eng.pred(kv, other, outputs="all").logits, _hf_logits(hf, ids[:40] + other)[40:], f"{fam} after a truncate")
    eng.kv_close(kv)
    eng.kv_close(fork)
    assert eng.kvfs.stats()["pages_used"] == 0


def test_a_batch_of_files_of_different_lengths_matches(family):
    """One forward pass over decodes and chunks of files of 5 to 120 tokens (inside and past the windows)."""
    from symphony_core import PredCall

    fam, _, hf, eng = family
    vocab = eng.tokenizer.vocab_size
    prompts = [_ids(n, 10 + n, vocab) for n in (5, 23, 47, 120)]
    kvs = [eng.kv_create() for _ in prompts]
    for kv, p in zip(kvs, prompts):
        eng.pred(kv, p[:-3])
    calls = [PredCall(kv, p[-3:] if i % 2 else p[-3:-2], outputs="all") for i, (kv, p) in enumerate(zip(kvs, prompts))]
    dists = eng.pred_batch(calls)
    for i, (d, p) in enumerate(zip(dists, prompts)):
        fed = len(p) - 3 + (3 if i % 2 else 1)
        ref = _hf_logits(hf, p[:fed])[len(p) - 3 :]
        got = d.logits if d.logits.dim() == 2 else d.logits[None]
        _close(got, ref, f"{fam} batch row {i} ({len(p)} tokens)")
    for kv in kvs:
        eng.kv_close(kv)


def test_greedy_64_tokens_equal_transformers_generate_as_concurrent_programs(family):
    fam, _, hf, eng = family
    vocab = eng.tokenizer.vocab_size
    prompts = [_ids(n, 20 + n, vocab) for n in (7, 33)]
    procs = [eng.run(greedy, p, 64) for p in prompts]  # decoding together, one batch a step
    for p, proc in zip(prompts, procs):
        with torch.inference_mode():
            ref = hf.generate(
                torch.tensor([p]), max_new_tokens=64, min_new_tokens=64, do_sample=False, eos_token_id=None
            )[0, len(p) :].tolist()
        assert proc.result(timeout=300) == ref, f"{fam}: greedy tokens differ from transformers' generate"


def test_chat_template_and_stop_tokens_are_the_models_own(family):
    from transformers import AutoTokenizer

    fam, out, _, eng = family
    tok = AutoTokenizer.from_pretrained(str(out))
    msgs = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "What is 2+2?"}]
    if fam == "gemma3":
        msgs = msgs[1:]  # its template folds a system turn into the first user turn: checked below too
    assert eng.chat_template(msgs) == tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
    tools = [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "description": "Weather <now> & 'today'",  # tojson must not HTML-escape these
                "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
            },
        }
    ]
    want = tok.apply_chat_template(msgs, tools=tools, tokenize=False, add_generation_prompt=True)
    assert eng.chat_template(msgs, tools=tools) == want
    if "tools" in (tok.chat_template or ""):
        assert "get_weather" in want
    gen = json.loads((out / "generation_config.json").read_text()).get("eos_token_id")
    gen_eos = set(gen if isinstance(gen, list) else [gen])
    hf_eos = {tok.convert_tokens_to_ids(tok.eos_token)}
    assert gen_eos | hf_eos <= set(eng.tokenizer.eos_token_ids)


def test_example_programs_and_a_debugger_session_run(family):
    """The reference programs on each family (speculative decoding must reproduce greedy decoding exactly, over
    windows too), and a debugger session: stop on entry, step three preds, override with the runner-up, verify
    the KV file against a recompute."""
    from examples.lips.beam_search import beam_search
    from examples.lips.speculative import greedy, speculative
    from symphony_lab.debugger import Debugger

    fam, _, _, eng = family
    prompt = "the cat sat on the mat and the dog " * 4
    spec = eng.run(speculative, prompt, 40).result(timeout=300)
    plain = eng.run(greedy, prompt, 40).result(timeout=300)
    assert spec["text"] == plain["text"], f"{fam}: speculative decoding changed the greedy output"
    beams = eng.run(beam_search, prompt, 3, 8).result(timeout=300)
    assert beams["best"] and len(beams["hypotheses"]) >= 3 and beams["forks"] > 0

    dbg = Debugger(eng)
    try:
        pid = dbg.launch("examples.lips.streaming_completion:complete", prompt, max_tokens=8, stop_on_entry=True)["pid"]
        assert dbg.wait_stopped(pid, timeout=120)["reason"] == "entry"
        for i in range(1, 4):
            dbg.step(pid, 1)
            s = dbg.wait_stopped(pid, timeout=120)
            assert (s["call"], s["preds"]) == ("pred", i)
        runner_up = s["result"]["topk"][1]["token"]
        r = dbg.override(pid, 1, token=runner_up)
        assert r["applied"] and r["stop"]["result"]["chosen"]["token"] == runner_up
        dbg.set_breakpoint("kv_close", pid=pid)
        dbg.continue_(pid)
        s = dbg.wait_stopped(pid, timeout=120)
        assert s["call"] == "kv_close"
        assert dbg.verify_kv(s["kv_file"])["consistent"]
        dbg.continue_(pid)
        assert dbg.process(pid).result(timeout=120)["tokens"][2] == runner_up  # the overridden token stayed
    finally:
        dbg.detach()
    eng.kvfs.check()


@pytest.mark.parametrize("fam", FAMILIES)
def test_served_with_its_own_chat_template(fam, tmp_path):
    """`symphony serve --model DIR` answers the official client's chat request through the family's own template:
    the prompt it counts is exactly transformers' `apply_chat_template` of the conversation."""
    import openai
    from transformers import AutoTokenizer

    from tests.server_harness import Server

    out = make_random_model(fam, tmp_path / fam)
    tok = AutoTokenizer.from_pretrained(str(out))
    msgs = [{"role": "user", "content": "Name a colour."}]
    prompt_ids = tok(
        tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True), add_special_tokens=False
    )
    server = Server([], extra=["--model", str(out)], num_pages=256)
    try:
        client = openai.OpenAI(base_url=server.url + "/v1", api_key="unused")
        r = client.chat.completions.create(model=fam, messages=msgs, max_tokens=6, temperature=0)
        assert r.usage.prompt_tokens == len(prompt_ids["input_ids"])
        assert r.usage.completion_tokens >= 1 and r.choices[0].finish_reason in ("length", "stop")
    finally:
        assert server.stop() == 0, server.log()


def test_pages_outside_the_window_are_counted_and_kept(family):
    """The pages of a windowed file that no later query reads (docs/architecture.md, "Sliding windows and the KV
    file system"): counted off the file's page table, and kept, so a truncate back past them stays exact."""
    fam, _, hf, eng = family
    if fam != "mistral":
        pytest.skip("every layer windowed: Mistral's case (Gemma 3's global layers read every page)")
    window = eng.config.layer_windows[0]
    assert window == 24 and all(w == window for w in eng.config.layer_windows)
    ids = _ids(200, 4, eng.tokenizer.vocab_size)
    kv = eng.kv_create()
    eng.pred(kv, ids)
    page = eng.pool.page_size
    outside = [p for j, p in enumerate(kv.pages) if (j + 1) * page <= kv.len - window]
    assert (len(kv.pages), len(outside)) == (13, 11)
    eng.kv_truncate(kv, 30)  # back into those pages: their K/V are read again
    tail = _ids(20, 5, eng.tokenizer.vocab_size)
    _close(
        eng.pred(kv, tail, outputs="all").logits,
        _hf_logits(hf, ids[:30] + tail)[30:],
        "after truncating past the window",
    )
    eng.kv_close(kv)


def test_its_gguf_loads_exactly_and_q4_runs_the_files_blocks(family, tmp_path, monkeypatch):
    """The family written as a GGUF (llama.cpp's layout, symphony_core/model/gguf_writer.py): the F32 file converts
    with every switch kept (its own keys, gguf_config.py) and matches transformers; a Q4_1 file's blocks feed
    weights="q4" as they are."""
    from symphony_core import Engine
    from symphony_core.model.gguf_blocks import read_q4_1
    from symphony_core.model.gguf_writer import write_gguf

    fam, out, hf, eng = family
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    ids = _ids(PROMPT, 6, eng.tokenizer.vocab_size)
    f32 = Engine(str(write_gguf(out, tmp_path / f"{fam}.F32.gguf", qtype="F32")), num_pages=64)
    try:
        assert (f32.config.family, f32.config.layer_windows) == (eng.config.family, eng.config.layer_windows)
        kv = f32.kv_create()
        _close(f32.pred(kv, ids, outputs="all").logits, _hf_logits(hf, ids), f"{fam} from its F32 GGUF")
        f32.kv_close(kv)
    finally:
        f32.shutdown()
    q4_file = write_gguf(out, tmp_path / f"{fam}.Q4_1.gguf", qtype="Q4_1")
    blocks = read_q4_1(q4_file, eng.config.n_heads, eng.config.n_kv_heads)
    # every projection whose rows split into 32-value blocks (Mistral's 264-wide down projection stays F16)
    per_layer = 3 if fam == "mistral" else 4
    assert len(blocks) == per_layer * eng.config.n_layers
    # Decoding a token at a time runs the int4 kernel on those blocks; the same file's dequantised weights in fp32
    # are what it must reproduce, up to the activations' rounding inside the dot products.
    # (no prefix cache: the second fp32 decode below must compute what the first did, not reuse its pages)
    engines = [Engine(str(q4_file), num_pages=64, weights=w, prefix_cache=False) for w in ("q4", "fp32")]
    try:

        def decode(e):
            kv = e.kv_create()
            e.pred(kv, ids[:40])
            logits = torch.stack([e.pred(kv, [t]).logits for t in ids[40:]])
            e.kv_close(kv)
            return logits

        rows = [decode(e) for e in engines]
        # fp32 decodes from the very blocks (exact_blocks.py), the dense kernel's logits bit for bit
        fp32 = engines[1].model
        from_blocks = [lin for layer in fp32.layers for lin in vars(layer).values() if _runs_blocks(lin)]
        assert len(from_blocks) == per_layer * eng.config.n_layers, f"{fam}: {len(from_blocks)} projections from blocks"
        with dense_only(fp32):
            assert not any(_runs_blocks(lin) for layer in fp32.layers for lin in vars(layer).values())
            assert torch.equal(decode(engines[1]), rows[1]), (
                f"{fam}: fp32 from the blocks differs from the dense tensors"
            )
        agree = (rows[0].argmax(-1) == rows[1].argmax(-1)).float().mean().item()
        print(f"{fam}: q4 decode on the file's Q4_1 blocks picks fp32-of-those-blocks' token at {agree:.0%} of 40")
        assert agree >= 0.9, f"{fam}: q4 on the Q4_1 blocks agrees with their fp32 at only {agree:.0%}"
    finally:
        for e in engines:
            e.shutdown()


def _runs_blocks(lin) -> bool:
    return isinstance(getattr(lin, "tiers", [(0, None)])[0][1], BlocksLinear)


@pytest.mark.parametrize("fam", ["mistral", "gemma3"])
def test_the_triton_kernel_applies_each_layers_window(fam, tmp_path):
    """The CUDA path's attention (the Triton kernel, run here by Triton's interpreter) masks each windowed layer
    itself: the torch layer loop over it matches transformers past the window, prefill and decode."""
    pytest.importorskip("triton")
    from transformers import AutoModelForCausalLM

    from symphony_core import Engine
    from symphony_core.model.triton_backend import TritonPaged

    out = make_random_model(fam, tmp_path / fam)
    hf = AutoModelForCausalLM.from_pretrained(str(out), dtype=torch.float32).eval()
    eng = Engine(str(out), num_pages=64)
    try:
        eng.model.attention = TritonPaged(eng.pool.page_size)
        eng.model.ops = None  # the layer loop CUDA runs (no compiled CPU kernels)
        ids = _ids(60, 7, eng.tokenizer.vocab_size)
        kv = eng.kv_create()
        got = [eng.pred(kv, ids[:40], outputs="all").logits] + [eng.pred(kv, [t]).logits[None] for t in ids[40:]]
        _close(torch.cat(got), _hf_logits(hf, ids), f"{fam} through the Triton kernel")
        eng.kv_close(kv)
    finally:
        eng.shutdown()


def test_a_sandboxed_program_renders_the_models_tool_template(family):
    """`sym.chat_template(messages, tools=...)` inside the server's sandbox gives what it gives in-process."""
    from symphony_core.sandbox.job import SandboxJob
    from symphony_core.sandbox.pool import SandboxManager
    from symphony_core.sandbox.twin import sandboxed_lip
    from tests.server_harness import LIPS

    fam, _, _, eng = family
    if fam != "qwen3":
        pytest.skip("one family with a tool-calling template is enough for the sandbox's plumbing")
    msgs = [{"role": "user", "content": "Weather in Paris?"}]
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]
    mgr = SandboxManager(eng, max_workers=1)
    mgr.start()
    try:
        job = SandboxJob(open(LIPS).read(), "chat_with_tools", [msgs, tools], {}, "chat_with_tools", mgr.spec_for({}))
        boxed = eng.launch(sandboxed_lip, mgr, job, user="tester", name="tools").result(120)
    finally:
        mgr.shutdown()
    assert boxed == eng.chat_template(msgs, tools=tools) and "get_weather" in boxed
