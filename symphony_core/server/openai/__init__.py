"""OpenAI-compatible endpoints (chat completions, completions, responses) over built-in LIPs.

params.py parses and checks requests; messages.py, tools.py and template_tools.py turn them into
a prompt; constraints.py and tool_grammar.py compile the grammar (JSON output, tool calls in the
model's format); tool_parse.py reads the calls back; generation.py is the LIP (n
choices as forks of one prompt's KV); logprobs.py formats log-probabilities; running.py
launches and follows the LIP; completions.py and responses.py shape the replies.
"""

from .routes import openai_routes

__all__ = ["openai_routes"]
