"""Room for many open streams: each holds two sockets, the client's and the upstream's, and the usual soft
limit on open files (1 024) would refuse the 512th stream however much memory is free. The process takes
its hard limit, as nginx's worker_rlimit_nofile and Go's runtime do, and says when even that is too low
for the pools it was configured with."""

from __future__ import annotations

import logging
import resource

from firsttoken.config import Settings

log = logging.getLogger("firsttoken.server")
SPARE = 256  # files that are not sockets of a stream: listeners, logs, SQLite, Redis, the loop's own


def raise_fd_limit(settings: Settings) -> int:
    """Raise the soft limit on open files to the hard one; the limit now, warned about when the upstream
    pools (`pool.max` each) with a client socket beside each connection would not fit in it."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft < hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            soft = hard
        except (ValueError, OSError) as exc:
            log.warning("could not raise the limit on open files from %d: %s", soft, exc)
    streams = sum(upstream.pool.max for upstream in settings.upstreams.values())
    needed = 2 * streams + SPARE
    if soft != resource.RLIM_INFINITY and soft < needed:
        log.warning("open files are limited to %d: %d upstream connections with their clients' need %d; "
                    "fewer streams than the pools allow will fit (raise `ulimit -n`, or lower pool.max)",
                    soft, streams, needed)
    return soft
