"""A fuzz test of the HTTP API: hypothesis drives every operation of the server's own
/openapi.json (and paths outside it) with generated path segments, query parameters, headers
(tokens, media types, idempotency keys, event ids) and bodies (job-like documents, any JSON,
YAML text, raw bytes), against a real `toposched serve` on 127.0.0.1.

Whatever arrives: no 5xx, every error in the one error shape, the server stays up, and a
refused request changes nothing (jobs, accounts and nodes read back the same).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import httpx
import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.service_helpers import Server, job, serving
from toposched.service.auth import add_token

EXAMPLES = 300
METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE")
WRITES = ("POST", "PUT", "PATCH", "DELETE")
MEDIA = ("application/json", "application/yaml", "text/yaml", "text/plain", "", "x/y; a=b")
NAMES = ("run-0", "run-1", "wait-0", "n0", "n3", "r1", "prod", "research/team-a", "..", "%00")
SEED_JOBS = (
    job("run-0", account="prod"),
    job("run-1", pods=2, account="research/team-a"),
    job("wait-0", pods=4, account="research/team-b"),
)


@dataclass(frozen=True)
class Api:
    server: Server
    tokens: dict[str, str]
    operations: tuple[tuple[str, str], ...]
    """(method, path template) of every operation in /openapi.json."""


@pytest.fixture(scope="module")
def api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Api]:
    folder = tmp_path_factory.mktemp("fuzz")
    file = folder / "tokens.yaml"
    tokens = {
        "admin": add_token(file, "ops", "admin", []),
        "team": add_token(file, "team-a", "team", ["research/team-a"]),
    }
    args = ("--cluster", "cluster.yaml", "--budgets", "budgets.yaml", "--tokens", str(file))
    with serving(folder, *args, "--max-body", "4096", token=tokens["admin"]) as server:
        with server.client() as client:
            for document in SEED_JOBS:
                assert client.post("/v1/jobs", json=document).status_code == 201
            schema = client.get("/openapi.json").json()
        operations = tuple(
            (method.upper(), path)
            for path, entries in schema["paths"].items()
            for method in entries
            if method.upper() in METHODS
        )
        yield Api(server, tokens, operations)


def state(client: httpx.Client) -> dict[str, Any]:
    """What a refused request must leave as it was."""
    jobs = client.get("/v1/jobs", params={"limit": 1000}).json()["jobs"]
    return {
        "jobs": [(j["id"], j["state"], j["priority"], j["nodes"]) for j in jobs],
        "tree": client.get("/v1/accounts").json()["tree"],
        "nodes": [(n["name"], n["health"]) for n in client.get("/v1/nodes").json()["nodes"]],
    }


# --- what hypothesis draws ---------------------------------------------------------------------

SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=30)
)
JSON = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner),
    max_leaves=12,
)
FIELDS = st.sampled_from(
    [
        "name",
        "account",
        "pods",
        "resources_per_pod",
        "priority",
        "expected_runtime",
        "min_runtime",
        "topology",
        "resumable",
        "run",
        "submit_time",
        "accounts",
        "share",
        "children",
        "command",
    ]
)
JOB_LIKE = st.dictionaries(FIELDS, JSON, max_size=7) | st.builds(
    lambda fields, name: {**job(name), **fields},
    st.dictionaries(FIELDS, JSON, max_size=3),
    st.from_regex(r"fz[a-z0-9]{1,6}", fullmatch=True),
)


def _encode(document: Any, media: str) -> bytes:
    if "yaml" in media:
        return yaml.safe_dump(document).encode()
    return json.dumps(document, allow_nan=True).encode()


BODIES = st.one_of(
    st.tuples(JOB_LIKE, st.sampled_from(MEDIA)).map(lambda dm: (_encode(*dm), dm[1])),
    st.tuples(JSON, st.sampled_from(MEDIA)).map(lambda dm: (_encode(*dm), dm[1])),
    st.tuples(st.binary(max_size=300), st.sampled_from(MEDIA)),
    st.tuples(
        st.sampled_from(
            [
                b"a: &x [1]\nb: *x\n",
                b"[" * 200,
                b"{}" * 3,
                b"---\na: 1\n---\nb: 2\n",
                b"\xff\xfe\x00",
                b"!!python/object:os.system {}",
                b"x" * 5000,
            ]
        ),
        st.sampled_from(MEDIA),
    ),
)
SEGMENTS = st.sampled_from(NAMES) | st.text(min_size=1, max_size=20)
HEADER_TEXT = st.binary(max_size=60).map(
    lambda raw: bytes(b for b in raw if b >= 0x20 and b != 0x7F).strip(b" \t")
)
"""What HTTP allows in a header value: no control characters, no surrounding blanks."""
QUERY = st.dictionaries(
    st.sampled_from(["account", "state", "limit", "after", "level", "tail", "follow", "x"]),
    st.text(max_size=15) | st.integers(-5, 10**6).map(str),
    max_size=3,
)


@st.composite
def requests(draw: st.DrawFn, operations: tuple[tuple[str, str], ...]) -> dict[str, Any]:
    """One request: an operation of the schema (or a random method, or a path outside it)."""
    submissions = [("POST", "/v1/jobs"), ("PUT", "/v1/accounts")]
    method, template = draw(st.sampled_from(operations) | st.sampled_from(submissions))
    if draw(st.integers(0, 9)) == 0:
        method = draw(st.sampled_from(METHODS))
    safe = draw(st.sampled_from(["", "/"]))
    path = re.sub(r"\{[^}]+\}", lambda _m: quote(draw(SEGMENTS), safe=safe), template)
    if draw(st.integers(0, 19)) == 0:
        path = "/" + quote(draw(st.text(max_size=30)), safe="/?&=")
    query = draw(QUERY)
    if path.startswith("/v1/events"):
        query["follow"] = "false"  # a followed stream never ends; resuming is still fuzzed
    headers: dict[str, bytes] = {}
    auth = draw(st.sampled_from(["admin", "admin", "admin", "team", "team", "none", "junk"]))
    if auth == "junk":
        headers["Authorization"] = (b"Bearer " + draw(HEADER_TEXT)).strip()
    body, media = draw(BODIES) if method in WRITES else (b"", "")
    if media:
        headers["Content-Type"] = media.encode()
    for name in draw(st.sets(st.sampled_from(["Idempotency-Key", "Last-Event-ID", "Accept"]))):
        headers[name] = draw(HEADER_TEXT)
    return {
        "method": method,
        "path": path,
        "query": query,
        "headers": headers,
        "body": body,
        "auth": auth,
    }


def test_fuzzed_requests_never_get_a_server_error_and_refusals_change_nothing(api: Api) -> None:
    server = api.server
    with (
        server.client() as admin,
        server.client(api.tokens["team"]) as team,
        server.client("") as anonymous,
    ):
        clients = {"admin": admin, "team": team, "none": anonymous, "junk": anonymous}
        before = state(admin)

        @settings(
            max_examples=EXAMPLES,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
        )
        @given(requests(api.operations))
        def one(request: dict[str, Any]) -> None:
            nonlocal before
            client = clients[request["auth"]]
            answer = client.request(
                request["method"],
                request["path"],
                params=request["query"],
                headers=request["headers"],
                content=request["body"],
            )
            assert answer.status_code < 500, (request, answer.status_code, answer.text[:300])
            after = state(admin)
            if answer.status_code >= 400:
                error = answer.json()["error"]
                assert error["status"] == answer.status_code, answer.text
                assert after == before, request
            before = after

        one()
        assert admin.get("/v1/health").json() == {"status": "ok"}
        assert admin.get("/v1/ready").status_code == 200
    assert server.process is not None and server.process.poll() is None
