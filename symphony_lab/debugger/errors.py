"""The debugger's error type: a command that cannot be carried out."""

from __future__ import annotations

from symphony_core.errors import SymphonyError


class DebuggerError(SymphonyError):
    """A debugger command that cannot be carried out (no such stop, bad override, ...)."""


__all__ = ["DebuggerError"]
