"""What a batch's results mean for its calls, where the batch is not the common one (every call run
whole and given its distribution): a chunk of a long call recorded, a call finished or failed, or a
call left waiting for pages."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..errors import OutOfPages
from ..model.dist import Dist
from .pending import PendingPred

if TYPE_CHECKING:
    from ..kvfs import KVFS


def take_results(
    chosen: list[PendingPred], spans: list[tuple[int, int]] | None, results: list, vocab: int, kvfs: KVFS
) -> tuple[list[tuple], list[tuple[PendingPred, Dist | BaseException]], int, int]:
    """Each member's outcome (`spans[k]`: the tokens a..b of `chosen[k]` this batch ran; None: all of
    each). Returns (the batch record's member tuples, finished calls with their result, tokens run, errors)."""
    members: list[tuple] = []
    finished: list[tuple[PendingPred, Dist | BaseException]] = []
    tokens = errors = 0
    for k, (p, r) in enumerate(zip(chosen, results)):
        c = p.call
        total = len(c.tokens)
        a, b = spans[k] if spans is not None else (0, total)
        if isinstance(r, OutOfPages):
            if not p.waiting_pages:
                p.mark_waiting_pages(True)
            continue
        if p.waiting_pages:
            p.mark_waiting_pages(False)
        members.append(
            p.member
            if a == 0 and b == total
            else (p.pid, p.tid, p.user, p.fid, b - a, "decode" if total == 1 else "prefill", (a, b, total))
        )
        tokens += b - a
        if isinstance(r, BaseException):
            errors += 1
            if a > 0:  # undo the chunks already written: a failed pred changes nothing
                kvfs.cut_back(c.kv, p.start_len)
            finished.append((p, r))
            continue
        p.done_tokens = b
        if a == 0 and b == total:  # the whole call ran in one piece
            finished.append((p, r))
            continue
        rows = r.logits if r.logits.dim() == 2 else r.logits[None]
        if rows.shape[0]:
            p.logits.append(rows)
            if r.token is not None:
                p.picks.extend(r.token if isinstance(r.token, list) else [r.token])
        if b == total:
            finished.append((p, p.assemble(vocab)))
    return members, finished, tokens, errors
