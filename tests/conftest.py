"""Settings every test runs under, whatever the environment of the run."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def piped_width(monkeypatch: pytest.MonkeyPatch) -> None:
    """Commands print as they do into a file or a pipe (`cli.console.PIPED_WIDTH` columns),
    also where the run sets COLUMNS (a developer's shell, pytest-xdist's workers): the tests
    that read tables and the commands they start see one width."""
    monkeypatch.delenv("COLUMNS", raising=False)
