"""How the `Debugger` offers its parts' commands as methods of its own, without a wrapper each.

`tokens = Delegated("inspector", Inspector.tokens)` in the class body makes `dbg.tokens` the bound
method `dbg.inspector.tokens`. Read off the class, it is the part's function itself, so its
signature and docstring are what `RemoteDebugger`, the protocol's argument check and the API
reference see.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


class Delegated:
    def __init__(self, part: str, fn: Callable) -> None:
        self.part = part
        self.fn = fn

    def __set_name__(self, owner: type, name: str) -> None:
        if name != self.fn.__name__:
            raise TypeError(f"{owner.__name__}.{name} delegates to {self.fn.__qualname__}: the names must agree")

    def __get__(self, obj: Any, owner: type | None = None) -> Callable:
        if obj is None:
            return self.fn
        return getattr(getattr(obj, self.part), self.fn.__name__)


__all__ = ["Delegated"]
