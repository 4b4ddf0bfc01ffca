"""OpenAI-compatible endpoints (chat completions, completions, responses) over built-in LIPs.

params.py parses and checks requests; messages.py and tools.py turn them into a prompt;
constraints.py compiles the grammar (JSON output, tool calls); generation.py is the LIP (n
choices as forks of one prompt's KV); logprobs.py formats log-probabilities; running.py
launches and follows the LIP; completions.py and responses.py shape the replies.
"""

from .routes import openai_routes

__all__ = ["openai_routes"]
