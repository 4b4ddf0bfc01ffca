"""The tool-call parsers of each format family on literal replies (whole, cut short, malformed, text),
the format a chat template is recognised as, call ids a Mistral template takes, and the grammar of
each format accepting the model's way of writing a call (issue #51)."""

from __future__ import annotations

import json
import re

import pytest

from symphony_core.model.random_chat_templates import TEMPLATES
from symphony_core.server.openai.template_tools import HERMES, LLAMA3_JSON, MISTRAL, MISTRAL_ARGS, call_format
from symphony_core.server.openai.tool_json import json_prefix
from symphony_core.server.openai.tool_parse import OWN_FORMAT, CallStream, ParsedCall, ParsedReply, parse_reply

W = '{"name": "get_weather", "parameters": {"city": "Paris"}}'


def calls(*c: tuple[str, str, bool]) -> ParsedReply:
    return ParsedReply(None, [ParsedCall(*x) for x in c])


PARIS = ("get_weather", '{"city": "Paris"}', True)


@pytest.mark.parametrize(
    "text, want",
    [
        (W, calls(PARIS)),
        ("<|python_tag|>" + W.replace("parameters", "arguments"), calls(PARIS)),  # the tag; "arguments" read too
        (W + '; {"name": "get_time", "parameters": {}}', calls(PARIS, ("get_time", "{}", True))),
        (W + ";", calls(PARIS)),  # the next call not started yet
        ('{"parameters": {"city": "Paris"}, "name": "get_weather"}', calls(("get_weather", '{"city": "Paris"}', True))),
        ('{"name": "get_weather", "parameters": {"city": "Pa', calls(("get_weather", '{"city": "Pa', False))),  # cut
        ('{"name": "get_wea', calls()),  # cut before the name is whole: no call yet
        ("<|python", calls()),  # the tag half written: undecided
        ("The weather is fine.", ParsedReply("The weather is fine.")),
        ('{"name": "get_weather", "parameters": {"city": Paris}}', None),  # malformed: text, all of it
        (W + " and then some text", None),  # more than calls: all of it is text, as vLLM falls back
        ('{"name": "get_weather", "parameters": "Paris"}', None),  # arguments not an object
        ('{"city": "Paris"}', None),  # not a call object
    ],
)
def test_llama3_json(text, want):
    got = parse_reply(text, LLAMA3_JSON)
    assert got == (want if want is not None else ParsedReply(text))


M = '[TOOL_CALLS] [{"name": "get_weather", "arguments": {"city": "Paris"}'


@pytest.mark.parametrize(
    "text, want",
    [
        (M + "}]", calls(PARIS)),
        (M + ', "id": "abcDEF123"}, {"name": "get_time", "arguments": {}}]', calls(PARIS, ("get_time", "{}", True))),
        ('[TOOL_CALLS]{"name": "get_weather", "arguments": {"city": "Paris"}}', calls(PARIS)),  # a lone object
        (M[:-3], calls(("get_weather", '{"city": "Pari', False))),  # cut inside the arguments
        (M, calls(("get_weather", '{"city": "Paris"}', False))),  # arguments whole, the object not closed
        (M + "}, ", calls(PARIS)),
        ("[TOOL_CA", calls()),
        ("Sunny, 18 degrees.", ParsedReply("Sunny, 18 degrees.")),
        ("[TOOL_CALLS] hello", None),  # malformed: text, all of it
        (M + "}] trailing", None),
        ('[TOOL_CALLS] [{"name": "get_weather", "arguments": {"city": Paris}}]', None),
    ],
)
def test_mistral(text, want):
    assert parse_reply(text, MISTRAL) == (want if want is not None else ParsedReply(text))


@pytest.mark.parametrize(
    "text, want",
    [
        ('[TOOL_CALLS]get_weather[ARGS]{"city": "Paris"}', calls(PARIS)),
        (
            '[TOOL_CALLS]get_weather[ARGS]{"city": "Paris"}[TOOL_CALLS]get_time[ARGS]{}',
            calls(PARIS, ("get_time", "{}", True)),
        ),
        ("[TOOL_CALLS]get_wea", calls()),  # the name still being written
        ('[TOOL_CALLS] get_weather [ARGS] {"city": "Paris"}', calls(PARIS)),  # special tokens set off by spaces
        ("[TOOL_CALLS] get_wea", calls()),
        ("[TOOL_CALLS]get_weather[AR", calls()),
        ('[TOOL_CALLS]get_weather[ARGS]{"city": "Pa', calls(("get_weather", '{"city": "Pa', False))),
        ("Plain words.", ParsedReply("Plain words.")),
        ("[TOOL_CALLS]two words[ARGS]{}", None),
        ('[TOOL_CALLS]get_weather[ARGS]"Paris"', None),
        ('[TOOL_CALLS]get_weather[ARGS]{"city": "Paris"} then text', None),
    ],
)
def test_mistral_args(text, want):
    assert parse_reply(text, MISTRAL_ARGS) == (want if want is not None else ParsedReply(text))


def test_hermes_and_our_own_format_still_read():
    assert parse_reply(
        '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>', HERMES
    ) == calls(PARIS)
    assert parse_reply(
        '<tool_call>{"name": "a", "arguments": {}}<tool_call>{"name": "b", "arguments": {"x": 1}}'
    ) == calls(("a", "{}", True), ("b", '{"x": 1}', True))
    assert parse_reply("<tool_call>{oops}", OWN_FORMAT) == ParsedReply("<tool_call>{oops}")


@pytest.mark.parametrize(
    "fmt, reply",
    [
        (LLAMA3_JSON, '<|python_tag|>{"name": "get_weather", "parameters": {"city": "Paris", "n": [1, 2]}}'),
        (MISTRAL, '[TOOL_CALLS] [{"name": "get_weather", "arguments": {"city": "Paris", "n": [1, 2]}}]'),
        (MISTRAL_ARGS, '[TOOL_CALLS]get_weather[ARGS]{"city": "Paris", "n": [1, 2]}'),
    ],
)
def test_streaming_sends_the_name_once_and_the_arguments_piece_by_piece(fmt, reply):
    s = CallStream(fmt)
    names, pieces = [], []
    for n in range(1, len(reply) + 1):
        text, deltas = s.update(reply[:n])
        assert not text
        for _, name, args in deltas:
            names += [name] if name is not None else []
            pieces.append(args)
    assert names == ["get_weather"] and len([p for p in pieces if p]) > 5
    assert json.loads("".join(pieces)) == {"city": "Paris", "n": [1, 2]}


@pytest.mark.parametrize("fmt", [LLAMA3_JSON, MISTRAL, MISTRAL_ARGS, HERMES])
def test_text_is_streamed_as_soon_as_it_cannot_be_a_call(fmt):
    s = CallStream(fmt)
    assert s.update("S") == ("S", [])
    assert s.update("Sunny") == ("unny", [])


def test_json_prefix_tells_a_cut_from_an_error():
    for cut in ('{"a": "P', '{"a": 12', '{"ci', "[1, tr", '{"a" ', '{"a":[1,{"b":nul', '"ab\\u00'):
        assert json_prefix(cut), cut
    for bad in ('{"a": Paris}', '{"a": 12x', "{12", "[1,,", "{}}", '{"a":1]', '{"a": "\\q'):
        assert not json_prefix(bad), bad


def test_the_format_is_recognised_from_the_template():
    assert call_format(TEMPLATES["llama"]) == LLAMA3_JSON
    assert call_format(TEMPLATES["mistral"]) == MISTRAL
    assert call_format(TEMPLATES["qwen2"]) == HERMES and call_format(TEMPLATES["qwen3"]) == HERMES
    assert call_format(TEMPLATES["gemma3"]) is OWN_FORMAT and call_format(None) is OWN_FORMAT
    newer = "{%- for t in tools %}[AVAILABLE_TOOLS]{% endfor %}{{ '[TOOL_CALLS]' + name + '[ARGS]' + arguments }}"
    assert call_format(newer) == MISTRAL_ARGS
    llama_no_tools = TEMPLATES["llama"].replace("tools", "x")
    assert call_format(llama_no_tools) is OWN_FORMAT


def test_mistral_call_ids_are_nine_letters_and_digits_and_stable():
    made = MISTRAL.call_id("call_chatcmpl-7-1700000000_0_0")
    assert len(made) == 9 and made.isalnum() and made == MISTRAL.call_id("call_chatcmpl-7-1700000000_0_0")
    assert MISTRAL.call_id("abcDEF123") == "abcDEF123"  # already what the template takes
    assert MISTRAL.call_id("call_1") != MISTRAL.call_id("call_2")
    assert LLAMA3_JSON.call_id("call_1") == "call_1"


@pytest.fixture(scope="module")
def tokenizers(tmp_path_factory):
    from tokenizers import Tokenizer

    from symphony_core.lib.grammar import load_tokenizer
    from symphony_core.model.random_models import make_random_model

    out = {}
    for fam in ("llama", "mistral"):
        d = make_random_model(fam, tmp_path_factory.mktemp(fam))
        raw = Tokenizer.from_file(str(d / "tokenizer.json"))
        out[fam] = raw, load_tokenizer(d / "tokenizer.json", raw.get_vocab_size(), [2])
    return out


TOOLS = [
    {
        "name": "get_weather",
        "description": "",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    },
    {"name": "get_time", "description": "", "parameters": {"type": "object", "properties": {}}},
]


@pytest.mark.parametrize(
    "fam, fmt, reply, other",
    [
        ("llama", LLAMA3_JSON, W, '{"name": "nope", "parameters": {}}'),
        ("mistral", MISTRAL, M + "}]", '[TOOL_CALLS] [{"name": "nope", "arguments": {}}]'),
        ("mistral", MISTRAL_ARGS, '[TOOL_CALLS]get_weather[ARGS]{"city": "Paris"}', "[TOOL_CALLS]nope[ARGS]{}"),
    ],
)
def test_the_grammar_writes_calls_the_models_way(tokenizers, fam, fmt, reply, other):
    from symphony_core.lib.grammar import Grammar
    from symphony_core.server.openai.tool_grammar import tools_lark
    from symphony_core.server.openai.tools import ToolChoice

    raw, tok = tokenizers[fam]
    ids = {m: i for m in fmt.markers if (i := raw.token_to_id(m)) is not None}

    def spell(text: str) -> list[int]:  # a marker as its special token, the rest as plain text
        out: list[int] = []
        for part in filter(None, re.split(r"(\[TOOL_CALLS\]|\[ARGS\]|<\|python_tag\|>)", text)):
            out += [ids[part]] if part in ids else raw.encode(part, add_special_tokens=False).ids
        return out

    for mode in ("required", "auto"):
        g = Grammar.lark(tools_lark(TOOLS, ToolChoice(mode), True, fmt, ids), tok)
        toks = spell(reply)
        assert g.matcher().accepts(toks) == len(toks), (mode, reply)
        assert g.matcher().accepts(spell(other)) < len(spell(other))
    # under "auto" text is allowed, but it cannot start the way a call starts
    g = Grammar.lark(tools_lark(TOOLS, ToolChoice("auto"), True, fmt, ids), tok)
    words = raw.encode("Sunny today", add_special_tokens=False).ids
    assert g.matcher().accepts(words) == len(words)
    if fmt is LLAMA3_JSON:
        tagged = spell('<|python_tag|>{"name": "get_time", "parameters": {}}')
        assert g.matcher().accepts(tagged) == len(tagged)
    if fmt is MISTRAL:  # Nemo's template writes no space before the list, and the grammar follows it
        nemo = call_format(TEMPLATES["mistral"].replace('"[TOOL_CALLS] ["', '"[TOOL_CALLS]["'))
        assert nemo.lead == "["
        g = Grammar.lark(tools_lark(TOOLS, ToolChoice("required"), True, nemo, ids), tok)
        assert g.matcher().accepts(spell(reply.replace("] [", "]["))) == len(spell(reply.replace("] [", "][")))
