"""What speaking Anthropic's Messages and OpenAI's Responses costs a gateway, next to chat completions: the
same minimal fast upstream (nginx with a static chat completion and stream), the same question asked in
each of the three formats, through firsttoken and through LiteLLM's proxy, in one run on one machine.

    .venv/bin/python bench/client_formats.py [--seconds 5] [--repeat 3] [--skip-litellm]

The upstream speaks only chat completions, so both gateways translate the other two formats both ways.
Prints requests/s and p50 per gateway, format, mode (json, stream) and concurrency (1, 32), then the
ratios: each format against chat through the same gateway, and firsttoken against LiteLLM per format. A
format a gateway does not answer correctly (checked once before measuring) is reported as such. A
benchmark, run by hand; CI never runs it.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import platform
import sys
import urllib.error
import urllib.request
from contextlib import ExitStack
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import fixtures  # noqa: E402
import gateway_overhead as peers  # noqa: E402
import wrk  # noqa: E402

FORMATS = {
    "chat": ("/v1/chat/completions", lambda model, stream: {"model": model, "messages": fixtures.MESSAGES,
                                                            "stream": stream}),
    "messages": ("/v1/messages", lambda model, stream: {"model": model, "max_tokens": 64,
                                                        "messages": fixtures.MESSAGES, "stream": stream}),
    "responses": ("/v1/responses", lambda model, stream: {"model": model, "input": "Say hello.", "stream": stream}),
}
# What a correct answer holds, by format and mode: the upstream's text, and the format's own end.
EXPECTED = {("chat", False): '"Hello from the static upstream."', ("chat", True): "[DONE]",
            ("messages", False): '"type":"message"', ("messages", True): "message_stop",
            ("responses", False): '"object":"response"', ("responses", True): "response.completed"}
HEADERS = {"x-api-key": wrk.CLIENT_KEY, "anthropic-version": "2023-06-01"}


def answers_correctly(base: str, api: str, model: str, stream: bool) -> str | None:
    """None when the gateway answers this format correctly; else what it said."""
    path, body = FORMATS[api]
    request = urllib.request.Request(base + path, json.dumps(body(model, stream)).encode(),
                                     {"Content-Type": "application/json",
                                      "Authorization": f"Bearer {wrk.CLIENT_KEY}", **HEADERS})
    try:
        with urllib.request.urlopen(request, timeout=20) as reply:
            text = reply.read().decode()
    except urllib.error.HTTPError as error:
        return f"HTTP {error.code}: {error.read()[:200].decode(errors='replace')}"
    except (http.client.HTTPException, OSError) as error:  # a stream cut short
        return f"{type(error).__name__}: {error}"
    compact = text.replace(": ", ":")
    if EXPECTED[(api, stream)] not in compact or ("Hello" not in text and "hello" not in text.lower()):
        return f"unexpected answer: {text[:200]!r}"
    return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=int, default=5)
    parser.add_argument("--repeat", type=int, default=3, help="wrk runs per cell; the median one is reported")
    parser.add_argument("--skip-litellm", action="store_true")
    args = parser.parse_args()
    peers.WORK.mkdir(parents=True, exist_ok=True)
    upstream_port = fixtures.free_port()
    results: dict[tuple[str, str, str], wrk.WrkResult | str] = {}

    def measure(gateway: str, base: str, aliases: dict[bool, str]) -> None:
        for api, (path, body) in FORMATS.items():
            for stream in (False, True):
                wrong = answers_correctly(base, api, aliases[stream], stream)
                for connections in (1, 32):
                    key = (gateway, api, f"{'stream' if stream else 'json'}-c{connections}")
                    if wrong is not None:
                        results[key] = wrong
                        print(f"  {' '.join(key):<40} not measured: {wrong}", flush=True)
                        continue
                    runs = [wrk.run(base + path, json.dumps(body(aliases[stream], stream)), connections,
                                    args.seconds, peers.WORK, headers=HEADERS) for _ in range(args.repeat)]
                    result = sorted(runs, key=lambda r: r.requests_per_s)[len(runs) // 2]
                    results[key] = result
                    print(f"  {' '.join(key):<40} {result.requests_per_s:>8.0f} req/s  p50 {result.p50_ms:7.3f} ms"
                          f"  errors {result.errors}", flush=True)

    aliases = {False: "bench", True: "bench-sse"}
    with ExitStack() as stack:
        stack.enter_context(peers.nginx(fixtures.upstream_nginx_conf(str(peers.WORK), upstream_port), "upstream"))
        print(f"measuring (wrk, 1 thread, {args.seconds} s runs, median of {args.repeat}):", flush=True)
        with peers.firsttoken(upstream_port, 1) as gateway:
            measure("firsttoken", gateway, aliases)
        if not args.skip_litellm:
            with peers.litellm(upstream_port, "together_ai") as proxy:  # translated to chat (gateway_overhead)
                measure("litellm", proxy, aliases)
    print()
    print(report(results))


def report(results: dict[tuple[str, str, str], wrk.WrkResult | str]) -> str:
    lines = [f"machine: {platform.node()} · {os.cpu_count()} cores · {platform.platform()} · "
             f"python {platform.python_version()}", "",
             "| gateway | format | mode | c | req/s | p50 (ms) | errors |", "|---|---|---|---|---|---|---|"]
    for (gateway, api, key), r in results.items():
        mode, c = key.split("-c")
        if isinstance(r, str):
            lines.append(f"| {gateway} | {api} | {mode} | {c} | not answered correctly | | |")
        else:
            lines.append(f"| {gateway} | {api} | {mode} | {c} | {r.requests_per_s:,.0f} | {r.p50_ms:.3f} | "
                         f"{r.errors} |")
    lines += ["", "| ratio | mode | c | value |", "|---|---|---|---|"]
    for (gateway, api, key), r in results.items():
        chat = results.get((gateway, "chat", key))
        mode, c = key.split("-c")
        if api != "chat" and isinstance(r, wrk.WrkResult) and isinstance(chat, wrk.WrkResult):
            lines.append(f"| {gateway}: {api} / chat req/s | {mode} | {c} | "
                         f"{r.requests_per_s / chat.requests_per_s:.0%} |")
        theirs = results.get(("litellm", api, key))
        if gateway == "firsttoken" and isinstance(r, wrk.WrkResult) and isinstance(theirs, wrk.WrkResult):
            lines.append(f"| firsttoken / litellm req/s, {api} | {mode} | {c} | "
                         f"{r.requests_per_s / theirs.requests_per_s:.1f}× |")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
