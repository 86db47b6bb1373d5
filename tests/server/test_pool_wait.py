"""A connection limit is a queue once streams are long: a request that waits for a free upstream connection
says so in its Server-Timing, its journey (the `pool` phase, and the verdict), the metrics and the log."""

from __future__ import annotations

import threading
import time

import httpx
import openai

from conftest import ADMIN, CLIENT_KEY, gateway_settings
from support.faulty_answers import HELD
from support.gateway_process import GatewayProcess
from support.openai_upstream import UpstreamThread
from support.waiting import PATIENCE_S, wait_until

AUTH = {"Authorization": f"Bearer {CLIENT_KEY}"}
HOLD_S = 0.5  # how long the test keeps the only connection after the second request queued for it


def test_a_request_that_waits_for_a_free_connection_says_how_long(tmp_path) -> None:
    with UpstreamThread() as upstream:
        settings = gateway_settings(upstream.url)
        settings["upstreams"]["fake"]["pool"] = {"warm": 1, "max": 1}
        settings["upstreams"]["fake"]["timeouts"]["idle"] = 60.0  # the held stream waits for the test
        with GatewayProcess(settings, tmp_path) as gateway:
            client = openai.OpenAI(base_url=gateway.url + "/v1", api_key=CLIENT_KEY, max_retries=0, timeout=60)
            first_token = threading.Event()
            answered: list = []

            def hold_the_only_connection() -> None:  # its first word, then the rest once the test lets it go
                stream = client.chat.completions.create(model="fake/held", stream=True,
                                                        messages=[{"role": "user", "content": "hold on"}])
                for chunk in stream:
                    if chunk.choices and chunk.choices[0].delta.content:
                        first_token.set()

            def ask() -> None:
                answered.append(client.chat.completions.with_raw_response.create(
                    model="chat", messages=[{"role": "user", "content": "hello"}]))

            def waiting() -> bool:
                metrics = httpx.get(f"{gateway.url}/metrics", headers=ADMIN).text
                return 'firsttoken_upstream_pool_waiting{firsttoken_upstream="fake"} 1.0' in metrics

            holder, asker = threading.Thread(target=hold_the_only_connection), threading.Thread(target=ask)
            with HELD.shut():
                holder.start()
                assert first_token.wait(PATIENCE_S)
                asker.start()
                wait_until(waiting, "the second request to queue for the only connection")
                time.sleep(HOLD_S)  # the wait the second request then reports: at least this long
            holder.join(PATIENCE_S)
            asker.join(PATIENCE_S)
            [raw] = answered
            timing = dict(part.strip().split(";dur=") for part in raw.headers["server-timing"].split(","))
            assert float(timing["pool"]) >= HOLD_S * 1000, timing  # it waited for the stream to give it back
            assert float(timing["ttfb"]) < float(timing["pool"]), "the wait is not counted as the upstream's"

            journey = httpx.get(f"{gateway.url}/v1/journeys/{raw.headers['x-request-id']}", headers=AUTH).json()
            assert journey["phases"]["pool"] >= HOLD_S * 1000
            assert "free connection to fake" in journey["verdict"] and "pool.max" in journey["verdict"]

            metrics = httpx.get(f"{gateway.url}/metrics", headers=ADMIN).text
            assert 'firsttoken_upstream_pool_waited_total{firsttoken_upstream="fake"} 1.0' in metrics
            assert 'firsttoken_upstream_pool_limit{firsttoken_upstream="fake"} 1.0' in metrics
            assert 'firsttoken_journey_phase_seconds_count{firsttoken_upstream="fake",phase="pool"} 1.0' in metrics
            assert "waiting for a free connection" in gateway.log() and "pool.max" in gateway.log()
