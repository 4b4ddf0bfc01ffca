"""`ast.parse` and traceback formatting that survive CPython 3.11's shared AST counter.

CPython 3.11 keeps the AST builder's recursion counter in interpreter-wide state, so a thread that
builds an AST while another does can fail with a spurious `SystemError: AST constructor recursion
depth mismatch` (python/cpython#106905, fixed in later releases). The server parses each submitted
program on its event loop while LIP threads end and format their tracebacks, and 3.11's traceback
module parses source lines to place its `^^^` carets, so the two meet whenever several programs
fail at once. The error is transient: both retry.
"""

from __future__ import annotations

import ast
import traceback

ATTEMPTS = 8


def parse(source: str, filename: str) -> ast.Module:
    """`ast.parse(source, filename)`, retried past the spurious SystemError."""
    for attempt in range(ATTEMPTS):
        try:
            return ast.parse(source, filename=filename)
        except SystemError:
            if attempt == ATTEMPTS - 1:
                raise
    raise AssertionError("unreachable")


def format_exception(error: BaseException) -> str:
    """`traceback.format_exception(error)` joined, retried past the spurious SystemError; the
    traceback without its source lines if it keeps failing."""
    for _ in range(ATTEMPTS):
        try:
            return "".join(traceback.format_exception(error))
        except SystemError:
            pass
    frames = traceback.extract_tb(error.__traceback__)
    return "".join(
        ["Traceback (most recent call last):\n"]
        + [f'  File "{f.filename}", line {f.lineno}, in {f.name}\n' for f in frames]
        + traceback.format_exception_only(error)
    )
