"""The course-lab notebooks in tutorials/ run top to bottom in a real Jupyter kernel (nbclient).

Each notebook checks itself with asserts (stepping, overriding, relaunching an edited LIP, the
KV fork tree, the trace); this test also checks that the live widgets were displayed with a
state the browser can render.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
TUTORIALS = sorted((ROOT / "tutorials").glob("*.ipynb"))


@pytest.mark.parametrize("path", TUTORIALS, ids=[p.stem for p in TUTORIALS])
def test_tutorial_runs(path, tmp_path):
    import nbformat
    from nbclient import NotebookClient

    nb = nbformat.read(path, as_version=4)
    env_runtime = tmp_path / "runtime"
    env_runtime.mkdir()
    old = os.environ.get("JUPYTER_RUNTIME_DIR")
    os.environ["JUPYTER_RUNTIME_DIR"] = str(env_runtime)  # the kernel's bridge registers here
    try:
        client = NotebookClient(nb, timeout=240, kernel_name="python3",
                                resources={"metadata": {"path": str(path.parent)}})
        client.execute()
    finally:
        if old is None:
            os.environ.pop("JUPYTER_RUNTIME_DIR", None)
        else:
            os.environ["JUPYTER_RUNTIME_DIR"] = old
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []) if o.output_type == "error"]
    assert not errors
    widgets = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])
               if o.output_type == "display_data" and "application/vnd.jupyter.widget-view+json" in o.get("data", {})]
    assert len(widgets) >= 2, "lab.run and lab.views display live widgets"
    state = nb.metadata.get("widgets", {}).get("application/vnd.jupyter.widget-state+json", {}).get("state", {})
    views = [m["state"].get("view") for m in state.values() if m.get("model_name") == "AnyModel" and m["state"].get("view")]
    assert views, "nbclient stores the widgets' state in the notebook"
    runs = [v for v in views if v.get("name") == "complete"]
    # the state stored is the last one sent before the kernel stopped (a relaunched run may be mid-way)
    assert runs and any(v["status"] == "finished" for v in runs), [v.get("status") for v in runs]
    assert any(v["tokens"] and v["kv_tree"] and v["timeline"]["batches"] for v in runs)
    assert json.dumps(views)
