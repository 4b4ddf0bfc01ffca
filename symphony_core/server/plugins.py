"""Server plugins: extra routes mounted on `symphony serve`'s app, chosen by the operator.

A plugin is a function `plugin(ctx: PluginContext) -> list[starlette route]`. It is named on
the command line (`symphony serve --plugin NAME`, repeatable) either by an entry point in the
`symphony.server_plugins` group (the package `symphony-lip` registers `debugger`, which lives in
symphony_lab) or as `module:function`. Nothing is loaded unless named, so a server never grows
routes its operator did not ask for; and symphony_core never imports a plugin's package itself.

The context hands a plugin what it needs to behave like the server's own routes: the engine,
the server's state (users, quotas, the sandbox, the launch path) and `authenticate`, which
reads a bearer token (header, `?token=` or `x-api-key`) exactly as every other route does.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from importlib.metadata import entry_points
from typing import Any

from .auth import token_of
from .launch import launch_program

GROUP = "symphony.server_plugins"


class PluginError(Exception):
    """A plugin named on the command line could not be found or loaded."""


@dataclass
class PluginContext:
    engine: Any
    state: Any  # symphony_core.server.state.State

    def authenticate(self, conn) -> Any:
        """The `User` a request or WebSocket carries a token for (None: no or unknown token)."""
        return self.state.users.authenticate(token_of(conn.headers, conn.query_params))

    def launch_program(self, user, body: dict, where: str = "run"):
        """Launch a program through the server's own path (quotas, sandbox, limits) as `user`;
        returns the process record (`.proc` is the engine's Process)."""
        return launch_program(self.state, user, body, where)


def available() -> dict[str, str]:
    """Installed plugins: entry-point name → "module:function"."""
    return {ep.name: ep.value for ep in entry_points(group=GROUP)}


def load_plugin(spec: str) -> Callable[[PluginContext], list]:
    """A plugin by entry-point name, or by "module:function"."""
    eps = {ep.name: ep for ep in entry_points(group=GROUP)}
    try:
        if spec in eps:
            fn = eps[spec].load()
        elif ":" in spec:
            mod, _, attr = spec.partition(":")
            fn = getattr(importlib.import_module(mod), attr)
        else:
            known = ", ".join(sorted(eps)) or "none installed"
            raise PluginError(f"no server plugin {spec!r}; installed: {known}; or give module:function")
    except PluginError:
        raise
    except (ImportError, AttributeError) as e:
        raise PluginError(f"server plugin {spec!r} could not be loaded: {type(e).__name__}: {e}") from e
    if not callable(fn):
        raise PluginError(f"server plugin {spec!r} is not callable")
    return fn


def mount(app, state, specs: list[str]) -> list[str]:
    """Load each named plugin and add its routes to `app`; returns the paths mounted."""
    ctx = PluginContext(state.engine, state)
    paths = []
    for spec in specs:
        routes = load_plugin(spec)(ctx)
        for r in routes:
            app.router.routes.append(r)
            paths.append(getattr(r, "path", "?"))
    return paths


__all__ = ["GROUP", "PluginContext", "PluginError", "available", "load_plugin", "mount"]
