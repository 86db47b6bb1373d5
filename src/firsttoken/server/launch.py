"""Starting the gateway: take the port first, then say what runs, then serve.

The port is bound here, before anything is printed, and the socket handed to uvicorn (as its own `run`
does for several workers): a port that is taken is one clear line, never a banner followed by errno 98.
"""

from __future__ import annotations

import errno
import os
import shutil
import socket
import sys
import tempfile
from typing import Any

from firsttoken.config import Settings
from firsttoken.server.cluster import RUN_DIR_ENV, SHARED_REGION_ENV, WORKERS_ENV
from firsttoken.server.logs import configure_logging
from firsttoken.sim.embedded import SharedRegion


class ListenError(Exception):
    """The gateway cannot take its address; the message says what to do."""


def bind(host: str, port: int) -> socket.socket:
    """A socket bound to host:port, as uvicorn would bind it, ready to hand to its workers."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE:
            why = "something is already listening there (another firsttoken serve?); stop it, or pick another port"
        elif exc.errno == errno.EACCES:
            why = "a port below 1024 needs root; pick another port"
        elif exc.errno == errno.EADDRNOTAVAIL:
            why = "no interface of this machine has that address; pick another host"
        else:
            why = exc.strerror or str(exc)
        raise ListenError(f"cannot listen on {host}:{port}: {why} (--host, --port or listen: in the config)") from exc
    sock.set_inheritable(True)  # the workers serve on it
    return sock


def serve(settings: Settings, config_path: str | None, workers: int, sock: socket.socket) -> None:
    """Serve on `sock` until stopped: in this process, or in `workers` processes sharing it."""
    import uvicorn
    from uvicorn.supervisors import Multiprocess

    from firsttoken.server.fd_limit import raise_fd_limit
    from firsttoken.server.protocol import http_protocol

    configure_logging()
    raise_fd_limit(settings)  # the workers inherit it
    # httptools with header and body deadlines and a bound on waiting connections; it pickles into the
    # worker processes with the settings it closes over
    options: dict[str, Any] = dict(host=settings.listen.host, port=settings.listen.port,
                                   http=http_protocol(settings.limits),
                                   loop="uvloop", lifespan="on", access_log=False, log_level="warning",
                                   timeout_keep_alive=75, server_header=False, date_header=False,
                                   proxy_headers=False,  # we trust no X-Forwarded-* by default
                                   ssl_certfile=settings.listen.tls_cert, ssl_keyfile=settings.listen.tls_key)
    if workers == 1:
        from firsttoken.server.app import create_app

        server = uvicorn.Server(uvicorn.Config(create_app(settings), **options))
        try:
            server.run(sockets=[sock])
        except KeyboardInterrupt:
            pass
        if not server.started:
            sys.exit(3)  # uvicorn's own code for a start-up that failed (the reason is in the log above)
        return
    # Each worker builds its own gateway (its own pools and loop) from the same settings, and finds its
    # siblings and the one simulated region they share through the environment (server/cluster.py).
    if config_path:
        os.environ["FIRSTTOKEN_CONFIG"] = os.path.abspath(config_path)
    os.environ["FIRSTTOKEN_HOST"] = settings.listen.host
    os.environ["FIRSTTOKEN_PORT"] = str(settings.listen.port)
    os.environ["FIRSTTOKEN_ACCESS_LOG"] = "1" if settings.listen.access_log else "0"
    run_dir = tempfile.mkdtemp(prefix="firsttoken-")  # 0700: the workers' sockets are this user's alone
    os.environ[RUN_DIR_ENV] = run_dir
    os.environ[WORKERS_ENV] = str(workers)
    region = SharedRegion(settings.simulated) if settings.simulated is not None else None
    if region is not None:
        os.environ[SHARED_REGION_ENV] = region.url
    config = uvicorn.Config("firsttoken.server.app:app_from_environment", factory=True, workers=workers, **options)
    try:
        Multiprocess(config, sockets=[sock]).run()
    except KeyboardInterrupt:
        pass
    finally:
        if region is not None:
            region.close()
        shutil.rmtree(run_dir, ignore_errors=True)
