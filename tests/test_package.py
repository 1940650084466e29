"""`import toposched`: the version, the public API, and an import that loads nothing heavy."""

from __future__ import annotations

import subprocess
import sys
from importlib.metadata import version

import pytest

import toposched


def test_version_is_the_installed_distributions() -> None:
    assert toposched.__version__ == version("toposched")


def test_every_public_name_resolves_to_its_home() -> None:
    from toposched.cluster.errors import InputError
    from toposched.jobs.spec import JobSpec
    from toposched.scheduler.core import Scheduler

    for name in toposched.__all__:
        assert getattr(toposched, name) is not None, name
    assert toposched.JobSpec is JobSpec
    assert toposched.InputError is InputError
    assert toposched.Scheduler is Scheduler
    assert sorted(toposched.__all__) == dir(toposched)


def test_unknown_names_are_attribute_errors() -> None:
    with pytest.raises(AttributeError, match="no_such_thing"):
        toposched.no_such_thing  # noqa: B018


def test_import_loads_no_numpy_numba_or_pydantic() -> None:
    # A fresh interpreter: this one has loaded everything already.
    code = (
        "import sys, toposched; toposched.__version__; "
        "print(sorted(m for m in ('numpy', 'numba', 'pydantic', 'yaml', 'rich') "
        "if m in sys.modules))"
    )
    loaded = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert loaded.strip() == "[]"
