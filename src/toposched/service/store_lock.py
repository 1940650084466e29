"""One server per store: the lock an SQLite store is held by while `toposched serve` runs.

Two servers on one store would each schedule the same GPUs, and each would reconcile the
other's pods away. A PostgreSQL store takes a session advisory lock for this
(`postgres_store`); an SQLite store is locked here, by `flock` on a file beside the database
(`<store>.lock`, holding the server's process id). The kernel drops the lock when the process
ends, `kill -9` included, so a restart after a crash never finds a stale one. The lock belongs
to the server, not to `Store`: tools and tests may still open the database to read it.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from toposched.cluster.errors import InputError
from toposched.service.store_protocol import POSTGRES_SCHEMES

__all__ = ["StoreLock"]


class StoreLock:
    """An SQLite store's exclusive lock, held until `release` or the process ends."""

    def __init__(self, path: Path, descriptor: int) -> None:
        self.path = path
        self._descriptor = descriptor

    @classmethod
    def take(cls, location: str) -> StoreLock | None:
        """The lock of the SQLite store at `location`, or an `InputError` naming the server
        that holds it; None for a PostgreSQL store (it locks itself) or an in-memory one."""
        if location.startswith(POSTGRES_SCHEMES) or location == ":memory:":
            return None
        path = Path(f"{location}.lock")
        path.parent.mkdir(parents=True, exist_ok=True)
        descriptor = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(descriptor, 32).decode(errors="replace").strip()
            os.close(descriptor)
            by = f" (process {holder})" if holder.isdigit() else ""
            raise InputError(
                "--store", location, f"is in use by another toposched serve{by}; stop it first"
            ) from None
        os.ftruncate(descriptor, 0)
        os.write(descriptor, f"{os.getpid()}\n".encode())
        return cls(path, descriptor)

    def release(self) -> None:
        """Let the next server take the store. The file stays: removing it could let two
        servers hold locks on two different files of the same name."""
        if self._descriptor >= 0:
            os.close(self._descriptor)
            self._descriptor = -1
