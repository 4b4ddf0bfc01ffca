"""The OpenAI-compatible routes: `/v1/models` (and one model by id), `/v1/chat/completions`,
`/v1/completions`, `/v1/responses`; vLLM's `/tokenize`, `/detokenize`, `/version`, `/ping`; and
`/v1/embeddings`, refused with a 400 (this model is a generator). Each generation request
launches the built-in LIP (generation.py) as the API token's user, through the same schedulers
and quotas as any program."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from ...errors import PredError
from ..validate import BadRequest, check_fields, read_json
from . import completions, responses
from .messages import chat_messages, template_renders_names
from .running import Api
from .template_tools import call_format, render_with_tools
from .tool_parse import OWN_FORMAT
from .tools import parse_tools


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("symphony-lip")
    except PackageNotFoundError:
        return "unknown"


def openai_routes(state, authenticate: Callable[[Any, Request], Any], launch_builtin: Callable[..., Any]) -> list:
    api = Api(state, authenticate, launch_builtin)

    def card(name: str) -> dict:
        return {
            "id": name,
            "object": "model",
            "created": int(state.started),
            "owned_by": "symphony",
            "root": state.engine.model_name,
            "max_model_len": api.max_model_len(),
        }

    async def models(request: Request) -> Response:
        authenticate(state, request)
        return JSONResponse({"object": "list", "data": [card(api.served_name())]})

    async def model(request: Request) -> Response:
        authenticate(state, request)
        name = request.path_params["model"]
        if name not in api.model_names():
            raise BadRequest(404, f"model {name!r} is not served here", type="model_not_found", param="model")
        return JSONResponse(card(name))

    async def chat_route(request: Request) -> Response:
        return await completions.create(api, request, True)

    async def completion_route(request: Request) -> Response:
        return await completions.create(api, request, False)

    async def responses_route(request: Request) -> Response:
        return await responses.create(api, request)

    async def response_get(request: Request) -> Response:
        return await responses.retrieve(api, request)

    async def response_delete(request: Request) -> Response:
        return await responses.delete(api, request)

    async def tokenize(request: Request) -> Response:
        authenticate(state, request)
        spec = {
            "model": ((str,), False),
            "prompt": ((str,), False),
            "messages": ((list,), False),
            "add_special_tokens": ((bool,), False),
            "add_generation_prompt": ((bool,), False),
            "return_token_strs": ((bool,), False),
            "tools": ((list,), False),
        }
        body = check_fields(await read_json(request, state.config.max_body), spec, "tokenize")
        if ("prompt" in body) == ("messages" in body):
            raise BadRequest(400, "tokenize: give either 'prompt' or 'messages'", param="prompt")
        if "messages" in body:
            tok = state.engine.tokenizer
            names = template_renders_names(tok.template_source)
            tools = parse_tools(body.get("tools"))
            fmt = call_format(tok.template_source)
            own = fmt is not OWN_FORMAT
            msgs = chat_messages(body["messages"], names=names, template_tools=own)
            if own:
                text = render_with_tools(tok, msgs, tools, fmt, body.get("add_generation_prompt", True))
            else:
                text = state.engine.chat_template(msgs, body.get("add_generation_prompt", True))
        else:
            text = body["prompt"]
        ids = state.engine.tokenize(text)
        out: dict[str, Any] = {"count": len(ids), "max_model_len": api.max_model_len(), "tokens": ids}
        if body.get("return_token_strs"):
            out["token_strs"] = [state.engine.tokenizer.fast.id_to_token(i) for i in ids]
        return JSONResponse(out)

    async def detokenize(request: Request) -> Response:
        authenticate(state, request)
        spec = {"model": ((str,), False), "tokens": ((list,), True)}
        body = check_fields(await read_json(request, state.config.max_body), spec, "detokenize")
        ids = body["tokens"]
        if not all(isinstance(i, int) and not isinstance(i, bool) for i in ids):
            raise BadRequest(400, "detokenize: 'tokens' must be a list of token ids (integers)", param="tokens")
        try:
            return JSONResponse({"prompt": state.engine.detokenize(ids)})
        except PredError as e:
            raise BadRequest(400, str(e), param="tokens") from None

    async def version(request: Request) -> Response:
        return JSONResponse({"version": _version()})

    async def ping(request: Request) -> Response:
        return Response(status_code=200)

    async def embeddings(request: Request) -> Response:
        authenticate(state, request)
        raise BadRequest(
            400,
            f"embeddings are not supported by this model ({state.engine.model_name} is served for generation)",
            param="model",
        )

    return [
        Route("/v1/models", models, methods=["GET"]),
        Route("/v1/models/{model:path}", model, methods=["GET"]),
        Route("/v1/chat/completions", chat_route, methods=["POST"]),
        Route("/v1/completions", completion_route, methods=["POST"]),
        Route("/v1/responses", responses_route, methods=["POST"]),
        Route("/v1/responses/{rid}", response_get, methods=["GET"]),
        Route("/v1/responses/{rid}", response_delete, methods=["DELETE"]),
        Route("/v1/embeddings", embeddings, methods=["POST"]),
        Route("/tokenize", tokenize, methods=["POST"]),
        Route("/detokenize", detokenize, methods=["POST"]),
        Route("/version", version, methods=["GET"]),
        Route("/ping", ping, methods=["GET", "POST"]),
    ]
