"""Errors in OpenAI's format: `{"error": {"message", "type", "param", "code"}}` with a fitting status.

Every message says what to change; clients branch on `type`/`code` and the status, people read `message`.
"""

from __future__ import annotations

from typing import Any

import orjson

CLIENT_GAVE_UP = "client_deadline"  # the code of an error that the client's own deadline caused


class GatewayError(Exception):
    """An error answered to the client; raised anywhere on the request path."""

    def __init__(self, status: int, message: str, type: str = "invalid_request_error",
                 param: str | None = None, code: str | None = None,
                 headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.type = type
        self.param = param
        self.code = code
        self.headers = headers or {}

    def body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}

    def to_bytes(self) -> bytes:
        return orjson.dumps(self.body())


def bad_request(message: str, param: str | None = None, code: str | None = None) -> GatewayError:
    return GatewayError(400, message, "invalid_request_error", param, code)


def unauthorized(message: str) -> GatewayError:
    return GatewayError(401, message, "authentication_error", None, "invalid_api_key")


def not_found(message: str, param: str | None = None, code: str | None = None) -> GatewayError:
    return GatewayError(404, message, "invalid_request_error", param, code)


def bad_gateway(message: str, code: str = "upstream_unreachable") -> GatewayError:
    return GatewayError(502, message, "upstream_error", None, code)


def gateway_timeout(message: str) -> GatewayError:
    return GatewayError(504, message, "upstream_error", None, "upstream_timeout")


# An upstream's internal failure is not the gateway's: the client sees 502 (a bad answer from the
# upstream), and Anthropic's non-standard 529 "overloaded" becomes the standard 503.
_CLIENT_STATUS = {500: 502, 501: 502, 529: 503}


def upstream_status_error(status: int, body: bytes, upstream: str) -> GatewayError:
    """An upstream's own error, its message kept, its shape made OpenAI's."""
    message, type_, param, code = f"upstream {upstream} answered HTTP {status}", "upstream_error", None, None
    try:
        parsed = orjson.loads(body)
    except orjson.JSONDecodeError:
        text = body.decode("utf-8", "replace").strip()
        if text:
            message += f": {text[:500]}"
    else:
        err = parsed.get("error", parsed) if isinstance(parsed, dict) else parsed
        if isinstance(err, dict):
            message = str(err.get("message") or err.get("detail") or message)
            type_ = str(err.get("type") or type_)
            param, code = err.get("param"), err.get("code")
        elif isinstance(err, str):
            message = err
    if status in (401, 403):  # the upstream refused the gateway's key, not the client's
        return GatewayError(502, f"upstream {upstream} refused the gateway's credentials (HTTP {status}): "
                                 f"{message}; check upstreams.{upstream}.key.", "upstream_error", None,
                            "upstream_auth_failed")
    return GatewayError(_CLIENT_STATUS.get(status, status), message, type_, param,
                        None if code is None else str(code))
