"""Files that hold every tenant's prompts and answers (the SQLite cache, the journey log): the gateway's
user alone may read them.

SQLite creates a database 0644 (under the usual umask), and its -wal, -shm and -journal files with the
database's own permissions; so the database is created 0600 here before SQLite opens it, and one left
readable by an older version is tightened, companions included. Directories made for them are 0700;
directories that already exist (the working directory, /var/lib/…) are the user's, and left alone.
"""

from __future__ import annotations

import logging
import os
import stat
from pathlib import Path

log = logging.getLogger("firsttoken.files")

SQLITE_COMPANIONS = ("-wal", "-shm", "-journal")
_OTHERS = stat.S_IRWXG | stat.S_IRWXO


def private_file(path: str | Path) -> Path:
    """`path`, created empty with mode 0600 if missing (its missing directories 0700); it and its SQLite
    companions tightened to 0600 if group or others have any access. SQLite's in-memory and URI names
    pass untouched."""
    path = Path(path)
    if str(path) in ("", ":memory:") or str(path).startswith("file:"):
        return path
    private_directory(path.parent)
    try:
        # O_EXCL: a file already there is tightened below, never truncated; the umask can only take bits
        # away, so fchmod makes it exactly 0600 (read and write: SQLite needs both)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o600)
    except FileExistsError:
        pass
    else:
        try:
            os.fchmod(fd, 0o600)
        finally:
            os.close(fd)
    for candidate in (path, *(Path(f"{path}{suffix}") for suffix in SQLITE_COMPANIONS)):
        _tighten(candidate)
    return path


def private_directory(path: Path) -> None:
    """Create `path` and any missing parents with mode 0700; directories already there stay as they are."""
    missing = []
    for directory in (path, *path.parents):
        if directory.exists():
            break
        missing.append(directory)
    for directory in reversed(missing):
        try:
            os.mkdir(directory, 0o700)
        except FileExistsError:  # another process made it meanwhile: its mode is its maker's
            continue
        os.chmod(directory, 0o700)  # exactly: a umask of 0o022 or 0o077 leaves it so, an odd one might not


def _tighten(path: Path) -> None:
    try:
        mode = stat.S_IMODE(path.stat().st_mode)
    except FileNotFoundError:
        return
    if not mode & _OTHERS:
        return
    try:
        os.chmod(path, 0o600)
    except OSError as exc:  # not ours to change: the gateway still works, and says what is exposed
        log.warning("%s is readable by others (mode %o) and could not be made private: %s", path, mode, exc)
        return
    log.info("%s was readable by others (mode %o); now 0600", path, mode)
