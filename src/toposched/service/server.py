"""Assembling and running the service: store, cluster, budgets, backend, loop, HTTP server."""

from __future__ import annotations

import json
import logging
import signal
import socket
import threading
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import NoReturn

import uvicorn

from toposched.backends.protocol import Backend
from toposched.cluster.errors import InputError, ToposchedError
from toposched.scheduler.settings import SchedulerSettings
from toposched.scheduler.spares import spare_level
from toposched.service.api import create_app
from toposched.service.auth import Tokens
from toposched.service.config import (
    ServiceConfig,
    build_backend,
    build_topology,
    build_tree,
    open_store,
)
from toposched.service.fast_submit import SubmitFront
from toposched.service.http import Context
from toposched.service.loop import Loop
from toposched.service.recovery import starter
from toposched.service.server_locks import ServerLock, store_lock_path
from toposched.service.store_protocol import StateStore

log = logging.getLogger("toposched.service")


class ServiceStopped(ToposchedError):
    """The loop stopped (e.g. the store could not be recovered); the server exited."""


def serve(config: ServiceConfig, log_level: str = "info") -> int:
    """Run until interrupted (SIGINT/SIGTERM); the loop and store are closed on the way out."""
    logging.basicConfig(level=log_level.upper(), format="%(asctime)s %(levelname)s %(message)s")
    config.check()
    tokens = _tokens(config)
    backend: Backend
    if config.backend == "ray":
        from toposched.backends.ray_setup import connect_backend

        on_ray = connect_backend(config.ray_address, config.ray_levels)
        for skipped in on_ray.skipped:
            log.warning("Ray node %s is left out: %s", skipped.name, skipped.reason)
        topology, backend = on_ray.topology, on_ray.backend
    else:
        topology, backend = build_topology(config), build_backend(config)
    spares = config.scheduler.get("spares")
    if spares is not None:
        spare_level(topology, spares[0], "--spares")  # before the store is made or claimed
    listener, locks, store = _claim(config)
    if tokens is None:
        log.warning("no --tokens: the API is open to every local user of this machine")
    server: uvicorn.Server | None = None

    def stop_serving() -> None:  # the loop stopped: a server that cannot schedule exits
        if server is not None:
            server.should_exit = True

    loop = Loop(
        starter(store, topology, lambda: build_tree(config), backend, settings=config.scheduler),
        tick_s=config.tick_s,
        on_failure=stop_serving,
    )
    ctx = Context(loop, tokens, config.max_body)
    app = SubmitFront(create_app(ctx, store), ctx)
    server = uvicorn.Server(
        uvicorn.Config(
            app,
            host=config.host,
            port=config.port,
            log_level=log_level,
            ssl_keyfile=config.ssl_keyfile,
            ssl_certfile=config.ssl_certfile,
            ws="none",  # the API has no WebSocket route (the watch stream is server-sent events)
        )
    )
    nodes = topology.n_nodes
    log.info(
        "toposched serve: %d node%s, %d GPUs, store %s, backend %s",
        nodes,
        "" if nodes == 1 else "s",
        topology.n_gpus,
        config.store,
        config.backend,
    )
    chosen = SchedulerSettings.of(None, config.scheduler).changes_as_json()
    if chosen:
        log.info(
            "scheduling policy: %s",
            ", ".join(f"{name}={json.dumps(value)}" for name, value in chosen.items()),
        )
    log.info(
        "listening on %s://%s:%d",
        "https" if config.ssl_certfile else "http",
        config.host,
        listener.getsockname()[1],
    )
    restore = _stop_on_sigterm()
    loop.start()
    try:
        server.run(sockets=[listener])
    except _Terminated:
        pass  # uvicorn has shut down and raised the SIGTERM it caught again: a clean stop
    finally:
        restore()
        loop.stop()
        store.close()
        for lock in locks:
            lock.release()
    if loop.failed is not None:
        raise ServiceStopped(f"the scheduler loop stopped: {loop.failed}")
    return 0


class _Terminated(Exception):
    """SIGTERM, raised in the main thread so that the way out closes the loop and the store."""


def _terminate(signum: int, frame: FrameType | None) -> NoReturn:
    raise _Terminated


def _stop_on_sigterm() -> Callable[[], None]:
    """SIGTERM raises `_Terminated` until the returned call restores the previous handler.
    uvicorn catches SIGTERM while it serves and, once shut down, raises it again: with the
    default handler the process would end there, before the loop's and the store's clean-up."""
    if threading.current_thread() is not threading.main_thread():
        return lambda: None
    previous = signal.signal(signal.SIGTERM, _terminate)

    def restore() -> None:
        signal.signal(signal.SIGTERM, previous)

    return restore


def _tokens(config: ServiceConfig) -> Tokens | None:
    if config.tokens is not None:
        tokens = Tokens.load(config.tokens)
        if not tokens.by_hash:
            raise InputError(
                "--tokens",
                config.tokens,
                "holds no tokens; add one with `toposched serve "
                "token add NAME --role admin --tokens FILE`",
            )
        return tokens
    return None  # `ServiceConfig.check` allows this on loopback addresses only


def _claim(config: ServiceConfig) -> tuple[socket.socket, list[ServerLock], StateStore]:
    """The address, the state folder and the store, taken before anything is recovered: a
    server that could not serve must not reconcile another server's pods or write its store."""
    listener = _listen(config)
    locks: list[ServerLock] = []
    try:
        state = Path(config.state_dir)
        locks.append(ServerLock.take(state / "toposched.pid", "--state-dir", state))
        store_lock = store_lock_path(config.store)
        if store_lock is not None:
            locks.append(ServerLock.take(store_lock, "--store", Path(config.store)))
        return listener, locks, open_store(config)
    except BaseException:
        for lock in locks:
            lock.release()
        listener.close()
        raise


def _listen(config: ServiceConfig) -> socket.socket:
    """The server's listening socket, bound now, so that an address in use is told at once."""
    family = socket.AF_INET6 if ":" in config.host else socket.AF_INET
    listener = socket.socket(family, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        listener.bind((config.host, config.port))
    except OSError as error:
        listener.close()
        reason = error.strerror or str(error)
        raise InputError(
            "--port",
            config.port,
            f"cannot listen on {config.host}:{config.port} ({reason.lower()}); another server"
            " may hold it: stop it or choose another --port",
        ) from None
    return listener
