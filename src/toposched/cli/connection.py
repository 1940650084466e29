"""Where the client commands find the server and the token.

Each of the two is taken from the first place that has it: the `--server`/`--token` flag, the
`TOPOSCHED_SERVER`/`TOPOSCHED_TOKEN` environment variable, the config file
`$XDG_CONFIG_HOME/toposched/client.yaml` (`~/.config/...` without XDG_CONFIG_HOME, keys
`server` and `token`); the server defaults to http://127.0.0.1:8080, the token to none.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import yaml

from toposched.cluster.errors import InputError

DEFAULT_SERVER = "http://127.0.0.1:8080"
SERVER_VARIABLE = "TOPOSCHED_SERVER"
TOKEN_VARIABLE = "TOPOSCHED_TOKEN"
CONFIG_KEYS = ("server", "token")


@dataclass(frozen=True)
class Connection:
    """The server's base URL and the bearer token (never shown: not in repr, not in errors)."""

    server: str
    token: str | None = field(default=None, repr=False)
    server_source: str = "default"
    token_source: str = "none"


def config_path(environ: Mapping[str, str]) -> Path:
    base = environ.get("XDG_CONFIG_HOME") or str(Path(environ.get("HOME", "~")) / ".config")
    return Path(base).expanduser() / "toposched" / "client.yaml"


def read_config(path: Path, warn: Callable[[str], None]) -> dict[str, str]:
    """The config file's keys ({} when there is no file). A file holding a token that its
    group or others may read gets a warning (the token is used anyway)."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return {}
    except (OSError, UnicodeDecodeError) as error:
        raise InputError(
            str(path), type(error).__name__, f"cannot read the config file: {error}"
        ) from None
    try:
        document: Any = yaml.safe_load(text)
    except yaml.YAMLError as error:
        raise InputError(str(path), "(file)", f"not valid YAML: {error}") from None
    if document is None:
        return {}
    if not isinstance(document, dict):
        raise InputError(
            str(path), type(document).__name__, "must be a mapping with keys server, token"
        )
    config: dict[str, str] = {}
    for key, value in document.items():
        if key not in CONFIG_KEYS:
            raise InputError(f"{path}: {key}", "(key)", "unknown key; the keys are server, token")
        if not isinstance(value, str) or not value:
            shown = "(hidden)" if key == "token" else value
            raise InputError(f"{path}: {key}", shown, "must be a non-empty string")
        config[key] = value
    if "token" in config and _readable_by_others(path):
        warn(
            f"{path} holds a token and is readable by its group or others; "
            f"make it private: chmod 600 {path}"
        )
    return config


def _readable_by_others(path: Path) -> bool:
    try:
        mode = path.stat().st_mode
    except OSError:
        return False
    return bool(mode & (stat.S_IRWXG | stat.S_IRWXO))


def checked_server(url: str, source: str) -> str:
    """`url` without a trailing '/', if it is an http(s) URL with a host."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise InputError(
            source, url, "must be an http:// or https:// URL, e.g. http://127.0.0.1:8080"
        )
    return url.rstrip("/")


def resolve_connection(
    server_flag: str | None,
    token_flag: str | None,
    environ: Mapping[str, str] | None = None,
    warn: Callable[[str], None] = lambda message: None,
) -> Connection:
    """The server and the token, each from the first of flag, environment, config file. The
    config file is read only when a flag and a variable leave something to find."""
    env = os.environ if environ is None else environ
    server, server_source = _first(
        server_flag, "--server", env.get(SERVER_VARIABLE), SERVER_VARIABLE
    )
    token, token_source = _first(token_flag, "--token", env.get(TOKEN_VARIABLE), TOKEN_VARIABLE)
    if server is None or token is None:
        path = config_path(env)
        config = read_config(path, warn)
        if server is None and "server" in config:
            server, server_source = config["server"], str(path)
        if token is None and "token" in config:
            token, token_source = config["token"], str(path)
    if server is None:
        server, server_source = DEFAULT_SERVER, "default"
    return Connection(
        checked_server(server, server_source), token, server_source, token_source or "none"
    )


def _first(
    flag: str | None, flag_name: str, variable: str | None, variable_name: str
) -> tuple[str | None, str]:
    if flag:
        return flag, flag_name
    if variable:
        return variable, variable_name
    return None, ""
