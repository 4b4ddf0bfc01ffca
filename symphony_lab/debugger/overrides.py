"""Overrides: change what a stopped `pred` hands its LIP — force a token, ban tokens, add biases.

`edit_dist` makes the edited `Dist`; the `Overrides` part of `Debugger` applies it to a stop
(at once after a pred, or when the pred returns for a stop before it). It is composed through
an explicit interface: given the stop table (to find a stop and describe it) and where to
emit events; it keeps the edits waiting for a pred to return, which the kernel hook takes
(`take_pending`). The Debugger's `override` / `edit_dist` commands hand on to it. The LIP continues from
the edited distribution, and its KV cache holds only what the LIP then feeds it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import torch

from symphony_core.model.dist import Dist

from .errors import DebuggerError
from .stop_table import StopTable


def edit_dist(
    d: Dist,
    *,
    force: int | None = None,
    ban: list[int] | None = None,
    bias: dict | None = None,
    position: int = -1,
    token_only: bool = False,
) -> Dist:
    """A new Dist with the edit applied to one position (the last by default).

    `force=t`: every other token gets -inf, so argmax, any sampler and the engine's pick all
    give t. `ban`: those tokens get -inf (an engine pick among them is replaced by the most
    likely token left). `bias`: added to the logits of those tokens. `token_only`: keep the
    logits and replace only the engine's pick (`Dist.token`) with `force`.
    """
    vocab = d.vocab_size
    for t in ([force] if force is not None else []) + list(ban or []) + [int(k) for k in (bias or {})]:
        if not isinstance(t, int) or isinstance(t, bool) or not 0 <= t < vocab:
            raise DebuggerError(f"token {t!r} is outside the vocabulary [0, {vocab})")
    logits = d.logits.clone()
    multi = logits.dim() == 2
    if multi and not -logits.shape[0] <= position < logits.shape[0]:
        raise DebuggerError(f"position {position} outside this Dist's {logits.shape[0]} positions")
    row = logits[position] if multi else logits
    token = list(d.token) if isinstance(d.token, list) else d.token
    cur = (token[position] if isinstance(token, list) else token) if token is not None else None
    if token_only:
        if force is None:
            raise DebuggerError("token_only needs force=<token>")
        if cur is None:
            raise DebuggerError(
                "this pred did not sample in the engine (no Dist.token); override the "
                "distribution instead (token_only=False)"
            )
        cur = force
    else:
        if bias:
            for t, b in bias.items():
                row[int(t)] += float(b)
        if ban:
            row[torch.as_tensor(list(ban), dtype=torch.long)] = float("-inf")
            if not bool(torch.isfinite(row).any()):
                raise DebuggerError("the ban leaves no token with a finite logit")
        if force is not None:
            if ban and force in ban:
                raise DebuggerError(f"token {force} is both forced and banned")
            keep = float(row[force])
            row.fill_(float("-inf"))
            row[force] = keep if keep != float("-inf") else 0.0
        if cur is not None:
            if force is not None:
                cur = force
            elif not bool(torch.isfinite(row[cur])):
                cur = int(row.argmax())
    if token is not None:
        if isinstance(token, list):
            token[position] = cur
        else:
            token = cur
    return Dist(logits, token)


class Overrides:
    def __init__(self, stop_table: StopTable, emit: Callable[[str, dict], None]) -> None:
        self.tokenizer = stop_table.tokenizer
        self.stop_table = stop_table
        self._emit = emit
        self._lock = threading.Lock()
        self._pending: dict[Any, tuple[int, dict]] = {}  # LIPThread -> (seq, edit) from a before-stop

    @property
    def pending(self) -> bool:
        return bool(self._pending)

    def take_pending(self, th) -> tuple[int, dict] | None:
        """The edit waiting for `th`'s pred to return (seq, edit), taken."""
        with self._lock:
            return self._pending.pop(th, None)

    def clear(self) -> None:
        with self._lock:
            self._pending.clear()

    def override(
        self,
        pid: int | None = None,
        tid: int | None = None,
        token: int | None = None,
        text: str | None = None,
        token_only: bool = False,
        position: int = -1,
    ) -> dict:
        """Make the stopped thread's `pred` result choose `token` (or the one token of `text`).

        Raises:
            DebuggerError: `override needs exactly one of token= or text=`; `override text <t>
                is <n> tokens [...]; give one token`; `token <t> is outside the vocabulary [0,
                <V>)`; `nothing to override at a stop before <call>; step to a pred`.


        At a stop after the pred: the Dist the LIP is about to receive is replaced. At a stop
        before a pred: the edit is applied when that pred returns.
        """
        if (token is None) == (text is None):
            raise DebuggerError("override needs exactly one of token= or text=")
        if text is not None:
            ids = self.tokenizer.tokenize(text)
            if len(ids) != 1:
                pieces = [self.tokenizer.token_text(t) for t in ids]
                raise DebuggerError(f"override text {text!r} is {len(ids)} tokens {pieces}; give one token")
            token = ids[0]
        return self._edit(pid, tid, {"force": int(token), "token_only": token_only, "position": position})

    def edit_dist(
        self,
        pid: int | None = None,
        tid: int | None = None,
        ban: list[int] | None = None,
        force: int | None = None,
        bias: dict | None = None,
        position: int = -1,
    ) -> dict:
        """Edit the distribution before the LIP sees it: ban tokens, force one, or add biases."""
        if ban is None and force is None and not bias:
            raise DebuggerError("edit_dist needs ban=, force= or bias=")
        return self._edit(
            pid,
            tid,
            {
                "force": force,
                "ban": list(ban) if ban else None,
                "bias": {int(k): float(v) for k, v in (bias or {}).items()} or None,
                "position": position,
            },
        )

    def _edit(self, pid, tid, edit: dict) -> dict:
        s = self.stop_table.find(pid, tid)
        if s.where == "after":
            if not isinstance(s.result, Dist):
                raise DebuggerError(f"{s.call} returned no distribution to edit")
            s.edited(edit_dist(s.result, **edit), edit)
            info = self.stop_table.info(s)
            self._emit(
                "overridden", {"pid": s.pid, "tid": s.tid, "stop_id": s.id, "edit": edit, "result": info["result"]}
            )
            return {"applied": True, "stop": info}
        if s.where == "before" and s.call == "pred":
            with self._lock:
                self._pending[s.thread] = (s.seq, edit)
            s.edits.append(edit)
            return {"applied": False, "pending": True, "edit": edit}
        raise DebuggerError(f"nothing to override at a stop {s.where} {s.call or 'entry'}; step to a pred")


__all__ = ["Overrides", "edit_dist"]
