"""threadsafe_ast: the retries past CPython 3.11's spurious AST SystemError (python/cpython#106905),
which a CI run met when the server parsed a program while failing LIPs formatted their tracebacks."""

from __future__ import annotations

import ast
import traceback

import pytest

from symphony_core import threadsafe_ast


def flaky(real, failures: int):
    calls = {"n": 0}

    def f(*a, **kw):
        calls["n"] += 1
        if calls["n"] <= failures:
            raise SystemError("AST constructor recursion depth mismatch (before=90, after=30)")
        return real(*a, **kw)

    return f, calls


def test_parse_retries_the_spurious_error(monkeypatch):
    f, calls = flaky(ast.parse, 3)
    monkeypatch.setattr(ast, "parse", f)
    tree = threadsafe_ast.parse("def lip(sym):\n    return 1\n", "<program>")
    assert calls["n"] == 4 and isinstance(tree.body[0], ast.FunctionDef) and tree.body[0].name == "lip"


def test_parse_gives_up_after_its_attempts_and_keeps_syntax_errors(monkeypatch):
    with pytest.raises(SyntaxError):
        threadsafe_ast.parse("def (", "<program>")
    f, calls = flaky(ast.parse, 100)
    monkeypatch.setattr(ast, "parse", f)
    with pytest.raises(SystemError):
        threadsafe_ast.parse("x = 1", "<program>")
    assert calls["n"] == threadsafe_ast.ATTEMPTS


def _error() -> BaseException:
    try:
        {}["missing"]
    except KeyError as e:
        return e
    raise AssertionError


def test_format_exception_retries_then_falls_back(monkeypatch):
    err = _error()
    whole = "".join(traceback.format_exception(err))
    f, _ = flaky(traceback.format_exception, 2)
    monkeypatch.setattr(traceback, "format_exception", f)
    assert threadsafe_ast.format_exception(err) == whole
    f, _ = flaky(traceback.format_exception, 100)
    monkeypatch.setattr(traceback, "format_exception", f)
    text = threadsafe_ast.format_exception(err)
    assert text.startswith("Traceback (most recent call last):") and "in _error" in text
    assert text.rstrip().endswith("KeyError: 'missing'")
