"""A ReAct agent whose tools run inside the LIP, next to the model, with one KV cache for all turns.

The loop: the model writes `Thought: …` and `Action: tool[argument]`; the program runs the tool
right here (no round trip to a client) and adds `Observation: …` to the conversation; repeat
until `Action: finish[answer]`. The conversation lives in one KV file (`lib.chat.Chat`): each
observation is appended and only its tokens are computed — the cache is extended, never rebuilt.

A 135M model does not reliably produce the action format on its own, so each assistant turn is
constrained by a grammar (llguidance, via `lib.grammar`): the format, the tool names, the
calculator's expression syntax and the lookup keys are enforced; the model picks the content.
The first turn must use a tool; the last allowed turn must finish; the tools offered are the
ones the program finds relevant to the question (`relevant_tools`).

Tools: `calc[...]` — arithmetic evaluated by walking a parsed AST (numbers and + - * / ** %
and parentheses only; nothing is ever `eval`ed); `lookup[key]` — a local document collection.

    python examples/lips/react_agent.py "What is 17 * 23?"
"""

from __future__ import annotations

import argparse
import ast
import operator
import re
from pathlib import Path

from symphony_core.lib.chat import Chat
from symphony_core.lib.grammar import Grammar, GrammarError, tokenizer_for

DOCUMENTS = {
    "eiffel tower": "The Eiffel Tower in Paris is 330 metres tall and was completed in 1889.",
    "python": "Python is a programming language created by Guido van Rossum and first released in 1991.",
    "moon": "The Moon is on average 384,400 km from Earth and takes 27.3 days to orbit it.",
    "mount everest": "Mount Everest is 8,849 metres high, the highest mountain above sea level.",
}

SYSTEM = """You answer questions step by step using tools. Each turn, write one Thought and one Action.
Actions: calc[expression] computes arithmetic; lookup[topic] reads a document about a topic; finish[answer] gives the final answer.
Topics: """ + ", ".join(DOCUMENTS) + """.
Example 1:
Question: When was the Moon landing?
Thought: I should read the document about the moon.
Action: lookup[moon]
Observation: The first Moon landing was in 1969.
Thought: The document gives the answer.
Action: finish[1969]
Example 2:
Question: What is 6 times 7?
Thought: I need to multiply 6 by 7.
Action: calc[6*7]
Observation: 42
Thought: The calculator gives the answer.
Action: finish[42]"""


# --- tools -------------------------------------------------------------------------------------
_OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
        ast.Mod: operator.mod, ast.Pow: operator.pow, ast.USub: operator.neg, ast.UAdd: operator.pos}


class ToolError(ValueError):
    pass


def calc(expression: str) -> str:
    """Evaluate arithmetic safely: parse to an AST and allow only numbers and arithmetic operators."""
    try:
        tree = ast.parse(expression.strip(), mode="eval")
    except SyntaxError as e:
        raise ToolError(f"not an arithmetic expression: {expression!r}") from e

    def ev(node):
        if isinstance(node, ast.Expression):
            return ev(node.body)
        if isinstance(node, ast.Constant) and type(node.value) in (int, float):
            return node.value
        if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
            left, right = ev(node.left), ev(node.right)
            if isinstance(node.op, ast.Pow) and abs(right) > 64:
                raise ToolError("exponent too large")
            return _OPS[type(node.op)](left, right)
        if isinstance(node, ast.UnaryOp) and type(node.op) in _OPS:
            return _OPS[type(node.op)](ev(node.operand))
        raise ToolError(f"not allowed in a calculation: {type(node).__name__}")

    try:
        value = ev(tree)
    except ZeroDivisionError as e:
        raise ToolError("division by zero") from e
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return str(round(value, 6) if isinstance(value, float) else value)


def lookup(key: str) -> str:
    doc = DOCUMENTS.get(key.strip().lower())
    if doc is None:
        raise ToolError(f"no document about {key!r}")
    return doc


TOOLS = {"calc": calc, "lookup": lookup}


def run_tool(name: str, arg: str) -> str:
    try:
        return TOOLS[name](arg)
    except ToolError as e:
        return f"error: {e}"


# --- the action format ---------------------------------------------------------------------------
def relevant_tools(question: str) -> list[str]:
    """The program's own routing: offer `calc` when the question holds arithmetic and `lookup`
    when it names a topic of the collection (both when it is unclear). A small model then only
    has to fill in the arguments — the program, not the model, knows what its tools are for."""
    q = question.lower()
    tools = []
    if re.search(r"\d\s*([-+*/x]|times|plus|minus|divided)\s*\d", q):
        tools.append("calc")
    if any(w in q for k in DOCUMENTS for w in k.split()):
        tools.append("lookup")
    return tools or ["calc", "lookup"]


def action_grammar(tokenizer, *, tools=("calc", "lookup"), finish: bool = True) -> Grammar:
    """The format of one assistant turn, with only the given tools (and finish) allowed."""
    actions = []
    if "calc" in tools:
        actions.append('"calc[" expr "]"')
    if "lookup" in tools:
        actions.append('"lookup[" KEY "]"')
    if finish:
        actions.append('"finish[" ANSWER "]"')
    keys = " | ".join(f'"{k}"' for k in DOCUMENTS)
    return Grammar.lark(f"""
start: "Thought: " THOUGHT "\\nAction: " action
action: {" | ".join(actions)}
expr: term (SP? ADDOP SP? term)*
term: factor (SP? MULOP SP? factor)*
factor: NUMBER | "(" expr ")" | "-" factor
ADDOP: "+" | "-"
MULOP: "*" | "/"
SP: " "
NUMBER: /[0-9]{{1,9}}(\\.[0-9]{{1,4}})?/
KEY: {keys}
THOUGHT: /[^\\n\\[\\]]{{1,80}}/
ANSWER: /[^\\n\\[\\]]{{1,40}}/
""", tokenizer)


ACTION = re.compile(r"Action: (\w+)\[(.*)\]\s*$", re.S)


def react(sym, question: str, tokenizer_path, max_steps: int = 3, turn_tokens: int = 72) -> dict:
    """Answer `question` with tools; returns the answer, the steps and the KV cache's history."""
    tok = tokenizer_for(sym, tokenizer_path)
    chat = Chat(sym, system=SYSTEM)
    chat.add("user", f"Question: {question}")
    steps, kv_history = [], []  # kv_history: the cache after every turn (it must only grow)
    answer = None
    offered = relevant_tools(question)
    for step in range(max_steps):
        last = step == max_steps - 1
        grammar = action_grammar(tok, tools=() if last else offered, finish=step > 0)
        m = grammar.matcher()
        g = chat.reply(turn_tokens, grammar=m)
        kv_history.append({"len": chat.kv.len, "tokens": chat.kv.tokens})
        if not m.is_accepting():
            raise GrammarError(f"turn {step}: the action was not complete after {turn_tokens} tokens: {g.text!r}")
        name, arg = ACTION.search(g.text).groups()
        entry = {"turn": g.text, "tool": name, "arg": arg}
        if name == "finish":
            answer = arg
            steps.append(entry)
            break
        entry["observation"] = run_tool(name, arg)
        steps.append(entry)
        chat.add("user", f"Observation: {entry['observation']}")
        chat.flush()  # feed the observation now: the cache holds every turn so far
        kv_history.append({"len": chat.kv.len, "tokens": chat.kv.tokens})
    transcript = chat.text()
    rebuilt = chat.rebuilt_tokens
    chat.close()
    return {"answer": answer, "steps": steps, "transcript": transcript, "kv_history": kv_history,
            "rebuilt_tokens": rebuilt}


def main(argv: list[str] | None = None) -> None:
    from symphony_core import Engine

    ap = argparse.ArgumentParser(description="a ReAct agent with in-LIP tools")
    ap.add_argument("question", nargs="?", default="What is 17 * 23?")
    ap.add_argument("--steps", type=int, default=2, help="turns at most (the last one must finish)")
    args = ap.parse_args(argv)
    eng = Engine()
    res = eng.run(react, args.question, Path(eng.model_dir) / "tokenizer.json", args.steps).result()
    print(f"Question: {args.question}")
    for s in res["steps"]:
        print(s["turn"])
        if "observation" in s:
            print(f"Observation: {s['observation']}")
    print(f"\nanswer: {res['answer']!r}")
    print("KV cache per turn (tokens):", [h["len"] for h in res["kv_history"]],
          f"— extended in place, {res['rebuilt_tokens']} tokens recomputed")
    eng.shutdown()


if __name__ == "__main__":
    main()
