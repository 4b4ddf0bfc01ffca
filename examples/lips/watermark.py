"""Watermarking (Kirchenbauer et al., 2023): a green/red list keyed on the previous token, and its detector.

At every step the vocabulary is split by a keyed pseudo-random permutation seeded with the
previous token: a fraction `gamma` is *green*. The LIP adds `delta` to the green logits before
sampling — a logits processor on `Dist.logits`, no engine change needed. The text reads
normally, but it holds far more green tokens than chance.

The detector needs only the key and the tokens: with T scored tokens of which G are green,
z = (G − γT) / sqrt(T γ (1 − γ)). Unwatermarked text gives z ≈ N(0, 1); watermarked text gives
z ≫ 4 after a couple of hundred tokens. Repeated (previous, token) pairs are scored once, so a
text that loops cannot push z either way by repeating itself.

    python examples/lips/watermark.py --tokens 200
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Sequence
from functools import lru_cache

import torch

from symphony_core.lib import SamplingParams, generate

GAMMA = 0.25
DELTA = 2.0
KEY = 15485863


@lru_cache(maxsize=4096)
def _green_ids(key: int, prev: int, vocab_size: int, gamma: float) -> torch.Tensor:
    g = torch.Generator().manual_seed((key * 2654435761 + prev * 40503 + 1) % (2**63 - 1))
    return torch.randperm(vocab_size, generator=g)[: int(gamma * vocab_size)]


def green_mask(prev: int, vocab_size: int, key: int = KEY, gamma: float = GAMMA) -> torch.Tensor:
    """The green list after token `prev`, as a bool tensor [vocab_size]."""
    m = torch.zeros(vocab_size, dtype=torch.bool)
    m[_green_ids(key, int(prev), vocab_size, gamma)] = True
    return m


def is_green(prev: int, tok: int, vocab_size: int, key: int = KEY, gamma: float = GAMMA) -> bool:
    return bool((_green_ids(key, int(prev), vocab_size, gamma) == int(tok)).any())


def watermark_processor(vocab_size: int, key: int = KEY, gamma: float = GAMMA, delta: float = DELTA):
    """A logits processor for `lib.generate`: +delta on the green list of the previous token."""

    def process(logits: torch.Tensor, history: Sequence[int]) -> torch.Tensor:
        if not history:
            return logits
        bias = green_mask(history[-1], logits.shape[-1], key, gamma).to(logits.dtype) * delta
        return logits + bias.to(logits.device)

    return process


def detect(tokens: Sequence[int], prev: int, vocab_size: int, key: int = KEY, gamma: float = GAMMA,
           ignore_repeats: bool = True) -> dict:
    """z-score of `tokens` (preceded by token `prev`) against the green lists of `key`."""
    seen = set()
    green = total = 0
    for p, t in zip([prev] + list(tokens[:-1]), tokens):
        if ignore_repeats:
            if (p, t) in seen:
                continue
            seen.add((p, t))
        total += 1
        green += is_green(p, t, vocab_size, key, gamma)
    z = (green - gamma * total) / math.sqrt(total * gamma * (1 - gamma)) if total else 0.0
    return {"z": z, "green": green, "scored": total, "length": len(tokens)}


def write(sym, prompt: str, max_tokens: int, watermark: bool, temperature: float, seed: int,
          key: int = KEY, delta: float = DELTA) -> dict:
    """One text, with or without the watermark (all else equal); never stops early at EOS."""
    toks = sym.tokenize(prompt)
    processors = [watermark_processor(sym.vocab_size, key, GAMMA, delta)] if watermark else []
    kv = sym.kv_create()
    g = generate(sym, kv, toks, max_tokens, stop_tokens=[],
                 sampling=SamplingParams(temperature=temperature, seed=seed, processors=processors))
    sym.kv_close(kv)
    return {"tokens": g.tokens, "text": g.text, "prev": toks[-1], "watermarked": watermark,
            "temperature": temperature}


def watermark_demo(sym, prompt: str, max_tokens: int = 200, seed: int = 0, key: int = KEY,
                   temperature: float = 0.7) -> list[dict]:
    """Three texts side by side (one thread each, batched): watermarked (sampled), plain
    sampled with the same seed, and plain greedy; each with its detector score."""
    runs = [(True, temperature), (False, temperature), (False, 0.0)]
    threads = [sym.spawn(write, prompt, max_tokens, wm, temp, seed, key) for wm, temp in runs]
    out = [t.join() for t in threads]
    for r in out:
        r.update(detect(r["tokens"], r["prev"], sym.vocab_size, key))
    return out


def main(argv: list[str] | None = None) -> None:
    from symphony_core import Engine

    ap = argparse.ArgumentParser(description="green/red-list watermark and its detector")
    ap.add_argument("--prompt", default="Write a short story about a lighthouse keeper.\n\n")
    ap.add_argument("--tokens", type=int, default=200)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    eng = Engine()
    for r in eng.run(watermark_demo, args.prompt, args.tokens, args.seed).result():
        kind = "watermarked" if r["watermarked"] else ("plain, sampled" if r["temperature"] else "plain, greedy")
        print(f"--- {kind}: z = {r['z']:+.2f} ({r['green']}/{r['scored']} green)")
        print(r["text"][:300].strip() + (" …" if len(r["text"]) > 300 else ""))
    eng.shutdown()


if __name__ == "__main__":
    main()
