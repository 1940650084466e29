"""The HTTP API end to end: a real `toposched serve` on 127.0.0.1 with tokens, driven over
HTTP; bad input answers 4xx in the one error shape and changes nothing."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st
from service_helpers import Server, job, serving

from toposched.cli.jobcheck import SUBMITTED_JOB
from toposched.cluster.errors import unknown_field_rule
from toposched.scheduler.jobs import ReasonCode
from toposched.service.auth import add_token
from toposched.service.documents import JOB_DOCUMENT_FIELDS

TEAM_A = "research/team-a"


@pytest.fixture(scope="module")
def tokens(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    folder = tmp_path_factory.mktemp("api")
    file = folder / "tokens.yaml"
    return {
        "folder": folder,
        "file": file,
        "admin": add_token(file, "ops", "admin", []),
        "a": add_token(file, "team-a", "team", [TEAM_A]),
        "research": add_token(file, "research", "team", ["research"]),
        "prod": add_token(file, "prod", "team", ["prod"]),
    }


@pytest.fixture(scope="module")
def server(tokens: dict[str, Any]) -> Iterator[Server]:
    args = (
        "--cluster",
        "cluster.yaml",
        "--budgets",
        "budgets.yaml",
        "--tokens",
        str(tokens["file"]),
        "--max-body",
        "4096",
    )
    with serving(tokens["folder"], *args, token=tokens["admin"]) as running:
        yield running


def error_of(response: httpx.Response) -> dict[str, Any]:
    body = response.json()
    assert set(body) == {"error"}, body
    assert body["error"]["status"] == response.status_code
    return dict(body["error"])


def job_ids(client: httpx.Client) -> list[str]:
    return [j["id"] for j in client.get("/v1/jobs", params={"limit": 1000}).json()["jobs"]]


def test_submit_get_list_explain_and_cancel(server: Server, tokens: dict[str, Any]) -> None:
    with server.client(tokens["a"]) as client:
        answer = client.post("/v1/jobs", json=job("t1", pods=2, run={"command": ["true"]}))
        assert answer.status_code == 201, answer.text
        assert answer.json()["spec"]["run"] == {"command": ["true"], "env": {}}
        text = yaml.safe_dump(job("t2", pods=4))
        yaml_answer = client.post(
            "/v1/jobs", content=text, headers={"Content-Type": "application/yaml"}
        )
        assert yaml_answer.status_code == 201, yaml_answer.text
        got = client.get("/v1/jobs/t1").json()
        assert got["account"] == TEAM_A and got["gpus"] == 8.0
        listed = client.get("/v1/jobs", params={"account": "research", "limit": 1}).json()
        assert len(listed["jobs"]) == 1 and listed["next"] is not None
        explained = client.get("/v1/jobs/t2/explain").json()
        assert explained["state"] in ("pending", "running")
        assert explained["history"][0]["event"] == "submitted"
        cancelled = client.delete("/v1/jobs/t2")
        assert cancelled.status_code == 200 and cancelled.json()["state"] == "cancelled"
        again = client.delete("/v1/jobs/t2")
        assert again.status_code == 409 and error_of(again)["code"] == "conflict"
        assert client.get("/v1/jobs/nope").status_code == 404


def test_explain_gives_queue_positions_of_a_waiting_job(server: Server) -> None:
    with server.client() as client:
        for name in ("w-run", "w-wait1", "w-wait2"):
            assert (
                client.post("/v1/jobs", json=job(name, pods=4, account="prod")).status_code == 201
            )
        client.get("/v1/ready")
        explained = client.get("/v1/jobs/w-wait2/explain").json()
        assert explained["state"] == "pending", explained
        assert explained["position"]["account"] >= 1
        assert explained["position"]["overall"] >= explained["position"]["account"]
        assert explained["reason"]
        assert explained["code"] in {code.value for code in ReasonCode}
        queue = client.get("/v1/queue", params={"account": "prod"}).json()["queue"]
        assert [row["id"] for row in queue][-2:] == ["w-wait1", "w-wait2"]
        # A job below the size the cycle reserves for is told so, not "not yet".
        assert explained["reservation"] is None and explained["reservation_note"] is None
        assert (
            client.post("/v1/jobs", json=job("w-small", pods=1, account="prod")).status_code == 201
        )
        small = client.get("/v1/jobs/w-small/explain").json()
        assert small["state"] == "pending", small
        assert small["reservation_note"] == "a start is reserved only for jobs of 8 GPUs or more"
        for name in ("w-run", "w-wait1", "w-wait2", "w-small"):
            client.delete(f"/v1/jobs/{name}")


def test_an_idempotency_key_makes_one_job(server: Server) -> None:
    with server.client() as client:
        headers = {"Idempotency-Key": "key-1"}
        first = client.post("/v1/jobs", json=job("idem", account="prod"), headers=headers)
        second = client.post("/v1/jobs", json=job("idem", account="prod"), headers=headers)
        assert (first.status_code, second.status_code) == (201, 200)
        assert second.json()["id"] == "idem"
        other = client.post("/v1/jobs", json=job("idem2", account="prod"), headers=headers)
        assert other.status_code == 409
        assert job_ids(client).count("idem") == 1
        client.delete("/v1/jobs/idem")


def test_tokens_decide_who_sees_and_changes_what(server: Server, tokens: dict[str, Any]) -> None:
    with server.client(tokens["prod"]) as prod, server.client(tokens["a"]) as team_a:
        assert prod.post("/v1/jobs", json=job("prod-1", account="prod")).status_code == 201
        refused = team_a.post("/v1/jobs", json=job("sneak", account="prod"))
        assert refused.status_code == 403 and error_of(refused)["code"] == "forbidden"
        assert team_a.get("/v1/jobs/prod-1").status_code == 403
        assert team_a.delete("/v1/jobs/prod-1").status_code == 403
        assert "prod-1" not in job_ids(team_a)
        if prod.get("/v1/jobs/prod-1").json()["state"] == "running":
            on_nodes = [n["jobs"] for n in prod.get("/v1/nodes").json()["nodes"]]
            assert any("prod-1" in jobs for jobs in on_nodes)
        assert all("prod-1" not in n["jobs"] for n in team_a.get("/v1/nodes").json()["nodes"])
        assert team_a.post("/v1/nodes/n0/drain").status_code == 403
        assert team_a.put("/v1/accounts", json={"accounts": {"x": 100}}).status_code == 403
        prod.delete("/v1/jobs/prod-1")
    with server.client(tokens["research"]) as research:
        # A token for an account covers its sub-accounts.
        assert research.post("/v1/jobs", json=job("sub", account=TEAM_A)).status_code == 201
        research.delete("/v1/jobs/sub")
    anonymous = httpx.get(f"{server.url}/v1/jobs")
    assert anonymous.status_code == 401 and error_of(anonymous)["code"] == "unauthenticated"
    secret = "not-a-real-token-123456"
    wrong = httpx.get(f"{server.url}/v1/jobs", headers={"Authorization": f"Bearer {secret}"})
    assert wrong.status_code == 401 and secret not in wrong.text
    assert secret not in server.log.read_text()
    assert httpx.get(f"{server.url}/v1/health").json() == {"status": "ok"}


BAD_BODIES: list[tuple[str, bytes, str, int, str]] = [
    ("pods 0", json.dumps(job("b1", pods=0)).encode(), "application/json", 422, "invalid"),
    (
        "unknown field",
        json.dumps({**job("b2"), "colour": 1}).encode(),
        "application/json",
        422,
        "invalid",
    ),
    (
        "absurd number",
        json.dumps(job("b3", pods=10**30)).encode(),
        "application/json",
        422,
        "invalid",
    ),
    (
        "too many gpus",
        json.dumps(job("b4", pods=5)).encode(),
        "application/json",
        422,
        "never_fits",
    ),
    (
        "rack too small",
        json.dumps(job("b5", pods=3, topology={"required": "rack"})).encode(),
        "application/json",
        422,
        "never_fits",
    ),
    (
        "unknown model",
        json.dumps(job("b6", resources_per_pod={"gpus": 1, "gpu_models": ["X9"]})).encode(),
        "application/json",
        422,
        "never_fits",
    ),
    (
        "unknown account",
        json.dumps(job("b7", account="research/team-z")).encode(),
        "application/json",
        422,
        "never_fits",
    ),
    (
        "bad run",
        json.dumps(job("b8", run={"command": "rm -rf /"})).encode(),
        "application/json",
        422,
        "invalid",
    ),
    (
        "submit time",
        json.dumps(job("b9", submit_time=5)).encode(),
        "application/json",
        422,
        "invalid",
    ),
    ("junk bytes", b"\xff\xfe\x00garbage", "application/json", 422, "invalid"),
    ("not json", b"{name: x", "application/json", 422, "invalid"),
    ("yaml alias", b"a: &x [1]\nb: *x\n", "application/yaml", 422, "invalid"),
    ("deep json", b"[" * 100 + b"]" * 100, "application/json", 422, "invalid"),
    ("deep yaml", b"[" * 100 + b"]" * 100, "application/yaml", 422, "invalid"),
    ("too large", b" " * 5000, "application/json", 413, "too_large"),
    ("media type", b"name=x", "text/plain", 415, "unsupported_media_type"),
    ("a list", b"[1, 2]", "application/json", 422, "invalid"),
    ("nan", b'{"name": "n", "pods": NaN}', "application/json", 422, "invalid"),
    (
        "yaml inf",
        b"name: n\npods: 1\nresources_per_pod: {gpus: 1}\nexpected_runtime: .inf\n",
        "application/yaml",
        422,
        "invalid",
    ),
    (
        "huge priority",
        json.dumps(job("b10", priority=10**30)).encode(),
        "application/json",
        422,
        "invalid",
    ),
    (
        "huge min runtime",
        json.dumps(job("b11", min_runtime=1e300)).encode(),
        "application/json",
        422,
        "invalid",
    ),
]


def test_an_unknown_field_is_told_the_fields_of_a_job_document(server: Server) -> None:
    """The client's light pass and the server list the same fields: JobSpec's but those the
    server sets, and `run`."""
    with server.client() as client:
        answer = client.post("/v1/jobs", json={**job("b12"), "runn": {"command": ["true"]}})
    assert answer.status_code == 422, answer.text
    error = error_of(answer)
    assert error["field"] == "runn"
    assert error["rule"] == unknown_field_rule("runn", JOB_DOCUMENT_FIELDS)
    assert "(did you mean 'run'?)" in error["rule"] and "submit_time" not in error["rule"]
    assert tuple(SUBMITTED_JOB.fields) == JOB_DOCUMENT_FIELDS


@pytest.mark.parametrize(
    ("what", "body", "media", "status", "code"), BAD_BODIES, ids=[b[0] for b in BAD_BODIES]
)
def test_bad_submissions_answer_4xx_and_change_nothing(
    server: Server, what: str, body: bytes, media: str, status: int, code: str
) -> None:
    with server.client() as client:
        before = job_ids(client)
        answer = client.post("/v1/jobs", content=body, headers={"Content-Type": media})
        assert answer.status_code == status, answer.text
        error = error_of(answer)
        assert error["code"] == code
        assert len(error.get("value") or "") <= 80
        assert job_ids(client) == before
        assert client.get("/v1/health").status_code == 200


def test_invalid_field_errors_name_field_value_and_rule(server: Server) -> None:
    with server.client() as client:
        error = error_of(client.post("/v1/jobs", json=job("b1", pods=0)))
        assert (error["field"], error["value"]) == ("pods", "0")
        assert error["rule"] == "must be an integer >= 1"
        fits = error_of(client.post("/v1/jobs", json=job("b4", pods=5)))
        assert "more than the cluster has (16)" in fits["rule"]


def test_priority_changes_over_patch(server: Server) -> None:
    with server.client() as client:
        client.post("/v1/jobs", json=job("pr", account="prod"))
        changed = client.patch("/v1/jobs/pr", json={"priority": 7})
        assert changed.status_code == 200 and changed.json()["priority"] == 7
        assert client.patch("/v1/jobs/pr", json={"priority": "high"}).status_code == 422
        assert client.patch("/v1/jobs/pr", json={"colour": 1}).status_code == 422
        client.delete("/v1/jobs/pr")


def test_nodes_drain_and_uncordon(server: Server) -> None:
    with server.client() as client:
        drained = client.post("/v1/nodes/n3/drain")
        assert drained.status_code == 200 and drained.json()["health"] == "draining"
        nodes = {n["name"]: n for n in client.get("/v1/nodes").json()["nodes"]}
        assert nodes["n3"]["health"] == "draining" and nodes["n0"]["gpus"] == 4
        racks = client.get("/v1/nodes", params={"level": "rack"}).json()["domains"]
        assert sorted(r["healthy_nodes"] for r in racks) == [1, 2]
        assert client.post("/v1/nodes/n3/uncordon").json()["health"] == "healthy"
        assert client.post("/v1/nodes/n9/drain").status_code == 404
        assert client.post("/v1/nodes/n3/explode").status_code == 404
        assert client.get("/v1/nodes", params={"level": "planet"}).status_code == 422


def test_accounts_are_read_and_replaced_whole(server: Server) -> None:
    with server.client() as client:
        accounts = client.get("/v1/accounts").json()
        names = [row["account"] for row in accounts["accounts"]]
        assert names == ["research", "research/team-a", "research/team-b", "prod"]
        assert accounts["accounts"][3]["budget_gpus"] == pytest.approx(16 * 0.4)
        assert all(row["standing"] for row in accounts["accounts"])
        bad = client.put("/v1/accounts", json={"accounts": {"x": 150}})
        assert bad.status_code == 422 and error_of(bad)["code"] == "invalid"
        client.post("/v1/jobs", json=job("keeps-prod", account="prod"))
        gone = client.put("/v1/accounts", json={"accounts": {"research": 100}})
        assert gone.status_code == 409
        client.delete("/v1/jobs/keeps-prod")
        tree = {
            "accounts": {
                "research": {"share": 50, "children": {"team-a": 100}},
                "prod": 30,
                "infra": 20,
            }
        }
        replaced = client.put("/v1/accounts", json=tree)
        assert replaced.status_code == 200, replaced.text
        assert [r["account"] for r in replaced.json()["accounts"]] == [
            "research",
            "research/team-a",
            "prod",
            "infra",
        ]
        assert client.get("/v1/accounts").json()["tree"] == replaced.json()["tree"]
        client.put(
            "/v1/accounts", json=yaml.safe_load((server.folder / "budgets.yaml").read_text())
        )


def test_events_resume_from_an_id(server: Server) -> None:
    with server.client() as client:
        client.post("/v1/jobs", json=job("ev", account="prod"))
        text = client.get("/v1/events", params={"follow": "false"}).text
        ids = [int(line[4:]) for line in text.splitlines() if line.startswith("id: ")]
        assert ids == sorted(ids) and len(ids) >= 2
        middle = ids[len(ids) // 2]
        rest = client.get("/v1/events", params={"follow": "false", "after": middle}).text
        rest_ids = [int(line[4:]) for line in rest.splitlines() if line.startswith("id: ")]
        # Events of the new job may have been added since: the stored ones come first.
        expected = [i for i in ids if i > middle]
        assert rest_ids[: len(expected)] == expected
        assert all(i > middle for i in rest_ids)
        resumed = client.get(
            "/v1/events", params={"follow": "false"}, headers={"Last-Event-ID": str(ids[-2])}
        ).text
        assert f"id: {ids[-1]}" in resumed and f"id: {ids[-2]}\n" not in resumed
        with client.stream("GET", "/v1/events", params={"after": ids[-1]}) as stream:
            client.delete("/v1/jobs/ev")
            for line in stream.iter_lines():
                if line.startswith("data: "):
                    event = json.loads(line[6:])
                    assert event["id"] > ids[-1]
                    break


def test_openapi_schema_is_served(server: Server) -> None:
    schema = httpx.get(f"{server.url}/openapi.json").json()
    assert "/v1/jobs" in schema["paths"]


def test_token_add_prints_a_token_once_and_stores_its_hash(tmp_path: Path) -> None:
    from toposched.cli.main import main

    file = tmp_path / "t.yaml"
    assert (
        main(
            [
                "serve",
                "token",
                "add",
                "ci",
                "--role",
                "team",
                "--account",
                "prod",
                "--tokens",
                str(file),
            ]
        )
        == 0
    )
    stored = yaml.safe_load(file.read_text())["tokens"]
    assert stored[0]["name"] == "ci" and len(stored[0]["sha256"]) == 64
    assert file.stat().st_mode & 0o077 == 0
    assert main(["serve", "token", "add", "ci", "--role", "admin", "--tokens", str(file)]) == 2


SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=12)
)
VALUES = st.recursive(
    SCALARS,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=12,
)
FIELDS = st.sampled_from(
    [
        "name",
        "account",
        "pods",
        "resources_per_pod",
        "topology",
        "priority",
        "min_runtime",
        "expected_runtime",
        "grace_period",
        "resumable",
        "run",
        "colour",
    ]
)
DOCUMENTS = st.dictionaries(FIELDS, VALUES, max_size=8) | st.fixed_dictionaries(
    {
        "name": st.from_regex(r"fz[a-z0-9]{1,8}", fullmatch=True),
        "pods": VALUES,
        "resources_per_pod": st.fixed_dictionaries({"gpus": VALUES}) | VALUES,
        "account": st.sampled_from(["prod", "research", TEAM_A, "", "a//b"]),
    }
)


def test_random_documents_never_get_a_server_error(server: Server) -> None:
    with server.client() as client:
        before = job_ids(client)
        created: list[str] = []

        @settings(max_examples=150, deadline=None)
        @given(DOCUMENTS)
        def post(document: dict[str, Any]) -> None:
            answer = client.post("/v1/jobs", json=document)
            assert answer.status_code < 500, (document, answer.text)
            if answer.status_code == 201:
                created.append(answer.json()["id"])
            else:
                error_of(answer)

        post()
        for name in created:
            client.delete(f"/v1/jobs/{name}")
        assert [i for i in job_ids(client) if i not in created] == before


def test_random_trees_and_priorities_never_get_a_server_error(server: Server) -> None:
    with server.client() as client:
        tree = client.get("/v1/accounts").json()["tree"]
        assert client.post("/v1/jobs", json=job("fz-prio", account="prod")).status_code == 201

        @settings(max_examples=60, deadline=None)
        @given(VALUES, VALUES)
        def change(document: Any, priority: Any) -> None:
            answer = client.put("/v1/accounts", json={"accounts": document})
            assert answer.status_code < 500, (document, answer.text)
            if answer.status_code == 200:
                client.put("/v1/accounts", json=tree)
            patched = client.patch("/v1/jobs/fz-prio", json={"priority": priority})
            assert patched.status_code < 500, (priority, patched.text)

        change()
        assert client.get("/v1/accounts").json()["tree"] == tree
        client.delete("/v1/jobs/fz-prio")


def test_the_policy_is_read_with_any_token_and_not_without(
    server: Server, tokens: dict[str, Any]
) -> None:
    # This server runs the default contract: no setting differs.
    with server.client(tokens["a"]) as team:
        assert team.get("/v1/policy").json() == {"policy": {}}
    assert httpx.get(f"{server.url}/v1/policy").status_code == 401
