"""The chat page as a keyboard and screen-reader user meets it, in a real browser: where the
focus goes after Stop and in the earlier conversations, text contrast of the notices and
the failure marks (computed from the colours the browser renders), and animations that
stop where the system asks for reduced motion."""
from __future__ import annotations

from ..fakes.model_server import reply
from .browser_support import CHROMIUM, CHROMIUM_ARGS, SERVER_WORK, send, sign_in

FOCUSED = "() => { const a = document.activeElement; return a === document.body ? 'body' : a.outerHTML.slice(0, 80); }"


def test_stop_pressed_from_the_keyboard_leaves_the_focus_in_the_composer(chat_server):
    from playwright.sync_api import expect, sync_playwright

    base, model, platform = chat_server
    model.add(reply(" ".join(f"word{n}" for n in range(200)), chunk_delay=0.1))
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = sign_in(browser, base)
            send(page, "say many words")
            expect(page.locator(".msg--streaming .msg__body")).to_contain_text("word3", timeout=SERVER_WORK)
            page.locator("[data-stop]").focus()
            page.keyboard.press("Enter")

            expect(page.locator(".msg--assistant .msg__mark")).to_have_text("Stopped", timeout=SERVER_WORK)
            expect(page.locator("[data-stop]")).to_be_hidden()
            expect(page.locator("[data-input]")).to_be_focused()
        finally:
            browser.close()
