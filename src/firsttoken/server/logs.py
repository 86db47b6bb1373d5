"""Where the gateway's log goes: stderr, from INFO up (the access log is INFO), one line a record.

Each process sets it up: the supervisor of `serve --workers N` and every worker it spawns (a spawned
process starts with logging unconfigured, and Python's last-resort handler shows only warnings).
"""

from __future__ import annotations

import logging

FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def configure_logging() -> None:
    logging.basicConfig(level=logging.INFO, format=FORMAT)
