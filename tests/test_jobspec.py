"""Tests for the job model: units, every field rule, topology levels, files and round trips."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from toposched.cluster.errors import InputError, shown
from toposched.cluster.units import (
    format_cpu_milli,
    format_duration,
    format_memory_mib,
    parse_cpu_milli,
    parse_duration,
    parse_memory_mib,
)
from toposched.jobs.resources import Resources
from toposched.jobs.spec import JobSpec, load_jobs
from toposched.jobs.topology_spec import Slice, TopologySpec

EXAMPLE_YAML = """\
name: pretrain-405b
account: research/pretraining/team-a
priority: 50
min_runtime: 4h
resumable: true
expected_runtime: 3d
pods: 2304
resources_per_pod: {gpus: 4, cpu: 64, memory: 512Gi, gpu_models: [GB300]}
topology:
  required: zone          # every pod within one zone
  preferred: block        # as few spine blocks as possible
  slices:
    - {level: rack, pods: 18}   # every 18 consecutive pods in one rack
"""

CLUSTER_LEVELS = ("zone", "block", "rack")
MIB_PER_GIB = 1024


def job_dict(**overrides: Any) -> dict[str, Any]:
    """A valid job as a user writes it, with top-level fields replaced by `overrides`."""
    written: dict[str, Any] = {
        "name": "train-7b",
        "pods": 8,
        "resources_per_pod": {"gpus": 8, "cpu": 96, "memory": "1Ti"},
    }
    written.update(overrides)
    return written


def with_resources(**fields: Any) -> dict[str, Any]:
    return job_dict(resources_per_pod=fields)


def with_topology(pods: int = 8, **fields: Any) -> dict[str, Any]:
    return job_dict(pods=pods, topology=fields)


# --- durations ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("written", "seconds"),
    [
        ("90s", 90.0),
        ("30m", 1800.0),
        ("4h", 14_400.0),
        ("3d", 259_200.0),
        ("1h30m", 5_400.0),
        ("1d 12h", 129_600.0),  # 1 day + 12 hours
        ("1d2h3m4s", 93_784.0),  # 86400 + 7200 + 180 + 4
        ("1.5h", 5_400.0),
        ("0.5s", 0.5),
        ("  45m  ", 2_700.0),
        ("3600", 3_600.0),  # a bare number is seconds
        ("0", 0.0),
        (3600, 3_600.0),
        (0.25, 0.25),
        (0, 0.0),
    ],
)
def test_parse_duration_reads(written: object, seconds: float) -> None:
    assert parse_duration(written) == seconds


@pytest.mark.parametrize(
    "written",
    ["", "   ", "30m1h", "1h1h", "-5m", "5 m", "30ms", "1w", "abc", "h", -1, -0.5, True, None,
     float("nan"), float("inf"), [1]],
)  # fmt: skip
def test_parse_duration_rejects(written: object) -> None:
    with pytest.raises(InputError) as caught:
        parse_duration(written, field="min_runtime")
    assert caught.value.field == "min_runtime"
    assert caught.value.value is written or caught.value.value == written
    assert "duration >= 0" in caught.value.rule


@pytest.mark.parametrize(
    ("seconds", "written"),
    [
        (0, "0s"),
        (59, "59s"),
        (90, "1m30s"),
        (3_600, "1h"),
        (5_400, "1h30m"),
        (259_200, "3d"),
        (93_784, "1d2h3m4s"),
        (0.1, "0.1s"),
        (3_600.5, "3600.5s"),
        (5e-05, "0.00005s"),  # fixed point: the parser reads no exponent
    ],
)
def test_format_duration(seconds: float, written: str) -> None:
    assert format_duration(seconds) == written
    assert parse_duration(written) == seconds


@given(
    days=st.integers(0, 400),
    hours=st.integers(0, 23),
    minutes=st.integers(0, 59),
    seconds=st.integers(0, 59),
)
def test_duration_components_read_back(days: int, hours: int, minutes: int, seconds: int) -> None:
    amounts = {"d": days, "h": hours, "m": minutes, "s": seconds}
    written = "".join(f"{amount}{unit}" for unit, amount in amounts.items() if amount) or "0s"
    expected = days * 86_400 + hours * 3_600 + minutes * 60 + seconds
    assert parse_duration(written) == expected
    assert format_duration(expected) == written


@given(st.floats(min_value=0, max_value=1e12, allow_nan=False, allow_infinity=False))
def test_format_duration_round_trips(seconds: float) -> None:
    assert parse_duration(format_duration(seconds)) == seconds


# --- memory and CPU quantities -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("written", "mib"),
    [
        ("512Gi", 512 * MIB_PER_GIB),
        ("16384Mi", 16_384),
        ("1Ti", 1024 * MIB_PER_GIB),
        ("1Pi", 1024 * 1024 * MIB_PER_GIB),
        ("1.5Gi", 1_536),
        ("1Ki", 1),  # 1024 bytes rounds up to a whole MiB
        ("1G", 954),  # 10**9 bytes = 953.67 MiB, rounded up
        ("1M", 1),  # 10**6 bytes = 0.95 MiB, rounded up
        ("2T", 1_907_349),  # 2 * 10**12 / 2**20 = 1907348.6
        ("1k", 1),
        ("0Gi", 0),
        ("1024", 1_024),  # a bare number is MiB
        (1024, 1_024),
        (2048.0, 2_048),
        (0, 0),
    ],
)
def test_parse_memory_mib_reads(written: object, mib: int) -> None:
    assert parse_memory_mib(written) == mib


@pytest.mark.parametrize(
    "written", ["5GB", "1gi", "Gi", "-1Gi", "1.5", 1.5, -1, True, None, "", "1 Gb", [512]]
)
def test_parse_memory_mib_rejects(written: object) -> None:
    with pytest.raises(InputError) as caught:
        parse_memory_mib(written)
    assert caught.value.field == "memory"
    assert "memory size >= 0" in caught.value.rule


@pytest.mark.parametrize(
    ("mib", "written"),
    [(0, "0Mi"), (1, "1Mi"), (1_536, "1536Mi"), (524_288, "512Gi"), (1_048_576, "1Ti")],
)
def test_format_memory_mib(mib: int, written: str) -> None:
    assert format_memory_mib(mib) == written


@given(st.integers(min_value=0, max_value=10**12))
def test_memory_round_trips(mib: int) -> None:
    assert parse_memory_mib(format_memory_mib(mib)) == mib


@given(
    st.integers(min_value=0, max_value=10**9),
    st.sampled_from(["Ki", "Mi", "Gi", "Ti", "k", "M", "G", "T"]),
)
def test_memory_with_unit_rounds_up_to_mib(amount: int, unit: str) -> None:
    unit_bytes = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40}.get(unit)
    unit_bytes = unit_bytes or {"k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12}[unit]
    expected = -(-amount * unit_bytes // 2**20)  # ceiling division in integers
    assert parse_memory_mib(f"{amount}{unit}") == expected


@pytest.mark.parametrize(
    ("written", "milli"),
    [
        (64, 64_000),
        (0.5, 500),
        (0.1, 100),  # one tenth exactly, not the float nearest to it times 1000
        (1.001, 1_001),
        ("500m", 500),
        ("2", 2_000),
        ("1.5", 1_500),
        ("0m", 0),
        (0, 0),
    ],
)
def test_parse_cpu_milli_reads(written: object, milli: int) -> None:
    assert parse_cpu_milli(written) == milli


@pytest.mark.parametrize(
    "written", ["0.5m", "1.0005", 0.0005, -1, "-500m", "2 cores", "", True, None, float("inf")]
)
def test_parse_cpu_milli_rejects(written: object) -> None:
    with pytest.raises(InputError) as caught:
        parse_cpu_milli(written)
    assert caught.value.field == "cpu"
    assert "millicore" in caught.value.rule


@pytest.mark.parametrize(("milli", "written"), [(0, "0"), (500, "500m"), (64_000, "64")])
def test_format_cpu_milli(milli: int, written: str) -> None:
    assert format_cpu_milli(milli) == written


@given(st.integers(min_value=0, max_value=10**12))
def test_cpu_round_trips(milli: int) -> None:
    assert parse_cpu_milli(format_cpu_milli(milli)) == milli


@given(st.integers(min_value=0, max_value=10**9))
def test_cpu_cores_with_three_decimals_read_exactly(milli: int) -> None:
    assert parse_cpu_milli(f"{milli // 1000}.{milli % 1000:03d}") == milli
    assert parse_cpu_milli(milli / 1000) == milli


# --- resources ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("written", "gpus", "gpu_milli", "fractional", "gpu_milli_total"),
    [
        ({"gpus": 4}, 4, 1000, False, 4000),
        ({"gpus": 1}, 1, 1000, False, 1000),
        ({"gpus": 8.0}, 8, 1000, False, 8000),  # an integral float is a whole count
        ({}, 0, 1000, False, 0),  # CPU-only
        ({"gpus": 0}, 0, 1000, False, 0),
        ({"gpu_milli": 500}, 1, 500, True, 500),  # a fraction alone means one shared GPU
        ({"gpus": 1, "gpu_milli": 250}, 1, 250, True, 250),
        ({"gpus": None, "gpu_milli": 1}, 1, 1, True, 1),
        ({"gpu_milli": 999}, 1, 999, True, 999),
        ({"gpus": 2, "gpu_milli": 1000}, 2, 1000, False, 2000),  # the stored form reads back
    ],
)
def test_resources_gpu_normalisation(
    written: dict[str, Any], gpus: int, gpu_milli: int, fractional: bool, gpu_milli_total: int
) -> None:
    resources = Resources.from_dict(written)
    assert (resources.gpus, resources.gpu_milli) == (gpus, gpu_milli)
    assert resources.is_fractional is fractional
    assert resources.gpu_milli_total == gpu_milli_total


@pytest.mark.parametrize(
    ("written", "cpu", "memory", "gpu_models"),
    [
        ({"cpu": 64, "memory": "512Gi"}, 64_000, 524_288, None),
        ({"cpu": "500m", "memory": 2048}, 500, 2_048, None),
        ({"cpu": 0.5, "memory": "1G"}, 500, 954, None),
        ({"gpu_models": ["GB300", "H100"]}, 0, 0, ("GB300", "H100")),
        ({"gpu_models": "GB300"}, 0, 0, ("GB300",)),  # a single name for a one-model list
        ({"gpu_models": ["H100", "H100", "A100"]}, 0, 0, ("H100", "A100")),
        ({"gpu_models": None}, 0, 0, None),
    ],
)
def test_resources_quantities(
    written: dict[str, Any], cpu: int, memory: int, gpu_models: tuple[str, ...] | None
) -> None:
    resources = Resources.from_dict(written)
    assert (resources.cpu, resources.memory, resources.gpu_models) == (cpu, memory, gpu_models)


def test_constructor_reads_cpu_as_a_user_writes_it() -> None:
    assert Resources(cpu=64).cpu == 64_000  # a number is cores
    assert Resources(cpu="64000m").cpu == 64_000
    assert Resources(memory=2048).memory == 2_048  # a number is MiB


@given(
    share=st.one_of(
        st.integers(0, 16).map(lambda gpus: {"gpus": gpus}),
        st.integers(1, 999).map(lambda milli: {"gpu_milli": milli}),
    ),
    cpu=st.integers(0, 10**7),
    memory=st.integers(0, 10**9),
    gpu_models=st.one_of(
        st.none(), st.lists(st.sampled_from(["GB300", "H100", "A10"]), min_size=1, max_size=3)
    ),
)
def test_resources_round_trip(
    share: dict[str, int], cpu: int, memory: int, gpu_models: list[str] | None
) -> None:
    written = share | {"cpu": f"{cpu}m", "memory": memory, "gpu_models": gpu_models}
    resources = Resources.from_dict(written)
    assert (resources.cpu, resources.memory) == (cpu, memory)
    assert Resources.from_dict(resources.to_dict()) == resources


# --- every bad field ---------------------------------------------------------------------------

BAD_JOBS: list[tuple[str, dict[Any, Any], str, object, str]] = [
    # (case, job as written, field named, value named, fragment of the rule)
    ("name missing", {"pods": 1, "resources_per_pod": {}}, "name", None, "is required"),
    ("name empty", job_dict(name=""), "name", "", "1 to 253 characters"),
    ("name with space", job_dict(name="my job"), "name", "my job", "letters, digits"),
    ("name too long", job_dict(name="a" * 254), "name", "a" * 254, "1 to 253"),
    ("name not a string", job_dict(name=7), "name", 7, "characters"),
    ("account empty part", job_dict(account="research//a"), "account", "research//a", "slash"),
    ("account leading slash", job_dict(account="/team"), "account", "/team", "non-empty names"),
    ("account empty", job_dict(account=""), "account", "", "slash-separated path"),
    ("account not a string", job_dict(account=3), "account", 3, "slash-separated path"),
    ("priority float", job_dict(priority=1.5), "priority", 1.5, "must be an integer"),
    ("priority string", job_dict(priority="high"), "priority", "high", "must be an integer"),
    ("priority bool", job_dict(priority=True), "priority", True, "must be an integer"),
    ("min_runtime negative", job_dict(min_runtime=-1), "min_runtime", -1, "duration >= 0"),
    ("min_runtime bad unit", job_dict(min_runtime="4 hours"), "min_runtime", "4 hours", "d, h"),
    ("resumable string", job_dict(resumable="yes"), "resumable", "yes", "true or false"),
    ("resumable int", job_dict(resumable=1), "resumable", 1, "true or false"),
    ("expected_runtime zero", job_dict(expected_runtime=0), "expected_runtime", 0, "> 0"),
    ("expected_runtime bad", job_dict(expected_runtime="soon"), "expected_runtime", "soon", "d, h"),
    ("pods missing", {"name": "a", "resources_per_pod": {}}, "pods", None, "is required"),
    ("pods zero", job_dict(pods=0), "pods", 0, "integer >= 1"),
    ("pods fractional", job_dict(pods=2.5), "pods", 2.5, "integer >= 1"),
    ("pods string", job_dict(pods="8"), "pods", "8", "integer >= 1"),
    ("submit_time negative", job_dict(submit_time=-1), "submit_time", -1, "seconds >= 0"),
    ("submit_time string", job_dict(submit_time="now"), "submit_time", "now", "seconds >= 0"),
    ("unknown field", job_dict(gpus=8), "gpus", 8, "unknown field; valid fields are name,"),
    ("non-string key", job_dict() | {1: 0}, "1", 1, "unknown field"),
    ("resources missing", {"name": "a", "pods": 1}, "resources_per_pod", None, "is required"),
    ("resources not a mapping", job_dict(resources_per_pod=4), "resources_per_pod", 4,
     "mapping with fields gpus, gpu_milli, cpu, memory, gpu_models"),
    ("gpus fractional", with_resources(gpus=1.5), "resources_per_pod.gpus", 1.5,
     "must be an integer >= 0"),
    ("gpus negative", with_resources(gpus=-1), "resources_per_pod.gpus", -1,
     "must be an integer >= 0"),
    ("gpus string", with_resources(gpus="4"), "resources_per_pod.gpus", "4", "integer >= 0"),
    ("gpu_milli zero", with_resources(gpu_milli=0), "resources_per_pod.gpu_milli", 0,
     "from 1 to 999"),
    ("gpu_milli over one GPU", with_resources(gpu_milli=1500), "resources_per_pod.gpu_milli",
     1500, "from 1 to 999"),
    ("gpu_milli float", with_resources(gpu_milli=0.5), "resources_per_pod.gpu_milli", 0.5,
     "integer from 1 to 999"),
    ("fraction of several GPUs", with_resources(gpus=2, gpu_milli=500),
     "resources_per_pod.gpu_milli", 500, "gpus must be 1 or omitted"),
    ("fraction of no GPU", with_resources(gpus=0, gpu_milli=500),
     "resources_per_pod.gpu_milli", 500, "gpus must be 1 or omitted"),
    ("cpu negative", with_resources(cpu=-2), "resources_per_pod.cpu", -2, "CPU cores >= 0"),
    ("cpu finer than milli", with_resources(cpu="0.5m"), "resources_per_pod.cpu", "0.5m",
     "1 millicore"),
    ("memory bad unit", with_resources(memory="5GB"), "resources_per_pod.memory", "5GB",
     "Ki, Mi, Gi"),
    ("memory fractional MiB", with_resources(memory=1.5), "resources_per_pod.memory", 1.5,
     "whole number of MiB"),
    ("gpu_models empty", with_resources(gpu_models=[]), "resources_per_pod.gpu_models", [],
     "non-empty list"),
    ("gpu_models blank name", with_resources(gpu_models=["GB300", " "]),
     "resources_per_pod.gpu_models", ["GB300", " "], "GPU model names"),
    ("gpu_models not names", with_resources(gpu_models=[300]), "resources_per_pod.gpu_models",
     [300], "GPU model names"),
    ("resources unknown field", with_resources(gpu=1), "resources_per_pod.gpu", 1,
     "valid fields are gpus, gpu_milli, cpu, memory, gpu_models"),
    ("topology not a mapping", job_dict(topology="zone"), "topology", "zone",
     "mapping with fields required, preferred, slices"),
    ("topology unknown field", with_topology(require="zone"), "topology.require", "zone",
     "valid fields are required, preferred, slices"),
    ("required empty", with_topology(required=""), "topology.required", "", "level name"),
    ("preferred not a string", with_topology(preferred=2), "topology.preferred", 2,
     "level name"),
    ("slices not a list", with_topology(slices="rack"), "topology.slices", "rack",
     "list of {level, pods}"),
    ("slice not a mapping", with_topology(slices=["rack"]), "topology.slices[0]", "rack",
     "mapping with fields level, pods"),
    ("slice level missing", with_topology(slices=[{"pods": 2}]), "topology.slices[0].level",
     None, "is required"),
    ("slice level empty", with_topology(slices=[{"level": "", "pods": 2}]),
     "topology.slices[0].level", "", "level name"),
    ("slice pods zero", with_topology(slices=[{"level": "rack", "pods": 0}]),
     "topology.slices[0].pods", 0, "integer >= 1"),
    ("slice unknown field", with_topology(slices=[{"level": "rack", "pods": 2, "size": 1}]),
     "topology.slices[0].size", 1, "valid fields are level, pods"),
    # 8 pods: a slice of 3 cannot tile them.
    ("slice does not divide pods", with_topology(slices=[{"level": "rack", "pods": 3}]),
     "topology.slices[0].pods", 3, "must divide the job's pods (8)"),
    # 8 pods in racks of 4, nodes of 3: 3 does not divide 4.
    ("inner slice does not divide outer",
     with_topology(slices=[{"level": "rack", "pods": 4}, {"level": "node", "pods": 3}]),
     "topology.slices[1].pods", 3, "enclosing slice slices[0] (4 pods per rack)"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("written", "field", "value", "rule_fragment"),
    [case[1:] for case in BAD_JOBS],
    ids=[case[0] for case in BAD_JOBS],
)
def test_bad_field_is_named(
    written: dict[str, Any], field: str, value: object, rule_fragment: str
) -> None:
    assert_refused_naming(written, field, value, rule_fragment)


def assert_refused_naming(
    written: dict[str, Any], field: str, value: object, rule_fragment: str
) -> None:
    """The job is refused with an error naming `field` and `value`, a rule that holds
    `rule_fragment`, in the project's words (not pydantic's)."""
    with pytest.raises(InputError) as caught:
        JobSpec.from_dict(written)
    error = caught.value
    assert (error.field, error.value) == (field, value)
    assert rule_fragment in error.rule
    assert str(error).startswith(f"{field}: {shown(value)} is invalid: ")
    assert "pydantic" not in str(error) and "For further information" not in str(error)


@pytest.mark.parametrize("written", [None, [1, 2], "name: a", 5])
def test_job_that_is_not_a_mapping(written: object) -> None:
    with pytest.raises(InputError) as caught:
        JobSpec.from_dict(written)
    assert caught.value.field == "job"
    assert "mapping with fields name, account" in caught.value.rule


def test_several_bad_fields_name_the_first_and_list_the_rest() -> None:
    written = job_dict(pods=0, bogus=1) | {"resources_per_pod": {"gpus": -1}}
    with pytest.raises(InputError) as caught:
        JobSpec.from_dict(written)
    error = caught.value
    assert (error.field, error.value) == ("pods", 0)
    assert "integer >= 1" in error.rule
    assert "also resources_per_pod.gpus: -1 is invalid" in str(error)
    assert "bogus: 1 is invalid: unknown field" in str(error)


def test_direct_construction_raises_input_error_with_nested_path() -> None:
    with pytest.raises(InputError) as caught:
        JobSpec(name="a", pods=2, resources_per_pod={"gpus": -1})
    assert caught.value.field == "resources_per_pod.gpus"
    with pytest.raises(InputError) as caught_slice:
        Slice(level="rack", pods=0)
    assert caught_slice.value.field == "pods"


def test_models_are_frozen_and_hashable() -> None:
    job = JobSpec.from_dict(job_dict())
    with pytest.raises(ValueError):
        job.pods = 9  # type: ignore[misc]
    assert hash(job) == hash(JobSpec.from_dict(job_dict()))


# --- good jobs ---------------------------------------------------------------------------------


def test_example_job_reads_as_written() -> None:
    job = JobSpec.from_yaml(EXAMPLE_YAML)
    assert job.name == "pretrain-405b"
    assert job.account == "research/pretraining/team-a"
    assert job.priority == 50
    assert job.min_runtime == 4 * 3600
    assert job.resumable is True
    assert job.expected_runtime == 3 * 86_400
    assert job.pods == 2304
    resources = job.resources_per_pod
    assert (resources.gpus, resources.gpu_milli, resources.cpu, resources.memory) == (
        4,
        1000,
        64_000,  # millicores
        512 * 1024,  # MiB
    )
    assert resources.gpu_models == ("GB300",)
    assert job.topology == TopologySpec(
        required="zone", preferred="block", slices=(Slice(level="rack", pods=18),)
    )
    assert job.submit_time is None
    assert job.total_gpus == 9216  # 2304 pods x 4 GPUs
    assert job.total_gpu_milli == 9_216_000
    job.validate_topology(CLUSTER_LEVELS)


def test_defaults() -> None:
    job = JobSpec.from_dict({"name": "a", "pods": 1, "resources_per_pod": {"cpu": 1}})
    assert job.account == "default"
    assert job.priority == 0
    assert job.min_runtime == 3600.0
    assert job.resumable is False
    assert job.expected_runtime is None
    assert job.topology == TopologySpec()
    assert job.submit_time is None
    assert (job.total_gpus, job.total_gpu_milli) == (0, 0)


@pytest.mark.parametrize(
    ("written", "total_gpus", "total_gpu_milli"),
    [
        (job_dict(pods=8, resources_per_pod={"gpus": 8}), 64, 64_000),
        (job_dict(pods=10, resources_per_pod={"gpu_milli": 300}), 0, 3_000),  # shares only
        (job_dict(pods=3, resources_per_pod={"cpu": 4}), 0, 0),
    ],
)
def test_totals(written: dict[str, Any], total_gpus: int, total_gpu_milli: int) -> None:
    job = JobSpec.from_dict(written)
    assert (job.total_gpus, job.total_gpu_milli) == (total_gpus, total_gpu_milli)


@pytest.mark.parametrize(
    ("field", "written", "stored"),
    [
        ("name", "org/team.run_1-a", "org/team.run_1-a"),
        ("name", "a" * 253, "a" * 253),
        ("account", "research/pretraining/team-a", "research/pretraining/team-a"),
        ("account", "solo", "solo"),
        ("priority", -5, -5),
        ("priority", 3.0, 3),
        ("min_runtime", "90s", 90.0),
        ("min_runtime", 0, 0.0),
        ("min_runtime", "1h30m", 5_400.0),
        ("expected_runtime", "3d", 259_200.0),
        ("expected_runtime", None, None),
        ("expected_runtime", 0.5, 0.5),
        ("resumable", False, False),
        ("submit_time", 12, 12.0),
        ("submit_time", 0.5, 0.5),
    ],
)
def test_good_field_is_normalised(field: str, written: object, stored: object) -> None:
    job = JobSpec.from_dict(job_dict(**{field: written}))
    assert getattr(job, field) == stored


ROUND_TRIP_JOBS = [
    EXAMPLE_YAML,
    "{name: a, pods: 1, resources_per_pod: {memory: 1Gi}}",
    "{name: b, pods: 10, resources_per_pod: {gpu_milli: 250, cpu: 500m, memory: 1500}}",
    "{name: c, pods: 4, min_runtime: 0.1, expected_runtime: 90, submit_time: 7.5,"
    " resources_per_pod: {gpus: 2, cpu: 1.5, memory: 1G},"
    " topology: {slices: [{level: block, pods: 4}, {level: node, pods: 2}]}}",
]


@pytest.mark.parametrize("written", ROUND_TRIP_JOBS)
def test_to_dict_round_trips(written: str) -> None:
    job = JobSpec.from_yaml(written)
    assert JobSpec.from_dict(job.to_dict()) == job
    assert JobSpec.from_dict(json.loads(json.dumps(job.to_dict()))) == job


def test_to_dict_spells_like_a_user() -> None:
    assert JobSpec.from_yaml(EXAMPLE_YAML).to_dict() == {
        "name": "pretrain-405b",
        "account": "research/pretraining/team-a",
        "priority": 50,
        "min_runtime": "4h",
        "resumable": True,
        "expected_runtime": "3d",
        "pods": 2304,
        "resources_per_pod": {"gpus": 4, "cpu": 64, "memory": "512Gi", "gpu_models": ["GB300"]},
        "topology": {
            "required": "zone",
            "preferred": "block",
            "slices": [{"level": "rack", "pods": 18}],
        },
    }


# --- topology levels ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("topology", "pods"),
    [
        ({}, 5),
        ({"required": "zone"}, 5),
        ({"required": "node"}, 5),
        ({"preferred": "rack"}, 5),
        ({"required": "zone", "preferred": "zone"}, 5),
        ({"required": "zone", "preferred": "rack"}, 5),
        ({"required": "block", "slices": [{"level": "rack", "pods": 18}]}, 144),
        ({"slices": [{"level": "zone", "pods": 8}, {"level": "node", "pods": 4}]}, 16),
        # 2304 pods: blocks of 144 (8 racks of 18), racks of 18, nodes of 1.
        (
            {
                "required": "zone",
                "preferred": "block",
                "slices": [
                    {"level": "block", "pods": 144},
                    {"level": "rack", "pods": 18},
                    {"level": "node", "pods": 1},
                ],
            },
            2304,
        ),
    ],
)
def test_validate_levels_accepts(topology: dict[str, Any], pods: int) -> None:
    TopologySpec.from_dict(topology).validate_levels(CLUSTER_LEVELS, pods)


@pytest.mark.parametrize(
    ("topology", "pods", "field", "value", "rule_fragment"),
    [
        ({"required": "pod"}, 4, "topology.required", "pod",
         "valid levels are zone, block, rack, node (outermost first)"),
        ({"preferred": "nodes"}, 4, "topology.preferred", "nodes",
         "valid levels are zone, block, rack, node (outermost first)"),
        ({"preferred": "row"}, 4, "topology.preferred", "row", "unknown level"),
        ({"required": "rack", "preferred": "block"}, 4, "topology.preferred", "block",
         "must be the required level (rack) or inner to it"),
        ({"slices": [{"level": "racks", "pods": 2}]}, 4, "topology.slices[0].level", "racks",
         "unknown level; valid levels are zone, block, rack, node"),
        ({"required": "rack", "slices": [{"level": "rack", "pods": 2}]}, 4,
         "topology.slices[0].level", "rack",
         "strictly inner to the required level (rack); levels inner to rack are node"),
        ({"required": "rack", "slices": [{"level": "block", "pods": 2}]}, 4,
         "topology.slices[0].level", "block", "strictly inner to the required level (rack)"),
        ({"slices": [{"level": "rack", "pods": 4}, {"level": "block", "pods": 2}]}, 8,
         "topology.slices[1].level", "block",
         "outermost first, each strictly inner to the one before (rack)"),
        ({"slices": [{"level": "rack", "pods": 4}, {"level": "rack", "pods": 2}]}, 8,
         "topology.slices[1].level", "rack", "strictly inner to the one before (rack)"),
        ({"slices": [{"level": "node", "pods": 2}, {"level": "node", "pods": 1}]}, 8,
         "topology.slices[1].level", "node", "levels inner to node are none"),
        # 6 pods cannot be cut into racks of 4.
        ({"slices": [{"level": "rack", "pods": 4}]}, 6, "topology.slices[0].pods", 4,
         "must divide the job's pods (6)"),
    ],
)  # fmt: skip
def test_validate_levels_rejects(
    topology: dict[str, Any], pods: int, field: str, value: object, rule_fragment: str
) -> None:
    with pytest.raises(InputError) as caught:
        TopologySpec.from_dict(topology).validate_levels(CLUSTER_LEVELS, pods)
    assert (caught.value.field, caught.value.value) == (field, value)
    assert rule_fragment in caught.value.rule


def test_validate_levels_accepts_node_listed_by_the_cluster() -> None:
    spec = TopologySpec.from_dict({"required": "rack", "slices": [{"level": "node", "pods": 2}]})
    spec.validate_levels(("zone", "rack", "node"), 4)


def test_validate_levels_on_a_single_box_cluster() -> None:
    TopologySpec.from_dict({"required": "node"}).validate_levels((), 8)
    with pytest.raises(InputError) as caught:
        TopologySpec.from_dict({"required": "rack"}).validate_levels((), 8)
    assert "valid levels are node" in caught.value.rule


# --- files -------------------------------------------------------------------------------------

GOOD_JOB_YAML = "name: {name}\npods: 2\nresources_per_pod: {{gpus: 8}}\n"


@pytest.mark.parametrize(
    ("file_name", "text"),
    [
        ("multi.yaml", "---\n".join(GOOD_JOB_YAML.format(name=n) for n in ("a", "b", "c"))),
        ("list.yaml", "- {name: a, pods: 2, resources_per_pod: {gpus: 8}}\n"
                      "- {name: b, pods: 2, resources_per_pod: {gpus: 8}}\n"
                      "- {name: c, pods: 2, resources_per_pod: {gpus: 8}}\n"),
        ("jobs.yml", "jobs:\n"
                     "  - {name: a, pods: 2, resources_per_pod: {gpus: 8}}\n"
                     "  - {name: b, pods: 2, resources_per_pod: {gpus: 8}}\n"
                     "  - {name: c, pods: 2, resources_per_pod: {gpus: 8}}\n"),
        ("jobs.json", json.dumps({"jobs": [
            {"name": n, "pods": 2, "resources_per_pod": {"gpus": 8}} for n in "abc"]})),
    ],
)  # fmt: skip
def test_load_jobs_reads_every_layout(tmp_path: Path, file_name: str, text: str) -> None:
    path = tmp_path / file_name
    path.write_text(text)
    jobs = load_jobs(path)
    assert [job.name for job in jobs] == ["a", "b", "c"]
    assert all(job.total_gpus == 16 for job in jobs)


def test_load_jobs_names_the_file_and_the_job(tmp_path: Path) -> None:
    path = tmp_path / "batch.yaml"
    path.write_text(
        GOOD_JOB_YAML.format(name="first")
        + "---\nname: second\npods: 2\nresources_per_pod: {gpus: 1.5}\n"
        + "---\n"
        + GOOD_JOB_YAML.format(name="third")
    )
    with pytest.raises(InputError) as caught:
        load_jobs(path)
    error = caught.value
    # The second job's `resources_per_pod: {gpus: 1.5}` is on line 7 (its document starts at 5).
    assert (error.file, error.line) == (str(path), 7)
    assert error.field == "jobs[1].resources_per_pod.gpus"
    assert error.value == 1.5
    assert "must be an integer >= 0" in error.rule
    assert str(error).startswith(f"{path}:7: jobs[1].resources_per_pod.gpus: 1.5 is invalid")


def test_load_jobs_single_job_file(tmp_path: Path) -> None:
    path = tmp_path / "one.yaml"
    path.write_text(EXAMPLE_YAML)
    assert load_jobs(path) == [JobSpec.from_yaml(EXAMPLE_YAML)]
    assert load_jobs(str(path)) == load_jobs(path)


def test_load_jobs_error_in_single_job_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "one.yaml"
    path.write_text("name: a\npods: 0\nresources_per_pod: {}\n")
    with pytest.raises(InputError) as caught:
        load_jobs(path)
    assert (caught.value.file, caught.value.line, caught.value.field) == (str(path), 2, "pods")


def test_load_jobs_empty_file(tmp_path: Path) -> None:
    path = tmp_path / "empty.yaml"
    path.write_text("# nothing queued\n")
    with pytest.raises(InputError) as caught:
        load_jobs(path)
    assert caught.value.file == str(path)
    assert f"no job in {path}" in caught.value.rule


@pytest.mark.parametrize(
    ("file_name", "text", "rule_fragment"),
    [
        ("broken.yaml", "name: a\npods: [2\n", "is not valid YAML"),
        ("broken.json", '{"name": "a",,}', "is not valid JSON"),
    ],
)
def test_unreadable_file_is_named(
    tmp_path: Path, file_name: str, text: str, rule_fragment: str
) -> None:
    path = tmp_path / file_name
    path.write_text(text)
    with pytest.raises(InputError) as caught:
        load_jobs(path)
    assert caught.value.file == str(path)
    assert caught.value.line is not None and caught.value.line >= 1
    assert rule_fragment in caught.value.rule


def test_missing_file_is_named(tmp_path: Path) -> None:
    path = tmp_path / "absent.yaml"
    for load in (load_jobs, JobSpec.from_yaml):
        with pytest.raises(InputError) as caught:
            load(path)
        assert (caught.value.field, caught.value.value) == ("job file", path)
        assert "file not found" in caught.value.rule


def test_from_yaml_reads_a_path_or_text(tmp_path: Path) -> None:
    path = tmp_path / "job.json"
    path.write_text(json.dumps(JobSpec.from_yaml(EXAMPLE_YAML).to_dict()))
    assert JobSpec.from_yaml(path) == JobSpec.from_yaml(EXAMPLE_YAML)
    assert JobSpec.from_yaml(str(path)) == JobSpec.from_yaml(EXAMPLE_YAML)


def test_from_yaml_wants_exactly_one_job() -> None:
    with pytest.raises(InputError) as caught:
        JobSpec.from_yaml(GOOD_JOB_YAML.format(name="a") + "---\n" + GOOD_JOB_YAML.format(name="b"))
    assert "use load_jobs" in caught.value.rule


def test_from_yaml_error_names_the_job_field() -> None:
    with pytest.raises(InputError) as caught:
        JobSpec.from_yaml("name: a\npods: 1\nresources_per_pod: {memory: 5GB}\n")
    assert caught.value.field == "resources_per_pod.memory"
    assert caught.value.value == "5GB"
