"""Accessibility of the chat page (light and dark) and the webchat frame: axe-core (bundled
with axe-playwright-python, run in Debian's chromium) finds no serious or critical
violation, with a conversation on screen — badges, a code block, the actions."""
from __future__ import annotations

import pytest

from ..fakes.model_server import reply
from .browser_support import SERVER_WORK, post_telegram, send, sign_in

SEVERE = {"serious", "critical"}


def severe_violations(page) -> list[str]:
    from axe_playwright_python.sync_playwright import Axe

    results = Axe().run(page)
    return [f"{v['id']} ({v['impact']}): {v['help']} — " + "; ".join(n["target"][0] for n in v["nodes"][:4])
            for v in results.response["violations"] if v["impact"] in SEVERE]


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_the_chat_page_has_no_serious_accessibility_violations(chat_server, scheme, browser):
    from playwright.sync_api import expect

    base, model, platform = chat_server
    model.add(reply("Here:\n\n```\nmake run --port 8001 --and-a-very-long-option-line-that-scrolls-sideways\n```"),
              reply("Noted from Telegram."))
    context = browser.new_context(viewport={"width": 1280, "height": 820}, color_scheme=scheme)
    page = sign_in(browser, base, context=context)
    send(page, "how do I run it on another port?")
    expect(page.locator(".msg--assistant:not(.msg--streaming) pre")).to_be_visible(timeout=SERVER_WORK)
    assert post_telegram(base, "and from my phone", message_id=951) == 200
    expect(page.locator(".msg--assistant", has_text="Noted from Telegram.")).to_be_visible(timeout=SERVER_WORK)

    assert severe_violations(page) == []


def test_the_webchat_frame_has_no_serious_accessibility_violations(chat_server, browser):
    from playwright.sync_api import expect

    base, model, platform = chat_server
    model.add(reply("We open at nine."))
    page = browser.new_page(viewport={"width": 390, "height": 700})
    page.goto(base + "/webchat/wc_browser/frame")
    page.locator("[data-input]").fill("When do you open?")
    page.locator("[data-input]").press("Enter")
    expect(page.locator(".msg--assistant:not(.msg--streaming)")).to_contain_text("We open at nine.",
                                                                                 timeout=SERVER_WORK)
    assert severe_violations(page) == []
