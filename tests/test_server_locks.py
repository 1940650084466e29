"""The server's locks on its state folder and store: a path that cannot be made is refused
with the option named, and a lock held is refused naming the holder."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from toposched.cluster.errors import InputError
from toposched.service.server_locks import ServerLock


def test_a_path_the_system_cannot_make_is_refused_with_the_option_named(tmp_path: Path) -> None:
    long = str(tmp_path / ("x" * 300))
    with pytest.raises(InputError) as refused:
        ServerLock.take(Path(long) / "toposched.pid", "--state-dir", long)
    assert str(refused.value).startswith("--state-dir: ")
    assert "cannot be written: File name too long" in str(refused.value)
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    with pytest.raises(InputError, match="--state-dir: .* cannot be written"):
        ServerLock.take(blocker / "toposched.pid", "--state-dir", str(blocker))


def test_a_lock_held_is_refused_naming_the_process(tmp_path: Path) -> None:
    path = tmp_path / "state" / "toposched.pid"
    held = ServerLock.take(path, "--state-dir", str(path.parent))
    try:
        with pytest.raises(
            InputError, match=rf"in use by another toposched serve \(process {os.getpid()}\)"
        ):
            ServerLock.take(path, "--state-dir", str(path.parent))
    finally:
        held.release()
    ServerLock.take(path, "--state-dir", str(path.parent)).release()
