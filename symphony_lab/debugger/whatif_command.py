"""The protocol's `what_if` command: from a recorded process's thread, at a token position, feed
another token (or decode with another sampler) in a KV fork beside the original continuation
(symphony_lab/whatif.py), and answer both continuations as JSON (`WhatIfBody`).

The what-if runs as a LIP of its own on the debugger's engine. A breakpoint or stop-on-entry
meant for the user's programs would catch it and hold the command until it times out, so while
it runs the command resumes any stop of a what-if process at once.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from symphony_core.model.sampling import Sampler

from ..whatif import WHATIF_PROCESS, thread_context, thread_tokens, what_if
from .errors import DebuggerError
from .protocol_bodies import SamplerSettings, WhatIfBody

log = logging.getLogger(__name__)

MAX_WHATIF_TOKENS = 256
SAMPLER_FIELDS = {
    "temperature": (int, float),
    "top_k": (int,),
    "top_p": (int, float),
    "min_p": (int, float),
    "seed": (int,),
}


def _int_arg(name: str, v: Any, lo: int | None = None, hi: int | None = None) -> int:
    if not isinstance(v, int) or isinstance(v, bool):
        raise DebuggerError(f"{name} must be an integer, got {v!r}")
    if (lo is not None and v < lo) or (hi is not None and v > hi):
        raise DebuggerError(f"{name} must be in [{lo}, {hi}], got {v}")
    return v


def _recording(dbg: Any, pid: int) -> Any:
    try:
        return dbg.get_recording(pid)
    except DebuggerError:
        if pid not in dbg.runtime.processes:
            raise DebuggerError(f"no process {pid}") from None
        raise DebuggerError(
            f"process {pid} was not recorded: a what-if starts from a recorded run "
            "(`record` with its pid before it runs, or launch it with record: true)"
        ) from None


def _sampler(settings: Any) -> Sampler | None:
    if settings is None:
        return None
    if not isinstance(settings, dict):
        raise DebuggerError(f"sampler must be an object like {{'temperature': 0.8, 'seed': 1}}, got {settings!r}")
    unknown = sorted(set(settings) - set(SAMPLER_FIELDS))
    if unknown:
        raise DebuggerError(f"sampler: unknown field(s) {unknown}; it takes {sorted(SAMPLER_FIELDS)}")
    for k, v in settings.items():
        if isinstance(v, bool) or not isinstance(v, SAMPLER_FIELDS[k]):
            raise DebuggerError(f"sampler {k} must be a number, got {v!r}")
    return Sampler(**settings)  # out-of-range values: PredError naming the field


def _resume_later(dbg: Any, pid: int) -> None:
    for _ in range(40):  # the stop event comes just before the thread is registered as stopped
        try:
            dbg.continue_(pid)
            return
        except DebuggerError:  # not registered as stopped yet
            time.sleep(0.05)
    log.warning("process %s could not be resumed after its what-if: it stays stopped", pid)


@contextmanager
def _what_if_never_stops(dbg: Any) -> Iterator[None]:
    def on_stop(msg: dict) -> None:
        pid = (msg.get("body") or {}).get("pid")
        proc = dbg.runtime.processes.get(pid)
        if proc is not None and proc.name == WHATIF_PROCESS:
            threading.Thread(target=_resume_later, args=(dbg, pid), daemon=True).start()

    unsubscribe = dbg.subscribe(on_stop, ["stopped"])
    try:
        yield
    finally:
        unsubscribe()


class WhatIfExplorer:
    """The debugger's what-if command: alternative continuations of a recorded run."""

    def __init__(self, dbg: Any) -> None:
        self.dbg = dbg

    def what_if(
        self,
        pid: int,
        position: int,
        tid: int = 1,
        token: int | None = None,
        text: str | None = None,
        sampler: SamplerSettings | None = None,
        max_tokens: int = 16,
        source: str | None = None,
        timeout: float = 300.0,
    ) -> WhatIfBody:
        """Run the alternative continuation at `position` of thread `tid`'s recorded token stream of
        process `pid`: with `token` (an id) or `text` (exactly one token), and/or decoded with
        `sampler`; the original continuation runs greedily beside it, both in KV forks of the prefix.
        `source` names a live KV file holding the prefix (nothing recomputed).

        Raises:
            DebuggerError: `no process <pid>`; `process <pid> was not recorded ...`; `thread <tid>
                made no pred ...`; `position must be in [1, n-1] ...`; `token id <t> is outside the
                vocabulary [0, V)`; `'<text>' is k tokens ...`; `give token or text, not both`.
        """
        pid = _int_arg("pid", pid)
        tid = _int_arg("tid", tid, lo=1)
        max_tokens = _int_arg("max_tokens", max_tokens, lo=1, hi=MAX_WHATIF_TOKENS)
        if token is not None and text is not None:
            raise DebuggerError("give token (an id) or text (one token), not both")
        if token is None and text is None and sampler is None:
            raise DebuggerError("what_if needs a token, a text or a sampler: what should the alternative change?")
        if source is not None and not isinstance(source, str):
            raise DebuggerError(f"source must be a KV file path, got {source!r}")
        rec = _recording(self.dbg, pid)
        try:
            tokens = thread_tokens(rec, tid)
        except ValueError:
            with_preds = sorted({k[0] for k in rec.order if rec.entries[k].call == "pred"})
            raise DebuggerError(
                f"thread {tid} of process {pid} made no pred in its recording (threads with preds: {with_preds})"
            ) from None
        if not isinstance(position, int) or isinstance(position, bool) or not 1 <= position < len(tokens):
            raise DebuggerError(
                f"position must be in [1, {len(tokens) - 1}] (thread {pid}.{tid}'s recorded stream has "
                f"{len(tokens)} tokens), got {position!r}"
            )
        vocab = self.dbg.tokenizer.vocab_size
        if token is not None:
            token = _int_arg("token", token)
            if not 0 <= token < vocab:
                raise DebuggerError(f"token id {token} is outside the vocabulary [0, {vocab})")
        if text is not None and not isinstance(text, str):
            raise DebuggerError(f"text must be a string, got {text!r}")
        alt: int | str = token if token is not None else text if text is not None else tokens[position]
        samp = _sampler(sampler)
        with _what_if_never_stops(self.dbg):
            try:
                w = what_if(
                    self.dbg.engine, tokens, position, alt, max_tokens, samp, source, timeout, thread_context(rec, tid)
                )
            except ValueError as e:  # a text of several tokens, a source that does not hold the prefix
                raise DebuggerError(str(e)) from None
        tt = self.dbg.tokenizer.token_text
        return {
            "pid": pid,
            "tid": tid,
            "position": w.position,
            "token": w.alternative[0],
            "original_token": tokens[position],
            "sampler": dict(sampler) if sampler is not None else None,  # type: ignore[typeddict-item]
            "original": w.original,
            "alternative": w.alternative,
            "recorded": w.recorded,
            "token_texts": {"original": [tt(t) for t in w.original], "alternative": [tt(t) for t in w.alternative]},
            "texts": dict(w.texts),
            "diverge_at": w.diverge_at,
            "reproduces_recording": w.reproduces_recording(),
            "shared_pages": list(w.shared_pages),
            "prefix_pages": w.prefix_pages,
            "files": w.files,  # type: ignore[typeddict-item]
            "recomputed_prefix": w.recomputed_prefix,
        }


__all__ = ["MAX_WHATIF_TOKENS", "WhatIfExplorer"]
