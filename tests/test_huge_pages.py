"""huge_pages.py: the weights are copied, value for value, into one huge-page mapping where Linux offers it."""

from __future__ import annotations

import gc

import pytest
import torch

from symphony_core.model import huge_pages
from symphony_core.model.huge_pages import HUGE_PAGE, into_huge_pages, thp_mode


@pytest.fixture
def thp(tmp_path, monkeypatch):
    """Point the module at a settings file of our own: set(mode) writes the kernel's format."""
    path = tmp_path / "enabled"
    monkeypatch.setattr(huge_pages, "THP_SETTING", path)
    monkeypatch.setattr(huge_pages.sys, "platform", "linux")

    def set_mode(mode: str) -> None:
        path.write_text(" ".join(f"[{m}]" if m == mode else m for m in ("always", "madvise", "never")) + "\n")

    return set_mode


def test_the_mode_is_read_from_the_kernels_setting(thp, tmp_path):
    for mode in ("always", "madvise", "never"):
        thp(mode)
        assert thp_mode() == mode
    (tmp_path / "enabled").unlink()
    assert thp_mode() == ""  # no such file: no transparent huge pages


@pytest.mark.parametrize("mode", ["madvise", "always"])
def test_tensors_are_copied_exactly_into_one_aligned_mapping(thp, mode):
    thp(mode)
    torch.manual_seed(0)
    src = [
        torch.randn(300, 576),
        torch.randint(-127, 128, (7, 33), dtype=torch.int8),  # an odd size: the next one stays aligned
        torch.randint(0, 256, (5, 16), dtype=torch.uint8),
        torch.randn(3),
    ]
    out = into_huge_pages(src)
    assert [t.shape for t in out] == [t.shape for t in src] and [t.dtype for t in out] == [t.dtype for t in src]
    assert all(torch.equal(a, b) for a, b in zip(src, out))
    assert all(a.data_ptr() != b.data_ptr() for a, b in zip(src, out))  # copies, not the inputs
    assert len({t.untyped_storage().data_ptr() for t in out}) == 1  # one mapping
    assert out[0].data_ptr() % HUGE_PAGE == 0 and all(t.data_ptr() % 64 == 0 for t in out)
    assert all(t.is_contiguous() for t in out)
    out[0].add_(1)  # writable, and no longer tied to the source
    assert torch.equal(out[0], src[0] + 1)
    expected = out[3].clone()
    del src
    gc.collect()  # nothing but the returned views refers to the mapping now: they keep it alive
    assert torch.equal(out[3], expected)


def test_without_huge_pages_the_tensors_come_back_as_they_are(thp):
    thp("never")
    src = [torch.randn(4, 4)]
    assert into_huge_pages(src)[0] is src[0]
    thp("madvise")
    assert into_huge_pages([]) == []


def test_the_engines_weights_stream_from_one_mapping(engine):
    """The fp32 model's embedding, LM head and every projection: one mapping where the kernel offers huge pages."""
    from symphony_core.model.weight_formats import fp32_weight

    if thp_mode() not in ("always", "madvise"):
        pytest.skip(f"this kernel offers no transparent huge pages ({thp_mode() or 'no setting'})")
    m = engine.model
    tensors = [m.embed, fp32_weight(m.lm_head)] + [
        fp32_weight(getattr(layer, a)) for layer in m.layers for a in ("wqkv", "wo", "w_gate_up", "w_down")
    ]
    assert len({t.untyped_storage().data_ptr() for t in tensors}) == 1
    if engine.config.tie_embeddings:
        assert fp32_weight(m.lm_head) is m.embed
