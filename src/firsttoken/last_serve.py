"""Where the gateway last started keeps its journey log: `firsttoken serve` notes it in the user's state
directory ($XDG_STATE_HOME/firsttoken, ~/.local/state/firsttoken by default), so that `firsttoken journeys`
run from any other directory still finds it."""

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


def note(journey_log: str | None) -> None:
    """Called by `serve` as it starts; a home it cannot write to only means the note is missing."""
    path = _note_path()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"journeys": os.path.abspath(journey_log) if journey_log else None,
                                    "directory": os.getcwd(), "started": time.time()}))
    except OSError as exc:
        log.debug("could not note where the journey log is: %s", exc)


def journey_log() -> str | None:
    """The journey log of the gateway last started on this machine by this user, when it noted one."""
    try:
        noted = json.loads(_note_path().read_text())
    except (OSError, ValueError):
        return None
    found = noted.get("journeys") if isinstance(noted, dict) else None
    return found if isinstance(found, str) else None
