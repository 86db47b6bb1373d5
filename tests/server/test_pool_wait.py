"""A connection limit is a queue once streams are long: a request that waits for a free upstream connection
says so in its Server-Timing, its journey (the `pool` phase, and the verdict), the metrics and the log."""

from __future__ import annotations

import threading

import httpx
import openai

from conftest import ADMIN, CLIENT_KEY, gateway_settings
from support.gateway_process import GatewayProcess
from support.openai_upstream import UpstreamThread

AUTH = {"Authorization": f"Bearer {CLIENT_KEY}"}


def test_a_request_that_waits_for_a_free_connection_says_how_long(tmp_path) -> None:
    with UpstreamThread() as upstream:
        settings = gateway_settings(upstream.url)
        settings["upstreams"]["fake"]["pool"] = {"warm": 1, "max": 1}
        with GatewayProcess(settings, tmp_path) as gateway:
            client = openai.OpenAI(base_url=gateway.url + "/v1", api_key=CLIENT_KEY, max_retries=0)
            first_token = threading.Event()

            def hold_the_only_connection() -> None:  # 20 tokens, 50 ms apart: about a second
                words = " ".join(["word"] * 20)
                stream = client.chat.completions.create(model="fake/slow-stream", stream=True,
                                                        messages=[{"role": "user", "content": words}])
                for chunk in stream:
                    if chunk.choices and chunk.choices[0].delta.content:
                        first_token.set()

            holder = threading.Thread(target=hold_the_only_connection)
            holder.start()
            assert first_token.wait(10)
            raw = client.chat.completions.with_raw_response.create(
                model="chat", messages=[{"role": "user", "content": "hello"}])
            holder.join(10)
            timing = dict(part.strip().split(";dur=") for part in raw.headers["server-timing"].split(","))
            assert float(timing["pool"]) > 300, timing  # it waited for the stream to give the connection back
            assert float(timing["ttfb"]) < float(timing["pool"]), "the wait is not counted as the upstream's"

            journey = httpx.get(f"{gateway.url}/v1/journeys/{raw.headers['x-request-id']}", headers=AUTH).json()
            assert journey["phases"]["pool"] > 300
            assert "free connection to fake" in journey["verdict"] and "pool.max" in journey["verdict"]

            metrics = httpx.get(f"{gateway.url}/metrics", headers=ADMIN).text
            assert 'firsttoken_upstream_pool_waited_total{firsttoken_upstream="fake"} 1.0' in metrics
            assert 'firsttoken_upstream_pool_limit{firsttoken_upstream="fake"} 1.0' in metrics
            assert 'firsttoken_journey_phase_seconds_count{firsttoken_upstream="fake",phase="pool"} 1.0' in metrics
            assert "waiting for a free connection" in gateway.log() and "pool.max" in gateway.log()
