"""Request parsing for the OpenAI-compatible endpoints: a checked body (protocol.py: types,
unknown and refused fields, nulls dropped) -> `GenerationParams`. Values out of range, or a
combination Symphony does not implement, get a 400 naming the parameter. Nothing is silently
ignored.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..validate import BadRequest, check_fields
from .tool_parse import OWN_FORMAT, CallFormat
from .tools import ToolChoice, parse_response_tools, parse_tool_choice, parse_tools, response_tool_choice

MAX_TOKENS_CAP = 4096
MAX_N = 16
MAX_TOP_LOGPROBS = 20
MAX_STOPS = 4
MAX_TOP_K = 1 << 20
LOGIT_BIAS_RANGE = 100
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
    parallel_tool_calls: bool = True
    call_format: CallFormat = OWN_FORMAT  # how the model writes a call (ours, or its template's)
    top_k: int = 0
    min_p: float = 0.0
    repetition_penalty: float = 1.0
    logit_bias: dict[int, float] = field(default_factory=dict)
    ignore_eos: bool = False
    skip_special_tokens: bool = True
    spaces_between_special_tokens: bool = True
    echo: bool = False


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
    top_k = body.get("top_k", 0)
    if top_k == -1:  # vLLM's "off"
        top_k = 0
    if not 0 <= top_k <= MAX_TOP_K:
        raise bad(f"top_k must be -1, 0 (off) or in [1, {MAX_TOP_K}], got {top_k}", "top_k")
    return {
        "temperature": _in_range("temperature", body.get("temperature"), 1.0, 0, 2),
        "top_p": _in_range("top_p", body.get("top_p"), 1.0, 0, 1, lo_open=True),
        "top_k": top_k,
        "min_p": _in_range("min_p", body.get("min_p"), 0.0, 0, 1),
        "repetition_penalty": _in_range("repetition_penalty", body.get("repetition_penalty"), 1.0, 0, 2, lo_open=True),
        "skip_special_tokens": body.get("skip_special_tokens", True),
        "spaces_between_special_tokens": body.get("spaces_between_special_tokens", True),
    }


def _logit_bias(v: dict | None, vocab_size: int) -> dict[int, float]:
    out: dict[int, float] = {}
    for k, b in (v or {}).items():
        try:
            tok = int(k)
        except ValueError:
            raise bad(f"logit_bias keys must be token ids, got {k!r}", "logit_bias") from None
        if not 0 <= tok < vocab_size:
            raise bad(f"logit_bias: token id {tok} is outside the vocabulary [0, {vocab_size})", "logit_bias")
        if not -LOGIT_BIAS_RANGE <= b <= LOGIT_BIAS_RANGE:
            raise bad(f"logit_bias values must be in [-100, 100], got {b} for token {tok}", "logit_bias")
        out[tok] = float(b)
    return out


def _common(body: dict, default_max: int, vocab_size: int) -> GenerationParams:
    n = 1 if body.get("n") is None else body["n"]
    if not 1 <= n <= MAX_N:
        raise bad(f"n must be in [1, {MAX_N}], got {n}", "n")
    so = body.get("stream_options") or {}
    check_fields(
        so, {"include_usage": ((bool, type(None)), False), "include_obfuscation": ((bool,), False)}, "stream_options"
    )
    if so.get("include_obfuscation"):
        raise bad("stream_options.include_obfuscation is not supported (events are not padded)", "stream_options")
    seed = body.get("seed")
    if seed is not None and not SEED_RANGE[0] <= seed <= SEED_RANGE[1]:
        raise bad(f"seed must be a 64-bit integer in [{SEED_RANGE[0]}, {SEED_RANGE[1]}], got {seed}", "seed")
    mt = body.get("max_completion_tokens", body.get("max_tokens"))  # nulls are gone (protocol.as_body)
    return GenerationParams(
        max_tokens=_max_tokens(mt, default_max),
        n=n,
        stop=_stops(body.get("stop")),
        seed=seed,
        presence_penalty=_in_range("presence_penalty", body.get("presence_penalty"), 0.0, -2, 2),
        frequency_penalty=_in_range("frequency_penalty", body.get("frequency_penalty"), 0.0, -2, 2),
        logit_bias=_logit_bias(body.get("logit_bias"), vocab_size),
        ignore_eos=body.get("ignore_eos", False),
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


def chat_params(body: dict, vocab_size: int) -> GenerationParams:
    p = _common(body, 128, vocab_size)
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
    p.parallel_tool_calls = body.get("parallel_tool_calls", True)
    return p


def completion_params(body: dict, vocab_size: int) -> GenerationParams:
    p = _common(body, 16, vocab_size)
    lp = body.get("logprobs")
    if lp is not None:
        if not 0 <= lp <= 5:
            raise bad(f"logprobs must be in [0, 5] for completions, got {lp}", "logprobs")
        p.logprobs, p.top_logprobs = True, lp
    p.echo = body.get("echo", False)
    if p.echo and p.logprobs:
        raise bad("echo with logprobs is not supported (the prompt's log-probabilities are not computed)", "echo")
    return p


def responses_params(body: dict) -> GenerationParams:
    p = GenerationParams(
        max_tokens=_max_tokens(body.get("max_output_tokens"), 128, "max_output_tokens"), **_sampling(body)
    )
    p.tools = parse_response_tools(body.get("tools"))
    p.tool_choice = response_tool_choice(body.get("tool_choice"), p.tools)
    p.parallel_tool_calls = body.get("parallel_tool_calls", True)
    so = body.get("stream_options") or {}
    if any(so.values()):
        raise bad("stream_options is not supported by /v1/responses here", "stream_options")
    if body.get("top_logprobs"):
        raise bad("top_logprobs is not supported by /v1/responses here; use /v1/chat/completions", "top_logprobs")
    text = body.get("text") or {}
    check_fields(text, {"format": ((dict,), False), "verbosity": ((str,), False)}, "text")
    if text.get("verbosity") not in (None, "medium"):
        raise bad("text.verbosity is not supported: this model has no verbosity control", "text.verbosity")
    p.output = output_format(text.get("format"), "text.format")
    if p.tool_choice.active and p.output.kind != "text":
        raise bad("text.format cannot be combined with a tool call being allowed (tool_choice 'none' lifts it)", "text")
    return p


def prompt_text(prompt: Any) -> str:
    if isinstance(prompt, list):
        if len(prompt) != 1 or not isinstance(prompt[0], str):
            raise bad("prompt must be a string (or a list of exactly one string)", "prompt")
        prompt = prompt[0]
    return prompt
