"""A policy file (`--policy FILE`): the scheduling policy's flags written once as a YAML or JSON
mapping, each setting named as its flag without the dashes, each value as it would follow the
flag (a switch takes true or false):

    checkpoint-wait: 1h
    urgent-priority: 10
    eviction-worth: 1
    eviction-worth-scope: own-account
    unallocated-headroom: 0.5
    unallocated-headroom-reserved: true

Every setting the command line leaves at its default is taken from the file, so a flag given
there wins. Each value is checked by its flag's own rule, and a bad one is refused with the
file, line, setting, value and rule before anything runs."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from toposched.cli.policy_options import add_policy_options
from toposched.cluster.documents import Document, parse_documents, read_text
from toposched.cluster.errors import InputError, did_you_mean

__all__ = ["POLICY_FILE_FLAG", "setting_line", "with_policy_file"]

POLICY_FILE_FLAG = "--policy"

_TYPE_WORDS = {int: "a whole number", float: "a number"}


def with_policy_file(args: argparse.Namespace, path: str) -> argparse.Namespace:
    """`args` with every policy setting it leaves at its default taken from the policy file at
    `path` (a copy; `args` is left as it was). Raises InputError, naming the file and line,
    for a file that is unreadable, not one mapping, names a setting that is no policy flag or
    gives one a value its flag refuses."""
    actions = _policy_actions()
    document = _read(path)
    settings: dict[str, Any] = document.data if document.data is not None else {}
    merged = argparse.Namespace(**vars(args))
    for name, written in settings.items():
        line = document.line((name,))
        action = actions.get(name) if isinstance(name, str) else None
        if action is None:
            rule = f"is not a policy setting{did_you_mean(name, actions)}; the settings are "
            raise InputError(str(name), written, rule + ", ".join(actions), file=path, line=line)
        try:
            value = _value(action, written)
        except InputError as error:
            raise InputError(name, written, error.rule, file=path, line=line) from None
        if getattr(merged, action.dest, action.default) == action.default:
            setattr(merged, action.dest, value)
    return merged


def setting_line(path: str, name: str) -> int | None:
    """The line of the policy file at `path` that gives the setting `name` (None: unknown)."""
    return _read(path).line((name,))


def _read(path: str) -> Document:
    text = read_text(Path(path), "policy file")
    documents = parse_documents(text, path, json_text=path.lower().endswith(".json"))
    if len(documents) > 1:
        raise InputError(
            "policy", f"{len(documents)} documents", "a policy file holds one mapping", file=path
        )
    document = documents[0] if documents else Document(None, path)
    if document.data is not None and not isinstance(document.data, dict):
        raise InputError(
            "policy",
            document.data,
            "must be a mapping of settings to values, e.g. 'checkpoint-wait: 1h'",
            file=path,
            line=document.line(()),
        )
    document.check_no_duplicate_keys()
    return document


def _policy_actions() -> dict[str, argparse.Action]:
    """The policy's flags by their name without the dashes, in `--help`'s order (a policy
    file names no other policy file)."""
    actions = {}
    for action in add_policy_options(argparse.ArgumentParser(add_help=False)):
        for flag in action.option_strings:
            if flag.startswith("--") and flag != POLICY_FILE_FLAG:
                actions[flag[2:]] = action
    return actions


def _value(action: argparse.Action, written: Any) -> Any:
    """The value its flag reads from `written`, by the flag's own rule (InputError if not)."""
    if action.nargs == 0:  # a switch: --flag or nothing
        if not isinstance(written, bool):
            raise InputError("", written, "must be true or false (a switch)")
        return action.const if written else action.default
    if written is False and _takes_off(action):
        written = "off"  # YAML reads a bare `off` as false
    if isinstance(written, bool) or not isinstance(written, str | int | float):
        raise InputError("", written, "must be one value, as written after the flag")
    text = str(written)
    if action.choices is not None and text not in action.choices:
        raise InputError("", written, f"must be one of {', '.join(map(str, action.choices))}")
    if action.type is None:
        return text
    reader: Any = action.type
    try:
        return reader(text)
    except argparse.ArgumentTypeError as error:
        rule = str(error)
        quoted = f"{text!r}: "
        raise InputError("", written, rule.removeprefix(quoted)) from None
    except (TypeError, ValueError):
        expected = _TYPE_WORDS.get(reader, "a value its flag accepts")
        raise InputError("", written, f"expected {expected}") from None


def _takes_off(action: argparse.Action) -> bool:
    """Whether the flag takes the word `off` (e.g. `--eviction-worth off`)."""
    reader: Any = action.type
    try:
        return reader is not None and reader("off") == "off"
    except (argparse.ArgumentTypeError, TypeError, ValueError):
        return False
