"""What every client command shares: the connection options, error handling with exit codes,
JSON output and the way times are shown."""

from __future__ import annotations

import argparse
import functools
import json
import textwrap
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from rich.console import Console, JustifyMethod
from rich.table import Table
from rich.text import Text

from toposched.cli.client import ApiClient, ClientError, ExitCode
from toposched.cli.connection import DEFAULT_SERVER, resolve_connection
from toposched.cli.console import output_console
from toposched.cluster.errors import ToposchedError

EXIT_CODES = (
    """\
exit codes:
  0  success
  2  bad usage or input: a local file unreadable or invalid, or the server's 422
  3  the server refused: 401 bad or missing token, 403 not yours, 404 no such job or node,
     409 conflict (e.g. the job already ended), 413 too large
  4  cannot reach the server, or it failed (5xx, timeout)

server and token: --server/--token, else TOPOSCHED_SERVER/TOPOSCHED_TOKEN, else
$XDG_CONFIG_HOME/toposched/client.yaml (keys server, token; keep it chmod 600); the server
defaults to """
    + DEFAULT_SERVER
)

HELP_WIDTH = 92

ClientHandler = Callable[[argparse.Namespace, ApiClient], int]


def add_client_parser(
    commands: Any,
    name: str,
    help_text: str,
    description: str,
    examples: str,
    json_option: bool = True,
) -> argparse.ArgumentParser:
    """A client subcommand with the connection options and --json, its examples and the exit
    codes in its --help."""
    parser: argparse.ArgumentParser = commands.add_parser(
        name,
        help=help_text,
        description=_paragraphs(description),
        epilog=f"examples:\n{examples}\n\n{EXIT_CODES}",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    options = parser.add_argument_group("connection and output")
    options.add_argument(
        "--server",
        metavar="URL",
        help=f"the server's URL (default: TOPOSCHED_SERVER, the config file, {DEFAULT_SERVER})",
    )
    options.add_argument(
        "--token",
        metavar="TOKEN",
        help="bearer token (default: TOPOSCHED_TOKEN, then the config file; prefer those: "
        "a flag is visible to others in the process list)",
    )
    if json_option:
        options.add_argument(
            "--json", action="store_true", help="print the server's JSON answer, unchanged"
        )
    return parser


def _paragraphs(text: str) -> str:
    """`text` wrapped to the terminal-friendly width, paragraph by paragraph."""
    return "\n\n".join(textwrap.fill(paragraph, HELP_WIDTH) for paragraph in text.split("\n\n"))


def client_command(handler: ClientHandler) -> Callable[[argparse.Namespace], int]:
    """`handler` run with a client connected per the options; any error becomes one line on
    stderr and the exit code for it."""

    @functools.wraps(handler)
    def run(args: argparse.Namespace) -> int:
        try:
            connection = resolve_connection(
                args.server, args.token, warn=lambda message: tell(message, "warning")
            )
            with ApiClient(connection) as client:
                return handler(args, client)
        except ClientError as error:
            tell(str(error), "error")
            return int(error.exit_code)
        except ToposchedError as error:
            tell(str(error), "error")
            return int(ExitCode.BAD_INPUT)

    return run


LABEL_STYLES = {"error": "bold red", "warning": "yellow"}


def say(text: str, style: str = "") -> None:
    """One line of output as is (server text may hold brackets: no markup), left to the
    terminal to wrap so that it greps and copies whole."""
    Console(soft_wrap=True).print(text, style=style, markup=False, highlight=False)


def tell(text: str, label: str) -> None:
    """An error or a warning on stderr, one line: `error: text`."""
    line = Text.assemble((f"{label}:", LABEL_STYLES[label]), " ", text)
    Console(stderr=True, soft_wrap=True).print(line, highlight=False)


def note(text: str) -> None:
    """A remark on stderr, dimmed, that is not the command's output."""
    Console(stderr=True, soft_wrap=True).print(Text(text, style="dim"), highlight=False)


def size(pods: int, gpu_count: float) -> str:
    """`1 pod, 1 GPU`, `2 pods, 8 GPUs`, `1 pod, 0.5 GPU`."""
    return f"{counted(pods, 'pod')}, {gpus(gpu_count)} GPU{'s' if gpu_count > 1 else ''}"


def counted(count: int, noun: str) -> str:
    """`1 node`, `2 nodes`, `1,000 jobs`."""
    return f"{count:,} {noun}{'' if count == 1 else 's'}"


@dataclass(frozen=True)
class Column:
    """A table column: `right` aligns numbers; a `cut` column holds long text kept to one
    line and cut with an ellipsis to the width the other columns leave; a `wrap` column holds
    long text on as many lines as that width needs."""

    header: str
    right: bool = False
    cut: bool = False
    wrap: bool = False


Cell = str | Text
"""A cell's text, shown as is (no markup); a Text for a styled cell."""


def print_table(title: str, columns: Sequence[Column], rows: Iterable[Sequence[Cell]]) -> None:
    """A table whose columns are never narrower than their widest cell, except `cut` and
    `wrap` ones."""
    texts = [[cell if isinstance(cell, Text) else Text(cell) for cell in row] for row in rows]
    table = Table(title=title)
    for index, column in enumerate(columns):
        justify: JustifyMethod = "right" if column.right else "left"
        if column.cut or column.wrap:
            table.add_column(column.header, justify=justify)
            continue
        widest = max([len(column.header)] + [row[index].cell_len for row in texts])
        table.add_column(column.header, justify=justify, no_wrap=True, min_width=widest)
    for row in texts:
        cells = [
            Text(cell.plain, style=cell.style, no_wrap=True, overflow="ellipsis")
            if column.cut
            else cell
            for column, cell in zip(columns, row, strict=True)
        ]
        table.add_row(*cells)
    output_console().print(table)


def print_json(document: Any) -> None:
    print(json.dumps(document, indent=2))


def print_json_line(document: Any) -> None:
    print(json.dumps(document), flush=True)


def clock(timestamp: float | None, now: float | None = None) -> str:
    """A time of day in local time, with the date when it is not within the last or next day."""
    if timestamp is None:
        return "-"
    current = time.time() if now is None else now
    if abs(current - timestamp) < 86_400:
        return time.strftime("%H:%M:%S", time.localtime(timestamp))
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(timestamp))


def duration(seconds: float | None) -> str:
    """`seconds` in the largest two units that matter: 45s, 12m, 2h05m, 3d04h."""
    if seconds is None:
        return "-"
    whole = max(0, round(seconds))
    if whole < 60:
        return f"{whole}s"
    minutes, secs = divmod(whole, 60)
    if minutes < 60:
        return f"{minutes}m{secs:02d}s" if minutes < 10 else f"{minutes}m"
    hours, minutes = divmod(minutes, 60)
    if hours < 24:
        return f"{hours}h{minutes:02d}m"
    days, hours = divmod(hours, 24)
    return f"{days}d{hours:02d}h"


def gpus(count: float) -> str:
    """A GPU count: whole numbers without a fraction, fractions with up to three digits."""
    return f"{count:,.0f}" if float(count).is_integer() else f"{count:,.3f}".rstrip("0")
