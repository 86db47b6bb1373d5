"""The long fuzzing pass, by hand (CI runs a bounded one in tests/server/test_openapi.py and
tests/unit/test_wire_parsers.py).

A real `firsttoken serve` in front of the test upstream (the one the tests use), with client keys and an admin
key. Every route of its /openapi.json is fuzzed by schemathesis (`--examples` cases each, half of the bodies
asking for a model the config routes), holding every answer to the document: no 5xx, every status documented,
every answer and error in its documented shape and content type. Then the parsers of Messages and Responses
take `--parser-examples` generated bodies each. Prints what was sent and what came back.

    .venv/bin/python bench/fuzz.py --examples 400 --parser-examples 20000
"""

from __future__ import annotations

import argparse
import collections
import sys
import tempfile
import time
from pathlib import Path

from hypothesis import given, settings

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from conftest import ADMIN, CLIENT_KEY, gateway_settings  # noqa: E402
from support import openapi_fuzz  # noqa: E402
from support import wire_properties as wire  # noqa: E402
from support.gateway_process import GatewayProcess  # noqa: E402
from support.openai_upstream import UpstreamThread  # noqa: E402


def fuzz_routes(url: str, examples: int) -> tuple[collections.Counter[int], list[str]]:
    schema = openapi_fuzz.served_schema(url)
    client = {"authorization": f"Bearer {CLIENT_KEY}"}
    statuses: collections.Counter[int] = collections.Counter()
    failures = []
    for path, operations in schema.raw_schema["paths"].items():
        for method in operations if path != openapi_fuzz.LIVE else ():
            try:
                openapi_fuzz.fuzz_operation(schema, path, method, url, openapi_fuzz.headers_for(path, client, ADMIN),
                                            examples, statuses)
            except Exception as failure:  # every failure is reported, and the pass goes on
                failures.append(f"{method.upper()} {path}: {failure}")
    return statuses, failures


def fuzz_parsers(examples: int) -> None:
    for bodies, holds in ((wire.messages_bodies, wire.messages_body_is_refused_or_read),
                          (wire.responses_bodies, wire.responses_body_is_refused_or_read)):
        settings(max_examples=examples, deadline=None, database=None)(given(body=bodies)(holds))()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--examples", type=int, default=400, help="cases per route")
    parser.add_argument("--parser-examples", type=int, default=20_000, help="bodies per parser")
    args = parser.parse_args()
    with UpstreamThread() as upstream, tempfile.TemporaryDirectory() as workdir, \
            GatewayProcess(gateway_settings(upstream.url), Path(workdir)) as gateway:
        started = time.monotonic()
        statuses, failures = fuzz_routes(gateway.url, args.examples)
        took = time.monotonic() - started
        print(f"routes: {sum(statuses.values())} requests in {took:.0f} s; statuses "
              + ", ".join(f"{code}: {count}" for code, count in sorted(statuses.items())))
        log = gateway.log()
        print(f"tracebacks in the gateway's log: {log.count('Traceback')}")
    started = time.monotonic()
    fuzz_parsers(args.parser_examples)
    print(f"parsers: {2 * args.parser_examples} bodies in {time.monotonic() - started:.0f} s, no failure")
    for failure in failures:
        print("FAILED", failure)
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
