"""A flood: N jobs submitted at one instant on 64 GPUs, as a workload file (docs/benchmarks.md,
"simulator: flood"). Jobs of 1, 2, 4 or 8 GPUs (1 twice as often), running 1, 5, 10 or 30
minutes, charged to one of two accounts of equal budget; seeded, so a given N always writes the
same file.

    .venv/bin/python benchmarks/flood_workload.py 20000 flood20000.jsonl
    .venv/bin/toposched simulate --workload flood20000.jsonl
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

HEADER = {
    "name": "flood",
    "description": "jobs submitted at one instant on 64 GPUs",
    "cluster": {
        "builder": "superpod",
        "spine_groups": 1,
        "units_per_group": 2,
        "nodes_per_unit": 4,
    },
    "budget": {"accounts": {"a": 50, "b": 50}},
}


def write_flood(jobs: int, path: Path, seed: int = 0) -> None:
    draw = random.Random(seed)
    with path.open("w") as out:
        out.write(json.dumps({**HEADER, "name": f"flood{jobs}"}) + "\n")
        for _ in range(jobs):
            job = {
                "submit": 0,
                "runtime": draw.choice([60, 300, 600, 1800]),
                "account": draw.choice("ab"),
                "pods": 1,
                "resources_per_pod": {"gpus": draw.choice([1, 1, 2, 4, 8])},
            }
            out.write(json.dumps(job) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("jobs", type=int, help="how many jobs")
    parser.add_argument("path", type=Path, help="the JSONL workload file to write")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    write_flood(args.jobs, args.path, args.seed)


if __name__ == "__main__":
    main()
