"""Job files: YAML/JSON holding one job, a list of jobs, a `jobs:` list or several YAML
documents, read within the limits of `toposched.cluster.limits`.

Errors read `FILE:LINE: field.path: 'value' is invalid: rule`, the field below `jobs[i]` (from
0) in a file of several jobs. A file with no job is an error, and so is a job name used twice,
in one file or across the files read together. `JobInFile` keeps where each job was written, so
that errors found later (against a cluster) name the file and line too.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from toposched.cluster.documents import Document, FieldPath, parse_documents, read_text
from toposched.cluster.errors import InputError, join_fields
from toposched.jobs.spec import JobSpec

__all__ = ["JobInFile", "load_job_files", "one_job", "read_job_files"]

_FILE_SUFFIXES = (".yaml", ".yml", ".json")


def one_job(text_or_path: str | os.PathLike[str]) -> JobSpec:
    """`JobSpec.from_yaml`: the one job in YAML/JSON text, or in a file when given a path
    ending .yaml/.yml/.json."""
    file = None
    if _is_path(text_or_path):
        file = str(text_or_path)
        jobs = _jobs_in(_read_documents(Path(text_or_path)))
    else:
        # Text has no file to name, so its errors name the field alone.
        jobs = _jobs_in(parse_documents(str(text_or_path), None))
    if len(jobs) != 1:
        raise InputError(
            "jobs",
            f"{len(jobs)} jobs",
            "must hold exactly one job; use load_jobs for many",
            file=file,
        )
    return jobs[0].spec


def _is_path(text_or_path: str | os.PathLike[str]) -> bool:
    if not isinstance(text_or_path, str):
        return True
    return "\n" not in text_or_path and text_or_path.strip().lower().endswith(_FILE_SUFFIXES)


def _read_documents(path: Path) -> list[Document]:
    text = read_text(path, "job file")
    return parse_documents(text, str(path), json_text=path.suffix.lower() == ".json")


@dataclass(frozen=True)
class _Entry:
    """A job as written in a file: its document and its path in it."""

    document: Document
    path: FieldPath
    data: Any


@dataclass(frozen=True)
class JobInFile:
    """A valid job and where it was written, to locate errors found later (e.g. against a
    cluster: `job.locate(error)` for an InputError from `GangRequest.from_spec(job.spec, ...)`)."""

    spec: JobSpec
    entry: _Entry
    prefix: str
    """The job's field name in errors: `jobs[i]` in a file of several jobs, else ""."""

    def locate(self, error: InputError) -> InputError:
        """`error`, whose field is one of this job's (e.g. `topology.required`), with the file
        and line where that field was written."""
        return self.entry.document.locate(error, self.entry.path, self.prefix, root="job")

    def where(self, seen_from: str | None) -> str:
        """`FILE:LINE` of this job, or `line N` when seen from the same file."""
        line = self.entry.document.line(self.entry.path)
        file = self.entry.document.file
        return f"line {line}" if file == seen_from else f"{file or 'text'}:{line}"


def _job_entries(documents: list[Document]) -> Iterator[_Entry]:
    """Each job entry: a document that is a job, a list of jobs, or a mapping {jobs: [...]}."""
    for document in documents:
        data: Any = document.data
        path: FieldPath = ()
        if isinstance(data, Mapping) and set(data) == {"jobs"}:
            data, path = data["jobs"], ("jobs",)
        if isinstance(data, list):
            for index, entry in enumerate(data):
                yield _Entry(document, (*path, index), entry)
        else:
            yield _Entry(document, path, data)


def _jobs_in(documents: list[Document]) -> list[JobInFile]:
    """The jobs in `documents`; errors name the file, the line and, when there are several
    jobs, the job's place as `jobs[i]` (from 0). Job names must be unique."""
    entries = list(_job_entries(documents))
    jobs: list[JobInFile] = []
    named: dict[str, JobInFile] = {}
    for index, entry in enumerate(entries):
        prefix = f"jobs[{index}]" if len(entries) > 1 else ""
        try:
            spec = JobSpec.from_dict(entry.data)
        except InputError as error:
            raise entry.document.locate(error, entry.path, prefix, root="job") from None
        job = JobInFile(spec, entry, prefix)
        _check_unique(job, named)
        jobs.append(job)
    return jobs


def _check_unique(job: JobInFile, named: dict[str, JobInFile]) -> None:
    first = named.setdefault(job.spec.name, job)
    if first is job:
        return
    document = job.entry.document
    raise InputError(
        join_fields(job.prefix, "name"),
        job.spec.name,
        f"another job has this name ({first.where(document.file)}); job names must be unique",
        file=document.file,
        line=document.line((*job.entry.path, "name")),
    )


def load_job_files(paths: Iterable[str | os.PathLike[str]]) -> list[JobSpec]:
    """The jobs of every file in `paths`, in order, as `load_jobs` reads each; job names must
    be unique across all of them. Every file is read and checked before any job is returned."""
    return [job.spec for job in read_job_files(paths)]


def read_job_files(paths: Iterable[str | os.PathLike[str]]) -> list[JobInFile]:
    """`load_job_files`, each job with where it was written (`JobInFile.locate`)."""
    named: dict[str, JobInFile] = {}
    jobs_read: list[JobInFile] = []
    for path in paths:
        file_path = Path(path)
        documents = _read_documents(file_path)
        jobs = _jobs_in(documents)
        if not jobs:
            raise InputError(
                "jobs",
                None,
                f"no job in {file_path}: a job file holds one job, a list of jobs, "
                "a jobs: list or several YAML documents",
                file=str(file_path),
            )
        for job in jobs:
            _check_unique(job, named)
        jobs_read.extend(jobs)
    return jobs_read
