"""What the quantised weight formats cost in quality: greedy agreement with fp32 and perplexity.

For each format (`Engine(weights=...)`): the held prompts below decoded greedily for 128 tokens
(in batches of QUANTISED_MAX_ROWS, the widest each format's own quantised kernel takes), compared with fp32 token for token — prompts
whose first 8 tokens match, prompts whose 128 match, and the mean length of the matching
prefix — and the perplexity of a fixed text (this file's PPL_TEXT) under the model.

    python -m bench.quality [--quick] [--new 128]
"""

from __future__ import annotations

import argparse
import math

import torch

from symphony_core.model.weight_formats import QUANTISED_MAX_ROWS

from .common import publish
from .decode import run_ours
from .machine import describe

HELD_PROMPTS = [
    "The capital of France is",
    "Water boils at a temperature of",
    "Write a haiku about the sea.",
    "def fibonacci(n):\n    ",
    "Once upon a time, in a small village,",
    "The three primary colours are",
    "To make a cup of tea, first",
    "Photosynthesis is the process by which",
    "List three benefits of regular exercise:",
    "The largest planet in our solar system is",
    "import numpy as np\n\n# compute the mean of an array\n",
    "Dear hiring manager, I am writing to apply for",
    "The French Revolution began in",
    "A good way to learn a new language is",
    "Explain what a black hole is in one sentence.",
    "The main ingredients of a pizza are",
]

PPL_TEXT = (
    "The river rises in the hills above the town and runs for forty miles before it reaches the sea. "
    "In spring the snow melts and the water comes down brown and fast, carrying branches and sometimes "
    "whole trees; in late summer it shrinks to a chain of quiet pools where children swim and old men "
    "fish for trout. The town grew up around a ford where the road from the north crossed the river, "
    "and for centuries the ford was the only way across. A wooden bridge was built in the seventeenth "
    "century and washed away twice; the stone bridge that stands today was finished in 1821, paid for "
    "by a toll that the townspeople resented for fifty years. Mills once lined both banks. They ground "
    "corn, then wove wool, and later made paper, until the last of them closed after the war. Today "
    "most of the mill buildings are flats or offices, and the weirs that fed their wheels are used by "
    "canoeists who practise in the white water below them. Every July the town holds a regatta, and "
    "the whole population seems to gather on the banks to watch the races, eat, and argue about the "
    "results. Scientists who study the river say that its water is cleaner now than at any time in "
    "the last two hundred years. Salmon, which vanished in the age of the mills, have returned, and "
    "otters are seen again near the bridge. The challenge for the future, they say, is to keep it "
    "that way as the town grows and the summers become hotter and drier."
)


def perplexity(eng, text: str, chunk: int) -> float:
    """Fed `chunk` tokens per forward, so a quantised engine runs its weight-only kernels (a whole
    text in one forward would take the fp32 tier: weight_formats.INT*_MAX_ROWS)."""
    ids = eng.tokenize(text)[: eng.config.max_positions]  # a tiny model's context may be shorter than the text
    kv = eng.kv_create()
    try:
        logits = [eng.pred(kv, ids[i : i + chunk], outputs="all").logits for i in range(0, len(ids), chunk)]
        logp = torch.log_softmax(torch.cat([x.reshape(-1, x.shape[-1]) for x in logits]).float(), dim=-1)
        nll = -logp[:-1].gather(1, torch.tensor(ids[1:])[:, None]).mean().item()
    finally:
        eng.kv_close(kv)
    return math.exp(nll)


# prompts decoded together (and tokens per forward for the perplexity): the widest batch the
# quantised kernels take, so this measures them and not the fp32 tier wider batches switch to
GROUP = QUANTISED_MAX_ROWS


def _common_prefix(a: list[int], b: list[int]) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def _wide_tier(eng) -> str:
    """The kernel a wide batch runs: "fp32" or "bf16" (weight_formats.py picks per machine for q8 and q4)."""
    from symphony_core.model.quant import Bf16Linear, RowsSwitchLinear

    head = eng.model.lm_head
    return "bf16" if isinstance(head, RowsSwitchLinear) and isinstance(head.pick(1 << 20), Bf16Linear) else "fp32"


def measure(formats: list[str], prompts: list[str], new: int, model: str | None = None) -> list[dict]:
    from symphony_core import Engine
    from symphony_core.model.registry import DEFAULT_MODEL

    rows, ref = [], None
    for fmt in formats:
        # the prefix cache off: every format computes every prompt itself
        pages = max(256, len(prompts) * (new + 64) // 16 + 64)
        eng = Engine(model or DEFAULT_MODEL, num_pages=pages, weights=fmt, prefix_cache=False)
        ids = [eng.tokenize(p) for p in prompts]
        outs = [o for i in range(0, len(ids), GROUP) for o in run_ours(eng, ids[i : i + GROUP], new)[2]]
        ppl = perplexity(eng, PPL_TEXT, GROUP)
        ppl_wide = perplexity(eng, PPL_TEXT, eng.config.max_positions)  # one forward: the wide tier
        if ref is None:
            ref = outs
        n = len(prompts)
        rows.append(
            {
                "weights": fmt,
                "first8": sum(a[:8] == b[:8] for a, b in zip(outs, ref)),
                "all": sum(a == b for a, b in zip(outs, ref)),
                "prefix": sum(_common_prefix(a, b) for a, b in zip(outs, ref)) / n,
                "prompts": n,
                "ppl": ppl,
                "ppl_wide": ppl_wide,
                "wide_tier": _wide_tier(eng),
                "example": eng.detokenize(outs[0][:24]),
            }
        )
        eng.shutdown()
        del eng
    return rows


def family_rows(prompts: list[str], new: int, families: list[str]) -> list[dict]:
    """The same measures on a tiny random-weight model of each family (random_models.py): that every format runs
    each family's shapes, and how far a random model's greedy path survives rounding (it has no structure for
    the rounding to keep, so agreement here is a floor, not what a trained model of the family shows)."""
    import tempfile

    from symphony_core.model.random_models import make_random_model

    out = []
    with tempfile.TemporaryDirectory() as tmp:
        for fam in families:
            path = make_random_model(fam, f"{tmp}/{fam}")
            out += [{"family": fam, **r} for r in measure(["fp32", "q8", "q4"], prompts, new, str(path))]
    return out


def main(argv=None) -> str:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="4 prompts, 8 tokens")
    ap.add_argument("--new", type=int, default=128)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    prompts, new = (HELD_PROMPTS[:4], 8) if args.quick else (HELD_PROMPTS, args.new)
    rows = measure(["fp32", "q8", "q4"], prompts, new)
    from symphony_core.model.random_models import FAMILIES

    fam_rows = family_rows(prompts, new, list(FAMILIES[:1] if args.quick else FAMILIES))
    publish(__name__, {"rows": rows, "new": new, "families": fam_rows})
    lines = [
        f"### Quality of the weight formats: greedy agreement with fp32 over {len(prompts)} held prompts "
        f"({new} tokens, in batches of {GROUP}), perplexity of a fixed {len(PPL_TEXT.split())}-word text "
        f"fed {GROUP} tokens per forward",
        "",
        f"Machine: {describe()}",
        "",
        "| weights | same first 8 tokens | same all tokens | mean matching prefix (tokens) | perplexity "
        "| perplexity, the text in one forward (wide tier) |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r['weights']} | {r['first8']}/{r['prompts']} | {r['all']}/{r['prompts']} | "
            f"{r['prefix']:.1f} of {new} | {r['ppl']:.3f} | {r['ppl_wide']:.3f} ({r['wide_tier']}) |"
        )
    lines += [
        "",
        "fp32 is the reference (the GGUF's Q4_1 weights dequantised exactly). q4 runs those same Q4_1 "
        "blocks, per-row int8 at more rows, then the wide tier (KERNEL_MAX_ROWS in "
        "symphony_core/model/weight_formats.py; where int8 stops is measured per machine, kernel_tiers.py), "
        "so the batch size picks the kernel; q8 is per-row int8, then the wide tier. The wide tier is fp32, or "
        "bf16 (weights and activations rounded to bf16, fp32 sums) where the CPU multiplies bf16 natively and it "
        "measured faster there. The compiled kernels (cpu_kernels/) round the activations to int16 in groups of "
        "32, torch's fallback to bf16 with bf16 scales. Decode batches and perplexity chunks here are "
        f"{GROUP} wide, so the quantised kernels are what is measured; each prompt is prefilled whole, and "
        "the last column feeds the whole text in one forward, so those run the wide tier. The LM head runs on the "
        "output rows only. Examples (first prompt): " + "; ".join(f"{r['weights']}: {r['example']!r}" for r in rows),
    ]
    lines += [
        "",
        "Each family, on a tiny random-weight model with its quirks on (symphony_core/model/random_models.py), the "
        "same prompts and text; a random model has no structure for the rounding to keep, so these agreements are "
        "a floor:",
        "",
        "| family | weights | same first 8 tokens | same all tokens | mean matching prefix | perplexity |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for r in fam_rows:
        lines.append(
            f"| {r['family']} | {r['weights']} | {r['first8']}/{r['prompts']} | {r['all']}/{r['prompts']} | "
            f"{r['prefix']:.1f} of {new} | {r['ppl']:.1f} |"
        )
    md = "\n".join(lines)
    print(md)
    return md


if __name__ == "__main__":
    main()
