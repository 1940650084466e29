"""The consoles commands print to: as wide as the terminal, and wide enough to read when the
output goes to a file or a CI log (where rich would assume 80 columns and wrap every table)."""

from __future__ import annotations

import os

from rich.console import Console

PIPED_WIDTH = 120
"""Columns of output that goes to a file or a pipe, unless COLUMNS says otherwise."""


def output_console(stderr: bool = False) -> Console:
    """A console on stdout (or stderr); `PIPED_WIDTH` columns when it is not a terminal."""
    console = Console(stderr=stderr)
    if not console.is_terminal and "COLUMNS" not in os.environ:
        console.width = PIPED_WIDTH
    return console
