"""The plan's HTML report in a real browser (Debian's Chromium driven by Playwright, nothing downloaded): it
opens from a file with no network at all, draws the map (land, each city, each option and gateway, the ways
between them), the CDF of time to first token for every option, the waterfall and the tables, and says no
error. Its screenshot goes to test-artifacts/ (FIRSTTOKEN_TEST_ARTIFACTS elsewhere)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from firsttoken.cli import main

CHROMIUM = shutil.which("chromium")
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="needs Debian's chromium (apt-get install chromium)")
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "lagos.yaml"
ARTIFACTS = Path(os.environ.get("FIRSTTOKEN_TEST_ARTIFACTS", Path(__file__).parents[2] / "test-artifacts"))


def test_the_report_opens_offline_and_draws_every_option(tmp_path) -> None:
    from playwright.sync_api import sync_playwright

    report = tmp_path / "plan.html"
    made = CliRunner().invoke(main, ["plan", str(EXAMPLE), "--duration", "60", "--html", str(report)])
    assert made.exit_code == 0, made.output
    assert report.stat().st_size < 1_000_000  # the vendored charts and outline, not a framework
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True)
        page = browser.new_page(viewport={"width": 1100, "height": 900})
        problems: list[str] = []
        requests: list[str] = []
        page.on("console", lambda m: problems.append(m.text) if m.type in ("error", "warning") else None)
        page.on("pageerror", lambda e: problems.append(str(e)))
        page.on("request", lambda r: requests.append(r.url))
        page.goto(report.as_uri())
        page.wait_for_selector("body[data-drawn=yes]", timeout=10_000)
        assert problems == []
        assert requests == [report.as_uri()]  # everything it shows is inside it
        assert len(page.get_attribute("#map .land", "d") or "") > 10_000  # the continents' outline
        assert page.locator("#map circle.user").count() == 4
        assert page.locator("#map rect.option").count() == 7
        assert page.locator("#map polygon.gateway").count() == 2
        assert page.locator("#map path.way").count() == 4 * 7
        assert page.locator("#map path.way.best").count() == 4
        # Lagos to Virginia is drawn through the cable hubs it passes (Europe), not as one straight line
        lagos_to_virginia = page.evaluate("PLAN.options.find((o) => o.name.startsWith('us-east-1')).ways[0]")
        assert len(lagos_to_virginia) > 3 and any(lat > 35 and -10 < lon < 5 for lon, lat in lagos_to_virginia)
        assert page.locator("#cdf canvas").count() >= 1
        legend = page.locator("#cdf .u-legend").inner_text()
        assert all(name in legend for name in ("Lagos colocation", "the same API, gateway in Lagos"))
        assert page.locator(".waterfall rect").count() >= 7 * 4  # at least four parts for each option
        assert page.locator("svg.scatter circle.point").count() == 7  # cost against speed, a point each
        assert page.locator("table.felt tbody tr").count() == 7
        assert page.locator("table.costs tbody tr").count() == 7
        assert "table [1]" in page.locator("table.costs").inner_text()  # a price from the shipped table, cited
        assert "AWS Price List" in page.locator("body").inner_text()
        assert page.locator("table.cities tbody tr").count() == 4
        assert "fastest first token" in page.locator(".lede").inner_text()
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "plan-report.png"), full_page=True)
        browser.close()
