"""A first, light pass over job files, before the job model loads: a bad file answers fast.

The job model (`toposched.JobSpec`, pydantic) costs about 0.15 s of imports and schema building
before it can refuse anything, which would put every error exit of `toposched place` past
0.2 s. This pass reads each file as the model's reader does (the same limits, the same
`FILE:LINE:` errors for unreadable files, YAML syntax and alias expansion) and refuses unknown
field names, the commonest mistake, with the model's own rule (`unknown_field_rule`), listed
in the order the model lists them. It refuses nothing the model accepts; values, missing fields
and duplicate names are the model's to check, after it. A job that also has such mistakes may
be refused for its unknown fields first, where the model would list those after the others.

`JOB_FIELDS` is the model's shape; tests/test_cli_start.py checks that it agrees with JobSpec.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple

from toposched.cluster.documents import Document, FieldPath, parse_documents, read_text
from toposched.cluster.errors import InputError, join_fields, unknown_field_rule

__all__ = ["JOB_FIELDS", "LIGHT_PASS_BYTES", "Fields", "check_job_files"]


class Fields(NamedTuple):
    """The fields of one mapping of a job, in the model's order, and the fields among them
    that hold a mapping (or a list of mappings) of their own."""

    names: tuple[str, ...]
    nested: Mapping[str, Fields]


_SLICE = Fields(("level", "pods"), {})
_TOPOLOGY = Fields(("required", "preferred", "slices"), {"slices": _SLICE})
_RESOURCES = Fields(("gpus", "gpu_milli", "cpu", "memory", "gpu_models"), {})
JOB_FIELDS = Fields(
    (
        "name",
        "account",
        "priority",
        "min_runtime",
        "resumable",
        "expected_runtime",
        "grace_period",
        "pods",
        "resources_per_pod",
        "topology",
        "submit_time",
    ),
    {"resources_per_pod": _RESOURCES, "topology": _TOPOLOGY},
)
"""A job's fields (JobSpec's), with those of resources_per_pod, topology and its slices."""

LIGHT_PASS_BYTES = 1 << 20
"""Files larger than this are left to the model alone: parsing them twice would cost more than
the model's imports."""


def check_job_files(paths: Sequence[str | os.PathLike[str]]) -> None:
    """Refuse a job file given twice, and the first that cannot be read or parsed, or names
    an unknown field."""
    _check_given_once(paths)
    for path in paths:
        file = Path(path)
        try:
            size = file.stat().st_size if file.is_file() else 0
        except OSError:
            size = 0  # read_text says what is wrong with it
        if size > LIGHT_PASS_BYTES:
            continue
        text = read_text(file, "job file")
        documents = parse_documents(text, str(file), json_text=file.suffix.lower() == ".json")
        entries = list(_job_entries(documents))
        for index, (document, where, data) in enumerate(entries):
            if not isinstance(data, Mapping):
                break  # not a job at all: the model says so, first
            errors = list(_unknown_fields(data, JOB_FIELDS, ""))
            if errors:
                prefix = f"jobs[{index}]" if len(entries) > 1 else ""
                found = errors[0].with_also(errors[1:])
                raise document.locate(found, where, prefix, root="job")


def _check_given_once(paths: Sequence[str | os.PathLike[str]]) -> None:
    """A file given twice would hold every one of its job names twice: say so plainly."""
    seen: dict[Path, int] = {}
    for position, path in enumerate(paths, 1):
        first = seen.setdefault(Path(os.path.realpath(path)), position)
        if first != position:
            rule = f"is given twice (job files {first} and {position}); give each file once"
            raise InputError("job file", str(path), rule)


def _job_entries(documents: list[Document]) -> Iterator[tuple[Document, FieldPath, Any]]:
    """Each job as the model's reader finds it: a document that is a job, a list of jobs, or a
    mapping {jobs: [...]}."""
    for document in documents:
        data: Any = document.data
        where: FieldPath = ()
        if isinstance(data, Mapping) and set(data) == {"jobs"}:
            data, where = data["jobs"], ("jobs",)
        if isinstance(data, list):
            for index, entry in enumerate(data):
                yield document, (*where, index), entry
        else:
            yield document, where, data


def _unknown_fields(data: Any, fields: Fields, at: str) -> Iterator[InputError]:
    """The unknown fields in `data` and in the mappings it holds, each field's nested ones in
    field order and then the mapping's own, as the model lists them."""
    if not isinstance(data, Mapping):
        return
    for name, inner in fields.nested.items():
        value = data.get(name)
        if isinstance(value, list):
            for index, item in enumerate(value):
                yield from _unknown_fields(item, inner, f"{join_fields(at, name)}[{index}]")
        else:
            yield from _unknown_fields(value, inner, join_fields(at, name))
    for key, value in data.items():
        if key not in fields.names:
            # A key that is not a string (YAML reads `1: x` as a number) is shown as itself.
            shown = value if isinstance(key, str) else key
            yield InputError(
                join_fields(at, str(key)), shown, unknown_field_rule(key, fields.names)
            )
