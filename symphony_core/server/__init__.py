"""Serving programs over the network: HTTP + WebSocket API, OpenAI-compatible endpoints, users
and quotas. Programs received over the network run in the sandbox (symphony_core/sandbox/),
which this package uses and which never imports it.

`symphony serve` (serve.py) is the entry point; `create_app` builds the ASGI app around an
`Engine`. Nothing here is imported by the engine itself.
"""

from __future__ import annotations

__all__ = ["create_app", "serve"]


def __getattr__(name: str):
    if name == "create_app":
        from .app import create_app

        return create_app
    if name == "serve":
        from .serve import serve

        return serve
    raise AttributeError(name)
