"""Bearer tokens: a YAML file of names, roles, accounts and SHA-256 hashes (never tokens).

A token is 32 random bytes (URL-safe base64), so a plain SHA-256 is enough at rest: there is
nothing to guess that a slow hash would protect. Tokens are compared by their hash, and never
logged or put in an answer.
"""

from __future__ import annotations

import hashlib
import os
import secrets
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any

import yaml

from toposched.cluster.errors import InputError
from toposched.policy.budget import split_account_path

_HEX = frozenset("0123456789abcdef")


class Role(StrEnum):
    ADMIN = "admin"
    TEAM = "team"
    METRICS = "metrics"
    """Reads /metrics only (for a Prometheus server's scrapes)."""


@dataclass(frozen=True)
class Principal:
    """Who holds a token: an admin does everything; a team sees and changes only jobs of its
    accounts and their sub-accounts."""

    name: str
    role: Role
    accounts: tuple[str, ...] = ()

    @property
    def admin(self) -> bool:
        return self.role is Role.ADMIN

    @property
    def scrapes(self) -> bool:
        """May read /metrics: admin and metrics tokens."""
        return self.role in (Role.ADMIN, Role.METRICS)

    def sees(self, account: str) -> bool:
        if self.admin:
            return True
        return any(account == mine or account.startswith(mine + "/") for mine in self.accounts)


OPEN_ACCESS = Principal("open-access", Role.ADMIN)
"""Everyone, when the service runs without a token file (loopback only)."""


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


@dataclass(frozen=True)
class Tokens:
    """The token file's entries by hash."""

    by_hash: dict[str, Principal]

    def principal(self, token: str) -> Principal | None:
        return self.by_hash.get(token_hash(token))

    @staticmethod
    def load(path: str | Path) -> Tokens:
        entries = _read(Path(path))
        by_hash: dict[str, Principal] = {}
        for index, entry in enumerate(entries):
            digest, principal = _entry(entry, f"{path}: tokens[{index}]")
            by_hash[digest] = principal
        return Tokens(by_hash)


def _read(path: Path) -> list[Any]:
    try:
        if not path.exists():
            return []
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as error:
        raise InputError("--tokens", path, f"cannot be read as YAML: {error}") from None
    if data is None:
        return []
    if (
        not isinstance(data, dict)
        or set(data) != {"tokens"}
        or not isinstance(data["tokens"], list)
    ):
        raise InputError("--tokens", path, "must be a mapping {tokens: [...]}")
    return list(data["tokens"])


def _entry(entry: Any, where: str) -> tuple[str, Principal]:
    if not isinstance(entry, dict):
        raise InputError(where, "entry", "must be a mapping with name, role, sha256")
    unknown = set(entry) - {"name", "role", "accounts", "sha256"}
    if unknown:
        raise InputError(f"{where}.{sorted(unknown)[0]}", "field", "unknown field")
    digest = entry.get("sha256")
    if not isinstance(digest, str) or len(digest) != 64 or not set(digest) <= _HEX:
        raise InputError(f"{where}.sha256", "(hidden)", "must be 64 lowercase hex digits")
    return digest, _principal(entry.get("name"), entry.get("role"), entry.get("accounts"), where)


def _principal(name: Any, role: Any, accounts: Any, where: str) -> Principal:
    if not isinstance(name, str) or not name.strip():
        raise InputError(f"{where}.name", name, "must be a non-empty name")
    try:
        parsed_role = Role(role)
    except ValueError:
        raise InputError(f"{where}.role", role, "must be admin, team or metrics") from None
    accounts = accounts or []
    if not isinstance(accounts, list):
        raise InputError(f"{where}.accounts", accounts, "must be a list of account paths")
    for account in accounts:
        split_account_path(account, f"{where}.accounts")
    if parsed_role is Role.TEAM and not accounts:
        raise InputError(f"{where}.accounts", accounts, "a team token needs at least one account")
    if parsed_role is Role.METRICS and accounts:
        raise InputError(f"{where}.accounts", accounts, "a metrics token has no accounts")
    return Principal(name, parsed_role, tuple(accounts))


def add_token(path: str | Path, name: str, role: str, accounts: Sequence[str]) -> str:
    """Make a token for `name`, store its hash in the file (created if missing, mode 0600) and
    return the token: the only time it is seen."""
    file = Path(path)
    entries = _read(file)
    principal = _principal(name, role, list(accounts), "token")
    if any(isinstance(e, dict) and e.get("name") == name for e in entries):
        raise InputError("NAME", name, f"a token of that name is already in {file}")
    token = secrets.token_urlsafe(32)
    entry: dict[str, Any] = {"name": name, "role": str(principal.role)}
    if principal.accounts:
        entry["accounts"] = list(principal.accounts)
    entry["sha256"] = token_hash(token)
    entries.append(entry)
    _write(file, {"tokens": entries})
    return token


def _write(path: Path, data: dict[str, Any]) -> None:
    """Replace the file at once, readable by its owner only."""
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=".tokens-")
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as out:
            yaml.safe_dump(data, out, sort_keys=False)
        os.chmod(temporary, 0o600)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
