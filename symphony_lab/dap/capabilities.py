"""What the adapter tells an editor it can do (the `initialize` response, DAP's `Capabilities`)."""

from __future__ import annotations

CAPABILITIES = {
    "supportsConfigurationDoneRequest": True,
    "supportsFunctionBreakpoints": True,
    "supportsConditionalBreakpoints": True,
    "supportsHitConditionalBreakpoints": True,
    "supportsEvaluateForHovers": True,
    "supportsStepBack": True,
    "supportsSetVariable": True,
    "supportsExceptionInfoRequest": True,
    "supportsTerminateRequest": True,
    "supportTerminateDebuggee": True,
    "exceptionBreakpointFilters": [
        {
            "filter": "error",
            "label": "Program errors",
            "description": "Stop when the LIP ends with an exception (post-mortem: its traceback is the stack)",
            "default": False,
        },
        {
            "filter": "limit",
            "label": "Limit exceeded",
            "description": "Stop when a limit or quota (tokens, pages, threads, wall time) ends the LIP",
            "default": False,
        },
    ],
}


__all__ = ["CAPABILITIES"]
