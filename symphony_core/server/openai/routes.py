"""The OpenAI-compatible routes: `/v1/models`, `/v1/chat/completions`, `/v1/completions`,
`/v1/responses`. Each request launches the built-in LIP (generation.py) as the API token's user,
through the same schedulers and quotas as any program."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from . import completions, responses
from .running import Api


def openai_routes(state, authenticate: Callable[[Any, Request], Any], launch_builtin: Callable[..., Any]) -> list:
    api = Api(state, authenticate, launch_builtin)

    async def models(request: Request) -> Response:
        authenticate(state, request)
        eng = state.engine
        return JSONResponse(
            {
                "object": "list",
                "data": [
                    {"id": eng.model_name, "object": "model", "created": int(state.started), "owned_by": "symphony"}
                ],
            }
        )

    async def chat_route(request: Request) -> Response:
        return await completions.create(api, request, True)

    async def completion_route(request: Request) -> Response:
        return await completions.create(api, request, False)

    async def responses_route(request: Request) -> Response:
        return await responses.create(api, request)

    return [
        Route("/v1/models", models, methods=["GET"]),
        Route("/v1/chat/completions", chat_route, methods=["POST"]),
        Route("/v1/completions", completion_route, methods=["POST"]),
        Route("/v1/responses", responses_route, methods=["POST"]),
    ]
