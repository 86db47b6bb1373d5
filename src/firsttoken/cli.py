"""The `firsttoken` command."""

from __future__ import annotations

import gc
import sys
from typing import Any

import click
from rich.console import Console

from firsttoken import __version__
from firsttoken import config as config_module
from firsttoken.cache.command import cache
from firsttoken.config import ConfigError
from firsttoken.plan.command import plan
from firsttoken.spend.command import spend

err = Console(stderr=True, highlight=False)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="firsttoken")
def main() -> None:
    """firsttoken: the LLM gateway at the near end of the journey."""


main.add_command(cache)
main.add_command(plan)
main.add_command(spend)


@main.command()
@click.option("--config", "config_path", type=click.Path(dir_okay=False), default=None,
              help="firsttoken.yaml to use (default: $FIRSTTOKEN_CONFIG, ./firsttoken.yaml, or provider keys "
                   "from the environment).")
@click.option("--host", default=None, help="Address to listen on (default 127.0.0.1).")
@click.option("--port", type=int, default=None, help="Port to listen on (default 8787).")
@click.option("--workers", type=click.IntRange(1, 64), default=1, show_default=True,
              help="Worker processes sharing the port.")
@click.option("--access-log", "access_log", is_flag=True, default=None,
              help="A line per request on stderr (listen.access_log in the config).")
def serve(config_path: str | None, host: str | None, port: int | None, workers: int,
          access_log: bool | None) -> None:
    """Run the gateway."""
    overrides: dict[str, Any] = {}
    if access_log:
        overrides["listen.access_log"] = True
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
    from firsttoken import last_serve
    from firsttoken.banner import banner
    from firsttoken.server.launch import ListenError, bind
    from firsttoken.server.launch import serve as serve_on

    try:
        sock = bind(settings.listen.host, settings.listen.port)
    except ListenError as exc:
        err.print(f"firsttoken: {exc}", markup=False, soft_wrap=True)
        sys.exit(2)
    banner(settings, workers, err)
    last_serve.note(settings.journeys.log, settings.spend.log)
    serve_on(settings, config_path, workers, sock)


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
@click.option("--port", type=int, default=8787, show_default=True, help="The gateway's port (its dashboard too).")
@click.option("--pace", type=click.FloatRange(0, 60), default=2.0, show_default=True,
              help="Seconds between steps, to watch the dashboard.")
@click.option("--json", "as_json", is_flag=True, help="Print the steps as JSON at the end.")
def demo(port: int, pace: float, as_json: bool) -> None:
    """A one-minute tour on simulated regions: cold start, warm request, burst, cache, paraphrase, hedge, distance."""
    import json
    from dataclasses import asdict

    from firsttoken.demo import run
    from firsttoken.server.launch import ListenError, bind

    try:
        bind("127.0.0.1", port).close()  # a port in use is one line, before anything starts
    except ListenError as exc:
        err.print(f"firsttoken demo: {exc}", markup=False, soft_wrap=True)
        sys.exit(2)
    try:
        tour = run(port, pace, err if as_json else Console(highlight=False))
    except RuntimeError as exc:
        err.print(f"firsttoken demo: {exc}", markup=False, soft_wrap=True)
        sys.exit(1)
    if as_json:
        click.echo(json.dumps(asdict(tour), indent=2))


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

    from firsttoken.journey import log as journey_log
    from firsttoken.journey.report import print_summary
    from firsttoken.journey.summary import parse_since, summarise, unknown_models

    log_path = _journey_log(config_path, log_path)
    try:
        start = parse_since(since) if since else None
    except ValueError as exc:
        err.print(f"firsttoken journeys: {exc}", markup=False)
        sys.exit(2)
    rows = journey_log.read(log_path, start, model)
    summary, unknown = summarise(rows), unknown_models(rows)
    if as_json:
        click.echo(json.dumps({"log": log_path, "since": start, "model": model, "upstreams": summary,
                               "unknown_models": unknown}, indent=2))
        return
    print_summary(summary, unknown, log_path, Console(highlight=False))


def _journey_log(config_path: str | None, log_path: str | None) -> str:
    """The log to read: --log; else the one the settings name, as `serve` finds them; else, when that is not
    here and nothing was named, the log of the gateway last started on this machine, wherever it runs."""
    import os

    from firsttoken import last_serve

    named = log_path is not None or config_path is not None
    if log_path is None:
        try:
            log_path = config_module.load(config_path).journeys.log
        except ConfigError as exc:
            err.print(f"firsttoken journeys: {exc}", markup=False, soft_wrap=True)
            sys.exit(2)
    log_path = last_serve.locate("journeys", log_path, named)
    if not log_path or not os.path.isfile(log_path):
        err.print(f"firsttoken journeys: no journey log at {os.path.abspath(log_path) if log_path else 'all'}; "
                  f"the gateway writes one where its journeys.log says (default firsttoken-journeys.db in the "
                  f"directory where `firsttoken serve` runs); name it with --log.", markup=False, soft_wrap=True)
        sys.exit(2)
    return os.path.abspath(log_path)


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
        with err.status("") as status:  # a spinner on a terminal, nothing in a pipe
            result = asyncio.run(run_trace(target, model=model, prompt=prompt or DEFAULT_PROMPT, runs=runs,
                                           max_tokens=max_tokens, origin=place,
                                           progress=lambda words: status.update(f"{words}…")))
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


if __name__ == "__main__":
    main()
