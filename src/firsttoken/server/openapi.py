"""GET /openapi.json: every route the gateway serves, as OpenAPI 3.1.

Request bodies are described by what the gateway itself checks before it forwards them (server/validate.py,
formats/*_request.py): the fields it requires and the types it refuses otherwise, with every other field
allowed, since it passes them on to the upstream. Answers are described by their shape and every error by
its format: OpenAI's on the OpenAI routes and the operator's, Anthropic's on /v1/messages. A test keeps the
routes here and the gateway's routing table the same, and a fuzzer holds the gateway to the document.
"""

from __future__ import annotations

from typing import Any

from firsttoken import __version__

Schema = dict[str, Any]


def _ref(name: str) -> Schema:
    return {"$ref": f"#/components/schemas/{name}"}


_ANY_OBJECT: Schema = {"type": "object"}
_MODEL: Schema = {"type": "string", "minLength": 1, "maxLength": 256,
                  "description": "a model name, an alias of the config, or upstream/model"}
_TEXT_OR_PARTS: Schema = {"anyOf": [{"type": "string"}, {"type": "array", "items": _ANY_OBJECT}]}
_BLOCK: Schema = {"type": "object", "required": ["type"], "properties": {"type": {"type": "string"}}}
_TEXT_BLOCK: Schema = {"type": "object", "required": ["type", "text"],
                       "properties": {"type": {"const": "text"}, "text": {"type": "string"}}}
_POSITIVE: Schema = {"type": "integer", "minimum": 1, "description": "written without a fraction"}

SCHEMAS: dict[str, Schema] = {
    "OpenAIError": {
        "type": "object", "required": ["error"],
        "properties": {"error": {"type": "object", "required": ["message", "type"], "properties": {
            "message": {"type": "string"}, "type": {"type": "string"},
            "param": {"type": ["string", "null"]}, "code": {"type": ["string", "null"]}}}},
    },
    "AnthropicError": {
        "type": "object", "required": ["type", "error"],
        "properties": {"type": {"const": "error"}, "error": {"type": "object", "required": ["type", "message"],
                                                             "properties": {"type": {"type": "string"},
                                                                            "message": {"type": "string"}}}},
    },
    "ChatCompletionRequest": {
        "type": "object", "required": ["model", "messages"],
        "properties": {
            "model": _ref("ModelName"),
            "messages": {"type": "array", "minItems": 1, "items": {
                "type": "object", "required": ["role"],
                "properties": {"role": {"enum": ["system", "developer", "user", "assistant", "tool", "function"]},
                               "content": {"anyOf": [*_TEXT_OR_PARTS["anyOf"], {"type": "null"}]}},
                # only an assistant's turn (which may be tool calls alone) goes without content
                "if": {"properties": {"role": {"enum": ["assistant", "function"]}}},
                "else": {"required": ["content"], "properties": {"content": _TEXT_OR_PARTS}}}},
            "stream": {"type": ["boolean", "null"]},
            "max_tokens": {"type": ["integer", "null"]},
            "max_completion_tokens": {"type": ["integer", "null"]},
            "temperature": {"type": ["number", "null"]},
            "top_p": {"type": ["number", "null"]},
            "n": {"type": ["integer", "null"]},
            "tools": {"type": ["array", "null"], "items": _ANY_OBJECT},
        },
    },
    "ChatCompletion": {
        "type": "object", "required": ["object", "choices"],
        "properties": {"id": {"type": "string"}, "object": {"const": "chat.completion"},
                       "model": {"type": "string"}, "choices": {"type": "array", "items": _ANY_OBJECT},
                       "usage": {"type": ["object", "null"]}},
    },
    "MessagesRequest": {
        "type": "object", "required": ["model", "max_tokens", "messages"],
        "properties": {
            "model": _ref("ModelName"),
            "max_tokens": _POSITIVE,
            "messages": {"type": "array", "minItems": 1, "items": {
                "type": "object", "required": ["role", "content"],
                "properties": {"role": {"enum": ["user", "assistant", "system"]},
                               "content": {"anyOf": [{"type": "string"}, {"type": "array", "items": _BLOCK}]}}}},
            "system": {"anyOf": [{"type": "string"}, {"type": "array", "items": _TEXT_BLOCK}]},
            "stream": {"type": "boolean"},
            "tools": {"type": "array", "items": {"type": "object", "required": ["name"],
                                                 "properties": {"name": {"type": "string"}}}},
        },
    },
    "CountTokensRequest": {
        "type": "object", "required": ["model", "messages"],
        "properties": {"model": _ref("ModelName"), "messages": {"type": "array", "minItems": 1, "items": _ANY_OBJECT}},
    },
    "Message": {
        "type": "object", "required": ["type", "role", "content"],
        "properties": {"id": {"type": "string"}, "type": {"const": "message"}, "role": {"const": "assistant"},
                       "content": {"type": "array", "items": _ANY_OBJECT}, "stop_reason": {"type": ["string", "null"]},
                       "usage": _ANY_OBJECT},
    },
    "InputTokens": {"type": "object", "required": ["input_tokens"],
                    "properties": {"input_tokens": {"type": "integer", "minimum": 0}}},
    "ResponsesRequest": {
        "type": "object", "required": ["model", "input"],
        "properties": {
            "model": _ref("ModelName"),
            "input": {"anyOf": [{"type": "string", "minLength": 1},
                                {"type": "array", "minItems": 1, "items": _ref("InputItem")}]},
            "instructions": {"type": ["string", "null"]},
            "max_output_tokens": {"anyOf": [_POSITIVE, {"type": "null"}]},
            "stream": {"type": "boolean"},
            "background": {"const": False, "description": "background responses are refused: stream instead"},
            "store": {"type": ["boolean", "null"]},
            "previous_response_id": {"type": ["string", "null"]},
            "tools": {"type": ["array", "null"], "items": {
                "type": "object", "required": ["type"], "properties": {"type": {"type": "string"}},
                "if": {"properties": {"type": {"const": "function"}}},
                "then": {"required": ["name"], "properties": {"name": {"type": "string"}}}}},
        },
    },
    "InputItem": {"anyOf": [
        {"type": "object", "required": ["role", "content"],
         "properties": {"type": {"const": "message"}, "role": {"enum": ["user", "assistant", "system", "developer"]},
                        "content": _TEXT_OR_PARTS}},
        {"type": "object", "required": ["type", "call_id", "name"],
         "properties": {"type": {"const": "function_call"}, "call_id": {"type": "string"},
                        "name": {"type": "string"}, "arguments": {"type": "string"}}},
        {"type": "object", "required": ["type", "call_id"],
         "properties": {"type": {"const": "function_call_output"}, "call_id": {"type": "string"}}},
    ]},
    "Response": {
        "type": "object", "required": ["id", "object", "status", "output"],
        "properties": {"id": {"type": "string"}, "object": {"const": "response"}, "status": {"type": "string"},
                       "output": {"type": "array", "items": _ANY_OBJECT}, "usage": {"type": ["object", "null"]}},
    },
    "EmbeddingsRequest": {
        "type": "object", "required": ["model", "input"],
        "properties": {"model": _ref("ModelName"), "input": {"anyOf": [{"type": "string"},
                                                            {"type": "array", "minItems": 1}]}},
    },
    "Embeddings": {"type": "object", "required": ["object", "data"],
                   "properties": {"object": {"const": "list"}, "data": {"type": "array", "items": _ANY_OBJECT}}},
    "List": {"type": "object", "required": ["data"], "properties": {"data": {"type": "array", "items": _ANY_OBJECT}}},
    "Model": {"type": "object", "required": ["id"], "properties": {"id": {"type": "string"}}},
    "Journey": {"type": "object", "required": ["request_id"], "properties": {"request_id": {"type": "string"}}},
}


def _json(name: str, description: str) -> Schema:
    return {"description": description, "content": {"application/json": {"schema": _ref(name)}}}


def _errors(shape: str) -> dict[str, Schema]:
    """Every error a route may answer, in `shape`: 4XX for the client's, 5XX for an upstream's that failed."""
    return {"4XX": _json(shape, "the request was refused; the message says why and what to change"),
            "5XX": _json(shape, "no upstream gave an answer (502, 503, 504)")}


MODEL_EXAMPLE = "llama-3.1-8b"  # the offline default's, when the document is given no names
_HELLO = [{"role": "user", "content": "Say hello."}]


def _event(named: bool) -> Schema:
    """One server-sent event of a stream (what a client's SSE parser yields), named in Anthropic's and the
    Responses API's streams, unnamed in chat's."""
    return {"type": "object", "required": ["event", "data"] if named else ["data"],
            "properties": {"event": {"type": "string"}, "data": {"type": "string"}, "id": {"type": "string"}}}


def _generation(request: str, example: Schema, answer: str, shape: str, summary: str,
                named_events: bool) -> Schema:
    return {
        "summary": summary,
        "requestBody": {"required": True, "content": {"application/json": {"schema": _ref(request),
                                                                           "example": example}}},
        "responses": {"200": {"description": "the answer, whole or (with stream: true) as server-sent events",
                              "content": {"application/json": {"schema": _ref(answer)},
                                          "text/event-stream": {"schema": _event(named_events)}}},
                      **_errors(shape)},
    }


def _read(answer: str | None, summary: str, content_type: str = "application/json",
          parameters: list[Schema] | None = None, errors: bool = True) -> Schema:
    content: Schema = {content_type: {"schema": _ref(answer)} if answer else {}}
    operation: Schema = {"summary": summary, "responses": {"200": {"description": summary, "content": content}}}
    if errors:
        operation["responses"].update(_errors("OpenAIError"))
    if parameters:
        operation["parameters"] = parameters
    return operation


def _path_parameter(name: str, description: str) -> Schema:
    return {"name": name, "in": "path", "required": True, "description": description,
            "schema": {"type": "string", "minLength": 1}}


_LIMIT = {"name": "limit", "in": "query", "required": False, "schema": {"type": "integer", "minimum": 1}}

def _client_api(model: str) -> dict[str, dict[str, Schema]]:
    """The API clients call, each also served without its /v1 prefix (clients configured with a bare base
    URL); its examples ask for `model`."""
    return {
        "/chat/completions": {"post": _generation(
            "ChatCompletionRequest", {"model": model, "messages": _HELLO, "max_tokens": 64}, "ChatCompletion",
            "OpenAIError", "OpenAI chat completions", named_events=False)},
        "/messages": {"post": _generation(
            "MessagesRequest", {"model": model, "max_tokens": 64, "messages": _HELLO}, "Message",
            "AnthropicError", "Anthropic Messages", named_events=True)},
        "/messages/count_tokens": {"post": {
            "summary": "Anthropic's token count for a Messages request",
            "requestBody": {"required": True, "content": {"application/json": {
                "schema": _ref("CountTokensRequest")}}},
            "responses": {"200": _json("InputTokens", "the count"), **_errors("AnthropicError")}}},
        "/responses": {"post": _generation(
            "ResponsesRequest", {"model": model, "input": "Say hello.", "max_output_tokens": 64}, "Response",
            "OpenAIError", "OpenAI Responses", named_events=True)},
        "/embeddings": {"post": {
            "summary": "OpenAI embeddings",
            "requestBody": {"required": True, "content": {"application/json": {
                "schema": _ref("EmbeddingsRequest"), "example": {"model": model, "input": "Say hello."}}}},
            "responses": {"200": _json("Embeddings", "the vectors"), **_errors("OpenAIError")}}},
        "/models": {"get": _read("List", "the model names a client may ask for")},
        "/models/{model}": {"get": _read("Model", "one model name", parameters=[
            _path_parameter("model", "a name /models lists, or upstream/model")])},
    }


_OPERATOR_API: dict[str, dict[str, Schema]] = {
    "/v1/journeys": {"get": _read("List", "the latest journeys (a client key's own; every one for the admin key)",
                                  parameters=[_LIMIT])},
    "/v1/journeys/{request_id}": {"get": _read("Journey", "one journey, by its response's x-request-id",
                                               parameters=[_path_parameter("request_id", "an x-request-id")])},
    "/v1/routing": {"get": _read("List", "what the router knows of each target (the admin key)")},
    "/v1/spend": {"get": _read(None, "spend, savings and tokens by key and model, and each budget (a client key's "
                                     "own; every key's for the admin key)", parameters=[
        {"name": "since", "in": "query", "required": False, "description": "30m, 6h, 7d or a date (default 30d)",
         "schema": {"type": "string"}},
        {"name": "by", "in": "query", "required": False, "description": "one row per model, key or day",
         "schema": {"type": "string", "enum": ["key,model", "model", "key", "day"]}},
        {"name": "key", "in": "query", "required": False, "description": "only this client key (the admin's)",
         "schema": {"type": "string"}}])},
    "/metrics": {"get": _read(None, "Prometheus metrics (the admin key)", "text/plain")},
    "/healthz": {"get": _read(None, "liveness", errors=False)},
    "/readyz": {"get": {"summary": "readiness: whether every upstream is reachable",
                        "responses": {"200": {"description": "ready", "content": {"application/json": {}}},
                                      "503": {"description": "not ready", "content": {"application/json": {}}}}}},
    "/openapi.json": {"get": _read(None, "this document", errors=False)},
}

_DASHBOARD: dict[str, dict[str, Schema]] = {
    "/dashboard": {"get": _read(None, "the dashboard's page", "text/html")},
    "/dashboard/": {"get": _read(None, "the dashboard's page", "text/html")},
    "/dashboard/assets/{asset}": {"get": {
        "summary": "the page's scripts, styles and map", "parameters": [_path_parameter("asset", "a file's path")],
        "responses": {"200": {"description": "the file", "content": {"*/*": {}}}, **_errors("OpenAIError")}}},
    **{f"/dashboard/api/{name}": {"get": _read(None, f"the dashboard's {name} (the admin key)",
                                               "text/event-stream" if name == "events" else "application/json",
                                               parameters=[_LIMIT] if name == "recent" else None)}
       for name in ("auth", "state", "recent", "history", "events")},
    "/dashboard/api/journeys/{request_id}": {"get": _read("Journey", "one journey, whole (the admin key)",
                                                          parameters=[_path_parameter("request_id",
                                                                                      "an x-request-id")])},
}


def document(models: list[str], dashboard: bool) -> Schema:
    """The OpenAPI document of a gateway that answers to `models` (given as examples to its callers)."""
    models = models or [MODEL_EXAMPLE]
    paths: dict[str, dict[str, Schema]] = {}
    for path, operations in _client_api(models[0]).items():
        for prefix in ("/v1", ""):
            paths[prefix + path] = {method: {**operation, "operationId": _operation_id(method, prefix + path)}
                                    for method, operation in operations.items()}
    for path, operations in {**_OPERATOR_API, **(_DASHBOARD if dashboard else {})}.items():
        paths[path] = {method: {**operation, "operationId": _operation_id(method, path)}
                       for method, operation in operations.items()}
    schemas = {**SCHEMAS, "ModelName": {**_MODEL, "examples": models}}
    return {
        "openapi": "3.1.0",
        "info": {"title": "firsttoken", "version": __version__,
                 "description": "An LLM gateway: OpenAI chat completions and Responses, Anthropic Messages."},
        "paths": paths,
        "components": {"schemas": schemas, "securitySchemes": {
            "bearer": {"type": "http", "scheme": "bearer", "description": "a client key, or the admin key"},
            "x-api-key": {"type": "apiKey", "in": "header", "name": "x-api-key"}}},
        "security": [{"bearer": []}, {"x-api-key": []}, {}],
    }


def _operation_id(method: str, path: str) -> str:
    words = [part.strip("{}") for part in path.replace(".", "_").split("/") if part]
    if path.endswith("/") and words:
        words.append("index")  # /dashboard/ beside /dashboard
    return "_".join([method, *words])
