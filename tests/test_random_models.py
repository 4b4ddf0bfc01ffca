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


def test_rope_and_scaling_quirks_are_active(model_dirs):
    """transformers' own modules run the quirks QUIRKS names: llama3-scaled and linear-scaled frequencies, Gemma 3's
    local rope base and query_pre_attn_scalar, Phi-3's partial rotary and longrope attention factor, Qwen3's
    head_dim 80, and Gemma's final soft-cap bounding the logits."""
    llama = _load(model_dirs["llama"]).model
    default = 1.0 / (500000.0 ** (torch.arange(0, 48, 2, dtype=torch.float32) / 48))
    assert llama.rotary_emb.rope_type == "llama3" and not torch.allclose(llama.rotary_emb.inv_freq, default)
    gemma_lm = _load(model_dirs["gemma3"])
    gemma = gemma_lm.model
    local, glob = gemma.rotary_emb.sliding_attention_inv_freq, gemma.rotary_emb.full_attention_inv_freq
    assert torch.allclose(local[1], torch.tensor(10000.0 ** (-2 / 48)))
    assert torch.allclose(glob[1], torch.tensor(1e6 ** (-2 / 48) / 8))  # linear scaling, factor 8
    assert gemma.layers[0].self_attn.scaling == 64**-0.5 != 48**-0.5
    with torch.no_grad():
        assert gemma_lm(_ids(model_dirs["gemma3"])).logits.abs().max() < 12.0
    phi = _load(model_dirs["phi3"]).model
    assert phi.rotary_emb.inv_freq.shape == (30,)  # 60 of head_dim 80 rotated
    assert phi.rotary_emb.rope_type == "longrope" and phi.rotary_emb.attention_scaling == pytest.approx(
        1.0801, abs=1e-4
    )
    assert _load(model_dirs["qwen3"]).model.layers[0].self_attn.q_proj.out_features == 4 * 80


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
    n_tok = Tokenizer.from_file(str(model_dirs["qwen2"] / "tokenizer.json")).get_vocab_size()
    emb = q2["model.embed_tokens.weight"]
    assert emb.shape[0] > n_tok and not emb[n_tok:].any() and emb[:n_tok].abs().mean() > 0.03  # padded vocab
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
        call = {"role": "assistant", "tool_calls": [{"id": "abcDEF123", "type": "function", "function": {
            "name": "get_weather", "arguments": {"city": "Paris"}}}]}  # fmt: skip
        convo = [*msgs, call, {"role": "tool", "content": "21C sunny", "tool_call_id": "abcDEF123"}]
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
        if family == "llama":  # Llama 3.1's: the call as "parameters" JSON, the result as an ipython turn
            assert '{"name": "get_weather", "parameters": {"city": "Paris"}}<|eot_id|>' in out
            assert '<|start_header_id|>ipython<|end_header_id|>\n\n"21C sunny"<|eot_id|>' in out
            with pytest.raises(Exception, match="single tool-calls"):
                at.apply_chat_template([*msgs, {**call, "tool_calls": call["tool_calls"] * 2}], tools=TOOLS)
        if family == "mistral":  # Mistral v0.3's: a JSON list after [TOOL_CALLS], 9-character ids
            assert (
                '[TOOL_CALLS] [{"name": "get_weather", "arguments": {"city": "Paris"}, "id": "abcDEF123"}]</s>' in out
            )
            assert '[TOOL_RESULTS] {"content": 21C sunny, "call_id": "abcDEF123"}[/TOOL_RESULTS]' in out
            bad = [{**call, "tool_calls": [{**call["tool_calls"][0], "id": "call_1"}]}]
            with pytest.raises(Exception, match="length 9"):
                at.apply_chat_template([*msgs, *bad], tools=TOOLS)


def test_sharded_save_loads_the_same_weights(tmp_path, model_dirs):
    """shard=True: two safetensors files and an index, which transformers loads to the unsharded logits and the
    GGUF writer reads to the same tensors."""
    d = make_random_model("gemma3", tmp_path / "sharded", shard=True)
    index = json.loads((d / "model.safetensors.index.json").read_text())
    assert len(set(index["weight_map"].values())) == 2
    assert not (d / "model.safetensors").exists()
    ids = _ids(d)
    with torch.no_grad():
        assert torch.equal(_load(d)(ids).logits, _load(model_dirs["gemma3"])(ids).logits)
    from symphony_core.model.gguf_writer import write_gguf

    _, sharded = _gguf_fields(write_gguf(d, tmp_path / "sharded.gguf"))
    _, single = _gguf_fields(write_gguf(model_dirs["gemma3"], tmp_path / "single.gguf"))
    assert sharded.keys() == single.keys()
    assert all((sharded[k].data == single[k].data).all() for k in single)


# ---- the GGUF writer (symphony_core.model.gguf_writer) ----


@pytest.fixture(scope="module")
def gguf_files(model_dirs):
    from symphony_core.model.gguf_writer import write_gguf

    return {f: write_gguf(d, d / "model-F32.gguf") for f, d in model_dirs.items()}


def _gguf_state_dict(d, g):
    """The GGUF's tensors as transformers' GGUF reader gives them (dequantised, Q/K rows un-permuted, Gemma's
    norms shifted back), under HF names."""
    from transformers import AutoConfig, LlamaConfig, LlamaForCausalLM
    from transformers.modeling_gguf_pytorch_utils import load_gguf_checkpoint

    cfg = AutoConfig.from_pretrained(str(d))
    if cfg.model_type == "mistral":
        # transformers maps a "mistral" model to gguf-py's architecture list by name and finds none (llama.cpp
        # writes Mistral as "llama"), so read the tensors against a Llama of the same shape and names
        fields = {k: v for k, v in cfg.to_dict().items() if k not in ("model_type", "architectures", "sliding_window")}
        shell = LlamaForCausalLM(LlamaConfig(**fields))
    else:
        shell = _load(d)
    return load_gguf_checkpoint(str(g), return_tensors=True, model_to_load=shell)["tensors"]


def _gguf_model(d, g):
    """The GGUF's weights in transformers, in the directory's config (transformers' GGUF config reader drops
    most quirks; see test_transformers_gguf_config_reader_...)."""
    from transformers import AutoConfig, AutoModelForCausalLM

    cfg = AutoConfig.from_pretrained(str(d))
    if cfg.model_type != "mistral":
        return AutoModelForCausalLM.from_pretrained(str(d), gguf_file=str(g), config=cfg, dtype=torch.float32).eval()
    m = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32).eval()
    m.load_state_dict(_gguf_state_dict(d, g), strict=True)
    return m


@pytest.mark.parametrize("family", FAMILIES)
def test_f32_gguf_round_trips_through_transformers(family, model_dirs, gguf_files, tmp_path):
    """The F32 GGUF read back by transformers gives the directory model's logits (permuted Q/K rows, Gemma's
    1 + w norms, Phi-3's fused tensors, biases all undone correctly), and its tokenizer the same ids and chat
    template."""
    from transformers import AutoTokenizer

    d, g = model_dirs[family], gguf_files[family]
    ids = _ids(d)
    with torch.no_grad():
        want = _load(d)(ids).logits
        got = _gguf_model(d, g)(ids).logits
    assert torch.allclose(got, want, atol=1e-5, rtol=0), (got - want).abs().max()
    (tmp_path / g.name).symlink_to(g)  # the GGUF alone, as a GGUF repo ships it
    gt, dt = AutoTokenizer.from_pretrained(str(tmp_path), gguf_file=g.name), AutoTokenizer.from_pretrained(str(d))
    assert (gt.bos_token, gt.eos_token) == (dt.bos_token, dt.eos_token)
    sp = SPECIALS[family]
    for text in (TEXT, "  two  spaces\nnewline 12345 東京 🙂", f"{sp.eos}x{''.join(sp.tail[:3] + sp.head[:3])}"):
        assert gt(text).input_ids == dt(text).input_ids, text
    msgs = [{"role": "user", "content": "Weather in Paris?"}]
    assert gt.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True) == dt.apply_chat_template(
        msgs, tokenize=False, add_generation_prompt=True
    )


def _gguf_fields(g):
    import gguf

    r = gguf.GGUFReader(str(g))
    return {k: f.contents() for k, f in r.fields.items()}, {t.name: t for t in r.tensors}


def test_gguf_metadata_carries_each_quirk(model_dirs, gguf_files):
    """What transformers' GGUF reader ignores but an engine needs is in the files, under llama.cpp's keys:
    llama3 rope factors (equal to transformers' own llama3 frequencies), Mistral's and Gemma 3's windows, Gemma
    3's layer pattern, local rope base, linear scaling, soft-cap and attention scale, Phi-3's longrope factors
    and attention factor, Qwen3's head size, the chat template and the eos / end-of-turn ids."""
    from gguf import quants
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    kv, ts = _gguf_fields(gguf_files["llama"])
    cfg = _load(model_dirs["llama"]).config
    scaled, _ = ROPE_INIT_FUNCTIONS["llama3"](cfg, "cpu")
    base = 1.0 / (500000.0 ** (torch.arange(0, 48, 2, dtype=torch.float32) / 48))
    factors = torch.tensor(quants.dequantize(ts["rope_freqs.weight"].data, ts["rope_freqs.weight"].tensor_type))
    assert torch.allclose(base / factors, scaled, rtol=1e-5)
    assert (
        kv["llama.rope.dimension_count"] == 48
        and kv["tokenizer.ggml.eom_token_id"] != kv["tokenizer.ggml.eos_token_id"]
    )

    kv, _ = _gguf_fields(gguf_files["mistral"])
    assert kv["general.architecture"] == "llama" and "mistral" in kv["general.name"]
    assert kv["llama.attention.sliding_window"] == 24

    kv, _ = _gguf_fields(gguf_files["gemma3"])
    assert kv["gemma3.attention.sliding_window"] == 24
    assert kv["gemma3.attention.sliding_window_pattern"] == [True] * 5 + [False]
    assert kv["gemma3.rope.freq_base_swa"] == 10000.0 and kv["gemma3.rope.freq_base"] == 1e6
    assert kv["gemma3.rope.scaling.type"] == "linear" and kv["gemma3.rope.scaling.factor"] == 8.0
    assert kv["gemma3.final_logit_softcapping"] == 12.0
    assert kv["gemma3.attention.scale"] == pytest.approx(64**-0.5)

    kv, ts = _gguf_fields(gguf_files["phi3"])
    assert kv["phi3.rope.dimension_count"] == 60 and kv["phi3.rope.scaling.original_context_length"] == 4096
    assert kv["phi3.rope.scaling.attn_factor"] == pytest.approx(
        (1 + torch.log(torch.tensor(4.0)) / torch.log(torch.tensor(4096.0))).sqrt().item()
    )
    assert (
        ts["rope_factors_long.weight"].data.shape == (30,)
        and "blk.0.attn_qkv.weight" in ts
        and "blk.0.ffn_up.weight" in ts
    )

    kv, ts = _gguf_fields(gguf_files["qwen3"])
    assert kv["qwen3.attention.key_length"] == 80 and "blk.0.attn_q_norm.weight" in ts
    assert "output.weight" not in ts  # tied head
    kv, ts = _gguf_fields(gguf_files["qwen2"])
    assert "blk.0.attn_k.bias" in ts and kv["tokenizer.ggml.pre"] == "qwen2"
    assert len(kv["tokenizer.ggml.tokens"]) == 576 and kv["tokenizer.ggml.tokens"][-1] == "[PAD575]"
    assert "<tool_call>" in kv["tokenizer.chat_template"]


def test_transformers_gguf_config_reader_is_exact_only_where_it_reads_every_quirk(model_dirs, gguf_files):
    """Loaded from the GGUF alone (config rebuilt from metadata by transformers), Qwen2 is exact; Llama loses its
    llama3 rope scaling (transformers does not read rope_freqs) and computes different logits. This pins down
    why the round-trip above passes the directory's config."""
    from transformers import AutoModelForCausalLM

    for family, exact in (("qwen2", True), ("llama", False)):
        d, g = model_dirs[family], gguf_files[family]
        ids = _ids(d)
        m = AutoModelForCausalLM.from_pretrained(str(d), gguf_file=g.name, dtype=torch.float32).eval()
        with torch.no_grad():
            diff = (m(ids).logits - _load(d)(ids).logits).abs().max().item()
        assert (diff < 1e-5) == exact, (family, diff)


@pytest.mark.slow
@pytest.mark.parametrize("family", ["llama", "mistral", "phi3"])
def test_quantised_ggufs(family, model_dirs, tmp_path):
    """Q8_0 / Q4_1 files: every 2-D weight in the asked type (the untied head Q8_0; Mistral's ffn_down, 264 wide,
    falls back to F16 as llama.cpp's converter does), each Q4_1 weight within half a quantisation step of the original in every
    32-value block (so the block layout, scales and minima and the Q/K permutation are right), and Q8_0 logits
    close to the directory model's."""
    from symphony_core.model.gguf_writer import write_gguf

    d = model_dirs[family]
    ref = _load(d)
    sd = ref.state_dict()
    g4 = write_gguf(d, tmp_path / "q4.gguf", qtype="Q4_1")
    _, ts = _gguf_fields(g4)
    for name, t in ts.items():
        if len(t.shape) == 1:
            want = "F32"
        elif name == "output.weight":  # the head stays at 8 bits, as in llama.cpp's (and the shipped) Q4_1 files
            want = "Q8_0"
        elif name.endswith("ffn_down.weight") and family == "mistral":
            want = "F16"
        else:
            want = "Q4_1"
        assert t.tensor_type.name == want, (name, t.tensor_type.name)
    deq = _gguf_state_dict(d, g4)
    for name, w in sd.items():
        if w.dim() != 2 or (family == "mistral" and "down_proj" in name) or name not in deq:
            continue
        blocks = w.reshape(-1, 32)
        low = blocks.min(1, keepdim=True).values
        step = (blocks.max(1, keepdim=True).values - low) / 15
        err = (deq[name].reshape(-1, 32) - blocks).abs()
        # half a step, plus the scale and minimum rounded to f16 (11 significant bits)
        assert (err <= 0.5 * step + (low.abs() + 16 * step) * 2**-10 + 1e-6).all(), name
    g8 = write_gguf(d, tmp_path / "q8.gguf", qtype="Q8_0")
    ids = _ids(d)
    with torch.no_grad():
        diff = (_gguf_model(d, g8)(ids).logits - ref(ids).logits).abs().max().item()
    assert 1e-4 < diff < 1.5, diff  # really quantised, and close


def test_gguf_writer_refuses_what_it_cannot_write_faithfully(tmp_path, model_dirs):
    """A tokenizer that is not byte-level BPE with a split llama.cpp knows, an architecture outside the six, or an
    unknown qtype: a clear ValueError, and no file."""
    import shutil

    from symphony_core.model.gguf_writer import write_gguf

    d = tmp_path / "spm"
    shutil.copytree(model_dirs["llama"], d)
    tj = json.loads((d / "tokenizer.json").read_text())
    tj["pre_tokenizer"] = {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "first", "split": False}
    (d / "tokenizer.json").write_text(json.dumps(tj))
    with pytest.raises(ValueError, match="byte-level BPE"):
        write_gguf(d, tmp_path / "a.gguf")
    cfg = json.loads((d / "config.json").read_text())
    (d / "config.json").write_text(json.dumps(cfg | {"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"]}))
    with pytest.raises(ValueError, match="not supported"):
        write_gguf(d, tmp_path / "b.gguf")
    with pytest.raises(ValueError, match="qtype"):
        write_gguf(model_dirs["llama"], tmp_path / "c.gguf", qtype="Q5_K")
    assert not list(tmp_path.glob("*.gguf"))
