"""`POST /v1/responses` (the Responses API): text or message-list `input`, `instructions`,
`text.format` (text / json_object / json_schema), non-streaming and streaming with the
official event sequence: response.created, response.in_progress, response.output_item.added,
response.content_part.added, response.output_text.delta…, response.output_text.done,
response.content_part.done, response.output_item.done, then response.completed (or
response.incomplete when `max_output_tokens` ran out). Function `tools` reuse the chat tool
machinery; a call is a `function_call` item, streamed as response.output_item.added,
response.function_call_arguments.delta…, .done, response.output_item.done. With `store` (the default, as OpenAI) a
response is kept (store.py) for `previous_response_id`, `GET` and `DELETE /v1/responses/{id}`; a
follow-up continues the conversation's KV file instead of computing the history again."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from ..validate import BadRequest, read_json
from .constraints import request_grammar
from .generation import Usage
from .messages import chat_messages, responses_input
from .params import GenerationParams, check_model, responses_params
from .protocol import ResponsesRequest, as_body, parse
from .running import Api, data_line, early_failure, lip_messages, now_s, outcome, sse
from .store import ResponseStore, StoredResponse
from .template_tools import call_format, chat_prompt
from .tool_parse import OWN_FORMAT


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


def _call_item(rid: str, k: int, name: str, arguments: str, status: str) -> dict:
    return {
        "type": "function_call",
        "id": f"fc_{rid[5:]}_{k}",
        "call_id": f"call_{rid[5:]}_{k}",
        "name": name,
        "arguments": arguments,
        "status": status,
    }


def _reply_turn(items: list[dict], text: str | None) -> dict:
    """The assistant's turn as stored for a follow-up: text, or chat-form tool calls."""
    calls = [
        {"id": i["call_id"], "type": "function", "function": {"name": i["name"], "arguments": i["arguments"]}}
        for i in items
        if i["type"] == "function_call"
    ]
    return {"role": "assistant", "content": text or "", **({"tool_calls": calls} if calls else {})}


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
            "parallel_tool_calls": self.p.parallel_tool_calls,
            "tool_choice": self.body.get("tool_choice") or ("auto" if self.p.tools else "none"),
            "tools": self.body.get("tools") or [],
            "text": {"format": fmt},
            "store": self.body.get("store", True),
            "previous_response_id": self.body.get("previous_response_id"),
            "service_tier": "default",
            "user": self.body.get("user"),
            "safety_identifier": self.body.get("safety_identifier"),
        }


class _Keeping:
    """Where the conversation's KV file goes once the response is known: to the new response when
    it is stored, else back to the response it continued (a longer file is truncated to what a
    follow-up shares with it, so that is safe), else away. Done once, whatever happens."""

    def __init__(self, api: Api, user: str, body: dict, prev: StoredResponse | None, history: list[dict]) -> None:
        self.api, self.user, self.body, self.prev, self.history = api, user, body, prev, history
        self.store = body.get("store", True)
        self.path = api.responses.take_file(user, prev.id) if prev is not None else None
        self.resume = self.path is not None
        if self.path is None and self.store:
            self.path = ResponseStore.new_path()
        self.done = False

    def finish(self, obj: dict | None, reply: dict | None) -> None:
        if self.done:
            return
        self.done = True
        if obj is not None and self.store:
            hist = [*self.history, reply or {"role": "assistant", "content": ""}]
            self.api.responses.put(StoredResponse(obj["id"], self.user, hist, obj, time.time(), self.path))
        elif self.path is not None and self.prev is not None and self.resume:
            self.api.responses.give_back(self.prev, self.path)
        elif self.path is not None:
            self.api.responses.release(self.user, self.path)


async def create(api: Api, request: Request) -> Response:
    arrived = time.monotonic()
    state = api.state
    user = api.authenticate(state, request)
    req = parse(ResponsesRequest, await read_json(request, state.config.max_body), "responses")
    body = {**state.config.generation_defaults, **as_body(req)}
    check_model(body, api.model_names())
    params = responses_params(body)
    prev = None
    if (pid := body.get("previous_response_id")) is not None:
        prev = api.responses.get(user.name, pid)
        if prev is None:
            raise BadRequest(404, f"no stored response {pid!r}", type="not_found", param="previous_response_id")
    turn = responses_input(body["input"], None, prev.history if prev is not None else None)
    tok = state.engine.tokenizer
    fmt = call_format(tok.template_source)
    params.call_format = fmt if params.tool_choice.active else OWN_FORMAT
    msgs = responses_input(body["input"], body.get("instructions"), prev.history if prev is not None else None)
    msgs = chat_messages(msgs, params.tools, params.tool_choice, template_tools=fmt is not OWN_FORMAT)
    prompt = chat_prompt(state.engine, msgs, params.tools if params.tool_choice.active else [], fmt)
    grammar = request_grammar(state.engine, params, "text.format")
    stream = bool(body.get("stream"))
    end_user = body.get("safety_identifier") or body.get("user")
    keep = _Keeping(api, user.name, body, prev, turn)
    try:
        rec = api.launch(
            user,
            prompt,
            params,
            grammar,
            stream,
            "responses",
            arrived,
            end_user,
            conv_path=keep.path,
            resume=keep.resume,
        )
    except BaseException:
        keep.finish(None, None)
        raise
    created = now_s()
    r = _Response(f"resp_{rec.pid}_{created}", created, body["model"], body, params)

    if not stream:
        try:
            res = await outcome(rec)
        finally:
            if not keep.done and (rec.done is False or "error" in rec.outcome()):
                keep.finish(None, None)
        if isinstance(res, Response):
            return res
        c = res["choices"][0]
        status = "incomplete" if c["finish_reason"] == "length" else "completed"
        out = [_call_item(r.rid, k, t["name"], t["arguments"], status) for k, t in enumerate(c["tool_calls"])]
        out = out or [_message(r.mid, c["text"], status)]
        obj = r.obj(status, out, res["usage"], c["finish_reason"])
        keep.finish(obj, _reply_turn(out, c["text"]))
        return JSONResponse(obj)
    if (refused := await early_failure(rec)) is not None:
        keep.finish(None, None)
        return refused

    async def events() -> AsyncIterator[str]:
        seq = 0

        def ev(kind: str, **fields: Any) -> str:
            nonlocal seq
            seq += 1
            return data_line({"type": kind, "sequence_number": seq - 1, **fields}, event=kind)

        where = {"item_id": r.mid, "output_index": 0, "content_index": 0}
        items: list[dict] = []  # the output so far; the last one may be open
        try:
            yield ev("response.created", response=r.obj("in_progress", [], None))
            yield ev("response.in_progress", response=r.obj("in_progress", [], None))
            text, finish = "", "stop"

            def close(status: str) -> list[str]:
                """The events that end the open item, if one is open."""
                if not items or items[-1]["status"] != "in_progress":
                    return []
                it, at = items[-1], len(items) - 1
                it["status"] = status
                if it["type"] == "function_call":
                    done = {"item_id": it["id"], "output_index": at}
                    return [
                        ev("response.function_call_arguments.done", arguments=it["arguments"], **done),
                        ev("response.output_item.done", output_index=at, item=it),
                    ]
                it["content"] = [_text_part(text)]
                return [
                    ev("response.output_text.done", text=text, logprobs=[], **where),
                    ev("response.content_part.done", part=_text_part(text), **where),
                    ev("response.output_item.done", output_index=at, item=it),
                ]

            async for m in lip_messages(rec):
                kind = m.get("kind")
                if kind == "delta" and m["text"]:
                    if not items:
                        items.append(_message(r.mid, None, "in_progress"))
                        yield ev("response.output_item.added", output_index=0, item=dict(items[-1]))
                        yield ev("response.content_part.added", part=_text_part(""), **where)
                    text += m["text"]
                    yield ev("response.output_text.delta", delta=m["text"], logprobs=[], **where)
                elif kind == "tool":
                    if m["name"] is not None:
                        for e in close("completed"):
                            yield e
                        items.append(_call_item(r.rid, m["index"], m["name"], "", "in_progress"))
                        yield ev("response.output_item.added", output_index=len(items) - 1, item=dict(items[-1]))
                    if m["arguments"]:
                        items[-1]["arguments"] += m["arguments"]
                        at = {"item_id": items[-1]["id"], "output_index": len(items) - 1}
                        yield ev("response.function_call_arguments.delta", delta=m["arguments"], **at)
                elif kind == "end":
                    finish = m["finish_reason"]
                elif kind == "usage":
                    status = "incomplete" if finish == "length" else "completed"
                    if not items:  # an empty reply is still a message
                        items.append(_message(r.mid, None, "in_progress"))
                        yield ev("response.output_item.added", output_index=0, item=dict(items[-1]))
                        yield ev("response.content_part.added", part=_text_part(""), **where)
                    for e in close(status):
                        yield e
                    obj = r.obj(status, items, m["usage"], finish)
                    keep.finish(obj, _reply_turn(items, text))
                    yield ev(f"response.{status}", response=obj)
                elif kind == "error":
                    err = m["body"]["error"]
                    yield ev("error", code=str(err["code"]), message=err["message"], param=None)
        finally:
            keep.finish(None, None)

    return sse(events())


async def retrieve(api: Api, request: Request) -> Response:
    user = api.authenticate(api.state, request)
    r = api.responses.get(user.name, request.path_params["rid"])
    if r is None:
        raise BadRequest(404, f"no stored response {request.path_params['rid']!r}", type="not_found")
    return JSONResponse(r.body)


async def delete(api: Api, request: Request) -> Response:
    user = api.authenticate(api.state, request)
    rid = request.path_params["rid"]
    if not api.responses.delete(user.name, rid):
        raise BadRequest(404, f"no stored response {rid!r}", type="not_found")
    return JSONResponse({"id": rid, "object": "response", "deleted": True})
