"""A real PostgreSQL server for tests: initdb in a temporary folder, listening on loopback only.

`postgres_url` (session-scoped fixture) starts one server for the whole test run and stops it
after; tests that need it are skipped, with the reason, only where no server can be started
(no PostgreSQL binaries, or no unprivileged user to run them as when tests run as root).
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

USER = "toposched"


def _binaries() -> Path | None:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    if found:
        return Path(found[-1]).parent
    initdb = shutil.which("initdb")
    return Path(initdb).parent if initdb else None


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _as_server_user(argv: list[str]) -> list[str]:
    """PostgreSQL refuses to run as root: run it as the `postgres` system user then."""
    if os.geteuid() != 0:
        return argv
    return ["runuser", "-u", "postgres", "--", *argv]


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    bin_dir = _binaries()
    if bin_dir is None:
        pytest.skip("PostgreSQL server binaries not found (Debian package `postgresql`)")
    if os.geteuid() == 0:
        try:
            server_user = pwd.getpwnam("postgres")
        except KeyError:
            pytest.skip("running as root and no `postgres` user to run the server as")
    root = Path(tempfile.mkdtemp(prefix="toposched-pg-"))
    if os.geteuid() == 0:
        os.chown(root, server_user.pw_uid, server_user.pw_gid)
    data, log, port = root / "data", root / "server.log", _free_port()
    pg_ctl = str(bin_dir / "pg_ctl")
    try:
        subprocess.run(
            _as_server_user([str(bin_dir / "initdb"), "-D", str(data), "-A", "trust", "-U", USER]),
            check=True,
            capture_output=True,
        )
        options = f"-k {root} -h 127.0.0.1 -p {port} -c fsync=off"
        subprocess.run(
            _as_server_user(
                [pg_ctl, "-D", str(data), "-o", options, "-l", str(log), "-w", "start"]
            ),
            check=True,
            capture_output=True,
            timeout=60,
        )
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as error:
        shutil.rmtree(root, ignore_errors=True)
        pytest.skip(f"PostgreSQL did not start: {error}")
    try:
        yield f"postgresql://{USER}@127.0.0.1:{port}/postgres"
    finally:
        subprocess.run(
            _as_server_user([pg_ctl, "-D", str(data), "-m", "immediate", "-w", "stop"]),
            capture_output=True,
            timeout=60,
        )
        shutil.rmtree(root, ignore_errors=True)
