"""`firsttoken trace` as a developer runs it, against real servers on loopback: the simulated region
(plain HTTP and HTTPS, OpenAI and Anthropic formats) and one that refuses the key and quotes it back."""

from __future__ import annotations

import json
import os
import ssl
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import trustme
from aiohttp import web

from firsttoken.geo.places import resolve
from support.loopback import serve_on_loopback
from support.measure import PREFILL_SLACK_MS, agrees, typical
from support.sim_region import region_on_loopback
from support.threaded import InThread

CONTRACT = {"dns_ms", "connect_ms", "tls_ms", "ttfb_ms", "ttft_ms", "itl_ms_p50", "itl_ms_p95", "e2e_ms",
            "output_tokens", "tokens_per_s", "connection_reused", "floor_ms", "verdict"}
SECRET = "sk-test-never-print-me-42"


def trace(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    environment = {**os.environ, "COLUMNS": "100", **(env or {})}
    environment.pop("OPENAI_API_KEY", None)
    environment.pop("ANTHROPIC_API_KEY", None)
    environment.update(env or {})
    return subprocess.run([sys.executable, "-m", "firsttoken", "trace", *args], capture_output=True, text=True,
                          env=environment, timeout=60)


def trace_json(*args: str, env: dict[str, str] | None = None) -> dict:
    done = trace(*args, "--json", env=env)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


@pytest.fixture(scope="module")
def far_region() -> Iterator[int]:
    """A region in Virginia whose clients are in Lagos: its own distance on every round trip."""
    with region_on_loopback(region="aws:us-east-1", client_location="lagos") as (port, _region):
        yield port


def test_cold_then_warm_against_the_simulated_region(far_region: int) -> None:
    result = trace_json(f"http://127.0.0.1:{far_region}/v1", "-n", "3", "--max-tokens", "40",
                        "--from", "lagos", "--region", "aws:us-east-1")
    assert result["model"] == "llama-3.1-8b"  # the endpoint's first listed model
    floor = resolve("lagos").floor_ms(resolve("aws:us-east-1"))
    assert result["floor_ms"] == pytest.approx(floor, abs=0.01)
    cold, *warm = result["runs"]
    assert cold["connection_reused"] is False and all(r["connection_reused"] for r in warm)
    for run in result["runs"]:
        assert CONTRACT <= set(run) and run["status"] == 200 and run["error"] is None
        declared = run["endpoint_timing"]
        assert run["output_tokens"] == 40  # the provider's own usage count
        # The region adds its distance as a round trip on the wire: trace must find it in the rtt...
        assert agrees(run["rtt_ms"], declared["distance"]), (run["rtt_ms"], declared["distance"])
        assert run["distance_tax_ms"] == pytest.approx(run["rtt_ms"] - floor, abs=0.05)
        assert run["itl_ms_p50"] <= run["itl_ms_p95"]
        assert run["tokens_per_s"] == pytest.approx(39 / (run["decode_ms"] / 1000), rel=0.05)
        assert run["verdict"].startswith("most of this wait was distance")
    # ...the rest of the first byte's wait in queue+prefill, and the decode it declares in decode.
    runs = [(run, run["endpoint_timing"]) for run in result["runs"]]
    assert typical([r["queue_prefill_ms"] - (t["queue"] + t["cold"] + t["prefill"]) for r, t in runs]) == \
        pytest.approx(0, abs=PREFILL_SLACK_MS)
    assert typical([r["decode_ms"] / t["decode"] - 1 for r, t in runs]) == pytest.approx(0, abs=0.05)
    assert cold["tls_ms"] == 0 and cold["handshakes_ms"] > 0  # plain HTTP: a TCP handshake only
    assert all(r["handshakes_ms"] == 0 and r["dns_ms"] == 0 and r["connect_ms"] == 0 for r in warm)


def test_the_waterfall_reads_in_one_screen(far_region: int) -> None:
    done = trace(f"http://127.0.0.1:{far_region}/v1", "--from", "lagos", "--region", "aws:us-east-1")
    assert done.returncode == 0, done.stderr
    out = done.stdout
    for words in ("run 1: cold connection", "run 2: warm connection", "queue+prefill", "decode", "e2e",
                  "most of this wait was distance", "floor Lagos, NG → aws:us-east-1"):
        assert words in out
    assert max(len(line) for line in out.splitlines()) <= 100 and len(out.splitlines()) < 45


def test_the_anthropic_format(far_region: int) -> None:
    result = trace_json(f"http://127.0.0.1:{far_region}", "--api", "anthropic", "--model", "llama-3.1-8b",
                        "--max-tokens", "12", "-n", "1")
    (run,) = result["runs"]
    assert result["api"] == "anthropic" and run["status"] == 200
    assert run["output_tokens"] == 12 and run["input_tokens"] > 0  # from message_start and message_delta
    assert run["ttft_ms"] > run["rtt_ms"] > 100


@pytest.fixture(scope="module")
def tls_region(tmp_path_factory) -> Iterator[tuple[int, Path]]:
    ca = trustme.CA()
    server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1", "localhost").configure_cert(server)
    ca_file = tmp_path_factory.mktemp("ca") / "ca.pem"
    ca.cert_pem.write_to_path(str(ca_file))
    with region_on_loopback(ssl_context=server) as (port, _region):
        yield port, ca_file


def test_a_tls_handshake_is_measured_apart_and_only_once(tls_region: tuple[int, Path]) -> None:
    port, ca_file = tls_region
    result = trace_json(f"https://localhost:{port}/v1", "-n", "2", env={"SSL_CERT_FILE": str(ca_file)})
    cold, warm = result["runs"]
    assert cold["tls_ms"] > 0 and cold["connection_reused"] is False
    assert cold["handshakes_ms"] == pytest.approx(cold["dns_ms"] + cold["connect_ms"] + cold["tls_ms"], abs=0.1)
    assert warm["tls_ms"] == 0 and warm["connection_reused"] is True


def test_an_untrusted_certificate_says_what_to_do(tls_region: tuple[int, Path]) -> None:
    port, _ca_file = tls_region
    done = trace(f"https://localhost:{port}/v1", "--model", "llama-3.1-8b")
    assert done.returncode == 1 and "not trusted" in done.stderr and "SSL_CERT_FILE" in done.stderr


@pytest.fixture(scope="module")
def refusing_server() -> Iterator[int]:
    """Refuses every key and quotes it back, as providers do."""

    async def chat(request: web.Request) -> web.Response:
        key = request.headers.get("authorization", "").removeprefix("Bearer ")
        return web.json_response({"error": {"message": f"Incorrect API key provided: {key}.",
                                            "type": "invalid_request_error", "param": None,
                                            "code": "invalid_api_key"}}, status=401)

    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)
    with InThread(lambda: serve_on_loopback(app)) as port:
        yield port


@pytest.mark.parametrize("as_json", [False, True])
def test_the_api_key_is_never_printed(refusing_server: int, as_json: bool) -> None:
    args = [f"http://127.0.0.1:{refusing_server}/v1", "--model", "gpt-4o-mini", "-n", "3"]
    done = trace(*args, *(["--json"] if as_json else []), env={"OPENAI_API_KEY": SECRET})
    assert done.returncode == 1
    assert SECRET not in done.stdout + done.stderr
    assert "HTTP 401: Incorrect API key provided: [key]." in done.stdout
    if as_json:
        assert len(json.loads(done.stdout)["runs"]) == 1  # refused once: not asked again


def test_bad_places_and_urls_are_named() -> None:
    done = trace("http://127.0.0.1:9/v1", "--from", "lagoss")
    assert done.returncode == 2 and "lagos" in done.stderr.lower()
    done = trace("ftp://example.com/v1")
    assert done.returncode == 2 and "http" in done.stderr
    done = trace("http://127.0.0.1:9/v1", "--model", "m")
    assert done.returncode == 1 and "could not reach" in done.stderr
