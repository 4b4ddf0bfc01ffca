"""Driving Symphony Lab's TUI with Textual's pilot: what the screen shows, waiting for it."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")


def screen_text(app) -> str:
    """What the terminal shows now, as plain text (one line per row)."""
    return "\n".join(strip.text for strip in app.screen._compositor.render_strips())


async def wait_until(pilot, cond, what: str, timeout: float = 90.0) -> None:
    t0 = time.monotonic()
    while not cond():
        if time.monotonic() - t0 > timeout:
            raise AssertionError(f"timed out waiting for {what}; the screen shows:\n{screen_text(pilot.app)}")
        await pilot.pause(0.1)


LIPS_FOR_TESTS = Path(__file__).resolve().parent / "lips_for_tests.py"


def drive_greedy_session(engine, script: Callable[[Any, Any, Any], Awaitable[T]]) -> tuple[T, Any]:
    """Symphony Lab (160x48) on an embedded session of lips_for_tests.py's `greedy` (4 tokens):
    waits for the stop on entry, runs `await script(pilot, app, session)`, closes the session.
    Returns what the script returned, and the (closed) session."""
    from symphony_lab.tui.app import SymphonyLab
    from symphony_lab.tui.embedded import EmbeddedSession

    session = EmbeddedSession(f"{LIPS_FOR_TESTS}:greedy", ("Once upon a time",), {"max_tokens": 4}, engine=engine)
    app = SymphonyLab(session)

    async def drive() -> T:
        async with app.run_test(size=(160, 48)) as pilot:
            await wait_until(pilot, lambda: app.focused_stop() is not None, "the stop on entry")
            return await script(pilot, app, session)

    try:
        return asyncio.run(drive()), session
    finally:
        session.close()
