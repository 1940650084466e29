"""The service's configuration, and the cluster, budget tree, store and backend built from it."""

from __future__ import annotations

import ipaddress
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from toposched.cluster.errors import InputError
from toposched.cluster.limits import check_one_node_gpus

if TYPE_CHECKING:
    from toposched.backends.protocol import Backend
    from toposched.cluster.topology import Topology
    from toposched.policy.budget import BudgetTree
    from toposched.service.store_protocol import StateStore

# The backends, the cluster builders and the budget tree (numpy, the compiled loops) load in the
# functions that build them: `check` answers on its own, before any of them.

DEFAULT_STORE = "toposched-state/toposched.db"
DEFAULT_MAX_BODY = 1 << 20
DEFAULT_ACCOUNT = "default"
BACKENDS = ("local", "dry-run", "ray")


def service_clock() -> float:
    """The service's clock: wall-clock seconds (the loop's, and the dry-run backend's)."""
    return time.time()


@dataclass(frozen=True)
class ServiceConfig:
    """Everything `toposched serve` is told. Exactly one of `gpus`, `cluster`, `fleet` names
    the cluster (`gpus` = 8 when none is given)."""

    host: str = "127.0.0.1"
    port: int = 8080
    store: str = DEFAULT_STORE
    backend: str = "dry-run"
    gpus: int | None = None
    cluster: str | None = None
    fleet: str | None = None
    budgets: str | None = None
    tokens: str | None = None
    state_dir: str = "toposched-state"
    max_body: int = DEFAULT_MAX_BODY
    tick_s: float = 1.0
    ssl_keyfile: str | None = None
    ssl_certfile: str | None = None
    ray_address: str | None = None
    ray_levels: tuple[str, ...] = ("rack",)
    extra: dict[str, str] = field(default_factory=dict)
    scheduler: dict[str, Any] = field(default_factory=dict)
    """The scheduler's settings by `SchedulerSettings` name (the scheduling policy's flags,
    `toposched.cli.policy_options.policy_settings`); empty: its defaults."""

    def check(self) -> None:
        if self.backend not in BACKENDS:
            raise InputError("--backend", self.backend, f"must be one of {', '.join(BACKENDS)}")
        given = [name for name in ("gpus", "cluster", "fleet") if getattr(self, name) is not None]
        if len(given) > 1:
            raise InputError(
                "--" + given[1],
                getattr(self, given[1]),
                f"give one of --gpus, --cluster, --fleet (also given: --{given[0]})",
            )
        check_one_node_gpus(self.gpus)  # `serve --gpus`'s own rule, for library callers too
        if self.backend == "ray" and given:
            raise InputError(
                "--" + given[0],
                getattr(self, given[0]),
                "--backend ray takes the Ray nodes as the cluster",
            )
        if self.ray_address is not None and self.backend != "ray":
            raise InputError("--ray-address", self.ray_address, "needs --backend ray")
        if self.fleet is not None and self.backend == "local":
            raise InputError("--fleet", self.fleet, "is simulated: run it with --backend dry-run")
        if not 1 <= self.port <= 65535:
            raise InputError("--port", self.port, "must be a port number from 1 to 65535")
        if self.max_body < 1024:
            raise InputError("--max-body", self.max_body, "must be at least 1024 bytes")
        if not 0.05 <= self.tick_s <= 60:
            raise InputError("--tick", self.tick_s, "must be from 0.05 to 60 seconds")
        if (self.ssl_keyfile is None) != (self.ssl_certfile is None):
            raise InputError("--ssl-keyfile", self.ssl_keyfile, "give both TLS files or neither")
        if self.ssl_keyfile is not None and self.ssl_certfile is not None:
            check_tls_files(self.ssl_certfile, self.ssl_keyfile)
        if self.tokens is None and not self.loopback:
            raise InputError(
                "--host",
                self.host,
                "without --tokens the API is open to everyone, which is "
                "allowed only on a loopback address; give --tokens FILE",
            )

    @property
    def loopback(self) -> bool:
        return is_loopback(self.host)


def check_tls_files(certfile: str, keyfile: str) -> None:
    """Refuse, naming the option, TLS files that cannot be read or do not hold a certificate
    chain and its private key: the server would otherwise fail only once it starts to listen."""
    import ssl

    for option, path in (("--ssl-certfile", certfile), ("--ssl-keyfile", keyfile)):
        try:
            with open(path, "rb"):
                pass
        except OSError as error:
            raise InputError(option, path, f"cannot be read: {error.strerror}") from None
    try:
        ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER).load_cert_chain(certfile, keyfile)
    except (ssl.SSLError, OSError) as error:
        reason = getattr(error, "reason", None) or error.strerror or str(error)
        raise InputError(
            "--ssl-certfile",
            certfile,
            f"with --ssl-keyfile {keyfile}: not a PEM certificate chain and its key ({reason})",
        ) from None


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def build_topology(config: ServiceConfig) -> Topology:
    from toposched.backends.local_node import local_cluster
    from toposched.cluster.builders import million_gpu_cluster
    from toposched.cluster.loaders import load_topology

    if config.cluster is not None:
        return load_topology(config.cluster)
    if config.fleet is not None:
        if config.fleet != "million":
            raise InputError("--fleet", config.fleet, "the only fleet is 'million'")
        return million_gpu_cluster()
    return local_cluster(8 if config.gpus is None else config.gpus)


def build_tree(config: ServiceConfig) -> BudgetTree:
    """The budget tree the store starts with: --budgets, or one account owning everything."""
    from toposched.policy.budget import BudgetTree

    if config.budgets is not None:
        return BudgetTree.from_yaml(Path(config.budgets))
    return BudgetTree.from_dict({"accounts": {DEFAULT_ACCOUNT: {"share": 100}}})


def open_store(config: ServiceConfig) -> StateStore:
    from toposched.service import store_protocol

    return store_protocol.open_store(config.store)


def build_backend(config: ServiceConfig) -> Backend:
    if config.backend == "dry-run":
        from toposched.backends.dry_run import DryRunBackend

        return DryRunBackend(clock=service_clock)
    from toposched.backends.local import LocalBackend  # processes, pod files: its own only

    return LocalBackend(Path(config.state_dir) / "local")
