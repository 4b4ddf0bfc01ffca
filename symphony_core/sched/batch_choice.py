"""Which queued calls make the next batch when they do not all fit (sched/batch_scheduler.py)."""

from __future__ import annotations

from collections.abc import Callable

from .pending import PendingPred, PromptHead


def choose_ranked(
    ready: list[PendingPred],
    budget: int,
    max_batch: int,
    rank: Callable[[PendingPred], tuple],
    ran_heads: set[PromptHead] | None,
) -> list[PendingPred]:
    """The next batch out of `ready`, within `budget` tokens and `max_batch` calls: decodes first
    (they are latency-bound and cost one token each), then by `rank` (the process scheduler's
    word); one call a file (the second must see the first's K/V).

    `ran_heads` (with the prefix cache; None without): the prompt heads that have run. Of several
    prompts that start alike and have not run yet only the first goes now; the others wait for the
    next batch, where they find its K/V in the cache instead of computing them again beside it
    (SGLang's cache-aware scheduling; the budget goes to other calls). The heads chosen are added."""
    # One sort on the pair is the same order as the stable sort by rank followed by decode-first.
    ready = sorted(ready, key=lambda p: (len(p.call.tokens) - p.done_tokens > 1, rank(p)))
    chosen: list[PendingPred] = []
    files: set[int] = set()
    heads: set[PromptHead] = set()
    for p in ready:
        if len(chosen) >= max_batch or budget <= 0:
            break
        if p.fid in files:
            continue
        head = p.prompt_head
        if ran_heads is not None and head is not None and head not in ran_heads:
            if head in heads:
                continue
            heads.add(head)
        files.add(p.fid)
        chosen.append(p)
        budget -= min(len(p.call.tokens) - p.done_tokens, budget)
    if ran_heads is not None:
        ran_heads |= heads
    return chosen
