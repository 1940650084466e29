"""A stop under way in a backend, and the final report it ends in: one wording for every backend."""

from __future__ import annotations

from dataclasses import dataclass

from toposched.backends.protocol import Report, ReportKind

STOP_KINDS = (ReportKind.EVICTED, ReportKind.STOPPED, ReportKind.FAILED)
"""What a stop may end as."""


@dataclass
class Stopping:
    """A stop under way: what it ends as, its grace period, why, and whether the grace ran out.

    `deadline` is when the hard stop is due on the backend's own clock, for backends that
    enforce it themselves (0 where the pods' host enforces it).
    """

    kind: ReportKind
    grace_s: float
    detail: str = ""
    killed: bool = False
    deadline: float = 0.0

    def final_report(self, job_id: str, attempt: int, now: float, started: bool = True) -> Report:
        """The report of an attempt whose pods are all gone after this stop. A failure keeps
        its cause, as does a stop of pods that never started; other stops say how they ended."""
        if self.kind is ReportKind.FAILED or not started:
            detail = self.detail
        elif self.killed:
            detail = f"killed after the grace period of {self.grace_s:g} s"
        else:
            detail = "ended within the grace period"
        return Report(job_id, attempt, self.kind, now, detail)

    def to_json(self) -> dict[str, object]:
        return {
            "kind": self.kind.value,
            "deadline": self.deadline,
            "grace_s": self.grace_s,
            "detail": self.detail,
        }

    @classmethod
    def from_json(cls, value: object) -> Stopping | None:
        """The stop written by `to_json`, or None for anything else (no stop was under way)."""
        if not isinstance(value, dict) or value.get("kind") not in [k.value for k in STOP_KINDS]:
            return None
        return cls(
            ReportKind(value["kind"]),
            float(value.get("grace_s", 0.0)),
            str(value.get("detail", "")),
            deadline=float(value.get("deadline", 0.0)),
        )


def final_report(
    stopping: Stopping | None, job_id: str, attempt: int, now: float, started: bool = True
) -> Report:
    """The final report of an attempt whose pods are all gone: finished unless a stop was
    under way."""
    if stopping is None:
        return Report(job_id, attempt, ReportKind.FINISHED, now)
    return stopping.final_report(job_id, attempt, now, started)
