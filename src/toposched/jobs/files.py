"""Job files: YAML/JSON holding one job, a list of jobs, a `jobs:` list or several YAML
documents, read within the limits of `toposched.cluster.limits`.

Errors read `FILE:LINE: field.path: 'value' is invalid: rule`, the field below `jobs[i]` (from
0) in a file of several jobs. A file with no job is an error, and so is a job name used twice,
in one file or across the files read together. `JobInFile` keeps where each job was written, so
that errors found later (against a cluster) name the file and line too.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from toposched.cluster.documents import Document, parse_documents, read_text
from toposched.cluster.errors import InputError
from toposched.jobs.entries import JobEntry, NameRegister, job_entries, no_job_error
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
class JobInFile:
    """A valid job and where it was written, to locate errors found later (e.g. against a
    cluster: `job.locate(error)` for an InputError from `GangRequest.from_spec(job.spec, ...)`)."""

    spec: JobSpec
    entry: JobEntry

    @property
    def prefix(self) -> str:
        """The job's field name in errors: `jobs[i]` in a file of several jobs, else ""."""
        return self.entry.prefix

    def locate(self, error: InputError) -> InputError:
        """`error`, whose field is one of this job's (e.g. `topology.required`), with the file
        and line where that field was written."""
        return self.entry.locate(error)


def _jobs_in(documents: list[Document]) -> list[JobInFile]:
    """The jobs in `documents`; errors name the file, the line and, when there are several
    jobs, the job's place as `jobs[i]` (from 0). Job names must be unique."""
    jobs: list[JobInFile] = []
    names = NameRegister()
    for entry in job_entries(documents):
        try:
            spec = JobSpec.from_dict(entry.data)
        except InputError as error:
            raise entry.locate(error) from None
        names.add(spec.name, entry)
        jobs.append(JobInFile(spec, entry))
    return jobs


def load_job_files(paths: Iterable[str | os.PathLike[str]]) -> list[JobSpec]:
    """The jobs of every file in `paths`, in order, as `load_jobs` reads each; job names must
    be unique across all of them. Every file is read and checked before any job is returned."""
    return [job.spec for job in read_job_files(paths)]


def read_job_files(paths: Iterable[str | os.PathLike[str]]) -> list[JobInFile]:
    """`load_job_files`, each job with where it was written (`JobInFile.locate`)."""
    names = NameRegister()
    jobs_read: list[JobInFile] = []
    for path in paths:
        file_path = Path(path)
        documents = _read_documents(file_path)
        jobs = _jobs_in(documents)
        if not jobs:
            raise no_job_error(str(file_path))
        for job in jobs:
            names.add(job.spec.name, job.entry)
        jobs_read.extend(jobs)
    return jobs_read
