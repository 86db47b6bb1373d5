"""`firsttoken journeys` as a person runs it, from another directory, at 80 columns: the log found where the
gateway last started, cache hits under the edge cache, typos kept out of the tables; and the access log a
gateway started with `--access-log` writes for every request, a 404 too."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import httpx

from conftest import CLIENT_KEY, UPSTREAM_KEY
from support.gateway_process import GatewayProcess

QUESTION = {"model": "fake/echo", "max_tokens": 8, "messages": [{"role": "user", "content": "where is the log?"}]}


def test_journeys_from_anywhere_and_the_access_log(tmp_path: Path, upstream) -> None:
    served, elsewhere, state = tmp_path / "served", tmp_path / "elsewhere", tmp_path / "state"
    for directory in (served, elsewhere):
        directory.mkdir()
    env = {**os.environ, "XDG_STATE_HOME": str(state), "COLUMNS": "80"}
    # two upstreams: a name neither lists is refused here rather than passed on to the only one
    settings = {"upstreams": {"fake": {"url": upstream.url, "key": UPSTREAM_KEY},
                              "spare": {"url": upstream.url, "key": UPSTREAM_KEY}},
                "keys": [{"name": "app", "key": CLIENT_KEY}]}
    headers = {"Authorization": f"Bearer {CLIENT_KEY}"}
    with GatewayProcess(settings, served, env=env, args=["--access-log"]) as gateway:
        with httpx.Client(base_url=gateway.url, headers=headers, timeout=10) as client:
            assert client.get("/nope").status_code == 404
            outcomes = [client.post("/v1/chat/completions", json=QUESTION).headers["x-firsttoken-cache"]
                        for _ in range(2)]
            assert outcomes == ["miss", "hit"]
            typo = client.post("/v1/chat/completions", json={**QUESTION, "model": "lama-3"})
            assert typo.status_code == 404
    # the gateway's shutdown wrote the last journeys to the log, and the access log its last lines
    access = gateway.log_path.read_text()
    assert CLIENT_KEY not in access and UPSTREAM_KEY not in access
    lines = [line.partition("firsttoken.access: ")[2] for line in access.splitlines()
             if "firsttoken.access" in line and "/readyz" not in line]  # the readiness polls before ours
    assert re.fullmatch(r"req_\w+ GET /nope 404 e2e=\d+ms error=unknown_route", lines[0]), lines
    assert re.fullmatch(r"req_\w+ POST /v1/chat/completions 200 fake/echo cache=miss e2e=\d+ms", lines[1]), lines
    assert re.fullmatch(r"req_\w+ POST /v1/chat/completions 200 \S+ cache=hit e2e=\d+ms", lines[2]), lines
    assert "404" in lines[3] and "error=model_not_found" in lines[3], lines

    def journeys(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "firsttoken", "journeys", *args], cwd=elsewhere, env=env,
                              capture_output=True, text=True, timeout=30)

    table = journeys()
    assert table.returncode == 0, table.stderr
    # found where it was served (a path longer than the line wraps)
    assert f"Journeysin{served / 'firsttoken-journeys.db'}" in "".join(table.stdout.split())
    assert all(len(line) <= 80 for line in table.stdout.splitlines()), table.stdout
    assert "…" not in table.stdout  # nothing cut short
    rows = {line.split()[0] for line in table.stdout.splitlines() if line.startswith(("edge", "fake"))}
    assert rows == {"edge", "fake"}
    assert "lama-3" not in table.stdout.split("Asked for models")[0]
    assert "Asked for models that nothing serves (1 request, 404): lama-3" in table.stdout
    summary = json.loads(journeys("--json").stdout)
    assert set(summary["upstreams"]) == {"edge cache", "fake"} and summary["unknown_models"] == {"lama-3": 1}
    assert summary["upstreams"]["fake"]["models"] == ["fake/echo"]
    assert journeys("--log", str(elsewhere / "absent.db")).returncode == 2  # named: never another log instead
