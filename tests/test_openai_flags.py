"""`symphony serve`'s vLLM flags, parsed (no server): the positional MODEL, their help and
defaults, and what --generation-config and --chat-template read."""

from __future__ import annotations

import json

import pytest

from symphony_core.cli import build_parser
from symphony_core.server.commands import _serve
from symphony_core.server.vllm_flags import chat_template_text, generation_defaults


def test_positional_model_and_vllm_flags_parse():
    a = build_parser().parse_args(
        ["serve", "my/model.gguf", "--api-key", "k", "--served-model-name", "m", "--max-model-len", "512"]
    )
    assert a.model_tag == "my/model.gguf" and a.api_key == "k" and a.served_model_name == "m" and a.max_model_len == 512
    b = build_parser().parse_args(["serve", "--no-enable-prefix-caching", "--max-num-seqs", "4", "--dtype", "float32"])
    assert b.enable_prefix_caching is False and b.max_num_seqs == 4 and b.model_tag is None
    assert _serve(build_parser().parse_args(["serve", "a", "--model", "b"])) == 2  # the model given twice
    help_text = build_parser()._subparsers._group_actions[0].choices["serve"].format_help()
    assert "(default: 8000)" in help_text and "default: smollm2" in help_text


def test_generation_config_and_chat_template(tmp_path):
    (tmp_path / "generation_config.json").write_text(json.dumps({"temperature": 0.6, "top_p": 0.9, "do_sample": True}))
    assert generation_defaults("auto", tmp_path) == {"temperature": 0.6, "top_p": 0.9}
    assert generation_defaults("vllm", tmp_path) == {}
    assert generation_defaults(str(tmp_path), tmp_path / "elsewhere") == {"temperature": 0.6, "top_p": 0.9}
    assert generation_defaults("auto", tmp_path / "none") == {}
    with pytest.raises(ValueError, match="no generation_config.json"):
        generation_defaults(str(tmp_path / "none"), tmp_path)
    f = tmp_path / "t.jinja"
    f.write_text("{{ messages }}")
    assert chat_template_text(str(f)) == "{{ messages }}"
    assert chat_template_text("{% for m in messages %}{% endfor %}").startswith("{%")
    with pytest.raises(ValueError, match="neither"):
        chat_template_text("no-such-file.jinja")
