"""Symphony in a notebook: `from symphony_lab import lab`, then `lab.run(fn, ...)`.

Importing this module starts nothing. The first use (`lab.run`, `lab.wait`, `lab.views`, ...)
creates the kernel's one `Lab`, which loads an embedded engine on a background thread,
attaches a `Debugger` to it and — inside a Jupyter kernel — opens the bridge the JupyterLab
sidebar talks to (see `symphony_lab.jupyter`). `lab.start()` begins loading without launching.

    from symphony_lab import lab

    def complete(sym, prompt, max_tokens=16): ...

    run = lab.run(complete, "The capital of France is", stop_on_entry=True)   # shows a live widget
    run.step(); run.step(); run.override(text=" Lyon"); run.continue_()
    run.result()

Edit `complete` in its cell, run the cell again, and press *Relaunch* in the widget (or call
`run.relaunch()`): the new definition runs, the kernel keeps its engine and model.

Record and replay: launch with `record=True` (or press *Record* in the widget while the LIP is
stopped on entry); then *Step back* (`run.step_back()`) replays the recorded run into a new
process that stops right after the previous `pred`, with the recorded distribution. The run
(and its widget) follows the new process.

The parts live in `symphony_lab.notebook` (lab.py, run.py, views.py, token_tap.py, kernel.py).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from .notebook.lab import Lab
from .notebook.run import LabRun

_LAB: Lab | None = None
_LAB_LOCK = threading.Lock()


def get_lab() -> Lab:
    """The kernel's one Lab (created, and its engine started loading, on first use)."""
    global _LAB
    with _LAB_LOCK:
        if _LAB is None:
            _LAB = Lab()
        return _LAB


def start() -> Lab:
    """Start loading the engine now (in the background) without launching anything."""
    return get_lab()


def run(fn: Callable, *args: Any, **kwargs: Any) -> LabRun:
    return get_lab().run(fn, *args, **kwargs)


run.__doc__ = Lab.run.__doc__


def wait(timeout: float | None = 300):
    """Wait for the embedded engine to load and return it."""
    return get_lab().wait(timeout)


def views():
    return get_lab().views()


def trace(path: str | None = None) -> dict:
    return get_lab().trace(path)


def handle(req: dict) -> dict:
    return get_lab().handle(req)


def __getattr__(name: str) -> Any:
    if name in ("engine", "debugger", "bridge", "kernel_id", "state"):
        lab = get_lab()
        if name in ("engine", "debugger"):
            lab.wait()
        return getattr(lab, name)
    raise AttributeError(name)


__all__ = ["Lab", "LabRun", "get_lab", "handle", "run", "start", "trace", "views", "wait"]
