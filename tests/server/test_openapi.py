"""GET /openapi.json is true: it lists exactly the routes the gateway serves, it is a valid OpenAPI 3.1
document, and a fuzzer (schemathesis, a bounded pass) holds the running gateway to it: no 5xx, every status
documented, every answer and error in the shape and content type the document gives."""

from __future__ import annotations

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from openapi_spec_validator import validate
from schemathesis import checks

from conftest import ADMIN, CLIENT_KEY, gateway_settings
from firsttoken.config import Settings
from firsttoken.server import openapi
from firsttoken.server.app import Gateway
from support.gateway_process import GatewayProcess

CLIENT = {"authorization": f"Bearer {CLIENT_KEY}"}
OPERATOR = ("/v1/journeys", "/v1/routing", "/metrics", "/dashboard/api/")
STATUSES: dict[str, list[int]] = {}
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


def test_the_document_lists_exactly_the_routes_served(upstream) -> None:
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
    document = httpx.get(f"{gateway.url}/openapi.json", timeout=10).json()
    # The config's other names reach a dead upstream and failing test models on purpose (their 502s are other
    # tests' subject): the fuzzer asks for the alias of the healthy one, or for names nothing routes.
    document["components"]["schemas"]["ModelName"]["examples"] = ["chat"]
    return schemathesis.openapi.from_dict(document)


# One test per route, from the document itself; the live dashboard stream never ends, so it is not fuzzed.
ROUTES = [(path, method) for path, operations in openapi.document(["chat"], dashboard=True)["paths"].items()
          for method in operations if path != "/dashboard/api/events"]


@pytest.mark.parametrize("path, method", ROUTES, ids=[f"{m.upper()} {p}" for p, m in ROUTES])
def test_every_route_keeps_to_the_document(served_schema: schemathesis.BaseSchema, gateway: GatewayProcess,
                                           path: str, method: str) -> None:
    headers = ADMIN if path.startswith(OPERATOR) else CLIENT

    operation = served_schema[path][method]
    cases = st.one_of(operation.as_strategy(), *operation.get_strategies_from_examples())  # examples too

    @given(cases, st.booleans())
    @settings(max_examples=EXAMPLES_PER_ROUTE, deadline=None, database=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
    def keeps_to_it(case: schemathesis.Case, known_model: bool) -> None:
        if known_model and isinstance(case.body, dict) and "model" in case.body:
            case.body["model"] = "chat"  # a name the config routes, so that half the requests reach the upstream
        response = case.call_and_validate(base_url=gateway.url, headers=headers, timeout=20,
                               checks=[checks.not_a_server_error, checks.status_code_conformance,
                                       checks.content_type_conformance, checks.response_schema_conformance])
        STATUSES.setdefault(f"{method.upper()} {path}", []).append(response.status_code)

    keeps_to_it()


def test_the_fuzzer_reached_the_upstream() -> None:
    """The pass above is worth something only if some of its requests were answered: a document the gateway
    refused everything against would pass every check."""
    answered = {route for route, statuses in STATUSES.items() if 200 in statuses}
    generation = {"POST /v1/chat/completions", "POST /v1/messages", "POST /v1/responses", "POST /v1/embeddings"}
    assert generation <= answered, STATUSES
