"""JSON output constrained to a schema: the result always parses and validates.

The schema is compiled by llguidance (`lib.grammar.Grammar.json_schema`) into a grammar over
the model's own tokens; at every step the LIP passes the allowed-token mask to `pred(mask=)`,
so the engine masks the logits in the batch and the model can only write valid JSON. Strings
carry `maxLength` and arrays `maxItems`, so the longest valid output fits in `max_tokens`.

    python examples/lips/json_schema.py "Ada Lovelace, the mathematician from London, was born in 1815."
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from symphony_core.lib.chat import chat_prompt
from symphony_core.lib.grammar import Grammar, generate_constrained, tokenizer_for

PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "minLength": 1, "maxLength": 32},
        "age": {"type": "integer", "minimum": 0, "maximum": 130},
        "city": {"type": "string", "minLength": 1, "maxLength": 32},
        "occupation": {"type": "string", "enum": ["scientist", "artist", "engineer", "writer", "teacher", "other"]},
        "skills": {"type": "array", "items": {"type": "string", "minLength": 1, "maxLength": 20}, "maxItems": 3},
    },
    "required": ["name", "age", "city", "occupation", "skills"],
    "additionalProperties": False,
}


def extract(sym, text: str, tokenizer_path, schema: dict = PERSON, max_tokens: int = 200) -> dict:
    """Describe `text` as JSON under `schema`; returns the parsed value and the raw output."""
    grammar = Grammar.json_schema(schema, tokenizer_for(sym, tokenizer_path))
    prompt = chat_prompt(sym, [{"role": "user", "content":
                                f"Describe the person in this text as JSON with the fields "
                                f"{', '.join(schema.get('properties', {}))}.\n\nText: {text}"}])
    kv = sym.kv_create()
    g = generate_constrained(sym, kv, sym.tokenize(prompt), grammar, max_tokens)
    sym.kv_close(kv)
    return {"value": json.loads(g.text), "raw": g.text, "tokens": len(g.tokens), "stop_reason": g.stop_reason}


def main(argv: list[str] | None = None) -> None:
    from symphony_core import Engine

    ap = argparse.ArgumentParser(description="JSON constrained to a schema")
    ap.add_argument("text", nargs="?", default="Marie Curie was a 66-year-old physicist and chemist living in "
                                                "Paris, skilled in radiochemistry and teaching.")
    args = ap.parse_args(argv)
    eng = Engine()
    res = eng.run(extract, args.text, Path(eng.model_dir) / "tokenizer.json").result()
    print(json.dumps(res["value"], indent=2, ensure_ascii=False))
    print(f"[{res['tokens']} tokens, stopped: {res['stop_reason']}]")
    try:
        import jsonschema

        jsonschema.validate(res["value"], PERSON)
        print("valid under the schema (checked with jsonschema)")
    except ImportError:
        pass
    eng.shutdown()


if __name__ == "__main__":
    main()
