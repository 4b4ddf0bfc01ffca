"""A small byte-level BPE tokenizer for a random test model, trained on the spot (deterministic).

Every family gets the same kind of tokenizer (byte-level BPE, as Llama 3 and Qwen have; Gemma, Mistral and
Phi-3 really use SentencePiece) with the family's own special tokens in the family's own places
(random_chat_templates.SPECIALS) and llama.cpp's split regex for the family, so that a GGUF can carry it
as tokens + merges (tokenizer.ggml.model "gpt2") and transformers rebuilds the same tokenizer from it.
"""

from __future__ import annotations

import json
from pathlib import Path

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers, processors, trainers

from symphony_core.model.random_chat_templates import SPECIALS, TEMPLATES

# llama.cpp's split regexes by tokenizer.ggml.pre name (the same patterns transformers rebuilds from a GGUF)
SPLIT_REGEX = {
    "qwen2": (
        r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+"
        r"|\s+(?!\S)|\s+"
    ),
    "llama-bpe": (
        r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
        r"|\s*[\r\n]+|\s+(?!\S)|\s+"
    ),
}

_CORPUS = (
    "The quick brown fox jumps over the lazy dog. A programmable serving system runs programs, not prompts.",
    "Symphony keeps each conversation's key-value cache in files that programs open, fork and truncate.",
    "def forward(self, x):\n    return self.down(self.act(self.gate(x)) * self.up(x))\n",
    'for i in range(10):\n    print(f"step {i}: loss={loss:.4f}")\n',
    '{"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}',
    '{"type": "function", "function": {"name": "search", "parameters": {"type": "object", "properties": {}}}}',
    "What is the weather like in Paris today? It is sunny, with a high of 21 degrees and a light breeze.",
    "You are a helpful assistant. Answer the question, then explain your reasoning step by step.",
    "Numbers: 0 1 2 3 4 5 6 7 8 9 10 42 100 2024 3.14159 1e-6 -7",
    "Café, naïve, résumé, 東京, 北京, Ünïcödé, emoji 🙂 and tabs\tand\nnewlines.",
    "The model has twenty-four layers, fourteen attention heads and two key-value heads per layer.",
    "Once upon a time there was a little robot who liked to count tokens and merge pairs of bytes.",
    "SELECT name, count(*) FROM users WHERE age > 30 GROUP BY name ORDER BY 2 DESC;",
    "<html><body><p>Hello, world!</p></body></html>",
    "She said: 'I'm sure we'll finish; they've already started, haven't they?'",
)


def _special(tok: str, special: bool = True) -> AddedToken:
    return AddedToken(tok, special=special, normalized=False, single_word=False, lstrip=False, rstrip=False)


def train_tokenizer(family: str, vocab_size: int = 560) -> Tokenizer:
    """The family's tokenizer: `vocab_size` ids from the head specials, the 256 bytes and the merges, then the
    tail specials and plain added tokens after them."""
    sp = SPECIALS[family]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(SPLIT_REGEX[sp.pre]), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=2,
        show_progress=False,
        special_tokens=[_special(t) for t in sp.head],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator(list(_CORPUS) * 4, trainer=trainer)
    tok.add_special_tokens([_special(t) for t in sp.tail])
    if sp.plain_tail:
        tok.add_tokens([_special(t, special=False) for t in sp.plain_tail])
    if sp.add_bos:
        assert sp.bos is not None
        bos_id = tok.token_to_id(sp.bos)
        tok.post_processor = processors.TemplateProcessing(
            single=f"{sp.bos} $A", pair=f"{sp.bos} $A {sp.bos} $B:1", special_tokens=[(sp.bos, bos_id)]
        )
    else:
        tok.post_processor = processors.ByteLevel(trim_offsets=False)
    return tok


def special_ids(family: str, tok: Tokenizer) -> dict[str, int | list[int] | None]:
    """bos / eos / pad ids for the config and generation_config (eos as the real generation_config lists it)."""
    sp = SPECIALS[family]

    def tid(t: str | None) -> int | None:
        return None if t is None else tok.token_to_id(t)

    gen_eos = [tid(t) for t in sp.gen_eos]
    assert all(i is not None for i in gen_eos)
    return {
        "bos_token_id": tid(sp.bos),
        "eos_token_id": gen_eos[0] if len(gen_eos) == 1 else gen_eos,  # type: ignore[dict-item]
        "pad_token_id": tid(sp.pad),
    }


def save_tokenizer(family: str, tok: Tokenizer, out_dir: Path, max_len: int) -> None:
    """tokenizer.json, and tokenizer_config.json with the family's special tokens and chat template."""
    sp = SPECIALS[family]
    tok.save(str(out_dir / "tokenizer.json"))
    cfg: dict[str, object] = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "model_max_length": max_len,
        "clean_up_tokenization_spaces": False,
        "add_bos_token": sp.add_bos,
        "add_eos_token": False,
        "bos_token": sp.bos,
        "eos_token": sp.eos,
        "pad_token": sp.pad,
        "unk_token": sp.unk,
        "chat_template": TEMPLATES[family],
    }
    (out_dir / "tokenizer_config.json").write_text(json.dumps(cfg, indent=2, ensure_ascii=False) + "\n")
