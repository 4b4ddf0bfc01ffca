"""The random-weight test models of every family (symphony_core.model.random_models): each saves as a
directory transformers loads back to the same logits, with the family's quirks really on, its tokenizer and
chat template working through transformers, and a sharded save loading the same weights."""

from __future__ import annotations

import json

import pytest
import torch
from tokenizers import Tokenizer

from symphony_core.model.random_chat_templates import SPECIALS, TOOL_FAMILIES
from symphony_core.model.random_models import FAMILIES, QUIRKS, build_model, make_random_model

TEXT = (
    "The quick brown fox jumps over the lazy dog, then asks about the weather in Paris today. "
    "It is sunny with a high of 21 degrees and a light breeze from the west."
)
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Get the weather for a city",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
        },
    }
]


@pytest.fixture(scope="module")
def model_dirs(tmp_path_factory):
    root = tmp_path_factory.mktemp("random_models")
    return {f: make_random_model(f, root / f) for f in FAMILIES}


def _load(d):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(str(d), dtype=torch.float32).eval()


def _ids(d, text=TEXT):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(d))(text, return_tensors="pt").input_ids


@pytest.mark.parametrize("family", FAMILIES)
def test_directory_reloads_to_the_built_model(family, model_dirs):
    """Saved and reloaded through transformers, the model gives the built model's logits exactly, the files
    name the architecture and the generation config carries the family's eos ids."""
    d = model_dirs[family]
    built, _ = build_model(family)
    loaded = _load(d)
    ids = _ids(d)
    assert ids.shape[1] > 32  # longer than the sliding windows
    with torch.no_grad():
        assert torch.equal(built(ids).logits, loaded(ids).logits)
    cfg = json.loads((d / "config.json").read_text())
    assert cfg["architectures"] == [type(built).__name__]
    gen = json.loads((d / "generation_config.json").read_text())
    tok = Tokenizer.from_file(str(d / "tokenizer.json"))
    want = [tok.token_to_id(t) for t in SPECIALS[family].gen_eos]
    assert gen["eos_token_id"] == (want[0] if len(want) == 1 else want)
    assert cfg["vocab_size"] >= tok.get_vocab_size()
    assert QUIRKS[family]


def test_builds_are_deterministic_and_seeded():
    a, _ = build_model("qwen2", seed=0)
    b, _ = build_model("qwen2", seed=0)
    c, _ = build_model("qwen2", seed=1)
    sa, sb, sc = a.state_dict(), b.state_dict(), c.state_dict()
    assert all(torch.equal(sa[k], sb[k]) for k in sa)
    assert not torch.equal(sa["model.layers.0.self_attn.q_proj.bias"], sc["model.layers.0.self_attn.q_proj.bias"])


def _logits_without(model, ids, **overrides):
    """The model's logits with some config fields changed (the same weights)."""
    saved = {k: getattr(model.config, k) for k in overrides}
    for k, v in overrides.items():
        setattr(model.config, k, v)
    try:
        with torch.no_grad():
            return model(ids).logits
    finally:
        for k, v in saved.items():
            setattr(model.config, k, v)


@pytest.mark.parametrize("family", ["mistral", "gemma3"])
def test_sliding_window_is_on(family, model_dirs):
    """sliding window 24 tokens < test context: the logits match full attention up to the window and differ after."""
    m = _load(model_dirs[family])
    ids = _ids(model_dirs[family])
    with torch.no_grad():
        windowed = m(ids).logits[0]
    full = _logits_without(m, ids, sliding_window=10_000)[0]
    assert torch.allclose(windowed[:24], full[:24], atol=1e-5)
    assert (windowed[30:] - full[30:]).abs().max() > 1e-2


def test_quirk_weights_are_drawn(model_dirs):
    """fused-qkv bias, (1+w) norms, q/k norm: drawn away from transformers' neutral start, so a loader that
    dropped a bias or used w instead of (1+w) would show in the logits."""
    q2 = _load(model_dirs["qwen2"]).state_dict()
    assert q2["model.layers.0.self_attn.k_proj.bias"].abs().mean() > 0.03
    g3 = _load(model_dirs["gemma3"]).state_dict()
    assert g3["model.layers.0.self_attn.q_norm.weight"].abs().mean() > 0.05
    assert g3["model.layers.0.pre_feedforward_layernorm.weight"].abs().mean() > 0.05
    q3 = _load(model_dirs["qwen3"]).state_dict()
    assert (q3["model.layers.0.self_attn.k_norm.weight"] - 1).abs().mean() > 0.05
    assert "lm_head.weight" not in q3 or torch.equal(q3["lm_head.weight"], q3["model.embed_tokens.weight"])


@pytest.mark.parametrize("family", FAMILIES)
def test_tokenizer_and_chat_template(family, model_dirs):
    """AutoTokenizer gives the trained tokenizer's ids (special tokens whole), and the chat template renders the
    family's turn layout through apply_chat_template (with tools where the real template has them)."""
    from transformers import AutoTokenizer

    d = model_dirs[family]
    at = AutoTokenizer.from_pretrained(str(d))
    raw = Tokenizer.from_file(str(d / "tokenizer.json"))
    sp = SPECIALS[family]
    for text in (TEXT, "  two  spaces\nnewline 12345 東京 🙂", sp.eos + " after"):
        assert at(text).input_ids == raw.encode(text).ids
    assert raw.token_to_id(sp.eos) in at(sp.eos).input_ids
    msgs = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Weather in Paris?"}]
    out = at.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
    expect = {
        "qwen2": "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nWeather in Paris?<|im_end|>\n"
        "<|im_start|>assistant\n",
        "qwen3": "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nWeather in Paris?<|im_end|>\n"
        "<|im_start|>assistant\n",
        "llama": "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December "
        "2023\nToday Date: 26 Jul 2024\n\nBe brief.<|eot_id|><|start_header_id|>user<|end_header_id|>\n\n"
        "Weather in Paris?<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n",
        "mistral": "<s>[INST] Be brief.\n\nWeather in Paris?[/INST]",
        "gemma3": "<bos><start_of_turn>user\nBe brief.\n\nWeather in Paris?<end_of_turn>\n<start_of_turn>model\n",
        "phi3": "<|system|>\nBe brief.<|end|>\n<|user|>\nWeather in Paris?<|end|>\n<|assistant|>\n",
    }[family]
    assert out == expect
    ids = at.apply_chat_template(msgs, tokenize=True, add_generation_prompt=True, return_dict=True)["input_ids"]
    assert ids == raw.encode(expect, add_special_tokens=False).ids
    if family in TOOL_FAMILIES:
        call = {"role": "assistant", "tool_calls": [{"type": "function", "function": {
            "name": "get_weather", "arguments": {"city": "Paris"}}}]}  # fmt: skip
        convo = [*msgs, call, {"role": "tool", "content": "21C sunny"}]
        out = at.apply_chat_template(convo, tools=TOOLS, tokenize=False, add_generation_prompt=True)
        assert '"get_weather"' in out and "Get the weather for a city" in out and "21C sunny" in out
        marker = {
            "qwen2": "<tools>",
            "qwen3": "<tools>",
            "llama": "Environment: ipython",
            "mistral": "[AVAILABLE_TOOLS]",
        }
        assert marker[family] in out
        if family.startswith("qwen"):
            assert '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>' in out
            assert "<tool_response>\n21C sunny\n</tool_response>" in out


def test_sharded_save_loads_the_same_weights(tmp_path, model_dirs):
    """shard=True: two safetensors files and an index, which transformers loads to the unsharded logits."""
    d = make_random_model("gemma3", tmp_path / "sharded", shard=True)
    index = json.loads((d / "model.safetensors.index.json").read_text())
    assert len(set(index["weight_map"].values())) == 2
    assert not (d / "model.safetensors").exists()
    ids = _ids(d)
    with torch.no_grad():
        assert torch.equal(_load(d)(ids).logits, _load(model_dirs["gemma3"])(ids).logits)
