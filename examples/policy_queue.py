"""Budgets, Fair Tree and the cycle: several teams share a 288-GPU cluster; print the queue."""

from __future__ import annotations

from toposched.cluster.builders import nvl72_cluster
from toposched.cluster.state import ClusterState
from toposched.jobs.spec import JobSpec
from toposched.policy.budget import BudgetTree
from toposched.scheduler.core import Scheduler

BUDGET = """
accounts:
  research:
    share: 70
    children:
      pretraining: {share: 60, children: {team-a: 50, team-b: 50}}
      eval: 40
  product: 30
"""
HOUR = 3600.0
TEAM_A = "research/pretraining/team-a"
TEAM_B = "research/pretraining/team-b"
EVAL = "research/eval"
PRODUCT = "product"


def job(name: str, account: str, pods: int, gpus: int = 4, **fields: object) -> JobSpec:
    return JobSpec.from_dict(
        {"name": name, "account": account, "pods": pods, "resources_per_pod": {"gpus": gpus}}
        | fields
    )


def main() -> None:
    tree = BudgetTree.from_yaml(BUDGET)
    # 4 NVL72 racks (18 nodes x 4 GPUs each) in one block: 288 GPUs.
    state = ClusterState(nvl72_cluster(zones=1, blocks_per_zone=1, racks_per_block=4))
    scheduler = Scheduler(state, tree)

    # Hours 0-2: team-a trains on two racks, product serves on one, eval runs a small sweep.
    # Each declares how long it is protected (min_runtime) and how long it expects to run.
    rack = {"required": "rack"}
    for spec in [
        job("a-pretrain", TEAM_A, 36, min_runtime="8h", expected_runtime="6h"),
        job("p-serve", PRODUCT, 18, min_runtime="3h", expected_runtime="3h", topology=rack),
        job("eval-sweep", EVAL, 4, expected_runtime="2h"),
    ]:
        scheduler.submit(spec, 0)
    scheduler.cycle(0)
    scheduler.finish("eval-sweep", 2 * HOUR)

    # Hour 2: a new batch from every team, and one cycle.
    now = 2 * HOUR
    for spec in [
        job("p-train", PRODUCT, 36, expected_runtime="8h", topology={"preferred": "rack"}),
        job("a-ablation", TEAM_A, 8, priority=5, expected_runtime="1h"),
        job("a-eval", TEAM_A, 2, expected_runtime="30m"),
        job("b-finetune", TEAM_B, 18, expected_runtime="4h", topology=rack),
        job("eval-nightly", EVAL, 4, expected_runtime="2h"),
        job("a-notebook", TEAM_A, 1, gpus=1, min_runtime=0),  # unallocated: fills idle GPUs
    ]:
        scheduler.submit(spec, now)
    print("queue before the cycle (accounts below their budget first, then by Fair Tree):")
    for row in scheduler.queue_rows(now):
        tier = f"{row.tier}, below its budget" if row.owed else row.tier
        print(f"  #{row.position} {row.job:<13} {tier}, priority {row.priority}")
        print(f"      {row.standing}")

    result = scheduler.cycle(now)
    print()
    print("cycle at +2 h:")
    for bind in result.bound:
        kind = "unallocated" if bind.unallocated else "allocated"
        backfill = ", backfilled" if bind.backfilled else ""
        print(f"  bind    {bind.job_id:<13} {bind.allocation.pods:>2} pod(s) ({kind}{backfill})")
    if result.reservation is not None:
        reserve = result.reservation
        wait = (reserve.start_time - now) / HOUR
        print(f"  reserve {reserve.job_id:<13} at +{wait:g} h in {reserve.domain}")

    print()
    print("queue after the cycle:")
    for row in scheduler.queue_rows(now):
        print(f"  #{row.position} {row.job:<13} [{row.account}]")
        print(f"      sort key: {row.standing}; priority {row.priority}")
        print(f"      reason:   {row.reason}")
    print()
    print("explain b-finetune:")
    print(f"  {scheduler.explain('b-finetune', now)}")


if __name__ == "__main__":
    main()
