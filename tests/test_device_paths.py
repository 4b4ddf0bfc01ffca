"""What the engine does the same whatever device or dtype its logits and K/V are on.

Sampling takes logits of any dtype and device (a CUDA engine's are bf16 on the GPU; the samplers'
noise is drawn on the CPU); attention on CUDA keeps to the SDPA backends that do not re-plan per
shape; and the whole engine, on a tiny random Llama made here, matches transformers on each device.
The CPU half runs everywhere; the CUDA half where torch sees a GPU, never in CI (docs/architecture.md,
"On a GPU")."""

from __future__ import annotations

import pytest
import torch

from symphony_core.model.attention import CUDA_SDPA_BACKENDS, _sdpa_group
from symphony_core.model.dist import Dist
from symphony_core.model.forward_batch import ForwardBatch, SeqInput
from symphony_core.model.sampling import Sampler, sample_rows
from tests.lips_for_tests import greedy

cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


def _logits(rows: int = 4, vocab: int = 512) -> torch.Tensor:
    torch.manual_seed(0)
    return torch.randn(rows, vocab) * 3


def _samplers() -> list[Sampler]:
    return [Sampler(temperature=0.8, top_p=0.9, seed=7), Sampler.greedy(), Sampler(top_k=5, seed=8), Sampler(seed=9)]


def _picks(logits: torch.Tensor) -> list[int]:
    return sample_rows(logits, _samplers())


def test_sampling_takes_half_precision_and_strided_logits():
    x = _logits().to(torch.bfloat16)
    want = _picks(x.float())
    assert _picks(x) == want
    assert _picks(x.t().contiguous().t()) == want  # a transposed view of the same values
    d = Dist(x[0])
    assert d.sample(temperature=0.7, seed=3) == Dist(x[0].float()).sample(temperature=0.7, seed=3)


@cuda
def test_sampling_takes_logits_on_the_gpu():
    x = _logits()
    want = _picks(x)
    for dtype in (torch.float32, torch.bfloat16):
        on_gpu = x.to("cuda", dtype)
        assert _picks(on_gpu) == _picks(on_gpu.cpu())
    assert _picks(x.cuda()) == want
    assert Dist(x[0].cuda()).sample(temperature=0.7, seed=3) == Dist(x[0]).sample(temperature=0.7, seed=3)


def _decode_batch(device) -> tuple[ForwardBatch, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Three single-token decodes over contexts of 5, 17 and 40 slots (a padded group: it has a mask)."""
    torch.manual_seed(1)
    h, kvh, d, n_slots = 9, 3, 64, 160
    seqs, base = [], 0
    for n in (5, 17, 40):
        ctx = list(range(base, base + n))
        seqs.append(SeqInput([1], [n - 1], [ctx[-1]], ctx, [0]))
        base += 48
    fb = ForwardBatch.build(seqs, device, None, False)
    q = torch.randn(3, h, d, device=device)
    k = torch.randn(n_slots, kvh, d, device=device)
    v = torch.randn(n_slots, kvh, d, device=device)
    return fb, q, k, v


def test_padded_decode_attention_matches_each_sequence_alone():
    fb, q, k, v = _decode_batch("cpu")
    (g,) = fb.groups
    got = _sdpa_group(q, k, v, g)
    for b, n in enumerate((5, 17, 40)):
        slots = torch.arange(48 * b, 48 * b + n)
        kb, vb = k[slots].transpose(0, 1)[None], v[slots].transpose(0, 1)[None]
        want = torch.nn.functional.scaled_dot_product_attention(q[b][None, :, None], kb, vb, enable_gqa=True)
        torch.testing.assert_close(got[b], want[0, :, 0], rtol=1e-5, atol=1e-5)


@cuda
def test_cuda_attention_skips_cudnn_and_agrees_with_the_cpu():
    from torch.profiler import ProfilerActivity, profile

    assert torch.nn.attention.SDPBackend.CUDNN_ATTENTION not in CUDA_SDPA_BACKENDS
    fb_cpu, q, k, v = _decode_batch("cpu")
    want = _sdpa_group(q, k, v, fb_cpu.groups[0])
    fb, *_ = _decode_batch("cuda")
    for dtype, tol in ((torch.float32, 1e-4), (torch.bfloat16, 3e-2)):
        args = [t.to("cuda", dtype) for t in (q, k, v)]
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            got = _sdpa_group(*args, fb.groups[0])
            torch.cuda.synchronize()
        assert not [e.key for e in prof.key_averages() if "cudnn" in e.key.lower()]
        torch.testing.assert_close(got.float().cpu(), want, rtol=tol, atol=tol)


# --- the whole engine on a tiny random Llama: a model directory made here, so it runs wherever torch does ---

TINY_WORDS = 512


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory) -> str:
    """A 2-layer random Llama (grouped-query heads of 64, tied embeddings) with a word-level tokenizer:
    what `Engine("path/to/dir")` loads, made in seconds without the shipped model (a GPU machine may
    not have it)."""
    import json

    from safetensors.torch import save_file
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import LlamaConfig, LlamaForCausalLM

    out = tmp_path_factory.mktemp("tiny-llama")
    torch.manual_seed(0)
    cfg = LlamaConfig(
        vocab_size=TINY_WORDS,
        hidden_size=256,
        intermediate_size=512,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=64,
        max_position_embeddings=1024,
        tie_word_embeddings=True,
        bos_token_id=0,
        eos_token_id=1,
        initializer_range=0.08,  # wide logits: greedy picks far from ties
    )
    model = LlamaForCausalLM(cfg)
    save_file(
        {k: v.contiguous() for k, v in model.state_dict().items() if k != "lm_head.weight"},
        str(out / "model.safetensors"),
    )
    (out / "config.json").write_text(json.dumps({**cfg.to_dict(), "architectures": ["LlamaForCausalLM"]}))
    tok = Tokenizer(models.WordLevel({f"w{i}": i for i in range(TINY_WORDS)}, unk_token="w2"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.save(str(out / "tokenizer.json"))
    (out / "tokenizer_config.json").write_text(json.dumps({"bos_token": "w0", "eos_token": "w1"}))
    return str(out)


def _prompt(n: int, seed: int) -> list[int]:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(3, TINY_WORDS, (n,), generator=g).tolist()


DEVICES = ["cpu", pytest.param("cuda", marks=cuda)]


@pytest.mark.parametrize("device", DEVICES)
def test_tiny_llama_matches_transformers_on(device, tiny_model):
    """fp32 on `device`: logits of a prompt in one pass and in two chunks equal transformers' forward on
    the same device; greedy tokens, alone and as concurrent programs, equal the CPU engine's; every page
    comes back."""
    from transformers import AutoModelForCausalLM

    from symphony_core import Engine

    hf = AutoModelForCausalLM.from_pretrained(tiny_model, dtype=torch.float32).to(device).eval()
    eng = Engine(tiny_model, device=device, dtype=torch.float32, num_pages=128)
    ref = eng if device == "cpu" else Engine(tiny_model, device="cpu", num_pages=128)
    try:
        ids = _prompt(150, 1)
        with torch.no_grad():
            want = hf(torch.tensor([ids], device=device)).logits[0].float().cpu()
        kv = eng.kv_create()
        whole = eng.pred(kv, ids, outputs="all").logits.float().cpu()
        eng.kv_close(kv)
        kv = eng.kv_create()
        eng.pred(kv, ids[:100])
        rest = eng.pred(kv, ids[100:], outputs="all").logits.float().cpu()
        eng.kv_close(kv)
        torch.testing.assert_close(whole, want, rtol=0, atol=1e-4)
        torch.testing.assert_close(rest, want[100:], rtol=0, atol=1e-4)

        prompts = [_prompt(n, 10 + n) for n in (5, 17, 40, 64)]
        alone = [greedy(ref, p) for p in prompts]
        assert [greedy(eng, p) for p in prompts] == alone
        procs = [eng.run(greedy, p) for p in prompts]  # decoding together, one batch a step
        assert [p.result(timeout=120) for p in procs] == alone
        assert eng.kvfs.stats()["pages_used"] == 0
    finally:
        eng.shutdown()
        if ref is not eng:
            ref.shutdown()


@cuda
def test_tiny_llama_in_bf16_on_the_gpu(tiny_model):
    """The CUDA default (bf16): concurrent programs and in-program sampling run, and pages come back."""
    from symphony_core import Engine

    eng = Engine(tiny_model, device="cuda", num_pages=128)
    try:
        assert eng.dtype == torch.bfloat16
        procs = [eng.run(greedy, _prompt(n, n), 16) for n in range(3, 35)]
        assert all(len(p.result(timeout=120)) == 16 for p in procs)
        kv = eng.kv_create()
        picked = eng.pred(kv, _prompt(20, 2)).sample(temperature=0.8, seed=5)
        eng.kv_close(kv)
        assert 0 <= picked < TINY_WORDS
        assert eng.kvfs.stats()["pages_used"] == 0
    finally:
        eng.shutdown()
