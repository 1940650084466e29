"""Client commands about jobs: `submit`, `jobs`, `show`, `cancel`, `prio` and `queue`."""

from __future__ import annotations

import argparse
import hashlib
import shlex
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.table import Table
from rich.text import Text

from toposched.cli.client import ApiClient, ClientError, Job, JobState, Submitted
from toposched.cli.console import output_console
from toposched.cli.jobcheck import SUBMITTED_JOB, check_job
from toposched.cli.remote import (
    Cell,
    Column,
    add_client_parser,
    client_command,
    clock,
    counted,
    duration,
    gpus,
    note,
    print_json,
    print_json_line,
    print_table,
    say,
    size,
)
from toposched.cluster.documents import parse_documents, read_text
from toposched.cluster.errors import InputError
from toposched.jobs.entries import JobEntry
from toposched.jobs.rules import SERVER_SET, SERVER_SET_FIELDS

MAX_KEY_LENGTH = 200
PAGE_SIZE = 500


@dataclass(frozen=True)
class JobFile:
    """A job document read from a file, sent to the server byte for byte."""

    path: Path
    body: bytes
    content_type: str
    idempotency_key: str


def default_idempotency_key(path: Path, body: bytes) -> str:
    """A key that names this file's content at this path: submitting the same unchanged file
    again answers the job it made the first time."""
    digest = hashlib.sha256(str(path.resolve()).encode() + b"\0" + body).hexdigest()
    return f"file-{digest}"


def read_job_file(path: Path, key: str | None) -> JobFile:
    """The job document in `path` (one job per file, YAML or JSON by its suffix), read within
    the limits every loader keeps (size, alias expansion), checked to be a single mapping
    and its job fields checked as `place` checks them; the server checks them again."""
    file = str(path)
    text = read_text(path, "job file")
    is_json = path.suffix.lower() == ".json"
    documents = parse_documents(text, file, json_text=is_json)
    if len(documents) != 1:
        raise InputError(
            "jobs",
            f"{len(documents)} documents",
            "must hold exactly one job; put each job in its own file",
            file=file,
        )
    (document,) = documents
    if not isinstance(document.data, dict):
        raise InputError(
            "job",
            type(document.data).__name__,
            "must be one job: a mapping with name, account, pods, resources_per_pod, ...",
            file=file,
            line=document.line(()),
        )
    # The job's fields get the light pass `place` runs (cli/jobcheck.py), with its errors, before
    # anything is sent; its `run` section is the server's to check.
    try:
        for name in SERVER_SET_FIELDS:
            if name in document.data:
                raise InputError(name, document.data[name], SERVER_SET)
        check_job(document.data, SUBMITTED_JOB)
    except InputError as error:
        raise JobEntry(document, (), document.data).locate(error) from None
    body = text.encode("utf-8")  # the bytes read: valid UTF-8 decodes and encodes unchanged
    chosen = key if key is not None else default_idempotency_key(path, body)
    content_type = "application/json" if is_json else "application/yaml"
    return JobFile(path, body, content_type, chosen)


def _keys_for(count: int, key: str | None) -> list[str | None]:
    """One key per file: the given key for one file, `KEY-1`, `KEY-2`, ... for several."""
    if key is None:
        return [None] * count
    keys: list[str | None] = (
        [key] if count == 1 else [f"{key}-{index}" for index in range(1, count + 1)]
    )
    for each in keys:
        if not each or len(each) > MAX_KEY_LENGTH:
            raise InputError("--idempotency-key", key, f"must be 1 to {MAX_KEY_LENGTH} characters")
    return keys


def register(commands: Any) -> None:
    _register_submit(commands)
    _register_jobs(commands)
    show = add_client_parser(
        commands,
        "show",
        "one job: state, times, nodes, what it runs",
        "Show one job as the server knows it: account, state, priority, size, when it was "
        "submitted, started and ended, its nodes, attempts and preemptions, and its command.",
        "  toposched show train-7b\n  toposched show train-7b --json | jq .nodes",
    )
    show.add_argument("job", metavar="JOB", help="the job's id (its name)")
    show.set_defaults(handler=client_command(_show))
    cancel = add_client_parser(
        commands,
        "cancel",
        "cancel a job: pending ones leave the queue, running ones stop",
        "Cancel a job. A pending job leaves the queue at once; a running one is sent a "
        "termination signal and stopped after its grace period. Cancelling a job that already "
        "ended is a conflict (exit 3).",
        "  toposched cancel train-7b",
    )
    cancel.add_argument("job", metavar="JOB", help="the job's id")
    cancel.set_defaults(handler=client_command(_cancel))
    prio = add_client_parser(
        commands,
        "prio",
        "change a job's priority within its team",
        "Change a job's priority. Priority orders jobs only within their team's account "
        "(higher first); it never moves a job ahead of another team's share.",
        "  toposched prio train-7b 10     # before the team's other jobs\n"
        "  toposched prio sweep-3 -5      # after them",
    )
    prio.add_argument("job", metavar="JOB", help="the job's id")
    prio.add_argument("priority", metavar="N", type=int, help="the new priority (an integer)")
    prio.set_defaults(handler=client_command(_prio))
    queue = add_client_parser(
        commands,
        "queue",
        "pending jobs in the order the scheduler will try them",
        "List the pending jobs in the order the scheduler will try them (budget and fair "
        "share first, then priority within a team, then submission time), each with why it "
        "waits. `toposched why JOB` says more about one.",
        "  toposched queue\n  toposched queue --account research/team-a",
    )
    queue.add_argument("--account", metavar="A", help="only this account and its sub-accounts")
    queue.set_defaults(handler=client_command(_queue))


def _register_submit(commands: Any) -> None:
    submit = add_client_parser(
        commands,
        "submit",
        "submit jobs from YAML/JSON files",
        "Submit jobs to the server, one job per file: the job YAML/JSON that `toposched place` "
        "reads, plus an optional `run:` section (command, env, workdir) saying what each pod "
        "runs. Each file's job fields are checked first, as `toposched place` checks them (a bad "
        "file exits 2 and nothing is sent); the file is then sent as it is, and the server "
        "checks it again and answers every problem with the field, the value and the rule.\n\n"
        "Re-running the same submit never makes a second job: each submission carries an "
        "idempotency key, by default derived from the file's content and its absolute path, "
        "so submitting an unchanged file again answers the job it already made (the output "
        "says 'already submitted'). A job's name is its id on the server and is never reused: "
        "to run a job again, give it a new name.",
        "  toposched submit train.yaml\n"
        "  toposched submit a.yaml b.yaml --json          # one JSON job per line\n"
        "  toposched submit train.yaml --idempotency-key run-2026-12-05\n\n"
        "a job file:\n"
        "  name: train-7b\n"
        "  account: research/team-a\n"
        "  pods: 2\n"
        "  resources_per_pod: {gpus: 4}\n"
        "  expected_runtime: 2h\n"
        "  run:\n"
        '    command: ["python", "train.py", "--lr", "3e-4"]\n'
        "    env: {WANDB_MODE: offline}",
    )
    submit.add_argument("files", nargs="+", metavar="FILE", help="job files (.yaml, .yml, .json)")
    submit.add_argument(
        "--idempotency-key",
        metavar="KEY",
        help="the key that makes a retried submission answer the same job, e.g. a CI run's "
        "id (default: from the file's content and path); with several files, KEY-1, KEY-2, "
        "... in order",
    )
    submit.set_defaults(handler=client_command(_submit))


def _register_jobs(commands: Any) -> None:
    jobs = add_client_parser(
        commands,
        "jobs",
        "list jobs, oldest submission first",
        "List jobs the token may see, oldest submission first, filtered by account (with its "
        "sub-accounts) and state.",
        "  toposched jobs\n"
        "  toposched jobs --account research/team-a --state running\n"
        "  toposched jobs --state failed --json | jq -r '.jobs[].id'",
    )
    jobs.add_argument("--account", metavar="A", help="only this account and its sub-accounts")
    jobs.add_argument(
        "--state",
        metavar="S",
        choices=[state.value for state in JobState],
        help="only jobs in this state: " + ", ".join(state.value for state in JobState),
    )
    jobs.add_argument(
        "--limit",
        metavar="N",
        type=int,
        default=1000,
        help="show at most N jobs (default 1000)",
    )
    jobs.set_defaults(handler=client_command(_jobs))


def _submit(args: argparse.Namespace, client: ApiClient) -> int:
    # Every file is read and checked before the first is sent.
    keys = _keys_for(len(args.files), args.idempotency_key)
    files = [read_job_file(Path(path), key) for path, key in zip(args.files, keys, strict=True)]
    for index, job_file in enumerate(files):
        try:
            submitted = client.submit(
                job_file.body, job_file.content_type, job_file.idempotency_key
            )
        except ClientError as error:
            rest = [str(each.path) for each in files[index + 1 :]]
            error.context = str(job_file.path)
            if rest:
                error.hint = f"not sent: {', '.join(rest)}"
            raise
        if args.json:
            print_json_line(submitted.job)
        else:
            say(_submitted_line(job_file, submitted))
    return 0


def _submitted_line(job_file: JobFile, submitted: Submitted) -> str:
    job = submitted.job
    what = "submitted" if submitted.created else "already submitted (same idempotency key)"
    return (
        f"{job_file.path}: {what}: job {job['id']} in {job['account']}, "
        f"{size(job['pods'], job['gpus'])}, {job['state']}"
    )


def _jobs(args: argparse.Namespace, client: ApiClient) -> int:
    if args.limit < 1:
        raise InputError("--limit", args.limit, "must be >= 1")
    state = JobState(args.state) if args.state else None
    found: list[Job] = []
    after: str | None = None
    while True:
        page = client.jobs(args.account, state, min(PAGE_SIZE, args.limit - len(found)), after)
        found.extend(page["jobs"])
        after = page["next"]
        if after is None or len(found) >= args.limit:
            break
    if args.json:
        print_json({"jobs": found, "next": after})
        return 0
    _print_jobs(found, more=after is not None)
    return 0


def _print_jobs(jobs: list[Job], more: bool) -> None:
    if not jobs:
        say("no jobs")
        return
    now = time.time()
    columns = [Column("job"), Column("account"), Column("state"), Column("GPUs", right=True)]
    columns += [Column("submitted", right=True), Column("ran", right=True)]
    columns += [Column("reason", cut=True)]
    rows: list[list[Cell]] = [
        [
            job["id"],
            job["account"],
            state_text(job["state"]),
            gpus(job["gpus"]),
            clock(job.get("submit_time"), now),
            _ran(job, now),
            job.get("reason") or "",
        ]
        for job in jobs
    ]
    print_table(counted(len(jobs), "job"), columns, rows)
    if more:
        note("more jobs match: raise --limit, or narrow with --account/--state")


def _ran(job: Job, now: float) -> str:
    start = job.get("start_time")
    if start is None:
        return "-"
    end = job.get("end_time")
    return duration((now if end is None else end) - start)


STATE_STYLES = {
    JobState.PENDING: "yellow",
    JobState.RUNNING: "green",
    JobState.FINISHED: "blue",
    JobState.FAILED: "red",
    JobState.CANCELLED: "dim",
}


def state_text(state: str) -> Text:
    """A job state, coloured."""
    try:
        return Text(state, style=STATE_STYLES[JobState(state)])
    except ValueError:
        return Text(state)


def _show(args: argparse.Namespace, client: ApiClient) -> int:
    job = client.job(args.job)
    if args.json:
        print_json(job)
        return 0
    now = time.time()
    table = Table(title=f"job {job['id']}", show_header=False)
    table.add_column("field", style="bold")
    table.add_column("value")
    nodes = job.get("nodes") or []
    shown_nodes = ", ".join(nodes[:8]) + (f" and {len(nodes) - 8:,} more" if len(nodes) > 8 else "")
    run = (job.get("spec") or {}).get("run") or {}
    command = run.get("command")
    rows: list[tuple[str, Cell]] = [
        ("account", job["account"]),
        ("state", state_text(job["state"])),
        ("reason", job.get("reason") or "-"),
        ("priority", str(job.get("priority", 0))),
        ("size", size(job["pods"], job["gpus"])),
        ("submitted", clock(job.get("submit_time"), now)),
        ("started", clock(job.get("start_time"), now)),
        ("ended", clock(job.get("end_time"), now)),
        ("ran for", _ran(job, now)),
        ("nodes", shown_nodes or "-"),
        ("attempts", str(job.get("attempts", 0))),
        ("preemptions", str(job.get("preemptions", 0))),
        ("unallocated", "yes: no budget pays for it" if job.get("unallocated") else "no"),
        ("command", shlex.join(command) if isinstance(command, list) else "-"),
    ]
    for field, value in rows:
        table.add_row(field, value)
    output_console().print(table)
    return 0


def _cancel(args: argparse.Namespace, client: ApiClient) -> int:
    job = client.cancel(args.job)
    if args.json:
        print_json(job)
        return 0
    outcome = (
        "stopping: it has its grace period to exit"
        if job["state"] == JobState.RUNNING
        else job["state"]
    )
    say(f"job {job['id']}: {outcome}")
    return 0


def _prio(args: argparse.Namespace, client: ApiClient) -> int:
    job = client.set_priority(args.job, args.priority)
    if args.json:
        print_json(job)
        return 0
    say(f"job {job['id']}: priority {job['priority']} in {job['account']} ({job['state']})")
    return 0


def _queue(args: argparse.Namespace, client: ApiClient) -> int:
    answer = client.queue(args.account)
    if args.json:
        print_json(answer)
        return 0
    entries = answer["queue"]
    if not entries:
        say("the queue is empty: no job is pending")
        return 0
    now = time.time()
    columns = [Column("#", right=True), Column("job"), Column("account")]
    columns += [Column("prio", right=True), Column("GPUs", right=True)]
    columns += [
        Column("waiting", right=True),
        Column("why it waits", cut=True),
    ]
    rows = [
        [
            str(entry["position"]),
            entry["id"],
            entry["account"],
            str(entry.get("priority", 0)),
            gpus(entry["gpus"]),
            duration(now - entry["submit_time"]) if entry.get("submit_time") else "-",
            entry.get("reason") or "",
        ]
        for entry in entries
    ]
    print_table(f"{len(entries):,} pending, in the order they will be tried", columns, rows)
    return 0
