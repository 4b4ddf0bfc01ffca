"""Request parsing for the OpenAI-compatible endpoints: JSON body -> `GenerationParams`.

Every field is type-checked (`check_fields`: an unknown field is a 422 naming it); values out
of range, or a feature Symphony does not implement, get a 400 naming the parameter. Nothing
is silently ignored.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..validate import BadRequest, check_fields
from .tools import ToolChoice, parse_tool_choice, parse_tools

_NUM = (int, float)
_OPT_NUM = (*_NUM, type(None))
_SAMPLING_FIELDS = {
    "model": ((str,), True),
    "temperature": (_OPT_NUM, False),
    "top_p": (_OPT_NUM, False),
    "stream": ((bool, type(None)), False),
    "user": ((str,), False),
}
_COMMON = {
    **_SAMPLING_FIELDS,
    "max_tokens": ((int, type(None)), False),
    "n": ((int, type(None)), False),
    "stream_options": ((dict, type(None)), False),
    "stop": ((str, list, type(None)), False),
    "seed": ((int, type(None)), False),
    "presence_penalty": (_OPT_NUM, False),
    "frequency_penalty": (_OPT_NUM, False),
}
CHAT_FIELDS = {
    **_COMMON,
    "messages": ((list,), True),
    "max_completion_tokens": ((int, type(None)), False),
    "logprobs": ((bool, type(None)), False),
    "top_logprobs": ((int, type(None)), False),
    "response_format": ((dict, type(None)), False),
    "tools": ((list, type(None)), False),
    "tool_choice": ((str, dict, type(None)), False),
    "parallel_tool_calls": ((bool, type(None)), False),
}
COMPLETION_FIELDS = {
    **_COMMON,
    "prompt": ((str, list), True),
    "logprobs": ((int, type(None)), False),
    "echo": ((bool, type(None)), False),
    "suffix": ((str, type(None)), False),
}
RESPONSES_FIELDS = {
    **_SAMPLING_FIELDS,
    "input": ((str, list), True),
    "instructions": ((str, type(None)), False),
    "max_output_tokens": ((int, type(None)), False),
    "text": ((dict, type(None)), False),
    "store": ((bool, type(None)), False),
    "metadata": ((dict, type(None)), False),
}
MAX_TOKENS_CAP = 4096
MAX_N = 16
MAX_TOP_LOGPROBS = 20
MAX_STOPS = 4
SEED_RANGE = (-(2**63), 2**63 - MAX_N)  # int64, room for choice i's seed + i


@dataclass
class OutputFormat:
    """What the output must be: free text, any JSON object, or JSON valid under `schema`."""

    kind: str = "text"  # "text" | "json_object" | "json_schema"
    schema: dict | None = None
    name: str | None = None


@dataclass
class GenerationParams:
    """Everything the built-in LIP needs besides the prompt; plain data (it crosses into the LIP)."""

    max_tokens: int
    temperature: float = 1.0
    top_p: float = 1.0
    n: int = 1
    stop: list[str] = field(default_factory=list)
    seed: int | None = None
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    logprobs: bool = False
    top_logprobs: int = 0
    output: OutputFormat = field(default_factory=OutputFormat)
    tools: list[dict] = field(default_factory=list)
    tool_choice: ToolChoice = field(default_factory=ToolChoice)


def bad(msg: str, param: str | None = None) -> BadRequest:
    return BadRequest(400, msg, param=param)


def check_model(body: dict, model_names: set[str]) -> None:
    if body["model"] not in model_names:
        raise BadRequest(
            404,
            f"model {body['model']!r} is not served here; available: {sorted(model_names)}",
            type="model_not_found",
            param="model",
        )


def _in_range(name: str, v: Any, default: float, lo: float, hi: float, lo_open: bool = False) -> float:
    x = default if v is None else float(v)
    if not (lo < x if lo_open else lo <= x) or x > hi:
        raise bad(f"{name} must be in {'(' if lo_open else '['}{lo:g}, {hi:g}], got {x:g}", name)
    return x


def _max_tokens(v: Any, default: int, name: str = "max_tokens") -> int:
    mt = default if v is None else v
    if not 1 <= mt <= MAX_TOKENS_CAP:
        raise bad(f"{name} must be in [1, {MAX_TOKENS_CAP}], got {mt}", name)
    return mt


def _stops(v: Any) -> list[str]:
    stop = [v] if isinstance(v, str) else (v or [])
    if len(stop) > MAX_STOPS or not all(isinstance(s, str) for s in stop):
        raise bad(f"stop must be a string or a list of at most {MAX_STOPS} strings", "stop")
    return [s for s in stop if s]


def _sampling(body: dict) -> dict:
    return {
        "temperature": _in_range("temperature", body.get("temperature"), 1.0, 0, 2),
        "top_p": _in_range("top_p", body.get("top_p"), 1.0, 0, 1, lo_open=True),
    }


def _common(body: dict, default_max: int) -> GenerationParams:
    n = 1 if body.get("n") is None else body["n"]
    if not 1 <= n <= MAX_N:
        raise bad(f"n must be in [1, {MAX_N}], got {n}", "n")
    so = body.get("stream_options") or {}
    check_fields(so, {"include_usage": ((bool,), False)}, "stream_options")
    seed = body.get("seed")
    if seed is not None and not SEED_RANGE[0] <= seed <= SEED_RANGE[1]:
        raise bad(f"seed must be a 64-bit integer in [{SEED_RANGE[0]}, {SEED_RANGE[1]}], got {seed}", "seed")
    mt = body.get("max_completion_tokens", body.get("max_tokens"))
    return GenerationParams(
        max_tokens=_max_tokens(mt, default_max),
        n=n,
        stop=_stops(body.get("stop")),
        seed=seed,
        presence_penalty=_in_range("presence_penalty", body.get("presence_penalty"), 0.0, -2, 2),
        frequency_penalty=_in_range("frequency_penalty", body.get("frequency_penalty"), 0.0, -2, 2),
        **_sampling(body),
    )


def output_format(rf: dict | None, param: str = "response_format") -> OutputFormat:
    """`response_format` (chat) or `text.format` (responses): text, json_object or json_schema."""
    if rf is None:
        return OutputFormat()
    kind = rf.get("type")
    if kind == "text":
        check_fields(rf, {"type": ((str,), True)}, param)
        return OutputFormat()
    if kind == "json_object":
        check_fields(rf, {"type": ((str,), True)}, param)
        return OutputFormat("json_object", {"type": "object"})
    if kind != "json_schema":
        raise bad(f"{param}.type must be 'text', 'json_object' or 'json_schema', got {kind!r}", f"{param}.type")
    fields = {
        "name": ((str,), True),
        "schema": ((dict,), True),
        "strict": ((bool, type(None)), False),  # the schema is always enforced strictly
        "description": ((str,), False),
    }
    if param == "response_format":  # chat nests the schema's fields under "json_schema"
        check_fields(rf, {"type": ((str,), True), "json_schema": ((dict,), True)}, param)
        spec = check_fields(rf["json_schema"], fields, f"{param}.json_schema")
    else:  # the Responses API puts them beside "type"
        spec = check_fields(rf, {"type": ((str,), True), **fields}, param)
    return OutputFormat("json_schema", spec["schema"], spec["name"])


def chat_params(body: dict) -> GenerationParams:
    p = _common(body, 128)
    if body.get("logprobs"):
        p.logprobs = True
        p.top_logprobs = body.get("top_logprobs") or 0
        if not 0 <= p.top_logprobs <= MAX_TOP_LOGPROBS:
            raise bad(f"top_logprobs must be in [0, {MAX_TOP_LOGPROBS}], got {p.top_logprobs}", "top_logprobs")
    elif body.get("top_logprobs") is not None:
        raise bad("top_logprobs needs logprobs: true", "top_logprobs")
    p.output = output_format(body.get("response_format"))
    p.tools = parse_tools(body.get("tools"))
    p.tool_choice = parse_tool_choice(body.get("tool_choice"), p.tools)
    if p.tool_choice.active and p.output.kind != "text":
        raise bad(
            "response_format cannot be combined with a tool call being allowed (tool_choice 'none' lifts it)",
            "response_format",
        )
    if body.get("parallel_tool_calls"):
        raise bad("parallel_tool_calls is not supported: a reply calls at most one tool", "parallel_tool_calls")
    return p


def completion_params(body: dict) -> GenerationParams:
    p = _common(body, 16)
    lp = body.get("logprobs")
    if lp is not None:
        if not 0 <= lp <= 5:
            raise bad(f"logprobs must be in [0, 5] for completions, got {lp}", "logprobs")
        p.logprobs, p.top_logprobs = True, lp
    if body.get("echo"):
        raise bad("echo is not supported", "echo")
    if body.get("suffix"):
        raise bad("suffix is not supported", "suffix")
    return p


def responses_params(body: dict) -> GenerationParams:
    p = GenerationParams(
        max_tokens=_max_tokens(body.get("max_output_tokens"), 128, "max_output_tokens"), **_sampling(body)
    )
    if body.get("store"):
        raise bad("store: true is not supported (responses are not kept; send store: false)", "store")
    text = body.get("text") or {}
    check_fields(text, {"format": ((dict,), False)}, "text")
    p.output = output_format(text.get("format"), "text.format")
    return p


def prompt_text(prompt: Any) -> str:
    if isinstance(prompt, list):
        if len(prompt) != 1 or not isinstance(prompt[0], str):
            raise bad("prompt must be a string (or a list of exactly one string)", "prompt")
        prompt = prompt[0]
    return prompt
