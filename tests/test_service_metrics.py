"""Metrics: `/metrics` of a real `toposched serve` read by a real Prometheus server through its
query API, who may scrape, and the state's numbers read from a loop."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_server import prometheus_for
from service_helpers import Clock, Server, job, running_loop, serving, settle

from toposched.cli.main import main
from toposched.service import commands
from toposched.service.auth import Tokens, add_token
from toposched.service.commands import Submission
from toposched.service.core import ServiceCore
from toposched.service.documents import body_hash, split_job
from toposched.service.loop import Loop
from toposched.service.metrics import ServiceMetrics, job_class, take_snapshot

TEAM_A = "research/team-a"
GRAFANA = Path(__file__).parents[1] / "docs" / "grafana" / "toposched.json"


@pytest.fixture(scope="module")
def tokens(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    folder = tmp_path_factory.mktemp("metrics")
    file = folder / "tokens.yaml"
    return {
        "folder": folder,
        "file": file,
        "admin": add_token(file, "ops", "admin", []),
        "a": add_token(file, "team-a", "team", [TEAM_A]),
        "prometheus": add_token(file, "prometheus", "metrics", []),
    }


@pytest.fixture(scope="module")
def server(tokens: dict[str, Any]) -> Iterator[Server]:
    """a1 runs on 8 of the 16 GPUs; `big` (12 GPUs) waits."""
    args = ("--cluster", "cluster.yaml", "--budgets", "budgets.yaml", "--tokens")
    with serving(tokens["folder"], *args, str(tokens["file"]), token=tokens["admin"]) as running:
        with running.client() as admin:
            assert admin.post("/v1/jobs", json=job("a1", gpus=4, pods=2)).status_code == 201
            assert admin.post("/v1/jobs", json=job("big", gpus=4, pods=3)).status_code == 201
            wait_until(lambda: admin.get("/v1/jobs/a1").json()["state"] == "running")
            wait_until(lambda: admin.get("/v1/jobs/big/explain").json()["code"] != "not-considered")
        yield running


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def test_only_admin_and_metrics_tokens_scrape(server: Server, tokens: dict[str, Any]) -> None:
    assert httpx.get(f"{server.url}/metrics").status_code == 401
    with server.client(tokens["a"]) as team:
        answer = team.get("/metrics")
        assert answer.status_code == 403
        assert "metrics token" in answer.json()["error"]["message"]
    with server.client(tokens["prometheus"]) as scraper:
        answer = scraper.get("/metrics")
        assert answer.status_code == 200
        assert answer.headers["content-type"].startswith("text/plain")
        # a metrics token reads nothing else
        assert scraper.get("/v1/jobs").json()["jobs"] == []
        assert scraper.post("/v1/nodes/n0/drain").status_code == 403


def test_prometheus_scrapes_the_server(
    server: Server, tokens: dict[str, Any], tmp_path: Path
) -> None:
    with server.client() as admin:
        code = admin.get("/v1/jobs/big/explain").json()["code"]
    target = server.url.removeprefix("http://")
    with prometheus_for(tmp_path / "prometheus", target, tokens["prometheus"]) as prometheus:
        assert prometheus.wait_for(f'toposched_running_jobs{{account="{TEAM_A}"}}') == 1
        pending = f'toposched_pending_jobs{{account="{TEAM_A}",reason="{code}"}}'
        assert prometheus.wait_for(pending) == 1
        held = prometheus.wait_for('sum(toposched_gpus{state=~"allocated|unallocated_work"})')
        assert held == 8
        assert prometheus.wait_for('toposched_gpus{state="idle"}') == 8
        assert prometheus.wait_for(f'toposched_account_running_gpus{{account="{TEAM_A}"}}') == 8
        assert prometheus.wait_for('toposched_account_running_gpus{account="research"}') == 8
        budget = prometheus.wait_for('toposched_account_budget_gpus{account="prod"}')
        assert budget == pytest.approx(16 * 0.4)
        # team-a asks for 20 GPUs (a1 and big) and runs 8, within its first 864 s under the
        # 4.8-GPU budget: owed is what it asked for, and all it ran was owed. The moment
        # between the two submissions, when it asked for 8 only, keeps owed below 2.5x
        # delivered.
        team_a = f'{{account="{TEAM_A}"}}'
        delivered = prometheus.wait_for(f"toposched_account_delivered_gpu_seconds{team_a}")
        assert delivered > 0
        owed_over_delivered = prometheus.wait_for(
            f"toposched_account_owed_gpu_seconds{team_a} "
            f"/ toposched_account_delivered_gpu_seconds{team_a}"
        )
        assert 1 < owed_over_delivered <= 2.5
        unmet = prometheus.wait_for(
            f"toposched_account_delivered_gpu_seconds{team_a} "
            f"- toposched_account_delivered_within_owed_gpu_seconds{team_a}"
        )
        assert unmet == 0
        assert prometheus.wait_for('toposched_account_owed_gpu_seconds{account="prod"}') == 0
        started = f'toposched_admission_wait_seconds_count{{account="{TEAM_A}",job_class="small"}}'
        assert prometheus.wait_for(started) == 1
        assert prometheus.wait_for("toposched_cycle_duration_seconds_count") >= 1
        assert prometheus.wait_for("toposched_store_commit_seconds_count") >= 2
        assert prometheus.wait_for('sum(toposched_domain_free_gpus{level="rack"})') == 8
        assert prometheus.wait_for('toposched_level_full_domains{level="rack"}') == 1
        assert prometheus.wait_for('up{job="toposched"}') == 1
        # every query of the Grafana dashboard is valid PromQL over metrics the server has
        with server.client() as admin:
            exported = metric_names(admin.get("/metrics").text)
        for expression in grafana_queries():
            assert set(re.findall(r"toposched_\w+", expression)) <= exported, expression
            instant = expression.replace("$__rate_interval", "1m").replace("$account", ".*")
            prometheus.query(instant)  # raises unless Prometheus answers "success"


def metric_names(text: str) -> set[str]:
    """The series names each family of the text may have (a labelled counter none of whose
    labels has been seen yet has no sample)."""
    suffixes = {"counter": ("_total",), "histogram": ("_bucket", "_count", "_sum")}
    return {
        family.name + suffix
        for family in text_string_to_metric_families(text)
        for suffix in suffixes.get(family.type, ("",))
    }


def grafana_queries() -> list[str]:
    dashboard = json.loads(GRAFANA.read_text())
    return [target["expr"] for panel in dashboard["panels"] for target in panel["targets"]]


def test_a_cordoned_node_counts_as_unavailable(server: Server) -> None:
    with server.client() as admin:
        busy = admin.get("/v1/jobs/a1").json()["nodes"]
        idle_node = next(n for n in ("n0", "n1", "n2", "n3") if n not in busy)
        before = samples(admin.get("/metrics").text)
        assert admin.post(f"/v1/nodes/{idle_node}/cordon").status_code == 200
        after = samples(admin.get("/metrics").text)
        assert admin.post(f"/v1/nodes/{idle_node}/uncordon").status_code == 200

    def gpus(snapshot: dict[Any, float], state: str) -> float:
        return snapshot[("toposched_gpus", (("state", state),))]

    assert gpus(before, "allocated") + gpus(before, "unallocated_work") == 8
    assert (gpus(before, "idle"), gpus(after, "idle")) == (8, 4)
    assert (gpus(before, "unavailable"), gpus(after, "unavailable")) == (0, 4)
    assert after[("toposched_nodes", (("health", "cordoned"),))] == 1


def test_snapshot_counts_jobs_gpus_and_evictions(tmp_path: Path) -> None:
    clock = Clock()
    metrics = ServiceMetrics()
    borrower = job("b1", gpus=4, pods=4, account="research/team-b", resumable=True, min_runtime=0)
    with running_loop(tmp_path / "s.db", clock) as loop:
        loop.observer = metrics
        submit(loop, borrower)
        settle(loop)
        clock.now += 600
        submit(loop, job("p1", gpus=4, account="prod"))  # within prod's budget: owed
        settle(loop)
        snapshot = loop.call(lambda core, now: take_snapshot(core, now, loop.cycles))
    text = samples(metrics.text())
    evictions = {
        labels: v for (name, labels), v in text.items() if name == "toposched_evictions_total"
    }
    assert evictions == {(("rule", "unallocated-victim"),): 1}
    # The borrower ran 600 s on 16 GPUs and reported no checkpoint: all of it is lost.
    lost = {
        labels: v
        for (name, labels), v in text.items()
        if name == "toposched_eviction_lost_gpu_seconds_total"
    }
    assert lost == {(("rule", "unallocated-victim"),): 16 * 600}
    assert text[("toposched_decisions_total", (("kind", "evict"),))] == 1
    wait = (
        "toposched_admission_wait_seconds_count",
        (("account", "research/team-b"), ("job_class", "medium")),
    )
    assert text[wait] == 1
    assert snapshot.running == {"prod": 1}  # the borrower left; the owed job runs
    assert sum(snapshot.gpus.values()) == 16
    rows = {row.account: row for row in snapshot.accounts}
    assert rows["research/team-b"].usage_gpu_seconds == 0  # unallocated work is not charged
    assert rows["prod"].running_gpus == 4
    assert [account for account, _ in snapshot.pending] == ["research/team-b"]  # requeued
    assert rows["prod"].budget_gpus == pytest.approx(6.4)
    assert rows["prod"].fair_share == float("inf")


def test_a_metrics_token_is_made_like_the_others(tmp_path: Path, capsys: Any) -> None:
    file = tmp_path / "t.yaml"
    command = ["serve", "token", "add", "prom", "--role", "metrics", "--tokens", str(file)]
    assert main(command) == 0
    token = capsys.readouterr().out.strip()
    principal = Tokens.load(file).principal(token)
    assert principal is not None and principal.scrapes and not principal.admin
    assert not principal.sees("prod")
    with_account = ["serve", "token", "add", "p2", "--role", "metrics", "--account", "prod"]
    assert main([*with_account, "--tokens", str(file)]) == 2
    assert "a metrics token has no accounts" in capsys.readouterr().err


def test_job_classes_by_gpus() -> None:
    assert [job_class(g) for g in (0.5, 1, 2, 8, 9, 72, 73, 4096)] == [
        "debug",
        "debug",
        "small",
        "small",
        "medium",
        "medium",
        "large",
        "large",
    ]


def submit(loop: Loop, document: dict[str, Any]) -> None:
    fields, run = split_job(document)

    def apply(core: ServiceCore, now: float) -> None:
        commands.submit(core, Submission(fields, run, None, body_hash(document)), now)

    loop.call(apply)


def wait_until(condition: Any, timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.05)
