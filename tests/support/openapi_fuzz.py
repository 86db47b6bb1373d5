"""Fuzzing the running gateway against its own /openapi.json with schemathesis: the bounded pass in
tests/server/test_openapi.py and the long one in bench/fuzz.py run this same code."""

from __future__ import annotations

import collections

import httpx
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schemathesis import checks

# every answer is held to the document: no 5xx, every status documented, every shape and content type as given
CHECKS = [checks.not_a_server_error, checks.status_code_conformance, checks.content_type_conformance,
          checks.response_schema_conformance]
OPERATOR = ("/v1/journeys", "/v1/routing", "/metrics", "/dashboard/api/")
LIVE = "/dashboard/api/events"  # a live stream never ends: it is not fuzzed
HEALTHY_MODEL = "chat"  # the alias conftest's gateway routes to the healthy test upstream


def served_schema(url: str) -> schemathesis.BaseSchema:
    """The gateway's document, its model examples narrowed to the healthy alias: the config's other names reach
    a dead upstream and failing test models on purpose (their 502s are other tests' subject)."""
    document = httpx.get(f"{url}/openapi.json", timeout=10).json()
    document["components"]["schemas"]["ModelName"]["examples"] = [HEALTHY_MODEL]
    return schemathesis.openapi.from_dict(document)


def fuzz_operation(schema: schemathesis.BaseSchema, path: str, method: str, url: str, headers: dict[str, str],
                   examples: int, statuses: collections.Counter[int]) -> None:
    """`examples` generated cases (and the document's own examples) against one operation; half of the bodies
    ask for the healthy model, so that the way to the upstream is fuzzed as well as the refusals."""
    operation = schema[path][method]

    @given(st.one_of(operation.as_strategy(), *operation.get_strategies_from_examples()), st.booleans())
    @settings(max_examples=examples, deadline=None, database=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
    def keeps_to_the_document(case: schemathesis.Case, known_model: bool) -> None:
        if known_model and isinstance(case.body, dict) and "model" in case.body:
            case.body["model"] = HEALTHY_MODEL
        response = case.call_and_validate(base_url=url, headers=headers, timeout=30, checks=CHECKS)
        statuses[response.status_code] += 1

    keeps_to_the_document()


def headers_for(path: str, client: dict[str, str], admin: dict[str, str]) -> dict[str, str]:
    return admin if path.startswith(OPERATOR) else client
