"""Where models come from (issue 3): the built-in name, a GGUF path, a Hugging Face directory, a
hub name; the conversion cache; clear errors for what cannot be loaded; the demo command."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from symphony_core.errors import ModelError
from symphony_core.model import loader
from symphony_core.model.registry import resolve_model

PROMPT = "The capital of France is"


def same_logits(a: torch.Tensor, b: torch.Tensor) -> None:
    """The same model's logits for the same text, up to the fp32 sums' order: the session engine may hold the
    prompt's prefix from earlier tests (the prefix cache) and run only its last token, one row, where a fresh
    engine runs the whole prompt, 5 rows, through another kernel loop (~2e-5 apart here)."""
    torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-4)


def last_logits(eng, text: str = PROMPT) -> torch.Tensor:
    kv = eng.kv_create()
    try:
        return eng.pred(kv, eng.tokenize(text)).logits.float()
    finally:
        eng.kv_close(kv)


def test_builtin_and_directory_sources_resolve(engine):
    src = resolve_model("smollm2")
    assert src.kind == "gguf" and src.path.suffix == ".gguf" and src.path.is_file()
    d = resolve_model(engine.model_dir)  # the conversion cache is itself a Hugging Face directory
    assert d.kind == "hf_dir" and (d.path / "config.json").is_file()
    assert resolve_model(src.path.parent).kind == "gguf"  # a directory holding a .gguf


def test_a_hugging_face_directory_loads_the_same_model(engine):
    from symphony_core import Engine

    other = Engine(str(engine.model_dir), num_pages=32)
    try:
        for field in ("vocab_size", "hidden_size", "n_layers", "n_heads", "n_kv_heads", "head_dim"):
            assert getattr(other.config, field) == getattr(engine.config, field), field
        same_logits(last_logits(other), last_logits(engine))
    finally:
        other.shutdown()


def test_bad_model_names_say_what_is_wrong(tmp_path, monkeypatch):
    with pytest.raises(ModelError, match="unknown model 'nonsense'"):
        resolve_model("nonsense")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ModelError, match="without config.json or a .gguf"):
        resolve_model(tmp_path / "empty")
    (tmp_path / "weights.bin").write_bytes(b"\0" * 16)
    with pytest.raises(ModelError, match="neither a .gguf file nor a model directory"):
        resolve_model(tmp_path / "weights.bin")
    # A hub name where the hub cannot be reached: an error naming the repository, not a hang.
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ModelError, match="could not fetch 'HuggingFaceTB/no-such-model-here'"):
        resolve_model("HuggingFaceTB/no-such-model-here")
    # A directory that is not a Llama-family model.
    bert = tmp_path / "bert"
    bert.mkdir()
    (bert / "config.json").write_text('{"model_type": "bert"}')
    (bert / "model.safetensors").write_bytes(b"")
    with pytest.raises(ModelError, match="model_type 'bert' is not supported"):
        loader.load_model(str(bert))


@pytest.mark.slow
def test_a_gguf_path_converts_once_into_the_cache(engine, tmp_path, monkeypatch):
    """A GGUF given by path converts into $XDG_CACHE_HOME/symphony/models once; the next load
    reads the cache without converting, and the weights give the built-in model's logits."""
    from symphony_core import Engine

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    gguf = resolve_model("smollm2").path
    converted = []
    real = loader._convert_gguf
    monkeypatch.setattr(loader, "_convert_gguf", lambda src, out: (converted.append(out), real(src, out)))

    first = Engine(str(gguf), num_pages=32)
    try:
        assert len(converted) == 1 and Path(converted[0]).parent == tmp_path / "symphony" / "models"
        files = sorted(p.name for p in first.model_dir.glob("*.safetensors"))
        # the weights, and the fp32 blocks checked against them (exact_blocks.py), which the loader leaves out
        assert files == ["fp32-blocks.safetensors", "model.safetensors"], files
        assert [n for n in files if not loader.is_derived_cache(first.model_dir / n)] == ["model.safetensors"]
        same_logits(last_logits(first), last_logits(engine))
    finally:
        first.shutdown()
    t0 = time.perf_counter()
    second = Engine(str(gguf), num_pages=32)
    took = time.perf_counter() - t0
    try:
        assert len(converted) == 1, "the second load converted again"
        assert second.model_dir == first.model_dir
        print(f"second load from the cache: {took:.1f} s")
    finally:
        second.shutdown()
    # no half-written conversion is left behind
    assert not list((tmp_path / "symphony" / "models").glob(".convert-*"))


@pytest.mark.slow
def test_symphony_demo_answers_with_paris():
    """`symphony demo` (the README's demo) runs the chat LIP on the real model and streams the answer."""
    out = subprocess.run(
        [sys.executable, "-m", "symphony_core.cli", "demo"],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "TOKENIZERS_PARALLELISM": "false"},
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.startswith("Q: What is the capital of France?\nA: ")
    assert "Paris" in out.stdout.split("A: ", 1)[1], out.stdout
