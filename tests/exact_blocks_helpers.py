"""A switch for tests that compare an fp32 engine's decode from exact GGUF blocks with its dense kernels."""

from __future__ import annotations

import contextlib

from symphony_core.model.exact_blocks import BlocksLinear
from symphony_core.model.weight_formats import PARTS


@contextlib.contextmanager
def dense_only(model):
    """`model` (an fp32 engine's) without its blocks tiers for the duration: the dense kernels at every row."""
    lins = [getattr(layer, a) for layer in model.layers for a in PARTS] + [model.lm_head]
    saved = [lin.tiers for lin in lins]
    try:
        for lin in lins:
            if isinstance(lin.tiers[0][1], BlocksLinear):
                lin.tiers = lin.tiers[1:]
        model.fused.clear()
        yield
    finally:
        for lin, tiers in zip(lins, saved):
            lin.tiers = tiers
        model.fused.clear()
