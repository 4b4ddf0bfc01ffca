"""The `symphony serve` flags a vLLM user types (`vllm serve`'s names and meanings), and what they
set: `OpenAIOptions` travels from the command line to `serve`, which applies it to the engine and
the server's configuration before the app starts.

--api-key adds a user (`api`) with that token; --enable-prefix-caching / --no-enable-prefix-caching
are --no-prefix-cache's vLLM spelling (handled in commands.py)."""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from pathlib import Path

DTYPES = ("auto", "float32", "float16", "bfloat16", "half", "float")
# sampling fields a model's generation_config.json may set, and the request field each one defaults
GENERATION_FIELDS = {
    "temperature": "temperature",
    "top_p": "top_p",
    "top_k": "top_k",
    "min_p": "min_p",
    "repetition_penalty": "repetition_penalty",
}


@dataclass
class OpenAIOptions:
    served_model_name: str | None = None
    max_model_len: int | None = None
    dtype: str = "auto"
    chat_template: str | None = None  # a file, or the template's text
    max_num_seqs: int | None = None
    generation_config: str = "auto"  # "auto" (the model's), "vllm" (none), or a directory
    allowed_origins: list[str] | None = None


def add_vllm_flags(s: argparse.ArgumentParser) -> None:
    g = s.add_argument_group("vLLM-compatible options")
    g.add_argument("--api-key", default=None, help="require this bearer token (a user named 'api' holds it)")
    g.add_argument(
        "--served-model-name", default=None, help="the model's name in the OpenAI API (default: the model's own)"
    )
    g.add_argument(
        "--max-model-len",
        type=int,
        default=None,
        help="most tokens of prompt + reply one OpenAI request may use (default: the model's context)",
    )
    g.add_argument("--dtype", choices=DTYPES, default="auto", help="the weights' dtype (default: %(default)s)")
    g.add_argument("--chat-template", default=None, help="a Jinja chat template (file or text) replacing the model's")
    g.add_argument(
        "--max-num-seqs", type=int, default=None, help="most sequences fused into one forward pass (default: 256)"
    )
    g.add_argument(
        "--enable-prefix-caching",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="keep prompts' K/V for later prompts of the same user (default: on)",
    )
    g.add_argument(
        "--generation-config",
        default="auto",
        help="sampling defaults: 'auto' (the model's generation_config.json), 'vllm' (none) "
        "or a directory holding a generation_config.json (default: %(default)s)",
    )
    g.add_argument(
        "--allowed-origins",
        nargs="*",
        default=None,
        help="origins a browser may call the API from (CORS; default: any, as vLLM)",
    )


def torch_dtype(name: str, device: str):
    import torch

    if name == "auto":
        return None
    return {"float32": torch.float32, "float": torch.float32, "float16": torch.float16, "half": torch.float16}.get(
        name, torch.bfloat16
    )


def chat_template_text(spec: str) -> str:
    p = Path(spec)
    try:
        if p.is_file():
            return p.read_text()
    except OSError:
        pass
    if "{{" in spec or "{%" in spec:
        return spec
    raise ValueError(f"--chat-template {spec!r} is neither a readable file nor a Jinja template")


def generation_defaults(spec: str, model_dir: Path) -> dict:
    """The request defaults of --generation-config."""
    if spec == "vllm":
        return {}
    path = (model_dir if spec == "auto" else Path(spec)) / "generation_config.json"
    if not path.exists():
        if spec == "auto":
            return {}
        raise ValueError(f"--generation-config {spec!r}: no generation_config.json there")
    cfg = json.loads(path.read_text())
    return {field: cfg[key] for key, field in GENERATION_FIELDS.items() if cfg.get(key) is not None}
