"""The front-end's Jest unit tests (extension/src/__tests__), run as part of the Python suite.

They cover the logic the sidebar and the widgets share: the KV fork tree layout and drawing,
the scheduler timeline, the token stream's colours and tooltips, the profiler's line table and the
what-if view, the sidebar's session model folded from events, the protocol's request /
response matching and checks, and which actions a thread offers in each state.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

EXT = Path(__file__).resolve().parent.parent / "extension"


def test_jest_unit_tests():
    jest = EXT / "node_modules" / ".bin" / "jest"
    if not jest.exists() or shutil.which("node") is None:
        pytest.skip("extension/node_modules is not installed (make setup)")
    out = subprocess.run(
        [str(jest), "--ci", "--silent"],
        cwd=EXT,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "CI": "true", "FORCE_COLOR": "0"},
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert "Tests:" in out.stderr and "failed" not in out.stderr.split("Tests:")[1].splitlines()[0]
