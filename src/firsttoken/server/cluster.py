"""One gateway in several processes (`serve --workers N`): which worker this process is, and where its
siblings listen.

The supervisor makes a private run directory and names it to the workers in the environment. Each
worker claims a slot, 0 to N-1, by holding an exclusive lock on `slot-<i>.lock` in it for as long as it
lives: the kernel drops the lock when the process dies, however it dies, and the worker started in its
place claims the free slot. Each worker answers its siblings on `worker-<i>.sock` (server/peers.py), so
that whichever worker a scrape or a journey lookup lands on can answer for all of them.
"""

from __future__ import annotations

import fcntl
import os
import time
from dataclasses import dataclass
from pathlib import Path

from firsttoken.config import Settings

RUN_DIR_ENV = "FIRSTTOKEN_RUN_DIR"
WORKERS_ENV = "FIRSTTOKEN_WORKERS"
SHARED_REGION_ENV = "FIRSTTOKEN_SHARED_REGION"  # the URL of the one simulated region all workers use
CLAIM_WAIT_S = 10.0  # a replaced worker's lock outlives it by as long as the kernel takes to reap it


@dataclass(frozen=True, slots=True)
class Cluster:
    run_dir: Path
    size: int
    slot: int
    lock_fd: int  # held open for the life of the process: the slot is ours while it is

    @classmethod
    def from_environment(cls) -> Cluster | None:
        """This worker's place among `--workers N`; None in a gateway of one process."""
        run_dir, size = os.environ.get(RUN_DIR_ENV), int(os.environ.get(WORKERS_ENV) or 1)
        if not run_dir or size < 2:
            return None
        return cls.join(Path(run_dir), size)

    @classmethod
    def join(cls, run_dir: Path, size: int) -> Cluster:
        """Claim the lowest free slot, waiting while every slot is still held by a worker on its way out."""
        deadline = time.monotonic() + CLAIM_WAIT_S
        while True:
            for slot in range(size):
                fd = os.open(run_dir / f"slot-{slot}.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    os.close(fd)
                    continue
                return cls(run_dir, size, slot, fd)
            if time.monotonic() > deadline:
                raise RuntimeError(f"no free worker slot in {run_dir} after {CLAIM_WAIT_S:.0f} s")
            time.sleep(0.05)

    def socket_path(self, slot: int) -> Path:
        return self.run_dir / f"worker-{slot}.sock"

    @property
    def siblings(self) -> list[int]:
        return [slot for slot in range(self.size) if slot != self.slot]

    def share(self, count: int) -> int:
        """This worker's part of `count` things the gateway keeps as a whole (warm connections): split so
        the workers' parts add up to `count`, but at least one each while `count` is not zero, so that no
        worker pays a handshake on its first request."""
        if count == 0:
            return 0
        return max(1, count // self.size + (1 if self.slot < count % self.size else 0))

    def shared_pools(self, settings: Settings) -> Settings:
        """The settings with each upstream's warm connections split among the workers."""
        upstreams = {name: upstream.model_copy(update={"pool": upstream.pool.model_copy(
                         update={"warm": self.share(upstream.pool.warm)})})
                     for name, upstream in settings.upstreams.items()}
        copy = settings.model_copy(update={"upstreams": upstreams})
        copy._source = settings._source
        return copy

    def ping_lock(self) -> int | None:
        """The cluster's lock on keep-warm pings, taken without waiting; None when a sibling holds it."""
        fd = os.open(self.run_dir / "pings.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return None
        return fd

    @staticmethod
    def unlock(fd: int) -> None:
        os.close(fd)  # closing the descriptor drops its lock
