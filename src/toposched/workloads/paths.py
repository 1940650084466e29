"""Where a workload file may be written: its suffix picks the format, its folder must exist.

Kept apart from the reader and writer (`toposched.workloads.files`, which loads the job model
and the cluster arrays) so that the command line checks an output path before anything loads.
"""

from __future__ import annotations

import os
from pathlib import Path

from toposched.cluster.errors import InputError

__all__ = ["JSONL_SUFFIXES", "WORKLOAD_SUFFIXES", "check_workload_path"]

JSONL_SUFFIXES = (".jsonl", ".ndjson")
"""Suffixes of JSON-lines workload files: a header line, then one job per line."""
WORKLOAD_SUFFIXES = (".yaml", ".yml", ".json", *JSONL_SUFFIXES)


def check_workload_path(path: str | os.PathLike[str], field: str = "workload file") -> Path:
    """`path` if a workload can be written there: a known suffix (which picks the format) in
    an existing folder. Nothing is created: a mistyped folder is an error, not a new folder."""
    file_path = Path(path)
    if file_path.suffix.lower() not in WORKLOAD_SUFFIXES:
        raise InputError(
            field,
            file_path,
            f"must end in {', '.join(WORKLOAD_SUFFIXES)} (the suffix picks the format)",
        )
    folder = file_path.parent
    try:
        folder_found, is_folder = folder.is_dir(), file_path.is_dir()
    except OSError as error:  # a name the system cannot look up (e.g. too long)
        raise InputError(field, file_path, f"cannot be written: {error.strerror}") from None
    if not folder_found:
        raise InputError(field, file_path, f"folder {folder} does not exist")
    if is_folder:
        raise InputError(field, file_path, "is a directory; give a file name")
    return file_path
