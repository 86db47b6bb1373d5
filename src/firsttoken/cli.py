"""The `firsttoken` command."""

from __future__ import annotations

import gc
import logging
import os
import sys
from typing import Any

import click
from rich.console import Console

from firsttoken import __version__
from firsttoken import config as config_module
from firsttoken.cache.command import cache
from firsttoken.config import NOTHING_CONFIGURED, SIM_UPSTREAM, ConfigError, Settings

err = Console(stderr=True, highlight=False)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="firsttoken")
def main() -> None:
    """firsttoken: the LLM gateway at the near end of the journey."""


main.add_command(cache)


@main.command()
@click.option("--config", "config_path", type=click.Path(dir_okay=False), default=None,
              help="firsttoken.yaml to use (default: $FIRSTTOKEN_CONFIG, ./firsttoken.yaml, or provider keys "
                   "from the environment).")
@click.option("--host", default=None, help="Address to listen on (default 127.0.0.1).")
@click.option("--port", type=int, default=None, help="Port to listen on (default 8787).")
@click.option("--workers", type=click.IntRange(1, 64), default=1, show_default=True,
              help="Worker processes sharing the port.")
def serve(config_path: str | None, host: str | None, port: int | None, workers: int) -> None:
    """Run the gateway."""
    overrides: dict[str, Any] = {}
    if host is not None:
        overrides["listen.host"] = host
    if port is not None:
        overrides["listen.port"] = port
    try:
        settings = config_module.load(config_path, overrides=overrides)
    except ConfigError as exc:
        err.print(f"[bold red]firsttoken: configuration error[/]\n{exc}", markup=True, soft_wrap=True)
        sys.exit(2)
    if not settings.loopback_only and not settings.keys and not settings.listen.allow_unauthenticated:
        err.print(f"firsttoken: refusing to listen on {settings.listen.host} without client keys: anyone who "
                  f"can reach it could spend your upstream keys. Add `keys:` to the config, listen on "
                  f"127.0.0.1, or set listen.allow_unauthenticated: true if something else guards it.",
                  markup=False, soft_wrap=True)
        sys.exit(2)
    _banner(settings, workers)
    _run(settings, config_path, workers)


def _fault_flags(stall: str | None, fail: str | None, queue_ms: float | None) -> dict[str, Any]:
    """`--stall 0.1:2 --fail 0.5:reset --queue-ms 300` as the `faults:` keys (validated with the rest)."""
    faults: dict[str, Any] = {}
    if stall is not None:
        share, _, seconds = stall.partition(":")
        faults["stall_share"] = share
        if seconds:
            faults["stall_s"] = seconds
    if fail is not None:
        share, _, kind = fail.partition(":")
        faults["error_share"] = share
        if kind:
            faults["error"] = kind
    if queue_ms is not None:
        faults["queue_ms"] = queue_ms
    return faults


@main.command()
@click.option("--config", "config_path", type=click.Path(dir_okay=False), default=None,
              help="firsttoken.yaml whose `sim:` section to start from; flags override it.")
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", type=int, default=9001, show_default=True)
@click.option("--model", "models", multiple=True, help="A catalogue model (repeat for several; default llama-3.1-8b).")
@click.option("--gpu", default=None, help="A catalogue GPU (default h100).")
@click.option("--tp", type=int, default=None, help="Tensor-parallel GPUs per replica (default 1).")
@click.option("--replicas", type=int, default=None, help="Replicas of each model (default 1).")
@click.option("--precision", type=click.Choice(["bf16", "fp8", "int4"]), default=None, help="Default bf16.")
@click.option("--idle-unload", "idle_unload", type=float, default=None,
              help="Unload a model after this many idle seconds; the next request pays the cold start.")
@click.option("--rpm", type=int, default=None, help="Requests per minute per API key; past it, 429.")
@click.option("--tpm", type=int, default=None, help="Tokens (prompt + max_tokens) per minute per API key.")
@click.option("--max-queue", "max_queue", type=int, default=None,
              help="Waiting requests per model past which new ones are refused as overloaded.")
@click.option("--overload-status", "overload_status", type=click.Choice(["429", "503"]), default=None,
              help="The status an overloaded OpenAI endpoint answers (default 503; Anthropic's is 529).")
@click.option("--region", default=None, help="Where the GPUs are: aws:us-east-1, a city, or lat,lon.")
@click.option("--client-location", "client_location", default=None,
              help="Where the clients are (a city or lat,lon); with --region, each direction pays the fibre delay.")
@click.option("--path-factor", "path_factor", type=float, default=None,
              help="Cable length over the great circle (default 1.5).")
@click.option("--answers", type=click.Choice(["natural", "max_tokens"]), default=None,
              help="natural (default): answers end at a length drawn from production traces for their kind of "
                   "request; max_tokens: every answer runs to its max_tokens (as with ignore_eos).")
@click.option("--seed", type=int, default=None, help="Of the answers' lengths (default 0).")
@click.option("--stall", default=None, metavar="SHARE[:SECONDS]",
              help="Make that share of first tokens wait that much longer (default 2 s): --stall 0.1:2.")
@click.option("--fail", default=None, metavar="SHARE[:500|503|reset]",
              help="Fail that share of requests, with a 500 (default), a 503 or a dropped connection.")
@click.option("--queue-ms", "queue_ms", type=float, default=None,
              help="Add this much queueing to every request (a region busy with others' traffic).")
@click.option("--tls-cert", "tls_cert", type=click.Path(exists=True, dir_okay=False), default=None,
              help="Serve HTTPS with this certificate (PEM), so clients pay a real TLS handshake.")
@click.option("--tls-key", "tls_key", type=click.Path(exists=True, dir_okay=False), default=None,
              help="The certificate's private key (PEM; default: in the --tls-cert file).")
def sim(config_path: str | None, host: str, port: int, models: tuple[str, ...], tls_cert: str | None,
        tls_key: str | None, **flags: Any) -> None:
    """Run a simulated region: an OpenAI- and Anthropic-compatible server with a GPU's real timing."""
    from aiohttp import web

    from firsttoken.sim.faults import FaultSettings
    from firsttoken.sim.region import Region
    from firsttoken.sim.server import SimServer

    tree: dict[str, Any] = {}
    if config_path is not None:
        try:
            tree = config_module.sim_tree(config_module.load(config_path))
        except ConfigError as exc:
            err.print(f"firsttoken sim: {exc}", markup=False, soft_wrap=True)
            sys.exit(2)
    if models:
        tree["models"] = list(models)
    if flags.get("overload_status") is not None:
        flags["overload_status"] = int(flags["overload_status"])
    faults = _fault_flags(flags.pop("stall"), flags.pop("fail"), flags.pop("queue_ms"))
    if faults:
        tree["faults"] = {**tree.get("faults", {}), **faults}
    tree.update({k: v for k, v in flags.items() if v is not None})
    try:
        settings = config_module.sim_settings(tree)
    except ConfigError as exc:
        err.print(f"firsttoken sim: {exc}", markup=False, soft_wrap=True)
        sys.exit(2)
    tls = None
    if tls_cert is not None:
        import ssl

        tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        tls.load_cert_chain(tls_cert, tls_key)
    elif tls_key is not None:
        err.print("firsttoken sim: --tls-key needs --tls-cert", markup=False)
        sys.exit(2)
    region = Region(settings)
    scheme = "https" if tls is not None else "http"
    err.print(f"[bold]firsttoken sim[/]: {settings.describe()}, listening on {scheme}://{host}:{port}/v1")
    for name, deployment in settings.deployments.items():
        load = f"; after {settings.idle_unload:g} s idle it unloads, and loading back takes " \
               f"{settings.load_s(deployment):.1f} s" if settings.idle_unload else ""
        err.print(f"  {name}: KV cache {deployment.max_kv_tokens:,} tokens per replica; one decode step "
                  f"{deployment.decode_step_s(1000, 1) * 1000:.1f} ms{load}")
    if settings.faults != FaultSettings():
        err.print(f"  faults: {settings.faults.model_dump(exclude_defaults=True)} (POST /sim/faults to change them)")
    limits = [f"{settings.rpm} requests" if settings.rpm else "", f"{settings.tpm} tokens" if settings.tpm else ""]
    if any(limits):
        err.print(f"  rate limits per API key: {' and '.join(x for x in limits if x)} per minute")
    gc.freeze()  # what start-up built lives forever: keep it out of the collections that pause the schedule
    web.run_app(SimServer(region).app, host=host, port=port, print=None, access_log=None, ssl_context=tls,
                handler_cancellation=True, loop=_fast_loop())


@main.command()
@click.option("--config", "config_path", type=click.Path(dir_okay=False), default=None,
              help="firsttoken.yaml whose journeys.log to read (default: as `serve` finds its settings).")
@click.option("--log", "log_path", type=click.Path(dir_okay=False), default=None, help="The journey log file itself.")
@click.option("--since", default=None, help="Only journeys since then: 30m, 6h, 7d, or a date (2026-12-01T09:00).")
@click.option("--model", default=None, help="Only this model (as asked for, or the upstream's name for it).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of tables.")
def journeys(config_path: str | None, log_path: str | None, since: str | None, model: str | None,
             as_json: bool) -> None:
    """Percentiles per upstream and where the time went, from the journey log."""
    import json
    from pathlib import Path

    from firsttoken.journey import log as journey_log
    from firsttoken.journey.summary import parse_since, summarise

    if log_path is None:
        try:
            log_path = config_module.load(config_path).journeys.log
        except ConfigError as exc:
            err.print(f"firsttoken journeys: {exc}", markup=False, soft_wrap=True)
            sys.exit(2)
    if not log_path or not Path(log_path).is_file():
        err.print(f"firsttoken journeys: no journey log at {log_path}; the gateway writes one where its "
                  f"journeys.log says (default firsttoken-journeys.db in its working directory).", markup=False,
                  soft_wrap=True)
        sys.exit(2)
    try:
        start = parse_since(since) if since else None
    except ValueError as exc:
        err.print(f"firsttoken journeys: {exc}", markup=False)
        sys.exit(2)
    summary = summarise(journey_log.read(log_path, start, model))
    if as_json:
        click.echo(json.dumps({"log": str(log_path), "since": start, "model": model, "upstreams": summary}, indent=2))
        return
    _print_journeys(summary, str(log_path))


def _print_journeys(summary: dict[str, dict[str, Any]], log_path: str) -> None:
    from rich.table import Table

    out = Console(highlight=False)
    if not summary:
        out.print(f"No journeys in {log_path} for that selection.")
        return

    def ms(entry: dict[str, Any], phase: str, q: str = "p50") -> str:
        value = entry[phase][q]
        return "—" if value is None else (f"{value / 1000:.2f} s" if value >= 10_000 else f"{value:.0f} ms"
                                          if value >= 10 else f"{value:.1f} ms")

    latency = Table(title=f"Journeys in {log_path}", title_justify="left")
    for column in ("upstream", "requests", "errors", "retried", "hedge wins", "ttft p50", "ttft p95", "e2e p50",
                   "e2e p95", "tok/s"):
        latency.add_column(column, justify="left" if column == "upstream" else "right")
    for name, e in summary.items():
        rate = e["tokens_per_s"]["p50"]
        latency.add_row(name, str(e["requests"]), str(e["errors"]), str(e["retried"]), str(e["hedge_wins"]),
                        ms(e, "ttft"), ms(e, "ttft", "p95"),
                        ms(e, "e2e"), ms(e, "e2e", "p95"), "—" if rate is None else f"{rate:.0f}")
    out.print(latency)
    phases = Table(title="Where the time went (medians)", title_justify="left")
    for column in ("upstream", "client rtt", "gateway", "connect", "rtt", "floor", "queue+prefill", "decode"):
        phases.add_column(column, justify="left" if column == "upstream" else "right")
    for name, e in summary.items():
        phases.add_row(name, *(ms(e, p) for p in ("client rtt", "gateway", "connect", "rtt", "floor",
                                                  "queue+prefill", "decode")))
    out.print(phases)


@main.command()
@click.argument("url")
@click.option("--model", default=None, help="Model to ask for (default: the endpoint's first listed model).")
@click.option("--prompt", default=None, help="The user message to send (default: a short question).")
@click.option("-n", "runs", type=click.IntRange(1, 50), default=2, show_default=True,
              help="Requests to send: the first on a new connection, the rest on the same one.")
@click.option("--max-tokens", type=click.IntRange(1, 100_000), default=64, show_default=True)
@click.option("--api", type=click.Choice(["openai", "anthropic"]), default=None,
              help="Wire format (default: anthropic for *.anthropic.com or a /messages URL, else openai).")
@click.option("--api-key-env", default=None,
              help="Environment variable holding the key (default OPENAI_API_KEY or ANTHROPIC_API_KEY).")
@click.option("--from", "origin", default=None,
              help="Where you are, for the floor: a city, region code or lat,lon (default: the config's location).")
@click.option("--region", default=None,
              help="Where the endpoint's GPUs are (default: known for the well-known APIs).")
@click.option("--config", "config_path", type=click.Path(dir_okay=False), default=None,
              help="firsttoken.yaml whose `location` is where you are.")
@click.option("--json", "as_json", is_flag=True,
              help="Print JSON (the keys in docs/contracts.md) instead of a waterfall.")
def trace(url: str, model: str | None, prompt: str | None, runs: int, max_tokens: int, api: str | None,
          api_key_env: str | None, origin: str | None, region: str | None, config_path: str | None,
          as_json: bool) -> None:
    """X-ray one endpoint: DNS, TCP, TLS, TTFB, TTFT, ITL and tokens/s, cold then warm, next to the floor."""
    import asyncio
    import json

    from firsttoken.geo.places import GeoError, resolve
    from firsttoken.trace.endpoint import EndpointError, endpoint
    from firsttoken.trace.probe import TraceError
    from firsttoken.trace.report import render, trace_facts
    from firsttoken.trace.tracer import DEFAULT_PROMPT
    from firsttoken.trace.tracer import trace as run_trace

    try:
        target = endpoint(url, api=api, key_env=api_key_env, region=region)  # type: ignore[arg-type]
        place = resolve(origin) if origin else _configured_location(config_path)
        result = asyncio.run(run_trace(target, model=model, prompt=prompt or DEFAULT_PROMPT, runs=runs,
                                       max_tokens=max_tokens, origin=place))
    except (EndpointError, GeoError) as exc:
        err.print(f"firsttoken trace: {exc}", markup=False, soft_wrap=True)
        sys.exit(2)
    except TraceError as exc:
        err.print(f"firsttoken trace: {exc}", markup=False, soft_wrap=True)
        sys.exit(1)
    if as_json:
        click.echo(json.dumps(trace_facts(result), indent=2))
    else:
        render(result, Console(highlight=False))
    if any(run.error for run in result.runs):
        sys.exit(1)


def _configured_location(config_path: str | None) -> Any:
    """The config's `location`, when there is a config that says one; a broken config only matters if named."""
    try:
        return config_module.load(config_path).place
    except ConfigError as exc:
        if config_path:
            err.print(f"[bold red]firsttoken: configuration error[/]\n{exc}", markup=True, soft_wrap=True)
            sys.exit(2)
        return None


def _fast_loop() -> Any:
    """uvloop where it is installed (it is a dependency off Windows), else asyncio's own loop."""
    try:
        import uvloop
    except ImportError:
        import asyncio

        return asyncio.new_event_loop()
    return uvloop.new_event_loop()


def _banner(settings: Settings, workers: int) -> None:
    listen = settings.listen
    err.print(f"[bold]firsttoken {__version__}[/] listening on http://{listen.host}:{listen.port}/v1 "
              f"({workers} worker{'s' if workers > 1 else ''}; settings from {settings.source})")
    for name, upstream in settings.upstreams.items():
        region = f", GPUs in {upstream.region}" if upstream.region else ""
        err.print(f"  upstream [cyan]{name}[/]: {upstream.api} at {upstream.public_url}{region}")
    simulated = settings.simulated
    if simulated is not None:
        err.print(f"  upstream [cyan]{SIM_UPSTREAM}[/]: a simulated region in this process: {simulated.describe()}")
        if workers > 1:
            err.print(f"  note: each of the {workers} workers runs its own simulated region (its own GPUs and "
                      f"rate limits); run `firsttoken sim` once and point an upstream at it to share one")
        if not settings.upstreams:
            click.echo(NOTHING_CONFIGURED, err=True)  # already wrapped for a terminal
            model = simulated.models[0]
            err.print(f"  try: curl -N http://{listen.host}:{listen.port}/v1/chat/completions -H 'content-type: "
                      f"application/json' -d '{{\"model\": \"{model}\", \"stream\": true, \"messages\": "
                      f"[{{\"role\": \"user\", \"content\": \"hello\"}}]}}'", markup=False, soft_wrap=True)
    for alias, targets in settings.models.items():
        err.print(f"  model [cyan]{alias}[/] → {', '.join(targets)}")
    if settings.keys:
        err.print(f"  client keys: {', '.join(k.name for k in settings.keys)}")
    journeys = settings.journeys
    where = [f"log {journeys.log}"] if journeys.log else []
    if journeys.otlp is not None:
        where.append(f"OTLP spans to {journeys.otlp.endpoint} as {journeys.otlp.service_name}")
    err.print(f"  journeys: {'; '.join(where) or 'kept in memory only'}", markup=False, soft_wrap=True)
    if workers > 1:
        err.print(f"  note: /metrics and /v1/journeys answer for the one of the {workers} workers that takes the "
                  f"request (each keeps its own); the journey log and OTLP export have every worker's journeys")
    cache = settings.cache
    if not cache.enabled:
        err.print("  cache: off", markup=False)
    else:
        from firsttoken.redis_guard import redacted  # the URL without its userinfo or query (a password)

        where = {"sqlite": cache.path, "memory": "memory",
                 "redis": f"Redis at {redacted(cache.url or '')}"}[cache.backend]
        scope = "shared by all client keys" if cache.shared else "one per client key"
        semantic = f"; paraphrases too (similarity ≥ {cache.similarity}, {cache.embedding})" if cache.semantic else ""
        err.print(f"  cache: exact, in {where}, {scope}, TTL {cache.ttl} s{semantic}", markup=False, soft_wrap=True)


def _run(settings: Settings, config_path: str | None, workers: int) -> None:
    import uvicorn

    from firsttoken.server.fd_limit import raise_fd_limit
    from firsttoken.server.protocol import http_protocol

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    raise_fd_limit(settings)  # the workers inherit it
    # httptools with header and body deadlines and a bound on waiting connections; it pickles into the
    # worker processes with the settings it closes over
    options: dict[str, Any] = dict(host=settings.listen.host, port=settings.listen.port,
                                   http=http_protocol(settings.limits),
                                   loop="uvloop", lifespan="on", access_log=False, log_level="warning",
                                   timeout_keep_alive=75, server_header=False, date_header=False,
                                   proxy_headers=False)  # we trust no X-Forwarded-* by default
    if workers == 1:
        from firsttoken.server.app import create_app

        uvicorn.run(create_app(settings), **options)
        return
    # Each worker builds its own gateway (its own pools and loop) from the same settings.
    if config_path:
        os.environ["FIRSTTOKEN_CONFIG"] = os.path.abspath(config_path)
    os.environ["FIRSTTOKEN_HOST"] = settings.listen.host
    os.environ["FIRSTTOKEN_PORT"] = str(settings.listen.port)
    uvicorn.run("firsttoken.server.app:app_from_environment", factory=True, workers=workers, **options)


if __name__ == "__main__":
    main()
