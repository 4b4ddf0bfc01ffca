"""The wheel ships Symphony Lab's prebuilt front-end where JupyterLab finds it (issue 8)."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tests.jupyter_harness import ROOT

LABEXT = ROOT / "symphony_lab" / "jupyter" / "labextension"


@pytest.mark.slow
def test_wheel_carries_the_prebuilt_extension_and_widget_bundle(tmp_path):
    """`pip wheel .` goes through hatch-jupyter-builder (which finds the front-end built by
    `make setup` up to date) and packs the labextension twice: inside `symphony_lab` and as
    shared data under share/jupyter/labextensions, plus the server extension's config."""
    if not (LABEXT / "package.json").exists():
        pytest.fail("the front-end is not built: run make setup")
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(tmp_path),
            str(ROOT),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"},
    )
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-3000:]
    (wheel,) = tmp_path.glob("symphony_lip-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    data = next(n.split("/")[0] for n in names if ".data/" in n)
    built = sorted(p.relative_to(LABEXT).as_posix() for p in LABEXT.rglob("*") if p.is_file())
    assert "package.json" in built and any(b.startswith("static/remoteEntry.") for b in built), built
    for rel in built:
        assert f"symphony_lab/jupyter/labextension/{rel}" in names, rel
        assert f"{data}/data/share/jupyter/labextensions/symphony-lab/{rel}" in names, rel
    assert "symphony_lab/widgets/static/widget.js" in names and "symphony_lab/widgets/static/widget.css" in names
    assert f"{data}/data/etc/jupyter/jupyter_server_config.d/symphony_lab.json" in names
    assert "symphony_core/engine.py" in names and "symphony_lab/tui/app.tcss" in names
    assert not any("__pycache__" in n or n.startswith(("tests/", "extension/")) for n in names)
