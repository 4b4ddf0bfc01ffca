"""The text of a growing list of token ids, decoded a few tokens at a time.

Decoding the whole reply again after every token costs time in its length, so a long reply costs
time in its length squared; `IncrementalText` decodes a short window instead, the way vLLM and
Hugging Face's text streamer do: the window's tokens without the new ones and with them, keeping
the difference. Both decodes start at the same token, so whatever a decoder does at the start of
a text (a SentencePiece decoder drops the first token's leading space) happens to both and cancels
out. While the new text ends in U+FFFD (a character whose UTF-8 bytes are split over tokens and
not all here yet) the window grows instead; `finish` adds what is still held back.

For ids that are text, the pieces add up to the full decode. For ids that are not (random ones),
a byte-fallback decoder (SentencePiece's) can differ: it turns a whole run of byte tokens that is
not UTF-8 into U+FFFDs, so a window may show a byte the whole run would not.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence


class IncrementalText:
    def __init__(self, detokenize: Callable[[Sequence[int]], str]) -> None:
        self._detokenize = detokenize
        self.ids: list[int] = []
        self.text = ""  # the text of ids[:_read]
        self._prefix = 0  # where the window starts
        self._read = 0  # the tokens whose text is in `text`

    def add(self, token: int) -> str:
        """Append `token`; the text so far (without a trailing incomplete character)."""
        self.ids.append(token)
        self._take(complete_only=True)
        return self.text

    def finish(self) -> str:
        """The whole text, a trailing incomplete character included (as U+FFFD, as a full decode gives it)."""
        if self._read < len(self.ids):
            self._take(complete_only=False)
        return self.text

    def _take(self, complete_only: bool) -> None:
        """Move the window's new text into `text` (unless it adds nothing, or ends mid-character and
        `complete_only`)."""
        before = self._detokenize(self.ids[self._prefix : self._read]) if self._read > self._prefix else ""
        now = self._detokenize(self.ids[self._prefix :])
        if complete_only and (len(now) <= len(before) or now.endswith("\ufffd")):
            return
        self.text += now[len(before) :]
        self._prefix, self._read = self._read, len(self.ids)


__all__ = ["IncrementalText"]
