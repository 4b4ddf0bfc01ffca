"""Token ids -> the text a reply carries, the way vLLM detokenizes: special tokens skipped unless
`skip_special_tokens` is false (then, with `spaces_between_special_tokens`, a special token and the
text beside it are joined by a space), and each token's exact bytes for logprobs (a multi-byte
character split over several tokens decodes to U+FFFD token by token; its bytes do not).

Built from the model's `tokenizers` tokenizer (`Engine.tokenizer.fast`) once per server.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from functools import lru_cache

_BYTE_FALLBACK = re.compile(r"^<0x([0-9A-Fa-f]{2})>$")


@lru_cache(maxsize=1)
def _byte_level_decoder() -> dict[str, int]:
    """GPT-2's byte-level BPE alphabet: the printable character that stands for each byte."""
    keep = (
        list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    )
    chars, extra = {}, 0
    for b in range(256):
        if b in keep:
            chars[chr(b)] = b
        else:
            chars[chr(256 + extra)] = b
            extra += 1
    return chars


class TextCodec:
    """How the server turns a request's token ids into text and bytes."""

    def __init__(self, fast) -> None:
        self.fast = fast
        added = fast.get_added_tokens_decoder()
        self.special: frozenset[int] = frozenset(i for i, t in added.items() if t.special)
        self.added: frozenset[int] = frozenset(added)
        decoder = (json.loads(fast.to_str()).get("decoder") or {}) if hasattr(fast, "to_str") else {}
        kinds = {decoder.get("type")} | {d.get("type") for d in decoder.get("decoders", [])}
        self.byte_level = "ByteLevel" in kinds
        self.metaspace = "Metaspace" in kinds or "Replace" in kinds

    def text(
        self,
        ids: Sequence[int],
        skip_special: bool = True,
        spaces_between: bool = True,
        keep: frozenset[int] = frozenset(),
    ) -> str:
        """`keep`: special tokens written out even when skipping them (a tool-call format's markers,
        which its parser must see)."""
        ids = [int(i) for i in ids]
        if skip_special:
            return self.fast.decode([i for i in ids if i not in self.special or i in keep], skip_special_tokens=False)
        if not spaces_between or not any(i in self.added for i in ids):
            return self.fast.decode(ids, skip_special_tokens=False)
        parts: list[str] = []
        run: list[int] = []
        for i in ids:
            if i in self.added:
                if run:
                    parts.append(self.fast.decode(run, skip_special_tokens=False))
                    run = []
                parts.append(self.fast.id_to_token(i))
            else:
                run.append(i)
        if run:
            parts.append(self.fast.decode(run, skip_special_tokens=False))
        return " ".join(parts)

    def detokenizer(
        self, skip_special: bool, spaces_between: bool, keep: frozenset[int] = frozenset()
    ) -> Callable[[Sequence[int]], str]:
        return lambda ids: self.text(ids, skip_special, spaces_between, keep)

    def token_ids(self, tokens: Sequence[str]) -> frozenset[int]:
        """The ids of those of `tokens` that are single tokens of the vocabulary."""
        return frozenset(i for t in tokens if (i := self.fast.token_to_id(t)) is not None)

    def token_bytes(self, tok: int) -> bytes:
        """The exact bytes token `tok` stands for (its piece of the UTF-8 text)."""
        piece = self.fast.id_to_token(int(tok))
        if piece is None:
            return b""
        if int(tok) in self.added:
            return piece.encode()
        if self.byte_level:
            table = _byte_level_decoder()
            if all(c in table for c in piece):
                return bytes(table[c] for c in piece)
        m = _BYTE_FALLBACK.match(piece)
        if m:
            return bytes([int(m.group(1), 16)])
        if self.metaspace:
            return piece.replace("\u2581", " ").encode()
        return self.fast.decode([int(tok)], skip_special_tokens=False).encode()


__all__ = ["TextCodec"]
