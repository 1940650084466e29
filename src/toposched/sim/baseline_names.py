"""The baselines' names and the rule for choosing them: light, so that the CLI checks
`--baselines` before the simulator loads."""

from __future__ import annotations

from collections.abc import Sequence

from toposched.cluster.errors import InputError

__all__ = ["BASELINE_NAMES", "DEFAULT_BASELINES", "chosen_baselines"]

BASELINE_NAMES = ("slurm_like", "slurm_like_preempt", "kube_like", "fifo_first_fit")
"""Every baseline by name, in the order reports show them (after toposched)."""

DEFAULT_BASELINES = ("slurm_like", "kube_like", "fifo_first_fit")
"""The baselines `simulate --compare` runs unless told which."""


def chosen_baselines(baselines: str | Sequence[str] | None) -> list[str]:
    """The baselines named (a comma-separated string or a list, in that order; None: the
    default ones). An unknown or repeated name is an `InputError` that lists the names."""
    if baselines is None:
        names: list[str] = list(DEFAULT_BASELINES)
    elif isinstance(baselines, str):
        names = [name.strip() for name in baselines.split(",") if name.strip()]
    else:
        names = list(baselines)
    known = ", ".join(BASELINE_NAMES)
    if not names:
        raise InputError("baselines", baselines, f"must name at least one of {known}")
    for name in names:
        if name not in BASELINE_NAMES:
            raise InputError("baselines", name, f"unknown baseline; the baselines are {known}")
    if len(set(names)) != len(names):
        raise InputError("baselines", baselines, "names a baseline twice")
    return names
