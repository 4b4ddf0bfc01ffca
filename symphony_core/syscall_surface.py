"""The syscall surface: what every `sym` offers a LIP, however the LIP runs.

A LIP meets one of two implementations: the in-process `Sym` (lip/syscalls.py), which the
debugger also serves (its hook sits in the kernel's dispatch, not in a wrapper), and the
sandbox's `RemoteSym` (sandbox/worker.py), a proxy that forwards each call to a `Sym` inside
the engine. Both are checked against the two protocols below (tests/test_syscall_surface.py:
names, parameters, defaults), and the test walks docs/reference/syscalls.md so that a documented
name missing here or in either implementation fails. The implementations are checked rather
than generated: each call's body differs by mode (a kernel dispatch, a round trip over a socket),
so a generator would need a template per call and hide each one's code.

This module runs in the sandbox too: it imports nothing of the engine.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any, Protocol


class ThreadHandleSurface(Protocol):
    """What `sym.spawn` returns."""

    @property
    def tid(self) -> int: ...
    @property
    def done(self) -> bool: ...
    def join(self, timeout: float | None = None) -> Any: ...


class SymSurface(Protocol):
    """Every documented member of `sym`: read-only facts, then the system calls."""

    @property
    def pid(self) -> int: ...
    @property
    def tid(self) -> int: ...
    @property
    def user(self) -> str: ...
    @property
    def eos_token_ids(self) -> frozenset[int]: ...
    @property
    def vocab_size(self) -> int: ...
    @property
    def tokenizer_file(self) -> str: ...
    @property
    def page_size(self) -> int: ...

    def pred(self, kv, token_ids, positions=None, *, outputs="last", sampler=None, mask=None) -> Any: ...
    def kv_create(self, path: str | None = None) -> Any: ...
    def kv_open(self, path: str, mode: str = "r") -> Any: ...
    def kv_fork(self, kv) -> Any: ...
    def kv_truncate(self, kv, n: int) -> None: ...
    def kv_close(self, kv) -> None: ...
    def kv_remove(self, path: str) -> None: ...
    def kv_hint(self, kv, keep_for: float | None = None, priority: int | None = None) -> None: ...
    def kv_list(self, prefix: str | None = None) -> list[str]: ...
    def tokenize(self, text: str) -> list[int]: ...
    def detokenize(self, ids) -> str: ...
    def chat_template(
        self, messages: list[dict], add_generation_prompt: bool = True, *, tools: list[dict] | None = None
    ) -> str: ...
    def send(self, obj: Any) -> None: ...
    def recv(self, timeout: float | None = None) -> Any: ...
    def spawn(self, fn: Callable, *args: Any, **kwargs: Any) -> ThreadHandleSurface: ...


def members(surface: type) -> dict[str, Any]:
    """The public members a surface declares: name -> its property or function."""
    return {n: v for n, v in vars(surface).items() if not n.startswith("_")}


def _params(fn: Callable) -> list[tuple[str, Any, Any]]:
    sig = inspect.signature(fn)
    return [(p.name, p.kind, p.default) for p in list(sig.parameters.values())[1:]]  # without self


def mismatches(impl: type, surface: type) -> list[str]:
    """How `impl` departs from `surface`: a missing member, a property that is a method (or the
    reverse), parameters that differ in name, kind or default, or a public member the surface
    does not declare. Empty when `impl` offers exactly the surface."""
    out: list[str] = []
    want = members(surface)
    for name, decl in want.items():
        got = inspect.getattr_static(impl, name, None)
        if got is None:
            out.append(f"{impl.__name__} lacks {name}")
        elif isinstance(decl, property) != (isinstance(got, property) or not callable(got)):
            out.append(f"{impl.__name__}.{name} is {'not ' if isinstance(decl, property) else ''}a method")
        elif not isinstance(decl, property) and _params(got) != _params(decl):
            out.append(f"{impl.__name__}.{name}{inspect.signature(got)} != {name}{inspect.signature(decl)}")
    extra = sorted(n for n in dir(impl) if not n.startswith("_") and n not in want)
    out += [f"{impl.__name__}.{n} is not in the syscall surface" for n in extra]
    return out


def no_such_member(name: str) -> AttributeError:
    """The error for `sym.<name>` where no such member exists, in every mode (not the
    implementation's class name, which differs by mode)."""
    known = ", ".join(members(SymSurface))
    return AttributeError(f"sym has no {name!r}: its members are {known} (docs/reference/syscalls.md)")


__all__ = ["SymSurface", "ThreadHandleSurface", "members", "mismatches", "no_such_member"]
