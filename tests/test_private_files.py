"""The cache and the journey log hold every tenant's prompts and answers: their SQLite files (and the -wal,
-shm and -journal beside them) are 0600, directories made for them 0700, whatever the umask; a file left
readable by an older version is tightened when opened. Real SQLite files, no mocks."""

from __future__ import annotations

import logging
import os
import sqlite3
import stat
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from firsttoken.cache.entry import Entry
from firsttoken.cache.stores import SqliteStore
from firsttoken.journey.attribution import phases
from firsttoken.journey.log import JourneyLog, row
from firsttoken.journey.timeline import Timeline
from firsttoken.private_files import private_directory, private_file


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def companion(path: Path, suffix: str) -> Path:
    return Path(f"{path}{suffix}")


@pytest.fixture(params=[0o022, 0o000], ids=["umask022", "umask000"])
def umask(request: pytest.FixtureRequest) -> Iterator[int]:
    """The usual umask, and none at all (the files must not depend on it)."""
    old = os.umask(request.param)
    try:
        yield request.param
    finally:
        os.umask(old)


@pytest.fixture
def umask022() -> Iterator[None]:
    old = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(old)


def journey(request_id: str) -> tuple:
    t = Timeline(request_id)
    t.tenant, t.status, t.upstream, t.route, t.sent, t.first_byte, t.last_byte = (
        "t", 200, "up", "up/m", t.received, t.received + 0.01, t.received + 0.02)
    return row(t, phases(t)[0], time.time())


def answer() -> Entry:
    now = time.time()
    return Entry("json", b'{"choices": []}', "app", "up/m", now, now + 60)


async def test_a_new_cache_is_private_with_its_wal(tmp_path: Path, umask: int) -> None:
    path = tmp_path / "state" / "cache" / "cache.db"
    there = mode(tmp_path)
    store = SqliteStore(path, 10_000)
    try:
        store.put("k", answer())
        store.flush()
        assert await store.get("k", time.time()) is not None
        # SQLite makes -wal and -shm with the database's permissions: seen, not assumed
        for made in (path, companion(path, "-wal"), companion(path, "-shm")):
            assert made.exists() and mode(made) == 0o600, made
        assert mode(path.parent) == 0o700 and mode(path.parent.parent) == 0o700
        assert mode(tmp_path) == there  # already there: left as it was
    finally:
        await store.close()


def test_a_new_journey_log_is_private_with_its_wal(tmp_path: Path, umask: int) -> None:
    path = tmp_path / "logs" / "journeys.db"
    log = JourneyLog(path, 1000, 3600)
    try:
        log.write([journey(f"r{i}") for i in range(10)])
        for made in (path, companion(path, "-wal"), companion(path, "-shm")):
            assert made.exists() and mode(made) == 0o600, made
        assert mode(path.parent) == 0o700
    finally:
        log.close()


def readable_wal_database(path: Path) -> sqlite3.Connection:
    """A database as SQLite makes it (0644 under umask 022), kept open so its -wal and -shm stay too."""
    db = sqlite3.connect(path)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("CREATE TABLE old (x)")
    db.commit()
    return db


async def test_a_readable_cache_is_tightened(tmp_path: Path, umask022: None,
                                             caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "cache.db"
    older = readable_wal_database(path)
    files = (path, companion(path, "-wal"), companion(path, "-shm"))
    assert [mode(f) for f in files] == [0o644] * 3
    with caplog.at_level(logging.INFO, logger="firsttoken.files"):
        store = SqliteStore(path, 10_000)
    try:
        assert [mode(f) for f in files] == [0o600] * 3
        assert f"{path} was readable by others (mode 644); now 0600" in caplog.text
        store.put("k", answer())
        store.flush()
        assert await store.get("k", time.time()) is not None
    finally:
        await store.close()
        older.close()


def test_a_readable_journey_log_is_tightened(tmp_path: Path, umask022: None,
                                             caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "journeys.db"
    older = readable_wal_database(path)
    with caplog.at_level(logging.INFO, logger="firsttoken.files"):
        log = JourneyLog(path, 1000, 3600)
    try:
        assert [mode(f) for f in (path, companion(path, "-wal"), companion(path, "-shm"))] == [0o600] * 3
        assert caplog.text.count("now 0600") == 3  # the database and both companions, once each
        log.write([journey("r")])
    finally:
        log.close()
        older.close()


def test_a_leftover_journal_is_tightened_and_a_private_file_left_alone(tmp_path: Path, umask022: None,
                                                                       caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "cache.db"
    path.write_bytes(b"")
    journal = companion(path, "-journal")
    journal.write_bytes(b"")
    os.chmod(path, 0o640)  # group-readable is readable by others too
    with caplog.at_level(logging.INFO, logger="firsttoken.files"):
        assert private_file(path) == path
    assert mode(path) == 0o600 and mode(journal) == 0o600 and caplog.text.count("now 0600") == 2
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="firsttoken.files"):
        private_file(path)
    assert caplog.text == ""  # already private: nothing to say


def test_directories_made_are_private_and_those_there_are_left_alone(tmp_path: Path, umask: int) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o755)
    private_directory(shared / "a" / "b")
    assert mode(shared) == 0o755 and mode(shared / "a") == 0o700 and mode(shared / "a" / "b") == 0o700


def test_a_relative_name_is_made_in_the_working_directory_untouched(tmp_path: Path, umask022: None,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    os.chmod(tmp_path, 0o755)
    monkeypatch.chdir(tmp_path)
    assert private_file("firsttoken-cache.db") == Path("firsttoken-cache.db")
    assert mode(tmp_path / "firsttoken-cache.db") == 0o600 and mode(tmp_path) == 0o755


def test_sqlite_memory_names_pass_untouched(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert private_file(":memory:") == Path(":memory:")
    assert list(tmp_path.iterdir()) == []
