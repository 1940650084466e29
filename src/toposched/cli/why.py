"""`toposched why JOB`: the server's explanation of a job, as sentences a person reads."""

from __future__ import annotations

import argparse
import time
from typing import Any

from toposched.cli.client import ApiClient, Explanation, HistoryEntry, Job, JobState
from toposched.cli.remote import (
    add_client_parser,
    client_command,
    clock,
    duration,
    print_json,
    say,
    size,
)

HISTORY_SHOWN = 10


def register(commands: Any) -> None:
    why = add_client_parser(
        commands,
        "why",
        "why a job waits (or what it is doing), in sentences",
        "Explain a job: its state; if pending, its place in its account's queue and overall, "
        "the placement, budget or contract reason it waits and what it would take to start, "
        "and the start the scheduler has reserved for it; then the job's recent history.",
        "  toposched why big-pretrain\n"
        "  toposched why big-pretrain --json      # the server's explanation, unchanged",
    )
    why.add_argument("job", metavar="JOB", help="the job's id")
    why.set_defaults(handler=client_command(_why))


def _why(args: argparse.Namespace, client: ApiClient) -> int:
    explanation = client.explain(args.job)
    if args.json:
        print_json(explanation)
        return 0
    job = client.job(args.job)
    for sentence in explanation_sentences(explanation, job, time.time()):
        say(sentence)
    history = explanation.get("history") or []
    if history:
        say("history:", style="bold")
        earlier = len(history) - HISTORY_SHOWN
        if earlier > 0:
            say(f"  ({earlier:,} earlier events; --json shows them all)", style="dim")
        for entry in history[-HISTORY_SHOWN:]:
            say(f"  {history_line(entry)}")
    return 0


def history_line(entry: HistoryEntry) -> str:
    """One history entry: its time, its event, then any other fields as key=value."""
    extra = " ".join(
        f"{key}={value}"
        for key, value in entry.items()
        if key not in ("time", "event") and value not in (None, "")
    )
    return f"{clock(entry.get('time'))}  {entry.get('event', '?')}  {extra}".rstrip()


def ordinal(number: int) -> str:
    """1st, 2nd, 3rd, 4th, ..., 11th, 12th, 13th, ..., 21st."""
    if 10 <= number % 100 <= 20:
        suffix = "th"
    else:
        suffix = {1: "st", 2: "nd", 3: "rd"}.get(number % 10, "th")
    return f"{number:,}{suffix}"


def explanation_sentences(explanation: Explanation, job: Job, now: float) -> list[str]:
    """The explanation in sentences: what the job is and its state, then for a pending job
    its position, the reason and the reservation; for a running or ended one, since when."""
    name = explanation["id"]
    state = explanation["state"]
    who = f"Job {name} ({job['account']}, {size(job['pods'], job['gpus'])})"
    opening = f"{who} is {state}"
    if state == JobState.PENDING:
        sentences = [opening + _waited(job, now) + "."]
        sentences.extend(_pending_sentences(explanation, job, now))
        return sentences
    if state == JobState.RUNNING:
        start = job.get("start_time")
        since = f" since {clock(start, now)} ({duration(now - start)})" if start else ""
        sentences = [f"{opening}{since}{_on_nodes(job)}."]
    else:
        end = job.get("end_time")
        at = f" at {clock(end, now)} ({duration(now - end)} ago)" if end else ""
        ran = _ran_for(job)
        verb = "was cancelled" if state == JobState.CANCELLED else state
        sentences = [f"{who} {verb}{at}{ran}."]
    reason = explanation.get("reason")
    if reason and reason != state:
        sentences.append(f"Reason: {reason}.")
    sentences.extend(_attempts_sentence(job))
    return sentences


def _pending_sentences(explanation: Explanation, job: Job, now: float) -> list[str]:
    sentences = []
    position = explanation.get("position")
    # A position of 0 or none: the server has not placed it in the queue.
    in_account = position.get("account") if position else None
    overall = position.get("overall") if position else None
    if in_account and overall:
        sentences.append(
            f"It is {ordinal(in_account)} in the queue of {job['account']} and "
            f"{ordinal(overall)} overall."
        )
    elif overall:
        sentences.append(f"It is {ordinal(overall)} in the queue.")
    code = explanation.get("code")
    blocking, ordering = _split_reason(explanation.get("reason") or "", job.get("reason") or "")
    if blocking:
        kind = f" ({code})" if code else ""
        sentences.append(f"It waits{kind}: {blocking}.")
    if ordering:
        sentences.append(f"Its order in the queue: {ordering}.")
    reservation = explanation.get("reservation")
    if reservation:
        start = reservation["start_time"]
        where = f" in {reservation['domain']}" if reservation.get("domain") else ""
        if start > now:
            sentences.append(
                f"Its start is reserved{where} in ~{duration(start - now)} "
                f"(at {clock(start, now)})."
            )
        else:
            sentences.append(
                f"Its reserved start{where} was {duration(now - start)} ago ({clock(start, now)}); "
                "it starts at the next cycle that finds the room free."
            )
    elif note := explanation.get("reservation_note"):
        sentences.append(f"{note[0].upper()}{note[1:]}.")
    else:
        sentences.append("No start is reserved for it yet.")
    sentences.extend(_attempts_sentence(job))
    return sentences


def _split_reason(explained: str, blocking: str) -> tuple[str, str]:
    """(what blocks the job, how the queue orders it). The explanation's reason is the queue
    order followed by the job's own reason (what blocks it), when the server says both."""
    if blocking and explained.endswith(blocking) and explained != blocking:
        return blocking, explained[: -len(blocking)].rstrip("; ")
    return explained or blocking, ""


def _waited(job: Job, now: float) -> str:
    submitted = job.get("submit_time")
    return f", submitted {duration(now - submitted)} ago" if submitted else ""


def _on_nodes(job: Job) -> str:
    nodes = job.get("nodes") or []
    if not nodes:
        return ""
    if len(nodes) <= 4:
        return " on " + ", ".join(nodes)
    return f" on {', '.join(nodes[:3])} and {len(nodes) - 3:,} more nodes"


def _ran_for(job: Job) -> str:
    start, end = job.get("start_time"), job.get("end_time")
    if start is None or end is None:
        return " without starting" if start is None else ""
    return f" after running {duration(end - start)}"


def _attempts_sentence(job: Job) -> list[str]:
    preemptions = job.get("preemptions", 0)
    attempts = job.get("attempts", 0)
    if not preemptions and attempts <= 1:
        return []
    return [
        f"It has been preempted {preemptions} time{'s' if preemptions != 1 else ''} "
        f"and started {attempts} time{'s' if attempts != 1 else ''}."
    ]
