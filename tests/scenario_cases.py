"""Shared helper for golden scenario files of one `defaults` mapping and a list of `cases`."""

from __future__ import annotations

from collections.abc import Collection
from pathlib import Path
from typing import Any

import pytest
import yaml


def cases_with_defaults(path: Path, fields: Collection[str]) -> list[Any]:
    """One pytest param per case of the file, id its name, each case laid over the file's
    defaults; a case with a field outside `fields` fails the loading."""
    document = yaml.safe_load(path.read_text())
    defaults = document["defaults"]
    params = []
    for case in document["cases"]:
        unknown = set(case) - set(fields)
        assert not unknown, f"{case['name']}: unknown fields {sorted(unknown)}"
        params.append(pytest.param({**defaults, **case}, id=case["name"]))
    return params
