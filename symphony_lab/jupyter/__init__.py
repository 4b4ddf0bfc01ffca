"""Symphony Lab in JupyterLab: the jupyter-server extension and the prebuilt labextension.

The sidebar (extension/, shipped prebuilt in `labextension/`) reaches the notebook kernel's
engine through this server extension: REST + WebSocket routes behind Jupyter's
authentication, forwarded to a bridge the kernel's `symphony_lab.lab` opens on a loopback
port (see bridge.py for why not kernel comms).
"""

from __future__ import annotations

from pathlib import Path

HERE = Path(__file__).parent


def _jupyter_labextension_paths() -> list[dict]:
    return [{"src": "labextension", "dest": "symphony-lab"}]


def _jupyter_server_extension_points() -> list[dict]:
    return [{"module": "symphony_lab.jupyter"}]


def _load_jupyter_server_extension(serverapp) -> None:
    from .handlers import setup_handlers

    setup_handlers(serverapp.web_app, serverapp.runtime_dir)
    serverapp.log.info("Symphony Lab server extension loaded (routes under /symphony-lab/api)")


load_jupyter_server_extension = _load_jupyter_server_extension
