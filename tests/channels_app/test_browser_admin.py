"""The admin as a host uses it on a laptop (1280 px wide): the tenant page and the heartbeat
list fit without scrolling sideways, and a binding's credentials are fields with hints."""
from __future__ import annotations

from .browser_support import ARTIFACTS, CHROMIUM, CHROMIUM_ARGS, sign_in

WIDTH = "() => document.documentElement.scrollWidth"
WIDEST = """() => [...document.querySelectorAll('#content *')]
  .filter(e => e.getBoundingClientRect().right > window.innerWidth + 1)
  .slice(0, 5).map(e => e.tagName + '.' + e.className + ' ' + Math.round(e.getBoundingClientRect().right))"""


def test_the_tenant_page_and_the_heartbeat_list_fit_a_laptop_screen(chat_server):
    from playwright.sync_api import sync_playwright

    base, model, platform = chat_server
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = sign_in(browser, base)
            ARTIFACTS.mkdir(exist_ok=True)
            page.goto(base + "/admin/qorven/tenant/")
            page.click("#result_list tbody a")
            page.wait_for_selector("#tenant_form")
            page.screenshot(path=str(ARTIFACTS / "admin-tenant.png"), full_page=True)
            assert page.evaluate(WIDTH) <= 1280, page.evaluate(WIDEST)
            page.goto(base + "/admin/heartbeats_app/heartbeat/")
            page.wait_for_selector("#changelist")
            page.screenshot(path=str(ARTIFACTS / "admin-heartbeats.png"), full_page=True)
            assert page.evaluate(WIDTH) <= 1280, page.evaluate(WIDEST)
            # Every column in view: the list does not scroll sideways inside its box either.
            assert page.evaluate("() => { const r = document.querySelector('.results');"
                                 " return r.scrollWidth <= r.clientWidth; }")
            assert page.locator("#result_list").get_by_text("· managed").count() == 2
        finally:
            browser.close()
