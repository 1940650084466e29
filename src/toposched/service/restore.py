"""The bulk steps of a restart, for stores of a hundred thousand running jobs: stored job
documents read back as specs, each distinct one validated once, and a dry-run backend's runs
resumed at once."""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping
from operator import attrgetter
from typing import Any

from toposched.backends.dry_run import DryRunBackend, ResumedRuns
from toposched.jobs.spec import JobSpec
from toposched.scheduler.jobs import JobState
from toposched.service.core import ServiceCore
from toposched.service.records import JobRecord

Copier = Callable[[str, float | None], JobSpec]
"""Copies of one spec under other names and submit times (`JobSpec.copier`)."""


def resume_simulated(core: ServiceCore, backend: DryRunBackend) -> None:
    """Every running job whose start was sent goes on in `backend` from its stored start
    time; a start stored but never sent is left to reconciliation, which sends it once."""
    unsent = {(d.job_id, d.attempt) for d in core.store.unsent_decisions() if d.kind == "start"}
    running = JobState.RUNNING
    resumed = [
        record
        for record in core.records.values()
        if record.state is running and record.start_time is not None
    ]
    if unsent:
        resumed = [record for record in resumed if (record.job_id, record.attempt) not in unsent]
    jobs, records, launch = core.scheduler.jobs, core.records, core.launch
    job_ids: list[str] = list(map(_JOB_ID, resumed))
    backend.resume_many(
        ResumedRuns(
            job_ids,
            list(map(_ATTEMPT, resumed)),
            [jobs[job_id].spec.expected_runtime for job_id in job_ids],
            list(map(_START_TIME, resumed)),
            lambda job_id: launch(records[job_id]),
        )
    )


_JOB_ID, _ATTEMPT, _START_TIME = (
    attrgetter("job_id"),
    attrgetter("attempt"),
    attrgetter("start_time"),
)


class RestoredSpecs:
    """Job documents read back from the store as specs. A stored document was validated when it
    was accepted; read back, each distinct document apart from its name, submit time and `run`
    is validated once, and the specs of its other jobs are copies with their own name and
    time (at restart, a store of 100,000 jobs holds a few dozen such documents, not 100,000).
    A record still holding its document as the text the service stores is known by that text
    (`_shape_key`), without parsing it."""

    def __init__(self) -> None:
        self._by_shape: dict[str, Copier] = {}
        self._by_text: dict[tuple[str, str], Copier] = {}

    def of(self, record: JobRecord) -> JobSpec:
        """The spec of `record`'s job."""
        key = _shape_key(record)
        if key is None:
            return self.spec(record.spec)
        copy = self._by_text.get(key)
        if copy is None:
            spec = self.spec(record.spec)
            self._by_text[key] = spec.copier()
            return spec
        return copy(record.job_id, record.submit_time)

    def spec(self, document: Mapping[str, Any]) -> JobSpec:
        shape = dict(document)
        name: Any = shape.pop("name", None)
        submit_time: Any = shape.pop("submit_time", None)
        shape.pop("run", None)  # what to run is the backend's, not the scheduler's
        # The shape's key is its repr: equal only for documents of equal values of the same
        # types (1 and 1.0 apart), and several times cheaper than a JSON dump. Keys in another
        # order only miss the cache.
        key = repr(shape)
        copy = self._by_shape.get(key)
        if copy is None or not _plain_name_and_time(name, submit_time):
            spec = JobSpec.from_dict({**shape, "name": name, "submit_time": submit_time})
            if copy is None:
                self._by_shape[key] = spec.copier()
            return spec
        return copy(name, float(submit_time))


def _plain_name_and_time(name: Any, submit_time: Any) -> bool:
    """Whether a stored document's name and submit time are of the types `JobSpec` holds (its
    own rules were checked when the document was accepted): a non-empty string, and a finite
    number >= 0 (not a bool; NaN fails every comparison)."""
    kind = type(submit_time)
    return (
        type(name) is str
        and name != ""
        and (kind is float or kind is int)
        and 0 <= submit_time < math.inf
    )


def _shape_key(record: JobRecord) -> tuple[str, str] | None:
    """What `record`'s document holds but its name, submit time and `run`, as the text it
    was stored as, where the record holds it as that text (parsing none of it) for its own
    job id and submit time (written as a decimal fraction of its value): `{"name": NAME, ...,
    "submit_time": TIME, ...}` with `run`, if any, last (the service writes documents so,
    `documents._Shape.text`). Of two documents of one key, the specs differ only by name and
    submit time. None for any other text."""
    text, job_id, submit_time = record.spec_text, record.job_id, record.submit_time
    if (
        text is None
        # `_plain_name_and_time`, of a float time
        or type(submit_time) is not float
        or not 0 <= submit_time < math.inf
        or type(job_id) is not str
        or job_id == ""
        or '"' in job_id
        or "\\" in job_id
        # The only "submit_time" is the document's own (a job's fields hold no other).
        or text.count('"submit_time"') != 1
    ):
        return None
    prefix = f'{{"name": "{job_id}", '
    end = text.find(_TIME, len(prefix))
    if end < 0 or not text.startswith(prefix) or text[-1] != "}":
        return None
    # The time, up to the next key or the end: a decimal fraction of the record's value
    # (read, not written out: `float.__repr__` costs more than the rest together).
    begin = end + len(_TIME)
    after = text.find(",", begin)
    after = len(text) - 1 if after < 0 else after
    number = text[begin:after]
    if not (
        number.isascii()
        and number.count(".") == 1
        and number.replace(".", "", 1).isdigit()
        and float(number) == submit_time
    ):
        return None
    middle, tail = text[len(prefix) : end], text[after:]
    if not tail.startswith(_RUN):
        return middle, tail
    try:  # `run` is last: what follows its key is one JSON object
        run = json.loads(tail[len(_RUN) : -1])
    except ValueError:
        return None
    return (middle, "") if isinstance(run, dict) else None


_RUN = ', "run": '
_TIME = ', "submit_time": '
