"""Text ↔ token ids and the model's chat template, as LIPs see them.

Built on the `tokenizers` library and a sandboxed Jinja environment (the way transformers
renders chat templates) so that loading a model never imports transformers (2 s).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from jinja2 import Template

import json
from datetime import datetime
from pathlib import Path

from ..errors import ModelError, PredError


def _special(value) -> str | None:
    if isinstance(value, dict):
        return value.get("content")
    return value


class Tokenizer:
    def __init__(self, directory: Path, config_eos: list[int]) -> None:
        from tokenizers import Tokenizer as FastTokenizer

        path = directory / "tokenizer.json"
        if not path.exists():
            raise ModelError(f"{directory} has no tokenizer.json")
        self.fast = FastTokenizer.from_file(str(path))
        cfg_path = directory / "tokenizer_config.json"
        tcfg = json.loads(cfg_path.read_text()) if cfg_path.exists() else {}
        template = tcfg.get("chat_template")
        if isinstance(template, list):  # named templates: the "default" one (transformers also names "tool_use")
            named = {t.get("name"): t.get("template") for t in template if isinstance(t, dict)}
            template = named.get("default") or next(iter(named.values()), None)
        self.template_source: str | None = template
        tpl_file = directory / "chat_template.jinja"
        if self.template_source is None and tpl_file.exists():
            self.template_source = tpl_file.read_text()
        self.bos_token = _special(tcfg.get("bos_token"))
        self.eos_token = _special(tcfg.get("eos_token"))
        # what a chat template may name: bos_token, eos_token, unk_token, pad_token ("" where unset)
        names = ("bos_token", "eos_token", "unk_token", "pad_token")
        self.special_tokens = {n: _special(tcfg.get(n)) or "" for n in names}
        eos = set(config_eos)
        eos_id = self.fast.token_to_id(self.eos_token) if self.eos_token is not None else None
        if eos_id is not None:
            eos.add(eos_id)
        self.eos_token_ids: frozenset[int] = frozenset(eos)
        self.vocab_size = self.fast.get_vocab_size(with_added_tokens=True)
        self._template: Template | None = None
        self._template_of: str | None = None

    def tokenize(self, text: str) -> list[int]:
        if not isinstance(text, str):
            raise PredError(f"tokenize expects a str, got {type(text).__name__}")
        return self.fast.encode(text, add_special_tokens=False).ids

    def detokenize(self, ids) -> str:
        try:
            ids = [int(i) for i in ids]
        except (TypeError, ValueError):
            raise PredError(f"detokenize expects a list of token ids (ints), got {ids!r:.80}") from None
        bad = [i for i in ids if not 0 <= i < self.vocab_size]
        if bad:
            raise PredError(f"detokenize: token ids {bad[:5]} are outside the vocabulary [0, {self.vocab_size})")
        return self.fast.decode(ids, skip_special_tokens=False)

    def token_text(self, tok: int) -> str:
        """One token as it would print, for views that show tokens one by one."""
        return self.fast.decode([int(tok)], skip_special_tokens=False)

    def chat_template(
        self, messages: list[dict], add_generation_prompt: bool = True, *, tools: list[dict] | None = None, **kwargs
    ) -> str:
        """The model's own chat template rendered as transformers' `apply_chat_template` renders it: the same
        sandbox, `tojson` and `strftime_now`, the tokenizer's special tokens, `tools` (JSON schemas) where the
        template has a tool-calling section, and any template switch as a keyword (Qwen3's `enable_thinking`)."""
        if not isinstance(messages, list) or not all(isinstance(m, dict) and "role" in m for m in messages):
            raise PredError("chat_template expects a list of {'role': ..., 'content': ...} dicts")
        if tools is not None and not (isinstance(tools, list) and all(isinstance(t, dict) for t in tools)):
            raise PredError("chat_template: tools must be a list of JSON-schema dicts")
        if self.template_source is None:
            raise PredError("this model has no chat template; build the prompt text yourself")
        if self._template is None or self._template_of != self.template_source:  # `--chat-template` may replace it
            self._template, self._template_of = _compile(self.template_source), self.template_source
        try:
            return self._template.render(
                **{**self.special_tokens, **kwargs},
                messages=messages,
                tools=tools,
                add_generation_prompt=add_generation_prompt,
            )
        except PredError:
            raise
        except Exception as e:  # the template's own error (a missing key, a type it cannot format)
            raise PredError(f"chat template: {type(e).__name__}: {e}") from None


def _compile(source: str) -> Template:
    import jinja2.ext
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    def raise_exception(message: str):
        raise PredError(f"chat template: {message}")

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        # jinja's own filter escapes HTML characters; templates expect plain JSON, as transformers gives them
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def strftime_now(fmt: str) -> str:
        return datetime.now().strftime(fmt)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env.from_string(source)
