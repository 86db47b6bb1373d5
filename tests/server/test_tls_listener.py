"""The gateway's own listener over TLS (`listen.tls_cert`, `tls_key`): a client that trusts the certificate
streams through it, one that does not is refused by its own TLS check, and plain HTTP gets nothing."""

from __future__ import annotations

import os
import ssl
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
import trustme
import yaml

from firsttoken import config
from support.gateway_process import free_port, terminate
from support.waiting import PATIENCE_S, wait_until


def test_the_gateway_serves_https_with_its_certificate(tmp_path: Path) -> None:
    ca = trustme.CA()
    ca.cert_pem.write_to_path(str(tmp_path / "ca.pem"))
    issued = ca.issue_cert("127.0.0.1", "localhost")
    issued.cert_chain_pems[0].write_to_path(str(tmp_path / "cert.pem"))
    issued.private_key_pem.write_to_path(str(tmp_path / "key.pem"))
    port = free_port()
    (tmp_path / "firsttoken.yaml").write_text(yaml.safe_dump(
        {"listen": {"tls_cert": str(tmp_path / "cert.pem"), "tls_key": str(tmp_path / "key.pem")}}))
    with (tmp_path / "serve.log").open("w") as log:
        gateway = subprocess.Popen([sys.executable, "-m", "firsttoken", "serve", "--config", "firsttoken.yaml",
                                    "--port", str(port)], cwd=tmp_path, stdout=log, stderr=subprocess.STDOUT,
                                   env={**os.environ, "COLUMNS": "200"})
    url = f"https://127.0.0.1:{port}"
    trusted = ssl.create_default_context(cafile=str(tmp_path / "ca.pem"))
    try:
        def ready() -> bool:
            assert gateway.poll() is None, (tmp_path / "serve.log").read_text()
            try:
                return httpx.get(f"{url}/readyz", verify=trusted, timeout=5).status_code == 200
            except httpx.HTTPError:
                return False

        wait_until(ready, "the gateway to be ready over TLS", timeout_s=60)  # it loads the embedding model
        answer = httpx.post(f"{url}/v1/chat/completions", verify=trusted, timeout=30, json={
            "model": "llama-3.1-8b", "max_tokens": 4, "messages": [{"role": "user", "content": "over TLS?"}]})
        assert answer.status_code == 200 and answer.json()["choices"][0]["message"]["content"]
        with pytest.raises(httpx.ConnectError, match="CERTIFICATE_VERIFY_FAILED"):
            httpx.get(f"{url}/healthz", timeout=PATIENCE_S)  # the system's CAs do not know this one
        with pytest.raises(httpx.HTTPError):
            httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=PATIENCE_S)  # plain HTTP to a TLS port
        assert f"listening on {url}/v1" in (tmp_path / "serve.log").read_text()
    finally:
        terminate(gateway)


@pytest.mark.parametrize("listen, words", [
    ({"tls_key": "key.pem"}, "tls_key without tls_cert"),
    ({"tls_cert": "/nowhere/cert.pem"}, "tls_cert: no file at /nowhere/cert.pem"),
])
def test_a_tls_setting_that_cannot_work_is_refused_at_load(listen: dict, words: str) -> None:
    with pytest.raises(ValueError, match=words):
        config.Settings.model_validate({"listen": listen})
