"""GET /openapi.json is true: it lists exactly the routes the gateway serves, it is a valid OpenAPI 3.1
document, and a fuzzer (schemathesis, a bounded pass) holds the running gateway to it: no 5xx, every status
documented, every answer and error in the shape and content type the document gives."""

from __future__ import annotations

import collections

import httpx
import pytest
import schemathesis
from openapi_spec_validator import validate

from conftest import ADMIN, CLIENT_KEY, gateway_settings
from firsttoken.config import Settings
from firsttoken.server import openapi
from firsttoken.server.app import Gateway
from support import openapi_fuzz
from support.gateway_process import GatewayProcess

CLIENT = {"authorization": f"Bearer {CLIENT_KEY}"}
EXAMPLES_PER_ROUTE = 12  # CI's bounded pass; bench/fuzz.py runs the long one


def served_routes(gateway: Gateway, templates: set[str]) -> set[tuple[str, str]]:
    """(path, method) for every route in the gateway's table; a prefix route as the document's template."""
    routes = {(path, method) for path, methods in gateway.routes.items() for method in methods}
    for prefix, methods in gateway.prefix_routes.items():
        template = [t for t in templates if t.startswith(prefix) and t.count("{") == 1 and t.endswith("}")
                    and "/" not in t[len(prefix):]]
        assert len(template) == 1, f"no single template in the document for the prefix route {prefix}"
        routes |= {(template[0], method) for method in methods}
    return routes


def test_the_document_lists_exactly_the_routes_served(upstream, tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # the gateway opens its state files where it runs
    gateway = Gateway(Settings.model_validate(gateway_settings(upstream.url)))
    spec = openapi.document(["chat"], dashboard=True)
    documented = {(path, method.upper()) for path, operations in spec["paths"].items() for method in operations}
    assert served_routes(gateway, set(spec["paths"])) == documented


def test_the_served_document_is_valid_openapi(gateway: GatewayProcess) -> None:
    response = httpx.get(f"{gateway.url}/openapi.json", timeout=10)
    assert response.status_code == 200
    spec = response.json()
    validate(spec)
    assert "chat" in spec["components"]["schemas"]["ModelName"]["examples"]  # the config's names, to try


@pytest.fixture(scope="module")
def served_schema(gateway: GatewayProcess) -> schemathesis.BaseSchema:
    return openapi_fuzz.served_schema(gateway.url)


STATUSES: dict[str, collections.Counter[int]] = {}
ROUTES = [(path, method) for path, operations in openapi.document(["chat"], dashboard=True)["paths"].items()
          for method in operations if path != openapi_fuzz.LIVE]


@pytest.mark.parametrize("path, method", ROUTES, ids=[f"{m.upper()} {p}" for p, m in ROUTES])
def test_every_route_keeps_to_the_document(served_schema: schemathesis.BaseSchema, gateway: GatewayProcess,
                                           path: str, method: str) -> None:
    statuses = STATUSES.setdefault(f"{method.upper()} {path}", collections.Counter())
    openapi_fuzz.fuzz_operation(served_schema, path, method, gateway.url,
                                openapi_fuzz.headers_for(path, CLIENT, ADMIN), EXAMPLES_PER_ROUTE, statuses)


def test_the_fuzzer_reached_the_upstream() -> None:
    """The pass above is worth something only if some of its requests were answered: a document the gateway
    refused everything against would pass every check."""
    answered = {route for route, statuses in STATUSES.items() if statuses[200]}
    generation = {"POST /v1/chat/completions", "POST /v1/messages", "POST /v1/responses", "POST /v1/embeddings"}
    assert generation <= answered, STATUSES
