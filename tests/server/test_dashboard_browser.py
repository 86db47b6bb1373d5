"""The dashboard in a real browser: Debian's Chromium driven by Playwright (nothing downloaded). It loads
with no console error and no request leaving the gateway, shows rows and the map for real requests sent
through the gateway, updates live, opens a row's journey, and stays locked until the admin key is given.
Screenshots go to test-artifacts/ (FIRSTTOKEN_TEST_ARTIFACTS elsewhere)."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from conftest import CLIENT_KEY, UPSTREAM_KEY
from support.gateway_process import GatewayProcess
from support.waiting import PATIENCE_S

CHROMIUM = shutil.which("chromium")
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="needs Debian's chromium (apt-get install chromium)")
ARTIFACTS = Path(os.environ.get("FIRSTTOKEN_TEST_ARTIFACTS", Path(__file__).parents[2] / "test-artifacts"))
ADMIN_KEY = "dashboard-admin-key-for-the-browser"
WAIT_MS = PATIENCE_S * 1000  # for the page to show what is awaited: a busy machine draws late, not never


class Browser:
    """One page, with every console message and every request it made recorded."""

    def __init__(self, playwright, base: str) -> None:
        self.browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True)
        self.page = self.browser.new_page(viewport={"width": 1280, "height": 900})
        self.console: list[str] = []
        self.requests: list[str] = []
        self.page.on("console", lambda m: self.console.append(f"{m.type}: {m.text}")
                     if m.type in ("error", "warning") else None)
        self.page.on("pageerror", lambda e: self.console.append(f"pageerror: {e}"))
        self.page.on("request", lambda r: self.requests.append(r.url))
        self.base = base

    def foreign(self) -> list[str]:
        return [url for url in self.requests if not url.startswith(self.base + "/")]

    def shot(self, name: str, full_page: bool = False) -> None:
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        self.page.screenshot(path=str(ARTIFACTS / name), full_page=full_page)


@pytest.fixture
def browser_for() -> Iterator:
    from playwright.sync_api import sync_playwright

    opened: list[Browser] = []
    with sync_playwright() as playwright:
        def open_at(base: str) -> Browser:
            opened.append(Browser(playwright, base))
            return opened[-1]
        yield open_at
        for browser in opened:
            browser.browser.close()


def ask(url: str, content: str, key: str = "none", model: str = "llama-3.1-8b") -> httpx.Response:
    response = httpx.post(f"{url}/v1/chat/completions", timeout=30, headers={"Authorization": f"Bearer {key}"},
                          json={"model": model, "max_tokens": 16, "stream": True,
                                "messages": [{"role": "user", "content": content}]})
    assert response.status_code == 200, response.text
    return response


def test_the_dashboard_draws_live_journeys_and_the_map(tmp_path: Path, browser_for) -> None:
    from playwright.sync_api import expect

    # Nothing configured (Lagos, and a region in Virginia) but a semantic lookup that waits for a busy encoder
    # rather than skip it: the paraphrase must be looked up.
    with GatewayProcess({"cache": {"semantic_wait_ms": 30_000}}, tmp_path) as gateway:
        view = browser_for(gateway.url)
        page = view.page
        page.goto(f"{gateway.url}/dashboard")
        page.wait_for_selector("[data-testid=feed-status][data-state=live]", timeout=WAIT_MS)
        assert page.locator("[data-testid=live-empty]").is_visible()
        miss = ask(gateway.url, "How do I cook beans?")
        hit = ask(gateway.url, "How do I cook beans?")
        paraphrase = ask(gateway.url, "What is the way to cook beans?")
        assert hit.headers["x-firsttoken-cache"] == "hit"
        assert paraphrase.headers["x-firsttoken-cache"].startswith("semantic-hit; similarity=0.9")
        for response in (miss, hit, paraphrase):  # live: the page was not reloaded
            page.wait_for_selector(f"tr[data-request-id={response.headers['x-request-id']}]", timeout=WAIT_MS)
        marks = page.locator(f"tr[data-request-id={paraphrase.headers['x-request-id']}]").inner_text()
        assert "semantic 0.9" in marks
        assert page.locator("[data-testid=gateway-location]").inner_text().endswith("Lagos, NG")
        # the map: Lagos, Virginia, and the great circle between them with its floor and measured round trip
        assert page.locator("circle[data-place=gateway]").count() == 1
        assert page.locator("circle[data-place=upstream][data-name=sim]").count() == 1
        assert page.locator("path.arc[data-upstream=sim]").count() >= 1
        label = page.locator("text.arc-label[data-upstream=sim]")
        expect(label).to_contain_text("measured 129", timeout=WAIT_MS)
        expect(label).to_contain_text("floor 86 ms", timeout=WAIT_MS)  # an SVG text: no inner_text
        # over time, a series per upstream and model (the charts redraw once a second)
        expect(page.locator("[data-testid=chart-ttft]")).to_contain_text("sim/llama-3.1-8b p50", timeout=WAIT_MS)
        # spend today: the region's GPU-hours, and the two answers the edge gave
        spend = page.locator("[data-testid=spend-table] tr[data-model='sim/llama-3.1-8b']")
        expect(spend).to_contain_text("default", timeout=WAIT_MS)
        expect(spend).to_contain_text("3", timeout=WAIT_MS)
        expect(page.locator("[data-testid=spend-notes]")).to_contain_text("2 cache hits", timeout=WAIT_MS)
        view.shot("dashboard.png", full_page=True)
        page.locator(f"tr[data-request-id={miss.headers['x-request-id']}]").click()
        verdict = page.locator("[data-testid=journey-detail] [data-testid=verdict]")
        expect(verdict).to_contain_text("most of this wait was distance: a 129 ms round trip", timeout=WAIT_MS)
        view.shot("dashboard-journey.png")
        assert view.console == [], view.console
        assert view.foreign() == [], view.foreign()


def test_the_dashboard_stays_locked_until_the_admin_key(tmp_path: Path, upstream, browser_for) -> None:
    from playwright.sync_api import expect

    settings = {"upstreams": {"fake": {"url": upstream.url, "key": UPSTREAM_KEY}},
                "keys": [{"name": "app", "key": CLIENT_KEY}], "admin_key": ADMIN_KEY}
    with GatewayProcess(settings, tmp_path) as gateway:
        view = browser_for(gateway.url)
        page = view.page
        page.goto(f"{gateway.url}/dashboard")
        lock = page.locator("[data-testid=lock]")
        lock.wait_for(timeout=WAIT_MS)
        assert page.locator("[data-testid=feed-status]").inner_text() == "locked"
        assert page.locator("tr[data-request-id]").count() == 0
        view.shot("dashboard-locked.png")
        page.fill("[data-testid=admin-key]", CLIENT_KEY)  # a client's key never opens it
        page.click("[data-testid=unlock]")
        expect(page.locator("[data-testid=lock-message]")).to_contain_text("client key", timeout=WAIT_MS)
        assert lock.is_visible()
        page.fill("[data-testid=admin-key]", ADMIN_KEY)
        page.click("[data-testid=unlock]")
        page.wait_for_selector("[data-testid=feed-status][data-state=live]", timeout=WAIT_MS)
        request_id = ask(gateway.url, "open sesame", CLIENT_KEY, "fake/echo").headers["x-request-id"]
        page.wait_for_selector(f"tr[data-request-id={request_id}]", timeout=WAIT_MS)
        assert view.console == [], view.console
        assert view.foreign() == [], view.foreign()
