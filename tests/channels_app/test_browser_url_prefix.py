"""The chat page under a path of a shared host (QORVEN_URL_PREFIX=/qorven) in a real
browser, asked as a proxy that passes the path on asks it: signing in, the page's
scripts and styles, its calls and its socket all stay under the prefix, with the strict
Content-Security-Policy in force, and a reply streams in."""
from __future__ import annotations

import pytest

from ..fakes.model_server import reply
from .browser_support import ARTIFACTS, PASSWORD, send


@pytest.mark.parametrize("chat_server", [{"QORVEN_URL_PREFIX": "/qorven"}], indirect=True)
def test_the_chat_page_under_a_prefix_streams_a_reply_and_asks_nothing_outside_it(chat_server, tmp_path, browser):
    from playwright.sync_api import expect

    base, model, _ = chat_server
    answer = "Under a path, and streaming: one, two, three, four, five."
    model.add(reply(answer, chunk_delay=0.12))
    ARTIFACTS.mkdir(exist_ok=True)
    asked, sockets, refused, static = [], [], [], []

    page = browser.new_page(viewport={"width": 1280, "height": 820})
    page.set_default_timeout(20_000)
    page.on("request", lambda r: asked.append(r.url))
    page.on("websocket", lambda ws: sockets.append(ws.url))
    page.on("console", lambda m: refused.append(m.text) if "Content Security Policy" in m.text else None)
    page.on("response", lambda r: static.append((r.url, r.status)) if "/static/" in r.url else None)
    page.goto(base + "/qorven/")
    assert page.url == base + "/qorven/accounts/login/?next=/qorven/chat/"
    page.fill("#id_username", "alice")
    page.fill("#id_password", PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_url(base + "/qorven/chat/aria/")
    expect(page.locator("[data-status]")).to_have_attribute("data-state", "live")

    send(page, "Where are you?")
    expect(page.locator(".msg--user .msg__body").last).to_have_text("Where are you?")
    page.wait_for_function(
        "(full) => { const b = document.querySelector('.msg--streaming .msg__body');"
        " return b && b.textContent.length > 0 && b.textContent.length < full.length; }",
        arg=answer,
    )
    final = page.locator(".msg--assistant:not(.msg--streaming) .msg__body").last
    expect(final).to_have_text(answer)
    page.screenshot(path=str(ARTIFACTS / "chat-under-prefix.png"))

    outside = [url for url in asked if not url.startswith(base + "/qorven/")]
    assert not outside, outside
    assert sockets and all(url.startswith(base.replace("http", "ws", 1) + "/qorven/ws/chat/acme/aria/")
                           for url in sockets), sockets
    assert {url.rsplit("/", 1)[1] for url, status in static if status in (200, 304)} >= {"chat.js", "chat.css"}, static
    assert not refused, refused
    assert f"Qorven on {base}/qorven/  (admin: /qorven/admin/)" in (tmp_path / "server.log").read_text()
