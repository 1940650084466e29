"""Request bodies as documents: JSON or guarded YAML, and a job document split into the
`JobSpec` the scheduler reads and the `run` section the backend reads."""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import yaml

from toposched.backends.protocol import RunSpec
from toposched.cluster.errors import InputError, unknown_field_rule
from toposched.jobs.rules import RUN_FIELD, SERVER_SET, SERVER_SET_FIELDS
from toposched.jobs.spec import JobSpec

MAX_DEPTH = 32
"""Nesting deeper than this is refused: no job or budget document needs it."""
MAX_COMMAND_ITEMS = 1024
MAX_ITEM_CHARS = 8192
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_RUN_FIELDS = ("command", "env", "workdir")
JOB_DOCUMENT_FIELDS = (
    *(name for name in JobSpec.model_fields if name not in SERVER_SET_FIELDS),
    RUN_FIELD,
)
"""The fields of a job document: JobSpec's but those the server sets, and `run`."""


def parse_body(body: bytes, content_type: str) -> Any:
    """The document in a request body: JSON, or YAML without aliases or deep nesting."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as error:
        raise InputError("body", body[:40].hex(), f"must be UTF-8 text ({error.reason})") from None
    kind = content_type.split(";")[0].strip().lower()
    if kind in ("application/yaml", "application/x-yaml", "text/yaml"):
        return _parse_yaml(text)
    return _parse_json(text)


def _no_constants(name: str) -> Any:
    raise InputError("body", name, "NaN and Infinity are not JSON numbers")


_DECODER = json.JSONDecoder(parse_constant=_no_constants)
"""One decoder for every body (`json.loads` with an option builds one per call)."""


def _parse_json(text: str) -> Any:
    try:
        document = _DECODER.decode(text)
    except json.JSONDecodeError as error:
        raise InputError("body", text[:80], f"is not valid JSON: {error.msg}") from None
    except RecursionError:
        raise InputError("body", text[:80], f"nests deeper than {MAX_DEPTH} levels") from None
    # A document nests no deeper than the brackets its text opens, strings' included.
    if text.count("{") + text.count("[") > MAX_DEPTH:
        _check_depth(document, text)
    return document


def _check_depth(document: Any, text: str) -> None:
    stack: list[tuple[Any, int]] = [(document, 0)]
    while stack:
        item, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise InputError("body", text[:80], f"nests deeper than {MAX_DEPTH} levels")
        if isinstance(item, Mapping):
            stack.extend((value, depth + 1) for value in item.values())
        elif isinstance(item, list):
            stack.extend((value, depth + 1) for value in item)


def _parse_yaml(text: str) -> Any:
    """YAML read event by event first: aliases (the billion-laughs expansion) and nesting past
    MAX_DEPTH are refused before any object is built."""
    depth = 0
    try:
        for event in yaml.parse(text, Loader=yaml.SafeLoader):
            if isinstance(event, yaml.AliasEvent):
                raise InputError("body", text[:80], "YAML aliases (*name) are not accepted")
            if isinstance(event, yaml.CollectionStartEvent):
                depth += 1
                if depth > MAX_DEPTH:
                    raise InputError("body", text[:80], f"nests deeper than {MAX_DEPTH} levels")
            elif isinstance(event, yaml.CollectionEndEvent):
                depth -= 1
        documents = list(yaml.safe_load_all(text))
    except yaml.YAMLError as error:
        problem = getattr(error, "problem", None) or "cannot be parsed"
        raise InputError("body", text[:80], f"is not valid YAML: {problem}") from None
    if len(documents) != 1:
        raise InputError("body", f"{len(documents)} documents", "must hold exactly one document")
    return documents[0]


def body_hash(document: Any) -> str:
    """A hash of the document's meaning, the same for equal JSON and YAML bodies."""
    canonical = json.dumps(document, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(canonical.encode()).hexdigest()


def split_job(document: Any) -> tuple[dict[str, Any], RunSpec | None]:
    """The job fields (for `JobSpec`) and the parsed `run` section of a job document."""
    if not isinstance(document, Mapping):
        raise InputError("job", _short(document), "must be a mapping of job fields")
    fields = {str(key): value for key, value in document.items()}
    for name in SERVER_SET_FIELDS:
        if name in fields:
            raise InputError(name, fields[name], SERVER_SET)
    unknown = [
        InputError(name, value, unknown_field_rule(name, JOB_DOCUMENT_FIELDS))
        for name, value in fields.items()
        if name not in JOB_DOCUMENT_FIELDS
    ]
    if unknown:
        raise unknown[0].with_also(unknown[1:])
    run = fields.pop(RUN_FIELD, None)
    return fields, parse_run(run)


def parse_run(run: Any) -> RunSpec | None:
    if run is None:
        return None
    if not isinstance(run, Mapping):
        raise InputError("run", _short(run), "must be a mapping with command, env, workdir")
    for key in run:
        if key not in _RUN_FIELDS:
            raise InputError(
                f"run.{key}", key, f"unknown field; valid fields are {', '.join(_RUN_FIELDS)}"
            )
    command = run.get("command")
    if (
        not isinstance(command, list)
        or not command
        or len(command) > MAX_COMMAND_ITEMS
        or not all(isinstance(item, str) and 0 < len(item) <= MAX_ITEM_CHARS for item in command)
    ):
        raise InputError(
            "run.command",
            _short(command),
            f"must be a non-empty list of at most {MAX_COMMAND_ITEMS} non-empty strings "
            "(argv, no shell)",
        )
    return RunSpec(tuple(command), _parse_env(run.get("env")), _parse_workdir(run.get("workdir")))


def _parse_env(env: Any) -> dict[str, str]:
    if env is None:
        return {}
    if not isinstance(env, Mapping):
        raise InputError("run.env", _short(env), "must be a mapping of NAME: value")
    parsed: dict[str, str] = {}
    for name, value in env.items():
        if not isinstance(name, str) or not _ENV_NAME.fullmatch(name):
            raise InputError("run.env", _short(name), "names are letters, digits and _")
        if isinstance(value, bool) or not isinstance(value, str | int | float):
            raise InputError(f"run.env.{name}", _short(value), "must be a string or a number")
        if len(str(value)) > MAX_ITEM_CHARS:
            raise InputError(f"run.env.{name}", _short(value), "is too long")
        parsed[name] = str(value)
    return parsed


def _parse_workdir(workdir: Any) -> str | None:
    if workdir is None:
        return None
    if not isinstance(workdir, str) or not workdir or "\0" in workdir:
        raise InputError("run.workdir", _short(workdir), "must be a folder path")
    return workdir


def run_to_dict(run: RunSpec | None) -> dict[str, Any] | None:
    if run is None:
        return None
    written: dict[str, Any] = {"command": list(run.command), "env": dict(run.env)}
    if run.workdir is not None:
        written["workdir"] = run.workdir
    return written


def job_spec(fields: Mapping[str, Any], submit_time: float | None = None) -> JobSpec:
    """Validate the job fields; `submit_time` is the server's."""
    data = dict(fields)
    if submit_time is not None:
        data["submit_time"] = submit_time
    return JobSpec.from_dict(data)


def stored_document(spec: JobSpec, run: RunSpec | None) -> dict[str, Any]:
    """The job document kept in the store and shown as a Job's `spec`."""
    return _with_run(spec.to_dict(), run)


def _with_run(written: dict[str, Any], run: RunSpec | None) -> dict[str, Any]:
    run_written = run_to_dict(run)
    if run_written is not None:
        written["run"] = run_written
    return written


@dataclass(frozen=True)
class AcceptedJob:
    """A submitted job validated: the spec the scheduler takes, the document the store keeps
    and that document as JSON text (None: not made yet)."""

    spec: JobSpec
    document: dict[str, Any]
    text: str | None = None


@dataclass(frozen=True)
class _Shape:
    """A shape's first job: its spec, its document and the document's JSON text between the
    name and the submit time (None where `to_dict` does not put those first and last)."""

    spec: JobSpec
    document: dict[str, Any]
    middle: str | None

    @staticmethod
    def of(spec: JobSpec, document: dict[str, Any]) -> _Shape:
        fields = list(document)
        if fields[0] != "name" or fields[-1] != "submit_time":
            return _Shape(spec, document, None)
        middle = {key: value for key, value in document.items() if key in fields[1:-1]}
        return _Shape(spec, document, json.dumps(middle)[1:-1])

    def text(self, spec: JobSpec, run: dict[str, Any] | None) -> str | None:
        """`json.dumps` of this shape's document for `spec` (renamed) and `run`, the parts
        that are the shape's dumped once."""
        if self.middle is None or type(spec.submit_time) is not float:
            return None
        ran = "" if run is None else f', "run": {json.dumps(run)}'
        name, time = json.dumps(spec.name), float.__repr__(spec.submit_time)
        return f'{{"name": {name}, {self.middle}, "submit_time": {time}{ran}}}'


class JobShapes:
    """Submitted jobs validated once per shape: the job fields but for the name. A job whose
    shape was seen is the earlier job's spec renamed (`JobSpec.renamed`: its name and submit
    time checked by their rules, nothing else validated again) with the earlier document's
    values, equal to what `job_spec` and `stored_document` give, at a small part of their
    cost: a service takes many jobs of few shapes. Documents share their nested values (the
    store's documents are never changed in place)."""

    LIMIT = 4096
    """Shapes kept; past it the memory starts again (a service with more shapes than this
    validates most jobs in full, as without it)."""

    def __init__(self) -> None:
        self._known: dict[str, _Shape] = {}

    def accept(
        self, fields: Mapping[str, Any], run: RunSpec | None, submit_time: float
    ) -> AcceptedJob:
        """`job_spec(fields, submit_time)` and its `stored_document`; InputError as theirs."""
        # The shape's key is its repr: equal only for fields of equal values of the same types
        # (1, 1.0 and True apart). Fields in another order only miss.
        key = repr({field: value for field, value in fields.items() if field != "name"})
        known = self._known.get(key)
        if known is not None:
            try:
                spec = known.spec.renamed(fields.get("name"), submit_time)
            except InputError:
                pass  # validated in full below, for the error `from_dict` gives
            else:
                # The document's fields in `to_dict`'s order: the name first, the time last.
                document = {**known.document, "name": spec.name, "submit_time": spec.submit_time}
                run_written = run_to_dict(run)
                if run_written is not None:
                    document["run"] = run_written
                return AcceptedJob(spec, document, known.text(spec, run_written))
        spec = job_spec(fields, submit_time)
        written = spec.to_dict()
        if len(self._known) >= self.LIMIT:
            self._known.clear()
        self._known[key] = _Shape.of(spec, written)
        return AcceptedJob(spec, _with_run(dict(written), run))


_SHAPES = JobShapes()


def accept_job(fields: Mapping[str, Any], run: RunSpec | None, submit_time: float) -> AcceptedJob:
    """A submitted job's spec and stored document (`JobShapes.accept`, one memory for the
    process: what it holds is a function of the fields alone)."""
    return _SHAPES.accept(fields, run, submit_time)


def short(value: Any, limit: int = 80) -> str:
    """A value as shown in an error: at most `limit` characters."""
    text = value if isinstance(value, str) else repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


_short = short
