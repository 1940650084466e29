"""One server per store and per state folder: the locks `toposched serve` holds while it runs.

Two servers on one store would each schedule the same GPUs; two on one state folder would each
take the other's local pods for strays and stop them. So a server locks both before it recovers
anything: its state folder by `flock` on the pid file `toposched.pid` there, an SQLite store by
`flock` on a file beside the database (`<store>.lock`), each holding the server's process id. A
PostgreSQL store locks itself with a session advisory lock (`postgres_store`). The system drops
a `flock` when its process ends, `kill -9` included, so a restart after a crash never finds a
stale lock. The locks belong to the server, not to `Store`: tools and tests may still open the
database to read it.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from toposched.cluster.errors import InputError
from toposched.service.store_protocol import POSTGRES_SCHEMES

__all__ = ["ServerLock", "store_lock_path"]


class ServerLock:
    """An exclusive lock on a file holding this process's id, until `release` or the process
    ends."""

    def __init__(self, path: Path, descriptor: int) -> None:
        self.path = path
        self._descriptor = descriptor

    @classmethod
    def take(cls, path: Path, option: str, value: Path) -> ServerLock:
        """The lock of `path`, or an `InputError` on `option` (given `value`) naming the
        process that holds it."""
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            descriptor = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as error:
            raise InputError(option, value, f"cannot be written: {error.strerror}") from None
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(descriptor, 32).decode(errors="replace").strip()
            os.close(descriptor)
            by = f" (process {holder})" if holder.isdigit() else ""
            raise InputError(
                option, value, f"in use by another toposched serve{by}; stop it first"
            ) from None
        os.ftruncate(descriptor, 0)
        os.write(descriptor, f"{os.getpid()}\n".encode())
        return cls(path, descriptor)

    def release(self) -> None:
        """Let the next server take it. The file stays, emptied: removing it could let two
        servers lock two different files of the same name."""
        if self._descriptor >= 0:
            os.ftruncate(self._descriptor, 0)
            os.close(self._descriptor)
            self._descriptor = -1


def store_lock_path(location: str) -> Path | None:
    """The lock file of the SQLite store at `location`; None for a PostgreSQL store (it locks
    itself) or an in-memory one."""
    if location.startswith(POSTGRES_SCHEMES) or location == ":memory:":
        return None
    return Path(f"{location}.lock")
