"""libc for LIPs: chat templating, generate loops, samplers and grammars — built only on syscalls.

Every helper takes the LIP's `sym` handle and does its work through system calls, so it runs
the same in a notebook, under the debugger, or on a server.
"""

from .chat import Chat, chat_prompt, chat_tokens
from .generate import Generation, StopStrings, generate, parallel_map, pred_parallel
from .samplers import SamplingParams, apply_mask, apply_repetition_penalty, greedy, log_softmax, sample

__all__ = [
    "Chat",
    "Generation",
    "SamplingParams",
    "StopStrings",
    "apply_mask",
    "apply_repetition_penalty",
    "chat_prompt",
    "chat_tokens",
    "generate",
    "greedy",
    "log_softmax",
    "parallel_map",
    "pred_parallel",
    "sample",
]


def __getattr__(name):  # grammar pulls in llguidance: import it only when asked for
    if name in (
        "Grammar",
        "GrammarError",
        "Matcher",
        "generate_constrained",
        "generate_json",
        "load_tokenizer",
        "tokenizer_for",
    ):
        from . import grammar

        return getattr(grammar, name)
    raise AttributeError(name)
