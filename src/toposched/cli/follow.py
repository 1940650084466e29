"""Client commands that follow what happens: `watch` (the event stream) and `logs` (a pod's
output)."""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from toposched.cli.client import ApiClient, ClientError, Event, ExitCode, JobState, ServerError
from toposched.cli.remote import add_client_parser, client_command, clock, note, print_json_line
from toposched.cluster.errors import InputError

RECONNECT_PAUSE_S = 1.0
RECONNECT_TRIES = 60
LOG_POLL_S = 1.0
FOLLOW_WINDOW = 10_000
"""Lines of the log read at each poll of `logs --follow`: more than a pod writes in a second."""
EVENT_FIELDS = ("id", "time", "kind", "job")


def register(commands: Any) -> None:
    watch = add_client_parser(
        commands,
        "watch",
        "follow job state changes and decisions as they happen",
        "Print the service's events, one line each: submitted, bound, started, finished, "
        "failed, requeued, evicting, evicted, cancelled, priority, node. Every event has an "
        "increasing id. The stored events come first (all of them, or those after --after ID, "
        "e.g. the last one you saw), then new ones as they happen. If the connection breaks, "
        "watch reconnects and resumes where it stopped. Ctrl-C ends it (exit 0). A team token "
        "sees the events of its accounts' jobs only.",
        "  toposched watch                              # everything, then new events\n"
        "  toposched watch --after 1200                 # resume after event 1200\n"
        "  toposched watch --after 0 --no-follow --json # every stored event, JSON lines",
    )
    watch.add_argument("--after", metavar="ID", type=int, help="start after the event with this id")
    watch.add_argument(
        "--no-follow",
        action="store_true",
        help="print the stored events (after --after) and exit instead of waiting for more",
    )
    watch.add_argument("--count", metavar="N", type=int, help="exit after printing N events")
    watch.set_defaults(handler=client_command(_watch))
    logs = add_client_parser(
        commands,
        "logs",
        "a pod's captured output (local backend)",
        "Print what a pod of a job wrote to stdout and stderr (the local backend captures it): "
        "its last 1,000 lines (the server's default) or the last N with --tail. POD is the "
        "pod's rank, 0 by default. --follow waits for a pending job to start, then prints new "
        "output every second until the job ends (Ctrl-C stops following, exit 0).",
        "  toposched logs train-7b                   # pod 0, its last 1,000 lines\n"
        "  toposched logs train-7b 3 --tail 50       # the last 50 lines of pod 3\n"
        "  toposched logs train-7b --follow          # like tail -f, until the job ends",
        json_option=False,
    )
    logs.add_argument("job", metavar="JOB", help="the job's id")
    logs.add_argument(
        "pod", metavar="POD", type=int, nargs="?", default=0, help="pod rank (default 0)"
    )
    logs.add_argument("--tail", metavar="N", type=int, help="only the last N lines")
    logs.add_argument(
        "--follow", "-f", action="store_true", help="keep printing new output until the job ends"
    )
    logs.set_defaults(handler=client_command(_logs))


def event_line(event: Event) -> str:
    """One event as a line: id, time, kind, job, then its other fields as key=value."""
    extra = " ".join(
        f"{key}={value}"
        for key, value in event.items()
        if key not in EVENT_FIELDS and value not in (None, "")
    )
    job = event.get("job") or "-"
    return (
        f"{event['id']:>8}  {clock(event.get('time'))}  {event['kind']:<10} {job}  {extra}".rstrip()
    )


def _watch(args: argparse.Namespace, client: ApiClient) -> int:
    if args.count is not None and args.count < 1:
        raise InputError("--count", args.count, "must be >= 1")
    if args.after is not None and args.after < 0:
        raise InputError("--after", args.after, "must be >= 0")
    try:
        _print_events(args, client)
    except KeyboardInterrupt:
        pass
    return 0


def _print_events(args: argparse.Namespace, client: ApiClient) -> None:
    """Events until --count is reached, the stored ones are out (--no-follow), or Ctrl-C.
    A stream that ends or breaks, or a server not ready again yet, is retried every second
    and resumed after the last event printed; RECONNECT_TRIES failures in a row give up."""
    after: int | None = args.after
    printed = 0
    failures = 0
    connected = False  # a first connection that fails is an error at once
    while True:
        try:
            for event in client.events(after, follow=not args.no_follow):
                connected, failures = True, 0
                after = event["id"]
                if args.json:
                    print_json_line(event)
                else:
                    print(event_line(event), flush=True)
                printed += 1
                if args.count is not None and printed >= args.count:
                    return
            connected, failures = True, 0
        except ClientError as error:
            retry = connected and error.exit_code == ExitCode.UNAVAILABLE
            if not retry or failures >= RECONNECT_TRIES:
                raise
            if failures == 0:
                shown = "-" if after is None else after
                note(f"the event stream broke ({error}); resuming after event {shown}")
            failures += 1
        if args.no_follow:
            return
        time.sleep(RECONNECT_PAUSE_S)


def _logs(args: argparse.Namespace, client: ApiClient) -> int:
    if args.pod < 0:
        raise InputError("POD", args.pod, "must be a pod rank >= 0")
    if args.tail is not None and args.tail < 1:
        raise InputError("--tail", args.tail, "must be >= 1")
    if not args.follow:
        sys.stdout.write(client.pod_log(args.job, args.pod, args.tail))
        sys.stdout.flush()
        return 0
    try:
        _follow_log(args, client)
    except KeyboardInterrupt:
        pass
    return 0


def last_lines(text: str, count: int) -> str:
    """The last `count` lines of `text` (none for 0), with their line ends."""
    return "".join(text.splitlines(keepends=True)[-count:]) if count > 0 else ""


def complete_lines(text: str) -> str:
    """`text` up to its last line end: a line still being written is left for later."""
    return text[: text.rfind("\n") + 1]


def new_output(previous: str, current: str) -> str:
    """What the log's last lines now (`current`) add to its last lines at the previous poll
    (`previous`). While the log fits the window, `current` extends `previous`; once it is
    longer, the window slides and the old lines still in it are found at its start. No
    overlap at all (a new attempt's log, or more new lines than the window): all of it."""
    if current.startswith(previous):
        return current[len(previous) :]
    old = previous.splitlines(keepends=True)
    new = current.splitlines(keepends=True)
    for dropped in range(1, len(old)):
        kept = old[dropped:]
        if new[: len(kept)] == kept:
            return "".join(new[len(kept) :])
    return current


def _follow_log(args: argparse.Namespace, client: ApiClient) -> None:
    """Print the pod's output as it grows, polling, until the job has ended and its output is
    all printed. The first print honours --tail."""
    told_pending = False
    while JobState(client.job(args.job)["state"]) == JobState.PENDING:
        if not told_pending:
            note(f"job {args.job} is pending; waiting for it to start")
            told_pending = True
        time.sleep(LOG_POLL_S)
    previous: str | None = None
    while True:
        ended = JobState(client.job(args.job)["state"]).final
        text = _log_so_far(client, args.job, args.pod, must_exist=ended)
        current = text if ended else complete_lines(text)
        if previous is None:
            shown = current if args.tail is None else last_lines(current, args.tail)
        else:
            shown = new_output(previous, current)
        sys.stdout.write(shown)
        sys.stdout.flush()
        previous = current
        if ended:
            return
        time.sleep(LOG_POLL_S)


def _log_so_far(client: ApiClient, job: str, pod: int, must_exist: bool) -> str:
    """The last FOLLOW_WINDOW lines of the pod's log; "" while it has none yet (a started job's
    pod may not have written its log file), unless the job has ended (`must_exist`)."""
    try:
        return client.pod_log(job, pod, FOLLOW_WINDOW)
    except ServerError as error:
        if error.status == 404 and not must_exist:
            return ""
        raise
