"""The `firsttoken` command."""

from __future__ import annotations

import logging
import os
import sys
from typing import Any

import click
from rich.console import Console

from firsttoken import __version__
from firsttoken import config as config_module
from firsttoken.config import NOTHING_CONFIGURED, ConfigError, Settings

err = Console(stderr=True, highlight=False)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="firsttoken")
def main() -> None:
    """firsttoken: the LLM gateway at the near end of the journey."""


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
    if not settings.upstreams:
        click.echo(NOTHING_CONFIGURED, err=True)  # already wrapped for a terminal
        sys.exit(2)
    if not settings.loopback_only and not settings.keys and not settings.listen.allow_unauthenticated:
        err.print(f"firsttoken: refusing to listen on {settings.listen.host} without client keys: anyone who "
                  f"can reach it could spend your upstream keys. Add `keys:` to the config, listen on "
                  f"127.0.0.1, or set listen.allow_unauthenticated: true if something else guards it.",
                  markup=False, soft_wrap=True)
        sys.exit(2)
    _banner(settings, workers)
    _run(settings, config_path, workers)


@main.command()
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", type=int, default=9001, show_default=True)
@click.option("--model", default="llama-3.1-8b", show_default=True, help="A catalogue model.")
@click.option("--gpu", default="h100", show_default=True, help="A catalogue GPU.")
@click.option("--tp", type=click.IntRange(1, 64), default=1, show_default=True, help="Tensor-parallel GPUs.")
@click.option("--precision", type=click.Choice(["bf16", "fp8", "int4"]), default="bf16", show_default=True)
@click.option("--idle-unload", "idle_unload", type=click.FloatRange(min=0, min_open=True), default=None,
              help="Unload the model after this many idle seconds; the next request pays the cold start.")
def sim(host: str, port: int, model: str, gpu: str, tp: int, precision: str, idle_unload: float | None) -> None:
    """Run a simulated region: an OpenAI-compatible server with a GPU's real timing."""
    from aiohttp import web

    from firsttoken.sim.catalogue import Catalogue, CatalogueError
    from firsttoken.sim.engine import Engine
    from firsttoken.sim.region import Region
    from firsttoken.sim.roofline import Deployment, DeploymentError
    from firsttoken.sim.server import SimServer

    catalogue = Catalogue.builtin()
    try:
        deployment = Deployment(catalogue.gpu(gpu), catalogue.model(model), precision, tp)
    except (CatalogueError, DeploymentError) as exc:
        err.print(f"firsttoken sim: {exc}", markup=False, soft_wrap=True)
        sys.exit(2)
    err.print(f"[bold]firsttoken sim[/]: {model} at {precision} on {tp}× {gpu}, listening on http://{host}:{port}/v1 "
              f"(KV cache {deployment.max_kv_tokens:,} tokens; one decode step "
              f"{deployment.decode_step_s(1000, 1) * 1000:.1f} ms)")
    if idle_unload is not None:
        err.print(f"  after {idle_unload:g} s idle the model unloads; loading it back takes "
                  f"{deployment.load_s():.1f} s")
    region = Region(Engine(deployment), idle_unload_s=idle_unload, load_s=deployment.load_s())
    web.run_app(SimServer(region, model).app, host=host, port=port, print=None, access_log=None)


def _banner(settings: Settings, workers: int) -> None:
    listen = settings.listen
    err.print(f"[bold]firsttoken {__version__}[/] listening on http://{listen.host}:{listen.port}/v1 "
              f"({workers} worker{'s' if workers > 1 else ''}; settings from {settings.source})")
    for name, upstream in settings.upstreams.items():
        region = f", GPUs in {upstream.region}" if upstream.region else ""
        err.print(f"  upstream [cyan]{name}[/]: {upstream.api} at {upstream.public_url}{region}")
    for alias, targets in settings.models.items():
        err.print(f"  model [cyan]{alias}[/] → {', '.join(targets)}")
    if settings.keys:
        err.print(f"  client keys: {', '.join(k.name for k in settings.keys)}")
    if settings.cache is not None:
        err.print("  cache: configured, but the edge cache is not part of this version; requests bypass it")


def _run(settings: Settings, config_path: str | None, workers: int) -> None:
    import uvicorn

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    options: dict[str, Any] = dict(host=settings.listen.host, port=settings.listen.port, http="httptools",
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
