"""Errors of the scheduler's own making, told apart from bad input."""

from __future__ import annotations

from toposched.cluster.errors import ToposchedError


class InternalError(ToposchedError):
    """The scheduler's records and the cluster state disagree: a fault in toposched, not in
    what the user asked. `message` is for the user; `detail` names the conflict for whoever
    reports it."""

    def __init__(self, job_id: str, detail: str) -> None:
        self.job_id = job_id
        self.detail = detail
        self.message = (
            f"toposched could not change job {job_id!r}: its records of the cluster disagree "
            "with each other. This is a fault in the scheduler, not in the request; please "
            f"report it with this detail: {detail}"
        )
        super().__init__(self.message)
