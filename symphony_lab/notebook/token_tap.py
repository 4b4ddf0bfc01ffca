"""The notebook's token tap: the top-k of each `pred` of the processes a notebook run watches."""

from __future__ import annotations

import logging
from typing import Any

log = logging.getLogger(__name__)

DEFAULT_TOPK = 5


class TokenTap:
    """A kernel hook chained under the debugger: the top-k of each `pred` of a watched process.

    It runs in the LIP's thread right after the engine answers (before any override), keeps
    the probabilities until the call's exit event says which token the LIP got, then drops them.
    """

    def __init__(self, k: int = DEFAULT_TOPK) -> None:
        self.k = k
        self.watch: set[int] = set()
        self.pending: dict[tuple, tuple] = {}
        self.failed = 0  # preds whose top-k could not be read (the first is logged)

    def before(self, th, ev) -> None:  # noqa: D401 - DebugHook protocol
        return None

    def after(self, th, ev, result: Any) -> Any:
        if ev.call == "pred" and th.proc.pid in self.watch:
            try:
                import torch

                logits = getattr(result, "logits", None)
                if logits is not None:
                    row = logits if logits.dim() == 1 else logits[-1]
                    probs = torch.softmax(row.float(), -1)
                    top = probs.topk(min(self.k, probs.numel()))
                    self.pending[(th.proc.pid, th.tid, ev.seq)] = (probs, top.indices.tolist(), top.values.tolist())
            except Exception:  # in the LIP's own thread: the tap failing must not fail the pred
                self.failed += 1
                if self.failed == 1:
                    log.warning("the token tap could not read a pred's top-k (pid %s)", th.proc.pid, exc_info=True)
        return result


__all__ = ["DEFAULT_TOPK", "TokenTap"]
