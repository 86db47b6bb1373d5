"""Tool calls, as the region makes them: which of a request's tools it calls, and arguments valid for
each tool's JSON schema, so that an agent's tool loop runs offline.

Which tools: `none` calls none; a named tool is called; otherwise (`auto`, `required`, Anthropic's `any`)
the region calls tools when the conversation's last turn is the user's, and answers in text once it
ends with the tools' results (`required` and `any` call even then, as they must). The tools it calls are
those whose names the user's message mentions (`get_weather` as "get weather" or "get_weather"), in the
request's order, all of them when parallel calls are allowed and the first otherwise; when it mentions
none, the one whose name and description share the most words with the message (the first on a tie).

The arguments come from jsf (a JSON Schema faker) seeded from the region's seed, the request and the
tool's place in it, so the same request gets the same call; each is checked against its schema with
jsonschema, and another seed is tried when jsf's value does not validate.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass, field
from typing import Any

import jsonschema
import orjson
from faker import Faker
from jsf import JSF

from firsttoken.sim.lengths import fraction_for

ATTEMPTS = 8  # seeds tried for a schema before the request is refused
_WORD = re.compile(r"[a-z0-9]+")
# A token of the region's own tokenizer, with the whitespace before it: the pieces join back to the text.
_PIECE = re.compile(r"\s*(?:\w+|[^\w\s])")


class ToolError(ValueError):
    """A schema the region cannot answer for (a tool's, or response_format's): not a JSON schema, or no
    value found that satisfies it. `param` names the request's field."""

    def __init__(self, message: str, param: str) -> None:
        super().__init__(message)
        self.param = param


@dataclass(frozen=True)
class Tool:
    name: str
    description: str
    schema: dict[str, Any]


@dataclass(frozen=True)
class ToolUse:
    """What a request offers and asks of its tools."""
    tools: list[Tool]
    choice: str = "auto"  # auto | required | none | the name of the tool to call
    parallel: bool = True
    after_results: bool = False  # the conversation ends with tools' results: time to answer in text


@dataclass(frozen=True)
class Call:
    id: str
    name: str
    arguments: str  # the JSON text, as the answer carries it
    pieces: list[str] = field(default_factory=list)  # one per token, joining back to `arguments`


def pieces_of(text: str) -> list[str]:
    """`text` as the region's tokens, each with the whitespace before it."""
    return _PIECE.findall(text) or [text]


def chosen(use: ToolUse, message: str) -> list[Tool]:
    """The tools this turn calls (none: it answers in text)."""
    if use.choice == "none" or not use.tools:
        return []
    if use.choice not in ("auto", "required"):
        return [tool for tool in use.tools if tool.name == use.choice][:1]
    if use.after_results and use.choice == "auto":
        return []
    said = f" {_words(message)} "
    named = [tool for tool in use.tools if f" {_words(tool.name)} " in said]
    if named:
        return named if use.parallel else named[:1]
    asked = set(said.split())
    overlap = [len(asked & set(_words(f"{tool.name} {tool.description}").split())) for tool in use.tools]
    return [use.tools[overlap.index(max(overlap))]]


def _words(text: str) -> str:
    """The text's words, lower-case, one space apart (`get_weather` → "get weather")."""
    return " ".join(_WORD.findall(text.lower()))


def calls_for(use: ToolUse, message: str, seed: int, content: Any, prefix: str) -> list[Call]:
    """The calls this turn makes, with their ids (`prefix` + a number from the request) and arguments."""
    calls = []
    for index, tool in enumerate(chosen(use, message)):
        key = {"request": content, "tool": tool.name, "call": index}
        arguments = orjson.dumps(value_for(tool.schema, f"tool {tool.name!r}", seed, key)).decode()
        number = int(fraction_for(seed, key) * 10**12)
        calls.append(Call(f"{prefix}{number:012d}", tool.name, arguments, pieces_of(arguments)))
    return calls


def value_for(schema: dict[str, Any], whose: str, seed: int, key: Any, param: str = "tools") -> Any:
    """A value valid for `schema` (`whose`: what it belongs to, and `param` the request's field, for the
    error), the same for the same seed and key."""
    try:
        validator = jsonschema.validators.validator_for(schema)(schema)
        validator.check_schema(schema)
    except jsonschema.SchemaError as exc:
        raise ToolError(f"the schema of {whose} is not a valid JSON schema: {exc.message}", param) from None
    for attempt in range(ATTEMPTS):
        value = _whole_numbers(_fake(schema, int(fraction_for(seed, {"key": key, "attempt": attempt}) * 2**32)))
        if value is not _FAILED and validator.is_valid(value):
            return value
    raise ToolError(f"could not make a value valid for the schema of {whose}", param)


_FAILED = object()


def _whole_numbers(value: Any) -> Any:
    """jsf may give an integer field a float such as 6965.0, which JSON Schema accepts as an integer but
    typed clients do not (Codex CLI's Rust tools refuse it): whole floats become integers."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, dict):
        return {k: _whole_numbers(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_whole_numbers(v) for v in value]
    return value


def _fake(schema: dict[str, Any], seed: int) -> Any:
    """jsf's value for the schema, drawn from a seeded state. jsf draws from the `random` module and Faker's
    shared generator: both are seeded here and the module's state put back after (the draw is synchronous,
    so nothing else on the event loop can draw in between)."""
    saved = random.getstate()
    random.seed(seed)
    Faker.seed(seed)
    try:
        return JSF(schema).generate()
    except Exception:  # jsf cannot handle every schema; the next seed or a clear refusal follows
        return _FAILED
    finally:
        random.setstate(saved)
