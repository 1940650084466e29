"""A first, light pass over job files, before the job model loads: a bad file answers fast.

The job model (`toposched.JobSpec`, pydantic) costs about 0.15 s of imports and schema building
before it can refuse anything, which would put every error exit of `toposched place` past
0.2 s. This pass reads each file as the model's reader does (the same limits, the same
`FILE:LINE:` errors for unreadable files, YAML syntax and alias expansion) and checks every job
as the model does, with the model's own rules (`toposched.jobs.rules`, which its validators
call): the fields in the model's order, each field's value, missing fields, unknown fields (each
mapping's after its fields), then the checks across fields once every field is valid. So a bad
job gets the model's message, word for word, with the same further problems listed after the
first. So are files with no job and job names used twice, as the model's reader finds them.

`JOB` is the model's shape and rules; tests/test_cli_start.py checks that its fields agree with
JobSpec's, and tests/test_light_values.py that its errors equal the model's.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple

from toposched.cluster.documents import parse_documents, read_text
from toposched.cluster.errors import InputError, join_fields, unknown_field_rule
from toposched.cluster.units import MILLI_PER_GPU, parse_duration
from toposched.jobs import rules
from toposched.jobs.entries import JobEntry, NameRegister, job_entries, no_job_error

__all__ = [
    "JOB",
    "JOB_FIELDS",
    "LIGHT_PASS_BYTES",
    "LIGHT_PASS_VALUES",
    "CheckedJob",
    "FieldRule",
    "Fields",
    "ModelRules",
    "check_job",
    "check_job_files",
    "check_jobs_against_cluster",
    "check_values_against_cluster",
    "left_to_the_model",
]

Check = Callable[[Any, Mapping[str, Any]], Any]
"""A field's rule: its value as written and the fields of its mapping checked before it (as
pydantic's `info.data`) -> the value as the model stores it, or InputError."""


class FieldRule(NamedTuple):
    """How the job model reads one field of a mapping."""

    check: Check | None = None
    """The field's own rule, run first; None for none."""
    model: ModelRules | None = None
    """The mapping the value holds (a list of them with `many`), read by its own rules."""
    many: bool = False
    required: bool = False
    missing: str = "is required"
    """The rule when a required field is left out."""
    after: Callable[[Any], None] | None = None
    """A rule on the field's checked mapping, once every field of it is valid."""
    defer: bool = False
    """The light pass has no rules for this field: a job that writes it is left to the model
    whole."""


class ModelRules(NamedTuple):
    """How the job model reads one mapping: its fields in order, what it fills in before they
    are read, and the rule across its fields once each is valid."""

    fields: Mapping[str, FieldRule]
    before: Callable[[Mapping[Any, Any]], Mapping[Any, Any]] | None = None
    after: Callable[[Mapping[str, Any]], None] | None = None


def _value(rule: Callable[[Any], Any]) -> Check:
    """A field rule that reads the value alone."""
    return lambda value, _earlier: rule(value)


def _groups(topology: Mapping[str, Any]) -> list[rules.Group]:
    return [rules.Group(group["level"], group["pods"]) for group in topology.get("slices", ())]


def _asks_for_something(resources: Mapping[str, Any]) -> None:
    gpu_milli_total = resources["gpus"] * resources.get("gpu_milli", MILLI_PER_GPU)
    rules.asks_for_something(gpu_milli_total, resources.get("cpu", 0), resources.get("memory", 0))


def _outermost_slice_divides_pods(job: Mapping[str, Any]) -> None:
    rules.check_slice_sizes(_groups(job.get("topology", {})), job["pods"], "topology.")


_SLICE = ModelRules(
    {
        "level": FieldRule(_value(rules.slice_level), required=True),
        "pods": FieldRule(_value(rules.pod_count), required=True),
    }
)
_TOPOLOGY = ModelRules(
    {
        "required": FieldRule(_value(rules.optional_level)),
        "preferred": FieldRule(_value(rules.optional_level)),
        "slices": FieldRule(_value(rules.slice_list), model=_SLICE, many=True),
    },
    after=lambda topology: rules.check_slice_sizes(_groups(topology), None, ""),
)
_RESOURCES = ModelRules(
    {
        "gpus": FieldRule(_value(rules.whole_gpus)),
        "gpu_milli": FieldRule(lambda value, earlier: rules.gpu_share(value, earlier.get("gpus"))),
        "cpu": FieldRule(_value(rules.cpu_millicores)),
        "memory": FieldRule(_value(rules.memory_mib)),
        "gpu_models": FieldRule(_value(rules.gpu_model_names)),
    },
    before=rules.one_shared_gpu_when_fractional,
)
_POD_SET = ModelRules(
    {
        "name": FieldRule(_value(rules.set_name), required=True),
        "pods": FieldRule(_value(rules.pod_count), required=True),
        "resources_per_pod": FieldRule(model=_RESOURCES, required=True, after=_asks_for_something),
        "topology": FieldRule(model=_TOPOLOGY),
        "min_pods": FieldRule(_value(rules.min_pods)),
    },
    after=lambda pod_set: rules.check_min_pods(
        pod_set.get("min_pods"), pod_set["pods"], _groups(pod_set.get("topology", {}))
    ),
)
"""A pod set's fields; a job with pod sets is left to the model whole (`defer`)."""
JOB = ModelRules(
    {
        "name": FieldRule(_value(rules.job_name), required=True),
        "account": FieldRule(_value(rules.account_path)),
        "priority": FieldRule(_value(rules.priority)),
        "min_runtime": FieldRule(_value(parse_duration)),
        "resumable": FieldRule(_value(rules.strict_bool)),
        "expected_runtime": FieldRule(_value(rules.positive_duration)),
        "grace_period": FieldRule(_value(rules.optional_duration)),
        "pods": FieldRule(_value(rules.pod_count), required=True, missing=rules.SHAPE_REQUIRED),
        "resources_per_pod": FieldRule(
            model=_RESOURCES,
            required=True,
            missing=rules.SHAPE_REQUIRED,
            after=_asks_for_something,
        ),
        "topology": FieldRule(model=_TOPOLOGY),
        "pod_sets": FieldRule(model=_POD_SET, many=True, defer=True),
        "submit_time": FieldRule(_value(rules.clock_time)),
    },
    after=_outermost_slice_divides_pods,
)
"""JobSpec's fields and rules, with those of resources_per_pod, topology, its slices and the
pod sets."""
SUBMITTED_JOB = ModelRules(
    {
        **{name: rule for name, rule in JOB.fields.items() if name not in rules.SERVER_SET_FIELDS},
        rules.RUN_FIELD: FieldRule(),
    },
    after=JOB.after,
)
"""A job document submitted to the service: JobSpec's fields but those the server sets, and
`run`, which the server checks (`toposched.service.documents`)."""


class Fields(NamedTuple):
    """The fields of one mapping of a job, in the model's order, and the fields among them
    that hold a mapping (or a list of mappings) of their own."""

    names: tuple[str, ...]
    nested: Mapping[str, Fields]


def _fields(model: ModelRules) -> Fields:
    nested = {name: _fields(rule.model) for name, rule in model.fields.items() if rule.model}
    return Fields(tuple(model.fields), nested)


JOB_FIELDS = _fields(JOB)
"""A job's field names (JobSpec's), with those of resources_per_pod, topology and its slices."""

LIGHT_PASS_BYTES = 1 << 20
LIGHT_PASS_VALUES = 100_000
"""Files larger than LIGHT_PASS_BYTES that also write more than LIGHT_PASS_VALUES values (counted
by their `:` and `,`) are left to the model alone: parsing them twice would cost more than the
model's imports. A large file of few values (one long name) is checked here."""


def left_to_the_model(text: str) -> bool:
    """Whether a file of `text` is too large for a light pass (see LIGHT_PASS_VALUES)."""
    return len(text) > LIGHT_PASS_BYTES and text.count(":") + text.count(",") > LIGHT_PASS_VALUES


class CheckedJob(NamedTuple):
    """A job the light pass found valid: its checked values, and where it was written."""

    values: Mapping[str, Any]
    """Each field written, as the model stores it; mappings as dicts of their fields."""
    entry: JobEntry

    def locate(self, error: InputError) -> InputError:
        """`error`, whose field is one of this job's, with the file and line of that field."""
        return self.entry.locate(error)


def check_job_files(paths: Sequence[str | os.PathLike[str]]) -> list[CheckedJob]:
    """Refuse a job file given twice, and the first that cannot be read or parsed, holds a job
    the model would refuse, holds no job, or uses a job name again, as the model's reader finds
    them; the jobs checked, to check against a cluster. A job or a file these rules leave to
    the model (`defer`, `left_to_the_model`) ends the pass, the model's reader finding what
    comes after: then no job is returned, since the model's errors in the jobs left come before
    those against the cluster."""
    _check_given_once(paths)
    checked: list[CheckedJob] = []
    names = NameRegister()
    for path in paths:
        file = Path(path)
        text = read_text(file, "job file")
        if left_to_the_model(text):
            return []
        documents = parse_documents(text, str(file), json_text=file.suffix.lower() == ".json")
        entries = job_entries(documents)
        in_file = NameRegister()
        in_full: list[CheckedJob] = []
        for entry in entries:
            try:
                values = check_job(entry.data)
            except InputError as error:
                raise entry.locate(error) from None
            if values is None:
                return []
            in_file.add(values["name"], entry)
            in_full.append(CheckedJob(values, entry))
        if not entries:
            raise no_job_error(str(file))
        for job in in_full:
            names.add(job.values["name"], job.entry)
        checked.extend(in_full)
    return checked


def check_job(data: Any, model: ModelRules = JOB) -> dict[str, Any] | None:
    """The job `data` (as written) checked as `JobSpec.from_dict` checks it, raising the same
    InputError; None for a job that writes a field with `defer`, left to the model (a field
    written as null is not written, as the model reads it)."""
    if isinstance(data, Mapping) and any(
        model.fields[key].defer and data[key] is not None for key in data if key in model.fields
    ):
        return None
    errors: list[InputError] = []
    values = _read(data, model, "", errors)
    if errors:
        raise errors[0].with_also(errors[1:])
    return values


def check_jobs_against_cluster(
    jobs: Sequence[CheckedJob], levels: Sequence[str], gpu_models: Sequence[str]
) -> None:
    """Refuse the first job that names a level or only GPU models a cluster lacks, given the
    cluster's levels (outermost first) and GPU models: the errors of
    `toposched.placement.request.check_against_cluster`, without the job model."""
    for job in jobs:
        try:
            check_values_against_cluster(job.values, levels, gpu_models)
        except InputError as error:
            raise job.locate(error) from None


def check_values_against_cluster(
    values: Mapping[str, Any], levels: Sequence[str], gpu_models: Sequence[str]
) -> None:
    """`check_jobs_against_cluster` for one job's checked values (`check_job`), its error's
    field the job's own."""
    topology = values.get("topology", {})
    resources = values["resources_per_pod"]
    rules.check_levels(
        topology.get("required"),
        topology.get("preferred"),
        _groups(topology),
        levels,
        values["pods"],
    )
    rules.check_models_present(resources.get("gpu_models"), resources["gpus"], gpu_models)


# --- reading a mapping as the model does --------------------------------------------------------

_REFUSED = object()
"""A field's value that broke a rule (its error is listed)."""


def _read(data: Any, model: ModelRules, at: str, errors: list[InputError]) -> dict[str, Any] | None:
    """`data` read by `model`'s rules, the mapping's errors appended to `errors` in the order
    the model lists them; None when there are any. `at` is the mapping's field ("" for a job)."""
    if not isinstance(data, Mapping):
        rule = f"must be a mapping with fields {', '.join(model.fields)}"
        errors.append(InputError(at or "job", data, rule))
        return None
    found = len(errors)
    if model.before is not None:
        data = model.before(data)
    checked: dict[str, Any] = {}
    for name, field_rule in model.fields.items():
        field = join_fields(at, name)
        if name not in data or (field_rule.defer and data[name] is None):
            if field_rule.required:
                errors.append(InputError(field, None, field_rule.missing))
            continue
        value = _read_field(data[name], field_rule, checked, field, errors)
        if value is not _REFUSED:
            checked[name] = value
    for key, value in data.items():
        if key not in model.fields:
            # A key that is not a string (YAML reads `1: x` as a number) is shown as itself.
            shown = value if isinstance(key, str) else key
            errors.append(
                InputError(join_fields(at, str(key)), shown, unknown_field_rule(key, model.fields))
            )
    if len(errors) > found:
        return None
    if model.after is not None:
        try:
            model.after(checked)
        except InputError as error:
            errors.append(InputError(join_fields(at, error.field), error.value, error.rule))
            return None
    return checked


def _read_field(
    written: Any,
    field_rule: FieldRule,
    earlier: Mapping[str, Any],
    field: str,
    errors: list[InputError],
) -> Any:
    """One field's value checked, or _REFUSED with its errors appended."""
    value = written
    if field_rule.check is not None:
        try:
            value = field_rule.check(written, earlier)
        except InputError as error:
            errors.append(InputError(field, written, error.rule))
            return _REFUSED
    if field_rule.model is None:
        return value
    if field_rule.many:
        read = [
            _read(item, field_rule.model, f"{field}[{index}]", errors)
            for index, item in enumerate(value)
        ]
        if any(item is None for item in read):
            return _REFUSED
        return read
    mapping = _read(value, field_rule.model, field, errors)
    if mapping is None:
        return _REFUSED
    if field_rule.after is not None:
        try:
            field_rule.after(mapping)
        except InputError as error:
            errors.append(InputError(field, written, error.rule))
            return _REFUSED
    return mapping


# --- finding the jobs ---------------------------------------------------------------------------


def _check_given_once(paths: Sequence[str | os.PathLike[str]]) -> None:
    """A file given twice would hold every one of its job names twice: say so plainly."""
    seen: dict[Path, int] = {}
    for position, path in enumerate(paths, 1):
        first = seen.setdefault(Path(os.path.realpath(path)), position)
        if first != position:
            rule = f"is given twice (job files {first} and {position}); give each file once"
            raise InputError("job file", Path(path), rule)
