"""CORS in a real browser: a page served from one origin calls the gateway on another with fetch(), as a web
app would (an authorisation header and a JSON body, so the browser sends a preflight first). Chromium
(Debian's package) driven by Playwright: the listed origin reads the answer and the X-ray's Server-Timing;
an origin not listed is blocked by the browser itself."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from aiohttp import web

from support.gateway_process import GatewayProcess
from support.loopback import serve_on_loopback
from support.threaded import InThread

CHROMIUM = shutil.which("chromium")
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="needs Debian's chromium (apt-get install chromium)")

PAGE = """<!doctype html><title>app</title><script>
async function ask(gateway) {
  try {
    const response = await fetch(gateway + "/v1/chat/completions", {
      method: "POST",
      headers: {"authorization": "Bearer none", "content-type": "application/json"},
      body: JSON.stringify({model: "sim/llama-3.2-1b", max_tokens: 3, messages: [{role: "user", content: "hi"}]}),
    });
    const answer = await response.json();
    return {status: response.status, text: answer.choices[0].message.content,
            timing: response.headers.get("server-timing")};
  } catch (error) {
    return {error: String(error)};
  }
}
</script>"""


async def page(request: web.Request) -> web.Response:
    return web.Response(text=PAGE, content_type="text/html")


def page_server():
    app = web.Application()
    app.router.add_get("/", page)
    return serve_on_loopback(app)


def test_a_listed_origin_reads_the_answer_and_an_unlisted_one_is_blocked(tmp_path: Path) -> None:
    from playwright.sync_api import sync_playwright

    with InThread(page_server) as allowed_port, InThread(page_server) as other_port:
        allowed = f"http://127.0.0.1:{allowed_port}"
        settings = {"sim": {"models": ["llama-3.2-1b"]}, "cors": {"origins": [allowed]}}
        with GatewayProcess(settings, tmp_path) as gateway, sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True)
            try:
                page = browser.new_page()
                page.goto(allowed + "/")
                answer = page.evaluate("gateway => ask(gateway)", gateway.url)
                assert answer["status"] == 200 and answer["text"]
                assert "gateway;dur=" in answer["timing"]  # exposed to the page
                page.goto(f"http://127.0.0.1:{other_port}/")
                blocked = page.evaluate("gateway => ask(gateway)", gateway.url)
                assert "Failed to fetch" in blocked["error"]
            finally:
                browser.close()
