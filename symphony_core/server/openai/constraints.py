"""The grammar a request's output must follow (`response_format`, `text.format`, tools), compiled
before the request's LIP starts so that a schema llguidance cannot compile (or that allows no
output at all) is a 400, not a failed generation."""

from __future__ import annotations

from ...lib.grammar import Grammar, GrammarError, load_tokenizer
from ..validate import BadRequest
from .params import GenerationParams
from .tool_grammar import tools_lark


def request_grammar(engine, p: GenerationParams, param: str = "response_format") -> Grammar | None:
    choice = p.tool_choice
    if not choice.active and p.output.kind == "text":
        return None
    tok = load_tokenizer(engine.model_dir / "tokenizer.json", engine.config.vocab_size, sorted(engine.eos_token_ids))
    try:
        if choice.active:
            ids = {m: i for m in p.call_format.markers if (i := engine.tokenizer.fast.token_to_id(m)) is not None}
            g = Grammar.lark(tools_lark(p.tools, choice, p.parallel_tool_calls, p.call_format, ids), tok)
        else:
            g = Grammar.json_schema(p.output.schema or {"type": "object"}, tok)
        g.matcher().mask()  # a schema that compiles but allows no first token (`{"$ref": "#"}`) fails here
        return g
    except (GrammarError, RecursionError, ValueError, TypeError) as e:
        where = "tools" if choice.active else param
        raise BadRequest(400, f"{where}: {e}", param=where) from None
