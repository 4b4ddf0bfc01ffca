"""Fair share of a batch's time between users: a prompt that shares a batch with another user's
decodes (or short calls) runs in chunks of at most SHARED_CHUNK tokens.

A batch lasts as long as its biggest piece of work. Cut into `token_budget` (512) token chunks,
one user's long prompt made every other user's decode step wait for 512 tokens of it, step after
step, until the prompt was done. With other users decoding beside it, the prompt now advances
SHARED_CHUNK tokens per batch, and their steps stay short; alone (or beside only its own
user's decodes) it still takes the whole budget.
"""

from __future__ import annotations

from operator import attrgetter

from .pending import PendingPred

SHARED_CHUNK = 64


def chunk_caps(calls: list[PendingPred], cap: int | None) -> dict[str, int]:
    """user -> the most prompt tokens a call of theirs may run in this batch: `cap` for each user
    whose prompt would share the batch with another user's call of at most `cap` tokens (a decode,
    a short prompt); {} when nothing is capped."""
    if cap is None or len(calls) < 2:
        return {}
    short = {p.user for p in calls if p.n_tokens - p.done_tokens <= cap}  # decodes, short prompts
    if not short:
        return {}
    return {p.user: cap for p in calls if p.n_tokens - p.done_tokens > cap and (len(short) > 1 or p.user not in short)}


def runs_whole(ready: list[PendingPred], budget: int, cap: int | None) -> bool:
    """Every call of `ready` can run whole in one batch: one call per file, all within the token
    budget, and no prompt to cut for another user's decodes."""
    if len(set(map(attrgetter("fid"), ready))) != len(ready):
        return False
    rest = sum(map(attrgetter("n_tokens"), ready)) - sum(map(attrgetter("done_tokens"), ready))
    if rest > budget:
        return False
    # A prompt of more than `cap` tokens makes rest >= cap + len(ready): most decode batches stop here.
    return cap is None or rest - len(ready) < cap or not chunk_caps(ready, cap)
