"""Shared helper for the tests of the scripts in benchmarks/: run one as a user does, or load it
as a module."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


def run_script(name: str, *args: str) -> subprocess.CompletedProcess[str]:
    """`benchmarks/NAME.py ARGS...` in a process of its own, the source tree on its path."""
    env = {**os.environ, "PYTHONPATH": str(BENCHMARKS.parent / "src")}
    return subprocess.run(
        [sys.executable, str(BENCHMARKS / f"{name}.py"), *args],
        capture_output=True,
        text=True,
        env=env,
        check=False,
        timeout=300,
    )


def load_script(name: str) -> ModuleType:
    """`benchmarks/NAME.py` as the module NAME, its folder on the path while it loads (it may
    import its neighbours, as when run), registered so its dataclasses resolve annotations."""
    spec = importlib.util.spec_from_file_location(name, BENCHMARKS / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    sys.path.insert(0, str(BENCHMARKS))
    try:
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(BENCHMARKS))
    return module
