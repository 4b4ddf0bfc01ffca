"""Load a model's weights, config and tokenizer; convert GGUF once into a safetensors cache.

Converting the GGUF (dequantising through transformers) takes ~20 s; the cache under
`$XDG_CACHE_HOME/symphony/models/` makes every later load a plain safetensors read.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import torch

from ..errors import ModelError
from .families import strip_wrapper, text_config
from .registry import ModelSource, resolve_model
from .tokenizer import Tokenizer


def cache_root() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "symphony" / "models"


@dataclass
class LoadedModel:
    name: str
    directory: Path  # safetensors + config.json + tokenizer files
    config: dict
    weights: dict[str, torch.Tensor]
    tokenizer: Tokenizer
    gguf_path: Path | None = None  # the GGUF it was converted from (its Q4_1 blocks feed weights="q4")


DERIVED_CACHES = ("quant-", "fp32-blocks")  # files derived from the weights and kept beside them


def is_derived_cache(path: Path) -> bool:
    """A file beside the converted weights that was derived from them (weight_formats.py, exact_blocks.py)."""
    return path.name.startswith(DERIVED_CACHES)


def _cache_dir_for(src: ModelSource) -> Path:
    st = src.path.stat()
    key = hashlib.sha256(f"{src.path}|{st.st_size}|{int(st.st_mtime)}".encode()).hexdigest()[:12]
    return cache_root() / f"{src.name}-{key}"


def _convert_gguf(src: ModelSource, out: Path) -> None:
    from safetensors.torch import save_file
    from tqdm import tqdm
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    from .gguf_config import config_from_gguf

    print(f"symphony: converting {src.path.name} to fp32 once; cached at {out}", file=sys.stderr)
    folder, fname = str(src.path.parent), src.path.name
    steps = tqdm(total=4, desc=f"converting {fname}", unit="step", file=sys.stderr)
    tmp = Path(tempfile.mkdtemp(prefix=".convert-", dir=out.parent))
    try:
        steps.set_postfix_str("tokenizer")
        tok = AutoTokenizer.from_pretrained(folder, gguf_file=fname)
        steps.update()
        steps.set_postfix_str("dequantising weights")
        # the family's whole config from the file's own keys: transformers' reader drops several (gguf_config.py)
        full = AutoConfig.for_model(**config_from_gguf(src.path))
        # transformers reads a Mistral GGUF's tensors only as the Llama llama.cpp wrote it (the same tensors)
        as_llama = {**full.to_dict(), "model_type": "llama", "sliding_window": None}
        config = AutoConfig.for_model(**as_llama) if full.model_type == "mistral" else full
        model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=fname, config=config, dtype=torch.float32)
        steps.update()
        steps.set_postfix_str("writing safetensors")
        state = {k: v.contiguous() for k, v in model.state_dict().items()}
        if model.config.tie_word_embeddings:
            state.pop("lm_head.weight", None)
        save_file(state, str(tmp / "model.safetensors"), metadata={"format": "pt"})
        steps.update()
        steps.set_postfix_str("config and tokenizer files")
        cfg = full.to_dict()
        cfg.pop("quantization_config", None)
        cfg["dtype"] = "float32"
        (tmp / "config.json").write_text(json.dumps(cfg, indent=2))
        tok.save_pretrained(str(tmp))
        os.replace(tmp, out)
        steps.update()
    finally:
        steps.close()
        shutil.rmtree(tmp, ignore_errors=True)


def ensure_converted(name_or_path: str) -> tuple[ModelSource, Path]:
    """The directory holding this model as safetensors, converting a GGUF the first time."""
    src = resolve_model(name_or_path)
    if src.kind == "hf_dir":
        return src, src.path
    out = _cache_dir_for(src)
    if not (out / "config.json").exists():
        out.parent.mkdir(parents=True, exist_ok=True)
        try:
            _convert_gguf(src, out)
        except OSError as e:  # another process converted it at the same time: its rename won (EEXIST, ENOTEMPTY)
            if not (out / "config.json").exists():
                raise ModelError(f"could not convert {src.path}: {e}") from e
        except Exception as e:
            raise ModelError(f"could not convert {src.path}: {e}") from e
    return src, out


def stop_token_ids(directory: Path, config: dict) -> list[int]:
    """The config's eos ids and generation_config.json's (Llama 3's instruct models stop on three)."""
    ids: list[int] = []
    gen = directory / "generation_config.json"
    for source in (config, json.loads(gen.read_text()) if gen.exists() else {}):
        eos = source.get("eos_token_id")
        for i in [] if eos is None else [eos] if isinstance(eos, int) else eos:
            if i not in ids:
                ids.append(int(i))
    return ids


def model_family(name_or_path: str) -> str:
    """A line saying which supported family the model is (converting a GGUF first), or a ModelError saying why not."""
    from .families import FAMILIES

    src, directory = ensure_converted(name_or_path)
    text, family = text_config(json.loads((directory / "config.json").read_text()), src.name)
    return f"{src.name}: {FAMILIES[family].name} ({family}), {text.get('num_hidden_layers')} layers, hidden {text.get('hidden_size')}"


def load_model(name_or_path: str, dtype: torch.dtype = torch.float32, device: str = "cpu") -> LoadedModel:
    from safetensors.torch import load_file

    src, directory = ensure_converted(name_or_path)
    config = json.loads((directory / "config.json").read_text())
    text, _ = text_config(config, src.name)  # an unsupported architecture is refused here, by name
    weights: dict[str, torch.Tensor] = {}
    index = directory / "model.safetensors.index.json"
    if index.exists():  # a sharded checkpoint names its files
        files = sorted({directory / f for f in json.loads(index.read_text())["weight_map"].values()})
    else:  # not the caches weight_formats.py and exact_blocks.py write beside the weights
        files = sorted(f for f in directory.glob("*.safetensors") if not is_derived_cache(f))
    if not files:
        raise ModelError(f"{directory} holds no .safetensors weights")
    for f in files:
        weights.update(load_file(str(f), device="cpu"))
    weights = {k: v.to(device=device, dtype=dtype) for k, v in strip_wrapper(config, weights).items()}
    tokenizer = Tokenizer(directory, stop_token_ids(directory, text))
    return LoadedModel(src.name, directory, config, weights, tokenizer, src.path if src.kind == "gguf" else None)
