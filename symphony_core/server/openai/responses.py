"""`POST /v1/responses` (the Responses API): text or message-list `input`, `instructions`,
`text.format` (text / json_object / json_schema), non-streaming and streaming with the
official event sequence: response.created, response.in_progress, response.output_item.added,
response.content_part.added, response.output_text.delta…, response.output_text.done,
response.content_part.done, response.output_item.done, then response.completed (or
response.incomplete when `max_output_tokens` ran out). Responses are not stored."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from ..validate import read_json
from .constraints import request_grammar
from .generation import Usage
from .messages import responses_input
from .params import GenerationParams, check_model, responses_params
from .protocol import ResponsesRequest, as_body, parse
from .running import Api, data_line, early_failure, lip_messages, now_s, outcome, sse


def _usage(u: Usage) -> dict:
    return {
        "input_tokens": u["prompt_tokens"],
        "output_tokens": u["completion_tokens"],
        "total_tokens": u["total_tokens"],
        "input_tokens_details": {"cached_tokens": u["prompt_tokens_details"]["cached_tokens"]},
        "output_tokens_details": {"reasoning_tokens": 0},
    }


def _text_part(text: str) -> dict:
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}


def _message(mid: str, text: str | None, status: str) -> dict:
    return {
        "type": "message",
        "id": mid,
        "status": status,
        "role": "assistant",
        "content": [] if text is None else [_text_part(text)],
    }


class _Response:
    """The response object as it grows; `obj` renders it at any stage."""

    def __init__(self, rid: str, created: int, model: str, body: dict, p: GenerationParams) -> None:
        self.rid, self.created, self.model, self.body, self.p = rid, created, model, body, p
        self.mid = f"msg_{rid[5:]}"

    def obj(self, status: str, output: list[dict], usage: Usage | None, finish: str | None = None) -> dict:
        fmt: dict[str, Any] = {"type": self.p.output.kind}
        if self.p.output.kind == "json_schema":
            fmt.update(name=self.p.output.name, schema=self.p.output.schema, strict=True)
        return {
            "id": self.rid,
            "object": "response",
            "created_at": self.created,
            "status": status,
            "model": self.model,
            "output": output,
            "usage": None if usage is None else _usage(usage),
            "error": None,
            "incomplete_details": {"reason": "max_output_tokens"} if finish == "length" else None,
            "instructions": self.body.get("instructions"),
            "metadata": self.body.get("metadata") or {},
            "max_output_tokens": self.p.max_tokens,
            "temperature": self.p.temperature,
            "top_p": self.p.top_p,
            "parallel_tool_calls": False,
            "tool_choice": "none",
            "tools": [],
            "text": {"format": fmt},
            "store": False,
            "service_tier": "default",
            "user": self.body.get("user"),
            "safety_identifier": self.body.get("safety_identifier"),
        }


async def create(api: Api, request: Request) -> Response:
    arrived = time.monotonic()
    state = api.state
    user = api.authenticate(state, request)
    req = parse(ResponsesRequest, await read_json(request, state.config.max_body), "responses")
    body = {**state.config.generation_defaults, **as_body(req)}
    check_model(body, api.model_names())
    params = responses_params(body)
    prompt = state.engine.chat_template(responses_input(body["input"], body.get("instructions")), True)
    grammar = request_grammar(state.engine, params, "text.format")
    stream = bool(body.get("stream"))
    end_user = body.get("safety_identifier") or body.get("user")
    rec = api.launch(user, prompt, params, grammar, stream, "responses", arrived, end_user)
    created = now_s()
    r = _Response(f"resp_{rec.pid}_{created}", created, body["model"], body, params)

    if not stream:
        res = await outcome(rec)
        if isinstance(res, Response):
            return res
        c = res["choices"][0]
        status = "incomplete" if c["finish_reason"] == "length" else "completed"
        return JSONResponse(r.obj(status, [_message(r.mid, c["text"], status)], res["usage"], c["finish_reason"]))
    if (refused := await early_failure(rec)) is not None:
        return refused

    async def events() -> AsyncIterator[str]:
        seq = 0

        def ev(kind: str, **fields: Any) -> str:
            nonlocal seq
            seq += 1
            return data_line({"type": kind, "sequence_number": seq - 1, **fields}, event=kind)

        where = {"item_id": r.mid, "output_index": 0, "content_index": 0}
        yield ev("response.created", response=r.obj("in_progress", [], None))
        yield ev("response.in_progress", response=r.obj("in_progress", [], None))
        yield ev("response.output_item.added", output_index=0, item=_message(r.mid, None, "in_progress"))
        yield ev("response.content_part.added", part=_text_part(""), **where)
        text, finish = "", "stop"
        async for m in lip_messages(rec):
            kind = m.get("kind")
            if kind == "delta" and m["text"]:
                text += m["text"]
                yield ev("response.output_text.delta", delta=m["text"], logprobs=[], **where)
            elif kind == "end":
                finish = m["finish_reason"]
            elif kind == "usage":
                status = "incomplete" if finish == "length" else "completed"
                yield ev("response.output_text.done", text=text, logprobs=[], **where)
                yield ev("response.content_part.done", part=_text_part(text), **where)
                item = _message(r.mid, text, status)
                yield ev("response.output_item.done", output_index=0, item=item)
                yield ev(f"response.{status}", response=r.obj(status, [item], m["usage"], finish))
            elif kind == "error":
                err = m["body"]["error"]
                yield ev("error", code=str(err["code"]), message=err["message"], param=None)

    return sse(events())
