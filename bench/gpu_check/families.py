"""The model families `make gpu-check` holds to transformers, and the models it makes for them.

No model files: each family is a tiny config from transformers' own config class, with random weights
made on the spot (`make_model`), saved as a model directory that `Engine(path)` loads, with a
word-level tokenizer whose words are `w0`, `w1`, ... and a small chat template. Every family of
symphony_core/model/random_models.py is checked, with the tiny config it tests on the CPU.

`speed_config` is the 1B-class Llama the speed section times (Llama 3.2 1B's shapes).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import torch

TINY_VOCAB = 512
# Each message as `wN <content>`: role words, then the content (unknown words read as w2).
CHAT_TEMPLATE = (
    "{% for m in messages %}{{ 'w3' if m['role'] == 'system' else ('w4' if m['role'] == 'user' else 'w5') }} "
    "{{ m['content'] }} w6 {% endfor %}{% if add_generation_prompt %}w5 {% endif %}"
)


def _common(vocab: int) -> dict:
    return {
        "vocab_size": vocab,
        "bos_token_id": 0,
        "eos_token_id": 1,
        "tie_word_embeddings": True,
        "initializer_range": 0.08,  # wide logits: greedy picks far from ties
    }


def _tiny(family: str) -> Callable:
    def config():
        """The family's tiny config with its quirks on (symphony_core/model/random_models.py, QUIRKS names them)."""
        from symphony_core.model.random_models import build_config

        return build_config(family)[0]

    return config


def _families() -> dict[str, Callable]:
    from symphony_core.model.random_models import FAMILIES as NAMES

    return {name: _tiny(name) for name in NAMES}


# name -> a function making that family's tiny config (transformers' class: AutoModelForCausalLM takes it).
FAMILIES: dict[str, Callable] = _families()


def speed_config():
    """A 1B-class Llama (Llama 3.2 1B: 16 layers of 2,048, 32 query and 8 KV heads of 64, a 128k vocabulary)."""
    from transformers import LlamaConfig

    cfg = LlamaConfig(
        hidden_size=2048,
        intermediate_size=8192,
        num_hidden_layers=16,
        num_attention_heads=32,
        num_key_value_heads=8,
        head_dim=64,
        max_position_embeddings=4096,
        rope_theta=500000.0,
        **_common(128256),
    )
    cfg.initializer_range = 0.02
    return cfg


def _tokenizer(out: Path, vocab: int) -> None:
    from tokenizers import Tokenizer, models, pre_tokenizers

    tok = Tokenizer(models.WordLevel({f"w{i}": i for i in range(vocab)}, unk_token="w2"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.save(str(out / "tokenizer.json"))
    cfg = {"bos_token": "w0", "eos_token": "w1", "chat_template": CHAT_TEMPLATE}
    (out / "tokenizer_config.json").write_text(json.dumps(cfg))


def make_model(config, out: Path, device: str = "cpu", dtype: torch.dtype = torch.float32, seed: int = 0):
    """Random weights for `config`, saved under `out` with a tokenizer; returns the transformers model
    (on `device`, in `dtype`), which holds the same weights as the directory."""
    from transformers import AutoModelForCausalLM

    out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(seed)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(config, dtype=dtype)
    model.eval()
    model.save_pretrained(out)
    _tokenizer(out, config.vocab_size)
    return model


def prompt(n: int, seed: int, vocab: int = TINY_VOCAB) -> list[int]:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(3, vocab, (n,), generator=g).tolist()
