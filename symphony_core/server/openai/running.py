"""Launching the built-in LIP for a request and following it: to its outcome (a JSON response) or
message by message (server-sent events). A client that goes away cancels what it started.

`failure` is the one place a failed generation becomes an HTTP status and error body.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, StreamingResponse

from ...errors import SymphonyError
from ...lib.grammar import Grammar
from ..records import ProcessRecord
from ..validate import BadRequest
from .generation import Outcome, openai_generate
from .params import GenerationParams
from .store import ResponseStore
from .text import TextCodec

SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


@dataclass
class Api:
    """What the endpoints need from the server: its state, and how it authenticates and launches
    (given by the caller, so this package never imports the app module that mounts it)."""

    state: Any
    authenticate: Callable[[Any, Request], Any]
    launch_builtin: Callable[..., ProcessRecord]
    codec: TextCodec = field(init=False)
    responses: ResponseStore = field(init=False)

    def __post_init__(self) -> None:
        self.codec = TextCodec(self.state.engine.tokenizer.fast)
        self.responses = ResponseStore(self._remove_kv)

    def _remove_kv(self, user: str, path: str) -> None:
        eng = self.state.engine
        with contextlib.suppress(SymphonyError):
            eng.runtime.kv_remove(user, path)

    def served_name(self) -> str:
        """The model's name in replies and `/v1/models` (`--served-model-name`, else the model's)."""
        return getattr(self.state.config, "served_model_name", None) or self.state.engine.model_name

    def max_model_len(self) -> int:
        """Prompt + reply tokens one request may use: --max-model-len, at most the model's context."""
        ctx = self.state.engine.config.max_positions
        return min(self.state.config.max_model_len or ctx, ctx)

    def model_names(self) -> set[str]:
        return {self.served_name(), self.state.engine.model_name, "symphony", "default"}

    def launch(
        self,
        user,
        prompt: str,
        params: GenerationParams,
        grammar: Grammar | None,
        stream: bool,
        endpoint: str,
        arrived: float,
        end_user: str | None = None,
        **extra: Any,
    ) -> ProcessRecord:
        where = "prompt" if endpoint == "completion" else "messages"
        if not prompt:
            raise BadRequest(400, "the prompt is empty", param=where)
        limit = self.max_model_len()
        n_prompt = len(self.state.engine.tokenize(prompt))
        if n_prompt + params.max_tokens > limit:
            raise BadRequest(
                400,
                f"this model's maximum context length is {limit} tokens; the request asks for "
                f"{n_prompt + params.max_tokens} ({n_prompt} in the prompt, up to {params.max_tokens} in the reply)",
                param=where,
                code="context_length_exceeded",
            )
        timer = self.state.metrics.request_timer(endpoint, arrived)
        kw = {"prompt": prompt, "params": params, "grammar": grammar, "stream": stream, "timer": timer}
        kw.update(codec=self.codec, **extra)
        # the request's `user` / `safety_identifier` names the process (GET /v1/processes shows it)
        name = f"openai.{endpoint}" + (f" for {end_user[:64]}" if end_user else "")
        rec = self.launch_builtin(self.state, user, openai_generate, kw, name)
        timer.proc = rec.proc
        return rec


def failure(out: dict) -> tuple[int, dict]:
    """The status and OpenAI `{"error": ...}` body for a generation that ended in an error: the
    client's mistakes and quotas are 4xx (a prompt past the context 400, a quota 429), the rest 500."""
    err = out["error"]
    etype, msg = err.get("type"), err.get("message", "")
    if etype == "PredError" and "past the model's context" in msg:
        status, typ, code = 400, "invalid_request_error", "context_length_exceeded"
    elif etype in ("LimitExceeded", "QuotaExceeded", "OutOfPages"):
        status, typ, code = 429, "insufficient_quota" if "quota" in msg else "rate_limit_exceeded", etype
    elif etype in ("PredError", "KVError", "ValueError", "TypeError"):
        status, typ, code = 400, "invalid_request_error", etype
    else:
        status, typ, code = 500, "server_error", None
    return status, {"error": {"message": msg, "type": typ, "param": None, "code": code}}


async def _until(rec: ProcessRecord, first_message: bool) -> None:
    """Wait until the generation ends (or, with `first_message`, sends its first piece); a client
    that goes away meanwhile cancels it."""
    try:
        while not rec.done and not (first_message and rec.sent()):
            await rec.changed(5.0)
    except BaseException:
        if not rec.proc.done:
            rec.proc.cancel("the client went away")
        raise


async def early_failure(rec: ProcessRecord) -> JSONResponse | None:
    """Before a stream answers 200: a prompt past the context or a quota fails before the first
    piece, and gets its 4xx as a plain JSON response instead of an error event."""
    await _until(rec, first_message=True)
    out = rec.outcome() if rec.done else {}
    if "error" in out:
        status, body = failure(out)
        return JSONResponse(body, status_code=status)
    return None


async def outcome(rec: ProcessRecord) -> Outcome | JSONResponse:
    """Wait for the generation; its result, or the error response."""
    await _until(rec, first_message=False)
    out = rec.outcome()
    if "error" in out:
        status, body = failure(out)
        return JSONResponse(body, status_code=status)
    return out["result"]


async def lip_messages(rec: ProcessRecord) -> AsyncIterator[dict]:
    """The LIP's messages as they come; an error ends the stream with `{"kind": "error", ...}`."""
    i = 0
    finished = False
    try:
        while True:
            done = rec.done
            msgs, i = rec.messages_since(i)
            for m in msgs:
                yield m
            if done:
                out = rec.outcome()
                if "error" in out:
                    yield {"kind": "error", "body": failure(out)[1]}
                finished = True
                return
            await rec.changed(5.0)
    finally:
        if not finished and not rec.proc.done:  # the client went away
            rec.proc.cancel("the client closed the stream")


def sse(events: AsyncIterator[str]) -> StreamingResponse:
    return StreamingResponse(events, media_type="text/event-stream", headers=SSE_HEADERS)


def data_line(obj: Any, event: str | None = None) -> str:
    head = f"event: {event}\n" if event else ""
    return f"{head}data: {json.dumps(obj)}\n\n"


def now_s() -> int:
    return int(time.time())
