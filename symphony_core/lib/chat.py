"""Chat helpers: prompts from messages, and conversations whose KV cache is kept across turns.

`chat_prompt` renders messages through the model's own template (`sym.chat_template`).
`Chat` keeps one KV file for a whole conversation: each new message is rendered, and only the
text the file does not hold yet is tokenized and fed — the earlier turns are never recomputed.
If the template rewrites earlier text (some templates strip or reformat past turns), the file
is truncated back to the longest prefix that still matches and extended from there.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .generate import Generation, generate


def message(role: str, content: str, **extra: Any) -> dict:
    return {"role": role, "content": content, **extra}


def system(content: str) -> dict:
    return message("system", content)


def user(content: str) -> dict:
    return message("user", content)


def assistant(content: str) -> dict:
    return message("assistant", content)


def chat_prompt(sym, messages: Sequence[dict], add_generation_prompt: bool = True) -> str:
    """The prompt text for `messages` in the model's chat format."""
    return sym.chat_template(list(messages), add_generation_prompt)


def chat_tokens(sym, messages: Sequence[dict], add_generation_prompt: bool = True) -> list[int]:
    return sym.tokenize(chat_prompt(sym, messages, add_generation_prompt))


class Chat:
    """A conversation in one KV file, extended turn by turn.

    `self.kv` holds the K/V of the conversation so far except `self.pending`, the tokens
    rendered (or just generated) but not yet fed; the next `pred` feeds them first. So
    `kv.tokens + pending` always equals the tokens of the rendered conversation.

        chat = Chat(sym, system="You are terse.")
        chat.add("user", "Name a colour.")
        reply = chat.reply(max_tokens=16)      # Generation; the reply is now a message too
        chat.add("user", "Another one.")       # feeds only the new turn's tokens
    """

    def __init__(self, sym, messages: Sequence[dict] = (), *, system: str | None = None, kv=None) -> None:
        """Start a conversation; `kv` continues a writable file (fork a read-only one first),
        whose tokens must render as a prefix of `messages`."""
        self.sym = sym
        self.messages: list[dict] = []
        if system is not None:
            self.messages.append(message("system", system))
        self.messages.extend(dict(m) for m in messages)
        self.kv = kv if kv is not None else sym.kv_create()
        self.pending: list[int] = []
        self.rebuilt_tokens = 0  # tokens dropped from the file because the template rewrote them

    # --- the rendered conversation ------------------------------------------------------------
    @property
    def tokens(self) -> list[int]:
        """Every token of the conversation so far: those in the KV file, then the pending ones."""
        return self.kv.tokens + self.pending

    def text(self) -> str:
        return self.sym.detokenize(self.tokens)

    def sync(self, add_generation_prompt: bool = False) -> list[int]:
        """Bring `kv.tokens + pending` in line with the rendered messages; returns the new tokens."""
        sym = self.sym
        target = chat_prompt(sym, self.messages, add_generation_prompt) if self.messages else ""
        held = self.tokens
        held_text = sym.detokenize(held) if held else ""
        if target.startswith(held_text):
            keep = len(held)
        else:
            keep = self._common_prefix_tokens(held, target)
            self.rebuilt_tokens += len(held) - keep
            in_kv = min(keep, self.kv.len)
            if in_kv < self.kv.len:
                sym.kv_truncate(self.kv, in_kv)
            self.pending = held[in_kv:keep]
            held_text = sym.detokenize(held[:keep]) if keep else ""
        rest = target[len(held_text) :]
        new = sym.tokenize(rest) if rest else []
        self.pending = self.pending + new
        return new

    def _common_prefix_tokens(self, held: list[int], target: str) -> int:
        """The most leading tokens of `held` whose text is a prefix of `target` (binary search)."""
        lo, hi = 0, len(held)
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if target.startswith(self.sym.detokenize(held[:mid])):
                lo = mid
            else:
                hi = mid - 1
        return lo

    # --- turns ------------------------------------------------------------------------------
    def add(self, role: str, content: str, **extra: Any) -> list[int]:
        """Append a message; returns the tokens it added (fed with the next `pred`)."""
        self.messages.append(message(role, content, **extra))
        return self.sync(add_generation_prompt=False)

    def flush(self):
        """Feed the pending tokens now (e.g. to cache a system prompt); returns the Dist, or None."""
        if not self.pending:
            return None
        d = self.sym.pred(self.kv, self.pending)
        self.pending = []
        return d

    def reply(self, max_tokens: int = 128, **generate_kw) -> Generation:
        """Generate the assistant's next message after the conversation so far and append it.

        Keyword options are `generate`'s (sampling, stop, grammar, stream, ...). The KV file
        then holds the whole conversation, the reply included (its last token pending).
        """
        self.sync(add_generation_prompt=True)
        if not self.pending:
            raise ValueError("nothing to feed: the conversation is empty")
        g = generate(self.sym, self.kv, self.pending, max_tokens, **generate_kw)
        self.pending = list(g.pending)
        self.messages.append(message("assistant", g.text))
        # A reply cut by max_tokens or a stop string has no end-of-turn token yet; `sync` puts
        # in what the template says follows the content (and trims what the template omits).
        self.sync(add_generation_prompt=False)
        return g

    def fork(self) -> Chat:
        """A copy of the conversation sharing its KV pages (copy-on-write): branch a dialogue."""
        c = Chat(self.sym, kv=self.sym.kv_fork(self.kv))
        c.messages = [dict(m) for m in self.messages]
        c.pending = list(self.pending)
        return c

    def close(self) -> None:
        self.sym.kv_close(self.kv)


__all__ = ["Chat", "assistant", "chat_prompt", "chat_tokens", "message", "system", "user"]
