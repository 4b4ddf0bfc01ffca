"""`POST /v1/chat/completions` and `POST /v1/completions`, streaming (server-sent events, `data:
[DONE]` last) and not. `usage` carries two extra fields, `prompt_prefills` and
`shared_prompt_pages` (see generation.py); a non-streaming reply also has them as the headers
`X-Symphony-Prompt-Prefills` and `X-Symphony-Shared-Prompt-Pages`."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from ..validate import read_json
from .constraints import request_grammar
from .generation import ChoiceOut, ToolCallOut, Usage
from .logprobs import TokenLogprob, chat_logprobs, completion_logprobs
from .messages import chat_messages, template_renders_names
from .params import chat_params, check_model, completion_params, prompt_text
from .protocol import ChatRequest, CompletionRequest, as_body, parse
from .running import Api, data_line, early_failure, lip_messages, now_s, outcome, sse
from .template_tools import call_format, chat_prompt
from .tool_parse import OWN_FORMAT, CallFormat


def _call_id(cid: str, choice: int, k: int, fmt: CallFormat) -> str:
    """The call's id, as the model's template takes it back (Mistral's: 9 letters and digits)."""
    return fmt.call_id(f"call_{cid}_{choice}_{k}")


def _tool_calls(calls: list[ToolCallOut], cid: str, choice: int, fmt: CallFormat) -> list[dict]:
    return [
        {
            "id": _call_id(cid, choice, k, fmt),
            "type": "function",
            "function": {"name": c["name"], "arguments": c["arguments"]},
        }
        for k, c in enumerate(calls)
    ]


def _usage_headers(u: Usage) -> dict[str, str]:
    return {
        "X-Symphony-Prompt-Prefills": str(u["prompt_prefills"]),
        "X-Symphony-Shared-Prompt-Pages": str(u["shared_prompt_pages"]),
    }


class _Stream:
    """Turns the LIP's messages into chat.completion.chunk / text_completion events."""

    def __init__(self, chat: bool, cid: str, created: int, model: str, logprobs: bool, fmt: CallFormat) -> None:
        self.chat, self.cid, self.created, self.model, self.logprobs = chat, cid, created, model, logprobs
        self.fmt = fmt
        self.offsets: dict[int, int] = {}

    def chunk(self, choices: list[dict], **extra: Any) -> str:
        obj = "chat.completion.chunk" if self.chat else "text_completion"
        return data_line(
            {"id": self.cid, "object": obj, "created": self.created, "model": self.model, "choices": choices, **extra}
        )

    def _lp(self, i: int, items: list[TokenLogprob]) -> dict | None:
        if not self.logprobs or not items:
            return None
        if self.chat:
            return chat_logprobs(items)
        lp = completion_logprobs(items, self.offsets.get(i, 0))
        self.offsets[i] = self.offsets.get(i, 0) + sum(len(t["token"]) for t in items)
        return lp

    def text(self, i: int, text: str, items: list[TokenLogprob], finish: str | None = None) -> str:
        if self.chat:
            delta = {"content": text} if text else {}
            return self.chunk([{"index": i, "delta": delta, "finish_reason": finish, "logprobs": self._lp(i, items)}])
        return self.chunk([{"index": i, "text": text, "finish_reason": finish, "logprobs": self._lp(i, items)}])

    def tool(self, m: dict) -> str:
        """A piece of a tool call: its id, type and name first, then its arguments piece by piece."""
        tc: dict[str, Any] = {"index": m["index"], "function": {"arguments": m["arguments"]}}
        if m["name"] is not None:
            tc.update(id=_call_id(self.cid, m["choice"], m["index"], self.fmt), type="function")
            tc["function"]["name"] = m["name"]
        return self.chunk(
            [{"index": m["choice"], "delta": {"tool_calls": [tc]}, "finish_reason": None, "logprobs": None}]
        )

    def end(self, m: dict) -> str:
        return self.text(m["choice"], "", m["logprobs"], m["finish_reason"])


def _chat_choice(c: ChoiceOut, cid: str, logprobs: bool, fmt: CallFormat) -> dict:
    msg: dict[str, Any] = {"role": "assistant", "content": c["text"]}
    if c["tool_calls"]:
        msg["tool_calls"] = _tool_calls(c["tool_calls"], cid, c["index"], fmt)
    return {
        "index": c["index"],
        "message": msg,
        "finish_reason": c["finish_reason"],
        "logprobs": chat_logprobs(c["logprobs"]) if logprobs else None,
    }


def _completion_choice(c: ChoiceOut, logprobs: bool, echo: str) -> dict:
    return {
        "index": c["index"],
        "text": echo + (c["text"] or ""),
        "finish_reason": c["finish_reason"],
        "logprobs": completion_logprobs(c["logprobs"]) if logprobs else None,
    }


async def create(api: Api, request: Request, chat: bool) -> Response:
    arrived = time.monotonic()
    state = api.state
    user = api.authenticate(state, request)
    where = "chat.completions" if chat else "completions"
    req = parse(ChatRequest if chat else CompletionRequest, await read_json(request, state.config.max_body), where)
    body = {**state.config.generation_defaults, **as_body(req)}
    check_model(body, api.model_names())
    vocab = state.engine.config.vocab_size
    echo = ""
    if chat:
        params = chat_params(body, vocab)
        tok = state.engine.tokenizer
        names = template_renders_names(tok.template_source)
        fmt = call_format(tok.template_source)
        params.call_format = fmt if params.tool_choice.active else OWN_FORMAT
        own = fmt is not OWN_FORMAT
        msgs = chat_messages(body["messages"], params.tools, params.tool_choice, names, template_tools=own)
        prompt = chat_prompt(state.engine, msgs, params.tools if params.tool_choice.active else [], fmt)
    else:
        params = completion_params(body, vocab)
        prompt = prompt_text(body["prompt"])
        echo = prompt if params.echo else ""
    grammar = request_grammar(state.engine, params)
    stream = bool(body.get("stream"))
    end_user = body.get("safety_identifier") or body.get("user")
    rec = api.launch(user, prompt, params, grammar, stream, "chat" if chat else "completion", arrived, end_user)
    created = now_s()
    cid = f"{'chatcmpl' if chat else 'cmpl'}-{rec.pid}-{created}"
    model = body["model"]
    tier = {"service_tier": "default"} if "service_tier" in body else {}

    if stream:
        if (refused := await early_failure(rec)) is not None:
            return refused
        include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
        s = _Stream(chat, cid, created, model, params.logprobs, params.call_format)

        async def events() -> AsyncIterator[str]:
            for i in range(params.n):
                if chat:
                    first = {"index": i, "delta": {"role": "assistant", "content": ""}}
                    yield s.chunk([{**first, "finish_reason": None, "logprobs": None}])
                elif echo:
                    yield s.chunk([{"index": i, "text": echo, "finish_reason": None, "logprobs": None}])
            async for m in lip_messages(rec):
                kind = m.get("kind")
                if kind == "delta":
                    yield s.text(m["choice"], m["text"], m["logprobs"])
                elif kind == "tool":
                    yield s.tool(m)
                elif kind == "end":
                    yield s.end(m)
                elif kind == "usage" and include_usage:
                    yield s.chunk([], usage=m["usage"])
                elif kind == "error":
                    yield data_line(m["body"])
            yield "data: [DONE]\n\n"

        return sse(events())

    res = await outcome(rec)
    if isinstance(res, Response):
        return res
    if chat:
        choices = [_chat_choice(c, cid, params.logprobs, params.call_format) for c in res["choices"]]
    else:
        choices = [_completion_choice(c, params.logprobs, echo) for c in res["choices"]]
    return JSONResponse(
        {
            "id": cid,
            "object": "chat.completion" if chat else "text_completion",
            "created": created,
            "model": model,
            "choices": choices,
            "usage": res["usage"],
            **tier,
        },
        headers=_usage_headers(res["usage"]),
    )
