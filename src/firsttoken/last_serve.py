"""Where the gateway last started keeps its journey log and its spend ledger: `firsttoken serve` notes them
in the user's state directory ($XDG_STATE_HOME/firsttoken, ~/.local/state/firsttoken by default), so that
`firsttoken journeys` and `firsttoken spend` run from any other directory still find them."""

from __future__ import annotations

import json
import logging
import os
import time
from pathlib import Path

log = logging.getLogger("firsttoken")


def _note_path() -> Path:
    state = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return Path(state) / "firsttoken" / "last-serve.json"


def note(journey_log: str | None, spend_log: str | None = None) -> None:
    """Called by `serve` as it starts; a home it cannot write to only means the note is missing."""
    path = _note_path()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"journeys": os.path.abspath(journey_log) if journey_log else None,
                                    "spend": os.path.abspath(spend_log) if spend_log else None,
                                    "directory": os.getcwd(), "started": time.time()}))
    except OSError as exc:
        log.debug("could not note where the journey log is: %s", exc)


def locate(what: str, configured: str | None, named: bool) -> str | None:
    """The file a command reads (`what`: journeys | spend): the one its settings or options give when it is
    here or was named; else the one the gateway last started on this machine by this user noted, wherever
    it runs; else the configured one (which is not here: the caller says so)."""
    if named or (configured and os.path.isfile(configured)):
        return configured
    return _noted(what) or configured


def _noted(what: str) -> str | None:
    try:
        noted = json.loads(_note_path().read_text())
    except (OSError, ValueError):
        return None
    found = noted.get(what) if isinstance(noted, dict) else None
    return found if isinstance(found, str) else None
