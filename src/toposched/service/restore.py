"""The bulk steps of a restart, for stores of a hundred thousand running jobs: the running
jobs adopted by the scheduler at once, and a dry-run backend's runs resumed at once."""

from __future__ import annotations

import functools

from toposched.backends.dry_run import DryRunBackend, ResumedRun
from toposched.scheduler.jobs import JobState
from toposched.service.core import ServiceCore


def resume_simulated(core: ServiceCore, backend: DryRunBackend) -> None:
    """Every running job whose start was sent goes on in `backend` from its stored start
    time; a start stored but never sent is left to reconciliation, which sends it once."""
    unsent = {(d.job_id, d.attempt) for d in core.store.unsent_decisions() if d.kind == "start"}
    jobs = core.scheduler.jobs
    runs = [
        ResumedRun(
            record.job_id,
            record.attempt,
            jobs[record.job_id].spec.expected_runtime,
            record.start_time,
            functools.partial(core.launch, record),
        )
        for record in core.records.values()
        if record.state is JobState.RUNNING
        and record.start_time is not None
        and (record.job_id, record.attempt) not in unsent
    ]
    backend.resume_many(runs)
