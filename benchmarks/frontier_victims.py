"""The victim searches of a frontier-lab run, timed one by one and grouped by what they answered.

Runs the frontier workload (`toposched simulate --workload frontier`, one cycle per 10 minutes)
for a few simulated days and times every victim search the scheduler runs
(`Preemptor.search`: those a kept refusal does not answer), grouped by the gang's size (up to one
rack, or larger) and the answer: a plan, or a refusal by its code, and whether the refusal
lasts (is kept for later cycles). Per group: searches, their total, mean and median time.

`--log FILE` also writes each answer, one line per search in call order (the job, and the plan's
victims or the refusal's code and reason): two trees' logs are equal when their searches
decided and explained alike.

    PYTHONPATH=src .venv/bin/python benchmarks/frontier_victims.py --days 10 --log a.txt
"""

from __future__ import annotations

import time
from collections import defaultdict

from grouped_times import frontier_options, frontier_run, report

from toposched.policy.queue_entry import QueueEntry
from toposched.policy.ranking import Ranking
from toposched.scheduler.candidates import PreemptionPlan
from toposched.scheduler.jobs import Job
from toposched.scheduler.preemptor import Preemptor
from toposched.scheduler.refusals import Refusal

RACK_PODS = 18
"""Pods of 4 GPUs in one NVL72 rack: gangs up to this size are searched rack by rack."""


def group(job: Job, answer: PreemptionPlan | Refusal, lasting: bool) -> str:
    size = "one rack or less" if job.request.pods <= RACK_PODS else "more than a rack"
    if isinstance(answer, PreemptionPlan):
        return f"{size}, plan"
    return f"{size}, {answer.code}{', lasting' if lasting else ''}"


def line(job: Job, answer: PreemptionPlan | Refusal) -> str:
    if isinstance(answer, PreemptionPlan):
        return f"{job.job_id} evict {' '.join(sorted(v.job_id for v in answer.victims))}"
    return f"{job.job_id} {answer.code}: {answer}"


def run(days: float, seed: int, logged: bool) -> tuple[dict[str, list[float]], list[str], float]:
    """Every search's time by group, the log lines in call order (when `logged`), and the
    run's wall time."""
    timed: dict[str, list[float]] = defaultdict(list)
    log: list[str] = []
    search = Preemptor.search

    def timed_search(
        self: Preemptor,
        job: Job,
        entry: QueueEntry,
        ranking: Ranking,
        now: float,
        only_unallocated: bool,
    ) -> tuple[PreemptionPlan | Refusal, bool]:
        start = time.perf_counter()
        answer, lasting = search(self, job, entry, ranking, now, only_unallocated)
        timed[group(job, answer, lasting)].append(time.perf_counter() - start)
        if logged:
            log.append(line(job, answer))
        return answer, lasting

    Preemptor.search = timed_search  # type: ignore[method-assign]
    return timed, log, frontier_run(days, seed)


def main() -> None:
    args = frontier_options(__doc__.split("\n\n")[0], 10.0, "each search's answer")
    timed, log, wall = run(args.days, args.seed, bool(args.log))
    report(args, wall, "victim searches", timed, "ms", log)


if __name__ == "__main__":
    main()
