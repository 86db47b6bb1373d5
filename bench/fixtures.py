"""What the benchmarks share: a minimal fast upstream (nginx with static answers), the bodies sent to it,
and ports and waiting for servers."""

from __future__ import annotations

import json
import socket
import time

from firsttoken.journey.server_timing import parse_server_timing

COMPLETION = json.dumps({
    "id": "chatcmpl-bench", "object": "chat.completion", "created": 1700000000, "model": "bench",
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "Hello from the static upstream."},
                 "finish_reason": "stop"}],
    "usage": {"prompt_tokens": 5, "completion_tokens": 6, "total_tokens": 11}}, separators=(",", ":"))


def _chunk(delta: dict, finish: str | None = None) -> str:
    return "data: " + json.dumps({"id": "chatcmpl-bench", "object": "chat.completion.chunk", "created": 1700000000,
                                  "model": "bench", "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]},
                                 separators=(",", ":")) + "\n\n"


STREAM = (_chunk({"role": "assistant", "content": ""})
          + "".join(_chunk({"content": w}) for w in ["Hello", " from", " the", " static", " upstream", "."])
          + _chunk({}, "stop")
          + "data: " + json.dumps({"id": "chatcmpl-bench", "object": "chat.completion.chunk", "created": 1700000000,
                                   "model": "bench", "choices": [],
                                   "usage": {"prompt_tokens": 5, "completion_tokens": 6, "total_tokens": 11}},
                                  separators=(",", ":")) + "\n\n"
          + "data: [DONE]\n\n")

MODELS = json.dumps({"object": "list", "data": [{"id": "bench", "object": "model", "owned_by": "bench"}]})

MESSAGES = [{"role": "user", "content": "Say hello."}]


def request_body(model: str, stream: bool) -> str:
    return json.dumps({"model": model, "messages": MESSAGES, "stream": stream})


# Each request's connection as nginx sees it: the independent word on whether a connection was new
# (connection_requests 1) or reused, whatever a gateway says about itself.
ACCESS_FORMAT = "$connection $connection_requests $request_method $uri $ssl_protocol $status"


def upstream_nginx_conf(workdir: str, port: int, ssl: tuple[str, str] | None = None,
                        listen_host: str = "127.0.0.1", access_log: str | None = None) -> str:
    """nginx answering /json/v1/... with one completion and /sse/v1/... with one stream; with TLS 1.3
    offered (nginx before 1.23.4 leaves it out by default), and optionally a log of connections."""
    listen = f"{listen_host}:{port}" + (" ssl" if ssl else "")
    certs = f"ssl_certificate {ssl[0]}; ssl_certificate_key {ssl[1]}; ssl_protocols TLSv1.2 TLSv1.3;" if ssl else ""
    logging = (f"log_format conns '{ACCESS_FORMAT}';\n  access_log {access_log} conns;" if access_log
               else "access_log off;")
    return f"""
worker_processes 1;
pid {workdir}/upstream.pid;
error_log {workdir}/upstream-error.log warn;
events {{ worker_connections 4096; }}
http {{
  {logging}
  keepalive_requests 1000000;
  keepalive_timeout 300s;
  client_max_body_size 16m;  # an agent's turn of a megabyte or more, as the gateway's own bound allows
  server {{
    listen {listen} reuseport;
    {certs}
    location ~ /v1/models$ {{ default_type application/json; return 200 '{MODELS}'; }}
    location = /json/v1/chat/completions {{ default_type application/json; return 200 '{COMPLETION}'; }}
    location = /sse/v1/chat/completions {{ default_type text/event-stream; return 200 '{STREAM}'; }}
  }}
}}
"""


def proxy_nginx_conf(workdir: str, port: int, upstream_port: int) -> str:
    """nginx proxy_pass to the upstream, keep-alive pool, no buffering: the practical limit of a proxy."""
    return f"""
worker_processes 1;
pid {workdir}/proxy.pid;
error_log {workdir}/proxy-error.log warn;
events {{ worker_connections 4096; }}
http {{
  access_log off;
  keepalive_requests 1000000;
  upstream up {{ server 127.0.0.1:{upstream_port}; keepalive 128; }}
  server {{
    listen 127.0.0.1:{port};
    location / {{
      proxy_pass http://up;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_buffering off;
    }}
  }}
}}
"""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_for(url: str, seconds: float = 60.0) -> None:
    import urllib.request

    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=1):
                return
        except Exception:
            time.sleep(0.1)
    raise RuntimeError(f"{url} did not come up")


def engine_ms(server_timing: str | None) -> float:
    """A simulated region's own queue, cold start and prefill, from its Server-Timing."""
    phases = parse_server_timing(server_timing)
    return sum(phases.get(name, 0.0) for name in ("queue", "cold", "prefill"))
