"""Constrained decoding — regex, JSON schema, Lark grammars, fixed choices — through llguidance.

llguidance computes, at each step, which tokens of the model's vocabulary keep the output
inside the grammar; `generate(..., grammar=matcher)` passes that set to `pred(mask=)`, so the
engine masks the logits inside the batch and the LIP only ever sees allowed tokens.

The grammar library needs the model's tokenizer (token byte strings, EOS): `sym.tokenizer_file`
(readable in-process and, bound read-only, in a server's sandbox), or a path given explicitly
(a `tokenizer.json`, or the model directory); building llguidance's tokenizer from it takes
~0.3 s and happens once per (file, vocabulary size, EOS set) in the process the LIP runs in —
every LIP after the first gets it from the cache.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..errors import SymphonyError
from .generate import Generation, generate


class GrammarError(SymphonyError):
    """A grammar that does not compile, or a token the grammar does not allow."""


def _llg():
    try:
        import llguidance
    except ImportError as e:  # pragma: no cover - llguidance is a dependency
        raise GrammarError("constrained decoding needs the `llguidance` package (pip install llguidance)") from e
    return llguidance


_cache: dict[tuple, Any] = {}
_cache_lock = threading.Lock()


def _tokenizer_file(path: str | Path) -> Path:
    p = Path(path)
    if p.is_dir():
        p = p / "tokenizer.json"
    if not p.is_file():
        raise GrammarError(f"no tokenizer file at {p} (give the model's tokenizer.json or its directory)")
    return p.resolve()


def load_tokenizer(path: str | Path, vocab_size: int | None = None, eos_token_ids: Sequence[int] | None = None):
    """llguidance's `LLTokenizer` for the tokenizer file at `path` (cached per file, size and EOS).

    `vocab_size` should be the model's (the width of its logits, `sym.vocab_size`), which may
    exceed the tokenizer's; `eos_token_ids` the tokens that end a generation (`sym.eos_token_ids`).
    """
    file = _tokenizer_file(path)
    eos = tuple(sorted(int(t) for t in eos_token_ids)) if eos_token_ids else None
    key = (str(file), file.stat().st_mtime_ns, vocab_size, eos)
    with _cache_lock:
        tok = _cache.get(key)
        if tok is None:
            llg = _llg()
            try:
                tok = llg.LLTokenizer(file.read_text(), n_vocab=vocab_size, eos_token=list(eos) if eos else None)
            except Exception as e:
                raise GrammarError(f"llguidance could not read the tokenizer {file}: {e}") from e
            _cache[key] = tok
        return tok


def tokenizer_for(sym, path: str | Path | None = None):
    """The grammar tokenizer for the model behind `sym` (from `sym.tokenizer_file` unless a path is given)."""
    return load_tokenizer(path or sym.tokenizer_file, sym.vocab_size, sorted(sym.eos_token_ids))


class Grammar:
    """A compiled grammar bound to a tokenizer; `matcher()` starts one decoding of it."""

    def __init__(self, spec: str, tokenizer, description: str = "grammar") -> None:
        llg = _llg()
        self.spec = spec
        self.tokenizer = tokenizer
        self.description = description
        is_error, msgs = llg.LLMatcher.validate_grammar_with_warnings(spec, tokenizer)
        if is_error:
            raise GrammarError(f"{description} does not compile: {msgs[0] if msgs else 'unknown error'}")

    # --- constructors -------------------------------------------------------------------------
    @classmethod
    def regex(cls, pattern: str, tokenizer) -> Grammar:
        """Output must match the regular expression `pattern` (Rust `regex` syntax), whole."""
        return cls(_llg().LLMatcher.grammar_from_regex(pattern), tokenizer, f"regex {pattern!r}")

    @classmethod
    def json_schema(cls, schema: dict | str, tokenizer, *, compact: bool = True) -> Grammar:
        """Output must be JSON valid under `schema`. `compact`: no whitespace between tokens
        (fewer tokens, and a small model cannot wander off into blank lines)."""
        if isinstance(schema, str):
            schema = json.loads(schema)
        options = {"whitespace_flexible": False, "item_separator": ",", "key_separator": ":"} if compact else None
        try:
            spec = _llg().LLMatcher.grammar_from_json_schema(schema, overrides=options)
        except ValueError as e:
            raise GrammarError(f"JSON schema rejected: {e}") from e
        return cls(spec, tokenizer, "JSON schema")

    @classmethod
    def lark(cls, source: str, tokenizer) -> Grammar:
        """A context-free grammar in llguidance's Lark dialect (`start:` is the top rule)."""
        return cls(_llg().LLMatcher.grammar_from_lark(source), tokenizer, "Lark grammar")

    @classmethod
    def choice(cls, options: Sequence[str], tokenizer) -> Grammar:
        """Output must be exactly one of `options`."""
        if not options:
            raise GrammarError("choice needs at least one option")
        return cls.lark("start: " + " | ".join(json.dumps(o) for o in options), tokenizer)

    def matcher(self) -> Matcher:
        return Matcher(self)

    def __repr__(self) -> str:
        return f"Grammar({self.description})"


class Matcher:
    """One decoding's position in a grammar: the allowed-token mask, advanced token by token.

    It is what `generate(grammar=)` expects (`mask`, `advance`, `is_stopped`).
    """

    def __init__(self, grammar: Grammar) -> None:
        llg = _llg()
        self.grammar = grammar
        self.vocab_size = grammar.tokenizer.vocab_size
        self._m = llg.LLMatcher(grammar.tokenizer, grammar.spec, log_level=0)
        self._check("start")
        self.consumed: list[int] = []

    def _check(self, what: str) -> None:
        if self._m.is_error():
            raise GrammarError(f"{self.grammar.description}: {what}: {self._m.get_error()}")

    def mask(self) -> torch.Tensor:
        """Allowed next tokens as a bool tensor [V] (EOS is allowed once the output is complete)."""
        bits = np.frombuffer(self._m.compute_bitmask(), dtype=np.uint8)
        self._check("computing the mask")
        allowed = np.unpackbits(bits, bitorder="little")[: self.vocab_size].astype(bool)
        return torch.from_numpy(allowed)

    def allowed_tokens(self) -> list[int]:
        return torch.nonzero(self.mask()).flatten().tolist()

    def advance(self, token: int) -> None:
        """Consume one token; raises GrammarError if the grammar does not allow it."""
        if not self._m.consume_token(int(token)):
            raise GrammarError(
                f"{self.grammar.description}: token {token} is not allowed here ({self._m.get_error() or 'rejected'})"
            )
        self.consumed.append(int(token))

    def accepts(self, tokens: Sequence[int]) -> int:
        """How many of `tokens` the grammar would accept from here (nothing is consumed)."""
        return self._m.validate_tokens([int(t) for t in tokens])

    def forced_tokens(self) -> list[int]:
        """Tokens the grammar forces from here on (fast-forward: feed them without sampling)."""
        return self._m.compute_ff_tokens()

    def rollback(self, n: int) -> None:
        """Forget the last `n` consumed tokens (backtracking, speculative decoding)."""
        if not self._m.rollback(n):
            raise GrammarError(f"{self.grammar.description}: cannot roll back {n} tokens")
        del self.consumed[len(self.consumed) - n :]

    def is_accepting(self) -> bool:
        """The output so far is complete (it may still go on)."""
        return self._m.is_accepting()

    def is_stopped(self) -> bool:
        """Nothing but EOS may follow."""
        return self._m.is_stopped()

    def capture(self, name: str) -> str | None:
        """The text a named capture of a Lark grammar (`name[capture]: ...`) matched last."""
        b = self._m.get_capture(name)
        return None if b is None else b.decode("utf-8", "replace")


def generate_constrained(
    sym, kv, prompt_tokens: Sequence[int], grammar: Grammar, max_tokens: int = 256, **generate_kw
) -> Generation:
    """`generate` under `grammar`; stops when the grammar is complete (or the model picks EOS
    where the grammar allows it). Raises GrammarError if `max_tokens` ran out before the
    output was complete — an incomplete JSON is never returned as if it were valid."""
    m = grammar.matcher()
    g = generate(sym, kv, prompt_tokens, max_tokens, grammar=m, **generate_kw)
    if not m.is_accepting():
        raise GrammarError(f"{grammar.description}: output incomplete after {max_tokens} tokens: {g.text!r}")
    return g


def generate_json(
    sym, kv, prompt_tokens: Sequence[int], schema: dict, tokenizer, max_tokens: int = 256, **generate_kw
) -> tuple[Any, Generation]:
    """Generate JSON valid under `schema`; returns (the parsed value, the Generation)."""
    g = generate_constrained(sym, kv, prompt_tokens, Grammar.json_schema(schema, tokenizer), max_tokens, **generate_kw)
    return json.loads(g.text), g


__all__ = [
    "Grammar",
    "GrammarError",
    "Matcher",
    "generate_constrained",
    "generate_json",
    "load_tokenizer",
    "tokenizer_for",
]
