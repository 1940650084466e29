"""The scheduling policy's options, shared by `toposched simulate` (and the demo) and
`toposched serve`: the flags with their help, and the scheduler settings they ask for
(`policy_settings`), so that a policy measured in the simulator runs as such in the service."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from toposched.cli.simulate_values import (
    WORTH_OFF,
    account_loss_budgets,
    borrowed_duration,
    headroom_share,
    keep_duration,
    loss_budget,
    owed_half_life,
    shortfall_weight,
    spares_option,
    worth_horizon,
    worth_ratio,
)
from toposched.cluster.errors import InputError
from toposched.cluster.units import HOUR, format_duration

if TYPE_CHECKING:
    from toposched.policy.checkpoint_wait import CheckpointWait
    from toposched.policy.worth import EvictionWorth
    from toposched.scheduler.admission import AdmissionRule

__all__ = ["add_policy_options", "checked_policy", "policy_settings"]

# The policy's classes are imported where settings are built, so that the parser (`--help`,
# usage errors) loads none of them.


def add_policy_options(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    """The scheduling policy's flags, as one group of `parser`'s options; returns them."""
    group = parser.add_argument_group(
        "scheduling policy",
        "how the scheduler protects, preempts and places work (the same flags for "
        "`toposched simulate` and `toposched serve`; docs/preemption.md)",
    )
    added: list[argparse.Action] = []

    def add(*flags: str, **options: Any) -> None:
        added.append(group.add_argument(*flags, **options))

    add(
        "--policy",
        metavar="FILE",
        help="take every policy setting the command line leaves at its default from FILE, a "
        "YAML or JSON mapping of these flags without their dashes to their values (e.g. "
        "'checkpoint-wait: 1h', 'unallocated-headroom-reserved: true'; docs/cli.md)",
    )
    add(
        "--spares",
        type=spares_option,
        metavar="LEVEL:N",
        help="hold N idle nodes per LEVEL domain (e.g. rack:1) as spares: a gang whose node "
        "fails restarts on its surviving nodes plus a spare of the same domain (default: none)",
    )
    add(
        "--failed-gangs",
        choices=("first", "in-order"),
        default="first",
        help="a gang a node failure interrupts while it runs within its team's budget: first = "
        "it heads the next cycle, trying to restart before the queue can take its surviving "
        "nodes; in-order = it waits in the queue's order like any pending job (default: "
        "first; a gang given a spare by --spares restarts there either way)",
    )
    add(
        "--keep-failed-nodes",
        type=keep_duration,
        metavar="DURATION",
        help="a budgeted gang a node failure interrupts (resumable, within its budget or beyond "
        "it, without a spare) keeps the nodes it ran on from every other job for up to "
        "DURATION (e.g. 30m) while it does not restart: it restarts where it was once they and "
        "what is free hold it (the failed node back after repair), or preempts only the room "
        "it lacks around them (default: its surviving nodes go back to the queue)",
    )
    add(
        "--keep-failed-nodes-from",
        choices=("all", "unallocated", "all-but-owed"),
        default=None,
        help="with --keep-failed-nodes, whom those nodes are kept from: all = every other job; "
        "unallocated = unallocated work only, budgeted jobs ranked first may take them; "
        "all-but-owed = every job but those of teams running below their budget, which may "
        "take them (default: all)",
    )
    add(
        "--unprotected-borrowing",
        action="store_true",
        help="a job that takes its team past its budget gets no min-runtime protection; the "
        "same as --borrowed-min-runtime 0",
    )
    add(
        "--borrowed-min-runtime",
        type=borrowed_duration,
        metavar="D",
        help="protect a job that takes its team past its budget for at most D (seconds, or "
        "e.g. 30m, 1h), so that a team back under its budget reclaims its share within D "
        "(default: none, each job keeps the min runtime it declared)",
    )
    add(
        "--cross-account",
        choices=("budget", "fair-share"),
        default="budget",
        help="when a job may evict another account's job past its min runtime: budget = only "
        "to reclaim its account's budget, never taking the victim's account below its own; "
        "fair-share = whenever its account ranks above in fair share (default: budget)",
    )
    add(
        "--borrowing-preempts",
        choices=("any", "own-account"),
        default="any",
        help="whom a job may preempt when its start would take its team beyond its budget: "
        "any = whomever the rules above allow, unallocated work too; own-account = only its "
        "team's lower-priority jobs, so that borrowed GPUs come from idle capacity and a "
        "borrower never displaces unallocated work or another team's (default: any)",
    )
    add(
        "--eviction-worth",
        type=worth_ratio,
        metavar="RATIO|off",
        help="evict budgeted work past its min runtime (of the scope, below) only when the "
        "work lost is at most RATIO x the GPU-time the preemptor's earlier start gains "
        "(1: no more lost than gained; docs/preemption.md, 'Is the eviction worth it?'); "
        "off: every eviction the contract allows (default: 1)",
    )
    add(
        "--eviction-worth-horizon",
        type=worth_horizon,
        metavar="D",
        help="with --eviction-worth: the longest wait an eviction is credited with avoiding "
        "(seconds, or e.g. 30m, 2h; default: 2h)",
    )
    add(
        "--eviction-worth-owed",
        action="store_true",
        help="with --eviction-worth: credit an eviction only with the preemptor's GPUs that "
        "bring its team back up to its budget, not those it would borrow beyond it",
    )
    add(
        "--eviction-worth-scope",
        choices=("all", "own-account", "cannot-resume"),
        help="which evictions of budgeted work --eviction-worth weighs: all; "
        "own-account = only a team's lower-priority jobs evicted for its own job, which move "
        "no GPUs between teams; cannot-resume = only jobs that cannot resume, which lose "
        "their whole run (default: cannot-resume)",
    )
    add(
        "--eviction-worth-restart",
        type=worth_horizon,
        metavar="D",
        help="with --eviction-worth: how long a victim's GPUs take to start it over (image, "
        "checkpoint, warm-up), weighed as work lost: each evicted budgeted job costs its GPUs "
        "x D more (seconds, or e.g. 5m; default: 0, restarts cost nothing)",
    )
    add(
        "--eviction-worth-shortfall",
        type=shortfall_weight,
        metavar="W",
        help="with --eviction-worth: credit the earlier start of a job whose team runs below "
        "its budget 1 + W x the share of the budget it lacks times (e.g. 2: a team at half "
        "its budget counts it twice), so that the teams furthest below their budgets "
        "reclaim first (default: 0, every team alike)",
    )
    add(
        "--eviction-worth-unallocated",
        action="store_true",
        help="with --eviction-worth: weigh unallocated victims too (within the scope), so "
        "that budgeted work waits rather than throw away a long run of unallocated work "
        "for a short gain (default: unallocated work is evicted whatever it loses)",
    )
    add(
        "--eviction-loss-budget",
        type=loss_budget,
        metavar="GPU_HOURS",
        help="with --eviction-worth: the most GPU-hours of budgeted work evictions may throw "
        "away in any 24 hours; the less of it is left, the more an eviction must gain "
        "(default: no budget)",
    )
    add(
        "--eviction-loss-budget-per-account",
        type=loss_budget,
        metavar="GPU_HOURS",
        help="with --eviction-worth: the most GPU-hours of any one team's work evictions may "
        "throw away in any 24 hours; an eviction that would take a team past it waits, so "
        "that no team loses its work day after day for others (default: no such budget)",
    )
    add(
        "--eviction-loss-budget-for",
        type=account_loss_budgets,
        metavar="ACCOUNT=GPU_HOURS,...",
        help="with --eviction-worth: named teams' own budgets of lost work, GPU-hours per 24 "
        "hours, in place of --eviction-loss-budget-per-account's (e.g. "
        "team-a=5,team-b=50; accounts as jobs name them; default: none)",
    )
    add(
        "--checkpoint-wait",
        type=worth_horizon,
        metavar="D",
        help="wait up to D for the chosen victims' next checkpoints when that saves more "
        "work than the wait costs the preemptor (seconds, or e.g. 30m, 1h; docs/preemption.md, "
        "'Waiting for checkpoints'; default: off, victims are evicted at once)",
    )
    add(
        "--urgent-priority",
        type=int,
        metavar="P",
        help="with --checkpoint-wait: jobs of priority P or above never wait for checkpoints "
        "(e.g. 10 for the Ai2-like workload's debug sessions; default: every job may wait)",
    )
    add(
        "--checkpoint-wait-first",
        type=worth_horizon,
        metavar="D",
        help="with --checkpoint-wait: expect a resumable job that has reported no checkpoint "
        "yet to checkpoint first D after its start, and wait for that too (seconds, or e.g. "
        "1h; default: a job that has reported none is not waited for)",
    )
    add(
        "--checkpoint-wait-total",
        type=worth_horizon,
        metavar="D",
        help="with --checkpoint-wait: a waiting job's waits add up to at most D, from the "
        "first until it starts (seconds, or e.g. 1h; default: no bound beyond "
        "--checkpoint-wait's for each wait)",
    )
    add(
        "--checkpoint-wait-owed",
        action="store_true",
        help="with --checkpoint-wait: a wait costs only the preemptor's GPUs that bring its "
        "team back up to its budget, so a job of a team already running its budget waits "
        "whenever the checkpoints save work (default: every GPU of the preemptor counts)",
    )
    add(
        "--unallocated-admission",
        type=worth_horizon,
        metavar="D",
        help="keep unallocated work off the reservation's nodes when the reserved job is due "
        "before the work's first checkpoint; D: when a resumable job checkpoints first "
        "(seconds, or e.g. 30m, 1h; docs/preemption.md, 'Where unallocated work starts'; "
        "default: off, unallocated work backfills onto reserved nodes)",
    )
    add(
        "--unallocated-headroom",
        type=headroom_share,
        metavar="PERCENT",
        help="start unallocated work only while it leaves PERCENT of the cluster's GPUs free "
        "(0 to below 100, e.g. 1), so that gangs a node failure interrupts and budgeted jobs "
        "that arrive find room without evicting it (docs/preemption.md, 'Where unallocated "
        "work starts'; default: 0, unallocated work takes any free GPU)",
    )
    add(
        "--unallocated-headroom-restarts",
        action="store_true",
        help="add to the headroom the GPUs of the budgeted gangs a node failure interrupted "
        "that wait to restart within their team's budget: each takes back unallocated work as "
        "soon as it can reassemble (default: the headroom is --unallocated-headroom's share)",
    )
    add(
        "--unallocated-headroom-borrowed",
        action="store_true",
        help="keep the headroom free of work beyond its team's budget too: a team coming back "
        "to its budget starts on it instead of waiting for borrowed runs or evicting them "
        "(needs --unallocated-headroom; default: budgeted work may take the headroom, "
        "borrowed or not)",
    )
    add(
        "--unallocated-headroom-reserved",
        action="store_true",
        help="count the free GPUs of the nodes a reservation drains towards the headroom: "
        "unallocated work may start while they make it up, instead of waiting beside them "
        "(needs --unallocated-headroom; default: only free GPUs outside the reservation count)",
    )
    add(
        "--unallocated-order",
        choices=("rank", "oldest"),
        default=None,
        help="the order unallocated work starts in: 'rank' by its accounts' Fair Tree rank, "
        "or 'oldest' submission first across accounts, so that the work nearest its "
        "withdrawal (a workload's cancel_after) runs first and the newest waits (docs/policy.md, "
        "'Unallocated work oldest first'; default: rank)",
    )
    add(
        "--owed-order",
        choices=("standing", "least-met"),
        default=None,
        help="the order among teams below their budget, whose budgeted work goes first: "
        "'standing' by Fair Tree standing, or 'least-met' the team that lately received the "
        "least of the GPU-hours it was owed first, so that GPUs a team borrowed beyond its "
        "budget do not put it behind for hours it went short (docs/policy.md, 'Owed teams, "
        "least served first'; default: standing)",
    )
    add(
        "--owed-half-life",
        type=owed_half_life,
        metavar="D",
        help="with --owed-order least-met: the age at which an hour owed or received counts "
        "half (seconds, or e.g. 12h, 2d; default: 1d)",
    )
    return added


def checked_policy(args: argparse.Namespace) -> argparse.Namespace:
    """`args` with the settings of `--policy FILE` in (`policy_file`), once no flag is found
    set without the one it refines: InputError for e.g. --checkpoint-wait-owed without
    --checkpoint-wait, whether the command line or the file set it. Loads nothing but the
    file: a simulation checks its options before the simulator loads."""
    path = getattr(args, "policy", None)
    given = args
    if path is not None:
        from toposched.cli.policy_file import with_policy_file

        args = with_policy_file(args, path)
    for refined, flags in _REFINEMENTS:
        if _on(args, refined):
            continue
        rule = (
            f"has no effect with {refined} {WORTH_OFF}"
            if refined == "--eviction-worth"
            else f"applies only with {refined}"
        )
        for flag in flags:
            if _on(args, flag):
                raise _refused(given, args, flag, rule)
    if _on(args, "--owed-half-life") and getattr(args, "owed_order", None) != "least-met":
        raise _refused(given, args, "--owed-half-life", "applies only with --owed-order least-met")
    return args


def _refused(
    given: argparse.Namespace, args: argparse.Namespace, flag: str, rule: str
) -> InputError:
    """The error for `flag`, set in `args` against `rule`: named as the policy file names it,
    with the file and line, when the file set it rather than the command line (`given`)."""
    value = _given(args, flag)
    path = getattr(given, "policy", None)
    if path is None or _on(given, flag):
        return InputError(flag, value, rule)
    from toposched.cli.policy_file import setting_line

    name = flag.removeprefix("--")
    return InputError(name, value, rule, file=path, line=setting_line(path, name))


_REFINEMENTS = (
    (
        "--eviction-worth",
        (
            "--eviction-worth-horizon",
            "--eviction-worth-owed",
            "--eviction-worth-scope",
            "--eviction-worth-restart",
            "--eviction-worth-shortfall",
            "--eviction-worth-unallocated",
            "--eviction-loss-budget",
            "--eviction-loss-budget-per-account",
            "--eviction-loss-budget-for",
        ),
    ),
    (
        "--checkpoint-wait",
        (
            "--urgent-priority",
            "--checkpoint-wait-first",
            "--checkpoint-wait-owed",
            "--checkpoint-wait-total",
        ),
    ),
    (
        "--unallocated-headroom",
        ("--unallocated-headroom-borrowed", "--unallocated-headroom-reserved"),
    ),
    ("--keep-failed-nodes", ("--keep-failed-nodes-from",)),
)
"""Each flag, and the flags that refine it and apply only with it."""


def _value(args: argparse.Namespace, flag: str) -> Any:
    return getattr(args, flag[2:].replace("-", "_"), None)


_DURATIONS = frozenset(
    {
        "--eviction-worth-horizon",
        "--eviction-worth-restart",
        "--checkpoint-wait-first",
        "--checkpoint-wait-total",
        "--owed-half-life",
    }
)
"""The refining flags that take a duration: parsed to seconds, shown in units."""


def _given(args: argparse.Namespace, flag: str) -> Any:
    """The flag's value as a user writes it: durations in units, budgets in GPU-hours, numbers
    without a trailing .0."""
    value = _value(args, flag)
    if flag == "--eviction-loss-budget-for":
        return ",".join(f"{account}={budget / HOUR:g}" for account, budget in value)
    if flag in ("--eviction-loss-budget", "--eviction-loss-budget-per-account"):
        value /= HOUR
    if flag in _DURATIONS:
        return format_duration(value)
    if isinstance(value, float):
        return int(value) if value.is_integer() else value
    return value


def _on(args: argparse.Namespace, flag: str) -> bool:
    """Whether the flag is set: a value, or a switch turned on; a headroom of 0 is none, and
    the cost/benefit rule is on unless `--eviction-worth off`."""
    value = _value(args, flag)
    if flag == "--eviction-worth":
        return bool(value != WORTH_OFF)
    if flag == "--unallocated-headroom" and value == 0:
        return False
    return value is not None and value is not False


def policy_settings(args: argparse.Namespace) -> dict[str, Any]:
    """The scheduler settings the policy flags ask for, by `SchedulerSettings` name: empty
    when every flag is at its default. Raises `InputError` for a flag given without the one it
    refines (e.g. --checkpoint-wait-owed without --checkpoint-wait, --eviction-worth-owed with
    --eviction-worth off). With `--policy FILE`, the
    settings the flags leave at their defaults come from the file (`policy_file`)."""
    args = checked_policy(args)
    from toposched.cluster.units import DAY
    from toposched.policy.contract import BorrowingPreempts, Contract
    from toposched.policy.fairshare import UnallocatedOrder
    from toposched.policy.owed_standing import OwedOrder
    from toposched.scheduler.interruptions import KeptFrom

    spares = getattr(args, "spares", None)
    protect = not getattr(args, "unprotected_borrowing", False)
    borrowed = getattr(args, "borrowed_min_runtime", None)
    cross_account = getattr(args, "cross_account", "budget")
    borrowing = BorrowingPreempts(getattr(args, "borrowing_preempts", None) or "any")
    failed_first = getattr(args, "failed_gangs", "first") == "first"
    keep_failed_nodes = getattr(args, "keep_failed_nodes", None)
    kept_from = getattr(args, "keep_failed_nodes_from", None)
    worth = _eviction_worth(args)
    admission = _admission(args)
    unallocated_order = UnallocatedOrder(getattr(args, "unallocated_order", None) or "rank")
    owed_order = OwedOrder(getattr(args, "owed_order", None) or "standing")
    half_life = getattr(args, "owed_half_life", None)
    checkpoint_wait = _checkpoint_wait(args)
    if (
        admission is None
        and checkpoint_wait is None
        and spares is None
        and protect
        and borrowed is None
        and cross_account == "budget"
        and borrowing is BorrowingPreempts.ANY
        and failed_first
        and keep_failed_nodes is None
        and worth == Contract().worth
        and unallocated_order is UnallocatedOrder.RANK
        and owed_order is OwedOrder.STANDING
    ):
        return {}
    return {
        "contract": Contract(
            cross_account="fair_share" if cross_account == "fair-share" else "budget",
            worth=worth,
            checkpoint_wait=checkpoint_wait,
            borrowing_preempts=borrowing,
        ),
        "spares": spares,
        "protect_beyond_budget": protect,
        "borrowed_min_runtime": borrowed,
        "failed_first": failed_first,
        "keep_failed_nodes": keep_failed_nodes,
        "keep_failed_nodes_from": KeptFrom(kept_from or "all"),
        "admission": admission,
        "unallocated_order": unallocated_order,
        "owed_order": owed_order,
        "owed_half_life": DAY if half_life is None else half_life,
    }


def _checkpoint_wait(args: argparse.Namespace) -> CheckpointWait | None:
    """The wait for victims' checkpoints `--checkpoint-wait` asks for (None: off)."""
    from toposched.policy.checkpoint_wait import CheckpointWait

    wait = getattr(args, "checkpoint_wait", None)
    if wait is None:
        return None
    return CheckpointWait(
        wait,
        urgent_priority=getattr(args, "urgent_priority", None),
        first_checkpoint=getattr(args, "checkpoint_wait_first", None),
        owed_only=getattr(args, "checkpoint_wait_owed", False),
        max_total_wait=getattr(args, "checkpoint_wait_total", None),
    )


def _eviction_worth(args: argparse.Namespace) -> EvictionWorth | None:
    """The cost/benefit rule `--eviction-worth` and its refinements ask for (None: off)."""
    from toposched.policy.worth import DEFAULT_EVICTION_WORTH, EvictionWorth, WorthScope

    ratio = getattr(args, "eviction_worth", None)
    horizon = getattr(args, "eviction_worth_horizon", None)
    owed = getattr(args, "eviction_worth_owed", False)
    budget = getattr(args, "eviction_loss_budget", None)
    scope = getattr(args, "eviction_worth_scope", None)
    restart = getattr(args, "eviction_worth_restart", None)
    if ratio == WORTH_OFF:
        return None
    default = DEFAULT_EVICTION_WORTH
    return EvictionWorth(
        default.max_lost_per_gained if ratio is None else ratio,
        default.horizon if horizon is None else horizon,
        owed_only=owed,
        loss_budget=budget,
        scope=default.scope if scope is None else WorthScope(scope),
        restart_cost=restart or 0.0,
        shortfall_weight=getattr(args, "eviction_worth_shortfall", None) or 0.0,
        account_loss_budget=getattr(args, "eviction_loss_budget_per_account", None),
        account_loss_budgets=getattr(args, "eviction_loss_budget_for", None) or (),
        unallocated=getattr(args, "eviction_worth_unallocated", False),
    )


def _admission(args: argparse.Namespace) -> AdmissionRule | None:
    """Where unallocated work may start, as `--unallocated-admission` and
    `--unallocated-headroom` ask (None: anywhere it fits)."""
    from toposched.scheduler.admission import AdmissionRule

    checkpoint = getattr(args, "unallocated_admission", None)
    headroom = getattr(args, "unallocated_headroom", None) or 0.0
    restarts = getattr(args, "unallocated_headroom_restarts", False)
    borrowed = getattr(args, "unallocated_headroom_borrowed", False)
    reserved = getattr(args, "unallocated_headroom_reserved", False)
    if checkpoint is None and headroom == 0 and not restarts:
        return None
    return AdmissionRule(checkpoint, headroom, restarts, borrowed, reserved)
