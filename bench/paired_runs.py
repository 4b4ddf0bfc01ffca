"""Off/on comparisons run in adjacent pairs (off, on, on, off, ...): the workload both overhead
benchmarks time (N concurrent greedy completions), the alternating loop, the paired ratios, and
the markdown section `python -m bench` gets from such a run."""

from __future__ import annotations

import contextlib
import io
import statistics
import time
from collections.abc import Callable

import torch

from .common import publish
from .lips import greedy

PROMPTS = [
    "The capital of France is",
    "Water boils at",
    "The three primary colours are",
    "Once upon a time",
    "A good name for a cat is",
    "The largest planet is",
    "In 1492, Columbus",
    "def fibonacci(n):",
]

Rate = tuple[float, float]  # generated tokens per wall-clock second, per CPU second of this process


def stub_forward(eng) -> None:
    """Replaces the model's forward with zeros, which leaves only host-side work: the worst case
    for a relative overhead. One buffer, sliced: no allocation per batch."""
    zeros = torch.zeros(256, eng.config.vocab_size)
    eng.model.forward = lambda fb, k, v: zeros[: fb.output_rows.shape[0]]


def concurrent_completions(engine, n_lips: int, n_tokens: int) -> Rate:
    """`n_lips` greedy completions of `n_tokens` at once, each streaming its pieces. CPU time
    is the steadier figure on a machine shared with others."""
    t0, c0 = time.perf_counter(), time.process_time()
    procs = [engine.run(greedy, PROMPTS[i % len(PROMPTS)] + f" ({i})", n_tokens, stream=True) for i in range(n_lips)]
    total = sum(len(p.result(timeout=600)) for p in procs)
    return total / (time.perf_counter() - t0), total / (time.process_time() - c0)


def alternate(repeats: int, what: str, run: Callable[[bool], Rate]) -> tuple[list[Rate], list[Rate]]:
    """`run(on)` for off and on, `repeats` times, in adjacent pairs whose order flips each time,
    so drift in a shared machine hits both sides alike; prints a line per run."""
    off: list[Rate] = []
    on: list[Rate] = []
    for r in range(repeats):
        for side in (False, True) if r % 2 == 0 else (True, False):
            tps, cps = run(side)
            (on if side else off).append((tps, cps))
            print(
                f"  run {r + 1}/{repeats} {what} {'on ' if side else 'off'}: {tps:8.1f} tok/s, {cps:8.1f} tok/CPU-s",
                flush=True,
            )
    return off, on


def summary(off: list[Rate], on: list[Rate]) -> dict:
    """Medians of each side, and the median on/off ratio within the adjacent pairs (which cancels
    the machine's drift over the run: a shared VM slows down and speeds up by 20% and more;
    the ratio of the two medians does not)."""
    return {
        "wall_off": statistics.median(x[0] for x in off),
        "wall_on": statistics.median(x[0] for x in on),
        "cpu_off": statistics.median(x[1] for x in off),
        "cpu_on": statistics.median(x[1] for x in on),
        "paired_ratio": statistics.median(b[0] / a[0] for a, b in zip(off, on)),
        "paired_ratio_cpu": statistics.median(b[1] / a[1] for a, b in zip(off, on)),
        "runs": {"off": off, "on": on},
    }


def section(
    workload: str, main: Callable[[list[str] | None], dict], argv, title: str, tail: Callable[[dict], str]
) -> str:
    """For `python -m bench`: runs `main(argv)`, publishes its numbers as `workload`'s, and returns
    `title`, the printed table, the runs in order as a list, then `tail(numbers)`."""
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        r = main(argv)
    text = buf.getvalue()
    print(text, end="")
    publish(workload, r)
    lines = text.splitlines()
    table = "\n".join(line for line in lines if not line.startswith("  run "))
    runs = "\n".join("- " + line.strip() for line in lines if line.startswith("  run "))
    return f"### {title}\n\n{table.strip()}\n\nThe runs, in order:\n\n{runs}\n\n{tail(r)}"
