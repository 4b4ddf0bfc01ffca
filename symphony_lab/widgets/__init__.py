"""Inline notebook widgets (anywidget): a live view of one LIP run, and of the whole engine.

The JavaScript is bundled into the wheel (`static/widget.js`, built from extension/src/widget
by `make setup`; no CDN). State flows kernel -> browser as one JSON trait, `view`, set from the
lab's background thread (so it updates while a cell runs or a LIP is stopped). Commands flow
browser -> kernel over the Jupyter server's Symphony Lab WebSocket when the page has one (it
does not wait behind a busy kernel), else as widget messages.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anywidget
import traitlets

STATIC = Path(__file__).parent / "static"
BUNDLE = STATIC / "widget.js"
CSS = STATIC / "widget.css"

_MISSING_JS = """
export default { render({ model, el }) {
  el.innerHTML = '<div class="symphony-lab-widget sl-missing">Symphony Lab widget code is not built: ' +
    'run <code>make setup</code> (it builds extension/ with jlpm).</div>';
} };
"""


def _esm() -> Any:
    return BUNDLE if BUNDLE.exists() else _MISSING_JS


def _css() -> Any:
    return CSS if CSS.exists() else ""


class _Base(anywidget.AnyWidget):
    _esm = _esm()
    _css = _css()
    kind = traitlets.Unicode("run").tag(sync=True)
    view = traitlets.Dict({}).tag(sync=True)
    kernel_id = traitlets.Unicode("").tag(sync=True)

    def __init__(self, lab, **kw: Any) -> None:
        super().__init__(**kw)
        self._lab = lab
        self.kernel_id = lab.kernel_id or ""
        self.on_msg(self._on_custom)

    def _on_custom(self, _widget: Any, content: Any, _buffers: Any) -> None:
        """A command sent over the widget's comm (when the page has no server route)."""
        if not isinstance(content, dict) or content.get("type") != "request":
            from symphony_lab.jupyter.messages import error_response

            self.send(
                error_response(
                    content if isinstance(content, dict) else None, "malformed message: expected a request object"
                )
            )
            return
        self.send(self._lab.handle(content))


class LIPWidget(_Base):
    """The live view of one `lab.run`: controls, the token stream, the stop, KV tree, timeline."""

    def __init__(self, run) -> None:
        super().__init__(run.lab, kind="run")
        self._run = run
        self.view = run.lab.run_views.run_view(run)


class LabViewWidget(_Base):
    """The KV fork tree and the scheduler timeline of the whole engine (`lab.views()`)."""

    def __init__(self, lab) -> None:
        super().__init__(lab, kind="engine")
        if lab.ready:
            self.view = lab.run_views.lab_view()
        else:
            self.view = {"engine": lab.run_views.engine_view()}


__all__ = ["LIPWidget", "LabViewWidget"]
