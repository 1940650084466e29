"""Where jobs stand in job files, and the rules across a file's jobs (a file holds a job; a
job's name is used once), shared by the job model's reader (`toposched.jobs.files`) and the
light pass before it (`toposched.cli.jobcheck`). Light: no job model, no pydantic."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from toposched.cluster.documents import Document, FieldPath
from toposched.cluster.errors import InputError, join_fields

__all__ = ["JobEntry", "NameRegister", "job_entries", "no_job_error"]


@dataclass(frozen=True)
class JobEntry:
    """A job as written in a file: its document, its path in it, its data and its field name
    in errors (`jobs[i]` in a file of several jobs, else "")."""

    document: Document
    path: FieldPath
    data: Any
    prefix: str = ""

    def locate(self, error: InputError) -> InputError:
        """`error`, whose field is one of this job's (e.g. `topology.required`), with the file
        and line where that field was written."""
        return self.document.locate(error, self.path, self.prefix, root="job")

    def where(self, seen_from: str | None) -> str:
        """`FILE:LINE` of this job, or `line N` when seen from the same file."""
        line = self.document.line(self.path)
        file = self.document.file
        return f"line {line}" if file == seen_from else f"{file or 'text'}:{line}"


def job_entries(documents: list[Document]) -> list[JobEntry]:
    """Each job of `documents`: a document that is a job, a list of jobs, or a mapping
    {jobs: [...]}; prefixed `jobs[i]` when there are several."""
    found = list(_entries(documents))
    if len(found) < 2:
        return found
    return [
        JobEntry(entry.document, entry.path, entry.data, f"jobs[{index}]")
        for index, entry in enumerate(found)
    ]


def _entries(documents: list[Document]) -> Iterator[JobEntry]:
    for document in documents:
        data: Any = document.data
        path: FieldPath = ()
        if isinstance(data, Mapping) and set(data) == {"jobs"}:
            data, path = data["jobs"], ("jobs",)
        if isinstance(data, list):
            for index, entry in enumerate(data):
                yield JobEntry(document, (*path, index), entry)
        else:
            yield JobEntry(document, path, data)


def no_job_error(file: str) -> InputError:
    """A job file that holds no job (empty, or only comments)."""
    return InputError(
        "jobs",
        None,
        f"no job in {file}: a job file holds one job, a list of jobs, "
        "a jobs: list or several YAML documents",
        file=file,
    )


class NameRegister:
    """The job names seen so far, each with the job that used it first."""

    def __init__(self) -> None:
        self._first: dict[str, JobEntry] = {}

    def add(self, name: str, entry: JobEntry) -> None:
        """Note `entry`'s name, or refuse it, naming where it was used first."""
        first = self._first.setdefault(name, entry)
        if first is entry:
            return
        document = entry.document
        raise InputError(
            join_fields(entry.prefix, "name"),
            name,
            f"another job has this name ({first.where(document.file)}); job names must be unique",
            file=document.file,
            line=document.line((*entry.path, "name")),
        )
