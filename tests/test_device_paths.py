"""What the engine does the same whatever device or dtype its logits and K/V are on.

Sampling takes logits of any dtype and device (a CUDA engine's are bf16 on the GPU; the samplers'
noise is drawn on the CPU), and attention on CUDA keeps to the SDPA backends that do not re-plan per
shape. The CPU half runs everywhere; the CUDA half where torch sees a GPU (docs/architecture.md, "On a GPU"),
never in CI."""

from __future__ import annotations

import pytest
import torch

from symphony_core.model.attention import CUDA_SDPA_BACKENDS, _sdpa_group
from symphony_core.model.dist import Dist
from symphony_core.model.forward_batch import ForwardBatch, SeqInput
from symphony_core.model.sampling import Sampler, sample_rows

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
