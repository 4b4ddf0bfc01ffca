"""OpenAI-compatible `/v1/completions`, `/v1/chat/completions` and `/v1/models`.

Each request launches a built-in LIP (builtin_lips.py) as the API token's user; its `sym.send`
pieces become server-sent events (`stream: true`) or are joined into one response. Parameters
Symphony does not implement (n > 1, logprobs, penalties ≠ 0, …) are refused with a 4xx that
names them, rather than silently ignored.
"""

from __future__ import annotations

import json
import time
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from .auth import authenticate
from .builtin_lips import chat_complete, complete_text
from .launch import launch_builtin
from .validate import BadRequest, check_fields, read_json

_NUM = (int, float)
_COMMON = {
    "model": ((str,), True), "max_tokens": ((int, type(None)), False), "temperature": (_NUM + (type(None),), False),
    "top_p": (_NUM + (type(None),), False), "n": ((int, type(None)), False), "stream": ((bool, type(None)), False),
    "stream_options": ((dict, type(None)), False), "stop": ((str, list, type(None)), False),
    "seed": ((int, type(None)), False), "user": ((str,), False), "presence_penalty": (_NUM + (type(None),), False),
    "frequency_penalty": (_NUM + (type(None),), False), "logprobs": ((bool, int, type(None)), False),
}
CHAT_FIELDS = {**_COMMON, "messages": ((list,), True), "max_completion_tokens": ((int, type(None)), False),
               "top_logprobs": ((int, type(None)), False), "response_format": ((dict, type(None)), False)}
COMPLETION_FIELDS = {**_COMMON, "prompt": ((str, list), True), "echo": ((bool, type(None)), False),
                     "suffix": ((str, type(None)), False)}
MAX_TOKENS_CAP = 4096


def _bad(msg: str, param: str | None = None) -> BadRequest:
    return BadRequest(400, msg, param=param)


def completion_error(err: dict) -> tuple[int, dict]:
    """The HTTP status and OpenAI error body of a completion whose LIP failed: the client's
    mistakes and quotas are 4xx (a prompt past the context 400, a quota 429), the rest 500."""
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


def _common(body: dict, model_names: set[str], default_max: int) -> dict:
    if body["model"] not in model_names:
        raise BadRequest(404, f"model {body['model']!r} is not served here; available: {sorted(model_names)}",
                         type="model_not_found", param="model")
    if body.get("n") not in (None, 1):
        raise _bad("only n=1 is supported", "n")
    if body.get("logprobs") not in (None, False, 0):
        raise _bad("logprobs are not supported", "logprobs")
    for p in ("presence_penalty", "frequency_penalty"):
        if body.get(p) not in (None, 0, 0.0):
            raise _bad(f"{p} is not supported (only 0)", p)
    mt = body.get("max_completion_tokens", body.get("max_tokens"))
    mt = default_max if mt is None else mt
    if not 1 <= mt <= MAX_TOKENS_CAP:
        raise _bad(f"max_tokens must be in [1, {MAX_TOKENS_CAP}], got {mt}", "max_tokens")
    temp = body.get("temperature")
    temp = 1.0 if temp is None else float(temp)
    if not 0 <= temp <= 2:
        raise _bad(f"temperature must be in [0, 2], got {temp}", "temperature")
    top_p = body.get("top_p")
    top_p = 1.0 if top_p is None else float(top_p)
    if not 0 < top_p <= 1:
        raise _bad(f"top_p must be in (0, 1], got {top_p}", "top_p")
    stop = body.get("stop")
    stop = [stop] if isinstance(stop, str) else (stop or [])
    if len(stop) > 4 or not all(isinstance(s, str) for s in stop):
        raise _bad("stop must be a string or a list of at most 4 strings", "stop")
    so = body.get("stream_options") or {}
    check_fields(so, {"include_usage": ((bool,), False)}, "stream_options")
    return {"max_tokens": mt, "temperature": temp, "top_p": top_p, "stop": stop, "seed": body.get("seed")}


def _messages(msgs: list) -> list[dict]:
    out = []
    for i, m in enumerate(msgs):
        if not isinstance(m, dict) or not isinstance(m.get("role"), str):
            raise _bad(f"messages[{i}] must be an object with a 'role' string", "messages")
        if m["role"] not in ("system", "user", "assistant", "developer", "tool"):
            raise _bad(f"messages[{i}].role {m['role']!r} is not one of system, user, assistant, developer, tool", "messages")
        c = m.get("content")
        if isinstance(c, list):
            parts = []
            for p in c:
                if not isinstance(p, dict) or p.get("type") != "text" or not isinstance(p.get("text"), str):
                    raise _bad(f"messages[{i}].content: only text parts are supported", "messages")
                parts.append(p["text"])
            c = "".join(parts)
        if c is None:
            c = ""
        if not isinstance(c, str):
            raise _bad(f"messages[{i}].content must be a string or a list of text parts", "messages")
        out.append({"role": "system" if m["role"] == "developer" else m["role"], "content": c})
    if not out:
        raise _bad("messages must not be empty", "messages")
    return out


def openai_routes(state) -> list:
    eng = state.engine

    def model_names() -> set[str]:
        return {eng.model_name, "symphony", "default"}

    async def models(request: Request) -> Response:
        authenticate(state, request)
        return JSONResponse({"object": "list", "data": [{"id": eng.model_name, "object": "model", "created": int(state.started),
                                                         "owned_by": "symphony"}]})

    async def run(request: Request, chat: bool) -> Response:
        user = authenticate(state, request)
        body = check_fields(await read_json(request, state.config.max_body), CHAT_FIELDS if chat else COMPLETION_FIELDS,
                            "chat.completions" if chat else "completions")
        kw = _common(body, model_names(), 128 if chat else 16)
        if chat:
            kw["messages"] = _messages(body["messages"])
            fn, name = chat_complete, "openai.chat"
        else:
            if body.get("echo") or body.get("suffix"):
                raise _bad("echo and suffix are not supported", "echo")
            prompt = body["prompt"]
            if isinstance(prompt, list):
                if len(prompt) != 1 or not isinstance(prompt[0], str):
                    raise _bad("prompt must be a string (or a list of exactly one string)", "prompt")
                prompt = prompt[0]
            kw["prompt"] = prompt
            fn, name = complete_text, "openai.completion"
        rec = launch_builtin(state, user, fn, kw, name)
        created = int(time.time())
        cid = f"{'chatcmpl' if chat else 'cmpl'}-{rec.pid}-{created}"
        model = body["model"]
        include_usage = bool((body.get("stream_options") or {}).get("include_usage"))

        def chunk(delta_text: str | None, finish: str | None, role: bool = False) -> dict:
            if chat:
                delta: dict[str, Any] = {}
                if role:
                    delta["role"] = "assistant"
                if delta_text is not None:
                    delta["content"] = delta_text
                choice = {"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}
                return {"id": cid, "object": "chat.completion.chunk", "created": created, "model": model, "choices": [choice]}
            return {"id": cid, "object": "text_completion", "created": created, "model": model,
                    "choices": [{"index": 0, "text": delta_text or "", "finish_reason": finish, "logprobs": None}]}

        async def until(first_message: bool) -> None:
            try:
                while not rec.done and not (first_message and rec.sent()):
                    await rec.changed(5.0)
            except BaseException:
                if not rec.proc.done:
                    rec.proc.cancel("the client went away")
                raise

        # a prompt past the context or a quota fails before the first piece: answer it with a 4xx, not a 200
        await until(first_message=bool(body.get("stream")))
        out = rec.outcome() if rec.done else {}
        if "error" in out:
            status, err_body = completion_error(out["error"])
            return JSONResponse(err_body, status_code=status)

        if body.get("stream"):
            async def events():
                i = 0
                finished = False
                try:
                    if chat:
                        yield f"data: {json.dumps(chunk('', None, role=True))}\n\n"
                    while True:
                        done = rec.done
                        msgs, i = rec.messages_since(i)
                        for m in msgs:
                            if isinstance(m, dict) and "text" in m:
                                yield f"data: {json.dumps(chunk(m['text'], None))}\n\n"
                            elif isinstance(m, dict) and "finish_reason" in m:
                                yield f"data: {json.dumps(chunk(None if chat else '', m['finish_reason']))}\n\n"
                                if include_usage:
                                    u = {**chunk(None, None), "choices": [], "usage": m.get("usage")}
                                    yield f"data: {json.dumps(u)}\n\n"
                        if done:
                            out = rec.outcome()
                            if "error" in out:
                                yield f"data: {json.dumps(completion_error(out['error'])[1])}\n\n"
                            yield "data: [DONE]\n\n"
                            finished = True
                            return
                        await rec.changed(5.0)
                finally:
                    if not finished and not rec.proc.done:  # the client went away
                        rec.proc.cancel("the client closed the stream")

            return StreamingResponse(events(), media_type="text/event-stream",
                                     headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})

        await until(first_message=False)
        out = rec.outcome()
        if "error" in out:
            status, err_body = completion_error(out["error"])
            return JSONResponse(err_body, status_code=status)
        res = out["result"]
        if chat:
            choice = {"index": 0, "message": {"role": "assistant", "content": res["text"]},
                      "finish_reason": res["finish_reason"], "logprobs": None}
            obj = "chat.completion"
        else:
            choice = {"index": 0, "text": res["text"], "finish_reason": res["finish_reason"], "logprobs": None}
            obj = "text_completion"
        return JSONResponse({"id": cid, "object": obj, "created": created, "model": model, "choices": [choice],
                             "usage": res["usage"]})

    async def chat_route(request: Request) -> Response:
        return await run(request, True)

    async def completion_route(request: Request) -> Response:
        return await run(request, False)

    return [Route("/v1/models", models, methods=["GET"]),
            Route("/v1/chat/completions", chat_route, methods=["POST"]),
            Route("/v1/completions", completion_route, methods=["POST"])]
