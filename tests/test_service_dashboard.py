"""The dashboard in a real browser: Debian's Chromium, headless, driven by playwright, against
a real `toposched serve`. Pages load with no console errors; the token is entered once; the
map opens a rack; the queue shows why a job waits; an admin drains a node from the page; a
team token gets no buttons; the first view of the 1,000,080-GPU fleet is timed.

Screenshots are written to $TOPOSCHED_ARTIFACTS (default: the test's temporary folder) and
checked for content by decoding them in the browser and counting the map's colours.
"""

from __future__ import annotations

import base64
import os
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from service_helpers import Server, job, serving

from toposched.service.auth import add_token

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
FIRST_VIEW_BUDGET_S = 1.0
TEAM_A = "research/team-a"

playwright_api = pytest.importorskip("playwright.sync_api")


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    if not Path(CHROMIUM).exists():
        pytest.skip(f"Chromium is not installed at {CHROMIUM} (Debian package `chromium`)")
    with playwright_api.sync_playwright() as driver:
        try:
            chromium = driver.chromium.launch(
                executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS
            )
        except playwright_api.Error as error:
            pytest.skip(f"Chromium did not start: {str(error)[:300]}")
        try:
            yield chromium
        finally:
            chromium.close()


@pytest.fixture(scope="module")
def artifacts(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = Path(os.environ.get("TOPOSCHED_ARTIFACTS") or tmp_path_factory.mktemp("shots"))
    folder.mkdir(parents=True, exist_ok=True)
    return folder


class Page:
    """A browser page that records console errors and failed requests."""

    def __init__(self, browser: Any, url: str) -> None:
        self.context = browser.new_context(viewport={"width": 1280, "height": 900})
        self.page = self.context.new_page()
        self.errors: list[str] = []
        self.page.on("console", lambda m: self.errors.append(m.text) if m.type == "error" else None)
        self.page.on("pageerror", lambda e: self.errors.append(str(e)))
        self.url = url

    def open_with(self, token: str) -> Any:
        page = self.page
        page.goto(self.url + "/")
        page.fill("#token", token)
        page.click("#login button[type=submit]")
        page.wait_for_selector("#map .tile")
        return page

    def close(self) -> None:
        self.context.close()


def colour_pixels(page: Any, png: bytes, colour: str) -> int:
    """Pixels of the screenshot `png` within a small distance of the CSS colour `colour`,
    counted by the browser's own PNG decoder."""
    script = """async ([data, colour]) => {
        const probe = document.createElement("div");
        probe.style.color = colour;
        document.body.append(probe);
        const [r, g, b] = getComputedStyle(probe).color.match(/\\d+/g).map(Number);
        probe.remove();
        const image = new Image();
        image.src = "data:image/png;base64," + data;
        await image.decode();
        const canvas = document.createElement("canvas");
        canvas.width = image.width; canvas.height = image.height;
        const context = canvas.getContext("2d");
        context.drawImage(image, 0, 0);
        const pixels = context.getImageData(0, 0, image.width, image.height).data;
        let count = 0;
        for (let i = 0; i < pixels.length; i += 4) {
            const distance = Math.abs(pixels[i] - r) + Math.abs(pixels[i + 1] - g)
                + Math.abs(pixels[i + 2] - b);
            if (distance < 12) count++;
        }
        return count;
    }"""
    return int(page.evaluate(script, [base64.b64encode(png).decode(), colour]))


@pytest.fixture(scope="module")
def tokens(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    folder = tmp_path_factory.mktemp("dashboard")
    file = folder / "tokens.yaml"
    return {
        "folder": folder,
        "file": file,
        "admin": add_token(file, "ops", "admin", []),
        "a": add_token(file, "team-a", "team", [TEAM_A]),
        "b": add_token(file, "team-b", "team", ["research/team-b"]),
    }


@pytest.fixture(scope="module")
def server(tokens: dict[str, Any]) -> Iterator[Server]:
    args = ("--cluster", "cluster.yaml", "--budgets", "budgets.yaml", "--tokens")
    with serving(tokens["folder"], *args, str(tokens["file"]), token=tokens["admin"]) as running:
        with running.client() as admin:
            assert admin.post("/v1/jobs", json=job("a1", gpus=4, pods=2)).status_code == 201
            assert admin.post("/v1/jobs", json=job("big", gpus=4, pods=3)).status_code == 201
            wait_until(lambda: admin.get("/v1/jobs/a1").json()["state"] == "running")
            wait_until(lambda: admin.get("/v1/jobs/big/explain").json()["code"] != "not-considered")
        yield running


def _figures_masked(text: str) -> str:
    return re.sub(r"\d[\d,.]*", "#", text)


def test_an_admin_opens_a_rack_reads_the_queue_and_drains_a_node(
    server: Server, browser: Any, artifacts: Path
) -> None:
    view = Page(browser, server.url)
    try:
        page = view.open_with(str(server.token))
        assert page.text_content("#who") == "ops (admin)"
        with server.client() as admin:
            a1_nodes = admin.get("/v1/jobs/a1").json()["nodes"]
            reason = admin.get("/v1/queue").json()["queue"][0]["reason"]
            why = admin.get("/v1/jobs/big/explain").json()
            racks = {n["name"]: n["labels"]["rack"] for n in admin.get("/v1/nodes").json()["nodes"]}
        # the queue says why `big` waits, as the API does (the seconds it has waited move on
        # between the API's answer and the page's, so figures are compared as placeholders)
        page.wait_for_selector("#queue tr[data-job=big]")
        shown = page.text_content("#queue tr[data-job=big] td:last-child") or ""
        assert _figures_masked(shown) == _figures_masked(reason)
        # its page: the explanation's words, code and position
        page.click("#queue tr[data-job=big]")
        page.wait_for_selector("#job-section:not([hidden]) #job-history li")
        facts = page.text_content("#job-facts") or ""
        assert _figures_masked(why["reason"]) in _figures_masked(facts) and why["code"] in facts
        assert "1 in the queue" in facts
        # the map: both racks; a1's rack opens to its nodes and the job on them
        names = page.locator("#map .tile").evaluate_all("ts => ts.map(t => t.dataset.name)")
        assert sorted(names) == sorted(set(racks.values()))
        held_rack = racks[a1_nodes[0]]
        page.click(f"#map .tile[data-name='{held_rack}']")
        page.wait_for_selector(f"#map .tile[data-name='{a1_nodes[0]}']")
        assert "a1 (research/team-a, 4 GPUs)" in page.text_content(
            f"#map .tile[data-name='{a1_nodes[0]}']"
        )
        # an idle node elsewhere: open its rack and drain it from the page
        idle = next(name for name in racks if name not in a1_nodes)
        page.click("#crumbs button:has-text('cluster')")
        page.click(f"#map .tile[data-name='{racks[idle]}']")
        node = page.locator(f"#map .tile[data-name='{idle}']")
        node.locator("button:has-text('drain')").click()
        page.wait_for_selector(f"#map .tile[data-name='{idle}'] .health-draining")
        with server.client() as admin:
            assert admin.get("/v1/nodes").json()["nodes"][list(racks).index(idle)]["health"] in (
                "draining",
                "cordoned",
            )
        # prod asks for nothing: it is owed nothing, and no share of it can be delivered
        prod = page.locator("#teams tr[data-account='prod'] td")
        assert prod.nth(9).text_content() == "0.00" and prod.nth(11).text_content() == "-"
        shot = page.screenshot(full_page=True)
        (artifacts / "dashboard-admin.png").write_bytes(shot)
        assert colour_pixels(page, shot, "#4a4a4a") > 50  # the drained node's hatching
        colour = page.locator("#legend i").first.evaluate(
            "e => getComputedStyle(e).backgroundColor"
        )
        assert colour_pixels(page, shot, colour) > 200  # research/team-a's GPUs and bars
        node.locator("button:has-text('uncordon')").click()
        page.wait_for_selector(f"#map .tile[data-name='{idle}'] .health-healthy")
        assert view.errors == []
    finally:
        view.close()


def test_a_team_token_sees_no_admin_buttons(
    server: Server, tokens: dict[str, Any], browser: Any, artifacts: Path
) -> None:
    with server.client(tokens["a"]) as team:
        # a1's 8 GPUs have run long enough for the page's 0.01 GPU-h to show them
        wait_until(lambda: delivered_gpu_hours(team) >= 0.01)
    view = Page(browser, server.url)
    try:
        page = view.open_with(tokens["a"])
        assert page.text_content("#who") == f"team-a (team: {TEAM_A})"
        page.click("#map .tile >> nth=0")
        page.wait_for_selector("#map .node")
        assert page.locator("#map .node button").count() == 0
        page.wait_for_selector("#teams tbody tr")
        assert TEAM_A in page.text_content("#teams")
        # owed vs delivered: team-a asks for 20 GPUs (a1 and big) and runs 8 under a 4.8-GPU
        # budget, so the share of what it is owed that is delivered falls towards 40% (from
        # 100% while a1 ran alone, before big came): the page shows it no lower than the API
        # a moment later
        cells = page.locator(f"#teams tr[data-account='{TEAM_A}'] td")
        owed, delivered = (float(cells.nth(i).text_content()) for i in (9, 10))
        assert 0 < delivered <= owed  # shown to 0.01 GPU-h: equal early on; the share below
        # says delivered falls short
        met = cells.nth(11).text_content().strip()
        with server.client(tokens["a"]) as team:
            rows = team.get("/v1/accounts").json()["accounts"]
        later = next(row["owed_met"] for row in rows if row["account"] == TEAM_A)
        assert met.endswith("%") and round(100 * later) <= int(met.removesuffix("%")) < 100, met
        assert later >= 0.4
        page.wait_for_selector("#events li")
        (artifacts / "dashboard-team.png").write_bytes(page.screenshot(full_page=True))
        # the token is kept for this tab: a reload needs no login
        page.reload()
        page.wait_for_selector("#map .tile")
        assert page.is_hidden("#login")
        assert view.errors == []
    finally:
        view.close()


def test_a_wrong_token_is_refused_with_a_message(server: Server, browser: Any) -> None:
    view = Page(browser, server.url)
    try:
        page = view.page
        page.goto(server.url + "/")
        page.fill("#token", "not-a-token")
        page.click("#login button[type=submit]")
        page.wait_for_selector("#login-error:has-text('not known')")
        assert page.is_hidden("#main")
    finally:
        view.close()


def test_first_view_of_a_million_gpus(browser: Any, tmp_path: Path, artifacts: Path) -> None:
    with serving(tmp_path, "--fleet", "million", "--backend", "dry-run") as server:
        view = Page(browser, server.url)
        try:
            page = view.page
            started = time.perf_counter()
            page.goto(server.url + "/")
            page.wait_for_selector("#map .tile")
            first_view = time.perf_counter() - started
            drawn = page.evaluate("window.firstMapDrawnAt")
            assert page.text_content("#map-summary").startswith("2 zones, 1,000,080 GPUs")
            page.click("#map .tile[data-name='z0']")
            page.wait_for_selector("#map .tile[data-name='z0-b0']")
            assert page.locator("#map .tile").count() == 15
            started = time.perf_counter()
            page.click("#map .tile[data-name='z0-b0']")
            page.wait_for_selector("#map .tile[data-name='z0-b0-r462']")
            block_view = time.perf_counter() - started
            assert page.locator("#map .tile").count() == 463
            (artifacts / "dashboard-million-block.png").write_bytes(page.screenshot())
            print(
                f"first view {first_view:.3f} s (map drawn {drawn / 1000:.3f} s after "
                f"navigation); a 463-rack block {block_view:.3f} s"
            )
            assert view.errors == []
            assert drawn / 1000 < FIRST_VIEW_BUDGET_S
        finally:
            view.close()


def delivered_gpu_hours(team: httpx.Client) -> float:
    rows = team.get("/v1/accounts").json()["accounts"]
    return float(next(row["delivered_gpu_hours"] for row in rows if row["account"] == TEAM_A))


def wait_until(condition: Any, timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.05)


def test_static_files_are_served_without_a_token(server: Server) -> None:
    for path, kind in (("/", "text/html"), ("/static/dashboard.js", "text/javascript")):
        answer = httpx.get(server.url + path)
        assert answer.status_code == 200
        assert answer.headers["content-type"].startswith(kind)
    assert httpx.get(server.url + "/v1/map").status_code == 401


def test_the_map_names_only_the_accounts_a_token_sees(
    server: Server, tokens: dict[str, Any]
) -> None:
    with server.client(tokens["b"]) as team_b, server.client() as admin:
        root = team_b.get("/v1/map").json()
        held = [child["held"] for child in root["children"] if child["held"]]
        assert held == [{"(other accounts)": 8.0}]
        assert [c["held"] for c in admin.get("/v1/map").json()["children"] if c["held"]] == [
            {TEAM_A: 8.0}
        ]
        rack = next(child for child in root["children"] if child["held"])
        nodes = team_b.get("/v1/map", params={"level": "rack", "index": rack["index"]}).json()
        assert nodes["child_level"] == "node"
        assert [job for node in nodes["children"] for job in node["jobs"]] == [
            {"id": None, "account": "(other accounts)", "gpus": 4.0}
        ] * 2
        assert team_b.get("/v1/whoami").json()["role"] == "team"
        unknown = team_b.get("/v1/map", params={"level": "row"}).json()["error"]
        assert (unknown["status"], unknown["field"], unknown["value"]) == (422, "level", "row")
        assert team_b.get("/v1/map", params={"level": "rack", "index": 9}).status_code == 404
        assert team_b.get("/v1/map", params={"index": -1}).status_code == 422
