"""The admin as a host uses it on a laptop (1280 px wide): the tenant page and the heartbeat
list fit without scrolling sideways; the owner links a new sender to her own chat."""
from __future__ import annotations

import json
import sqlite3
from contextlib import closing

from .browser_support import ARTIFACTS, ROOT, sign_in

WIDTH = "() => document.documentElement.scrollWidth"
WIDEST = """() => [...document.querySelectorAll('#content *')]
  .filter(e => e.getBoundingClientRect().right > window.innerWidth + 1)
  .slice(0, 5).map(e => e.tagName + '.' + e.className + ' ' + Math.round(e.getBoundingClientRect().right))"""


def test_the_tenant_page_and_the_heartbeat_list_fit_a_laptop_screen(chat_server, tmp_path, browser):

    base, model, platform = chat_server
    # The list as it looks once the beats have run (the reminders beat runs every five
    # minutes: the page must fit before and after it does).
    with closing(sqlite3.connect(tmp_path / "browser.sqlite3")) as db, db:
        db.execute("UPDATE heartbeats_app_heartbeat SET last_run_at = '2026-12-04 10:15:00',"
                   " last_status = CASE WHEN id % 2 = 0 THEN 'failed' ELSE 'ok' END, tokens_spent = 123456")
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
    # The shipped defaults file's beats, each one row of the one tenant's.
    shipped = json.loads((ROOT / "heartbeats.default.json").read_text())["beats"]
    assert page.locator("#result_list").get_by_text("· managed").count() == len(shipped)


def test_the_owner_links_a_new_telegram_sender_to_her_own_chat_from_the_admin(chat_server, browser):
    from playwright.sync_api import expect

    from ..fakes.model_server import reply
    from .browser_support import SERVER_WORK, post_telegram

    base, model, platform = chat_server
    model.add(reply("Hello from your other phone."))
    # Her second phone's Telegram account: unknown, so it gets a pairing code.
    assert post_telegram(base, "hi, it's me on my other phone", 1, user_id=555, first_name="Alice") == 200
    page = sign_in(browser, base)
    admin = page.context.new_page()
    admin.goto(base + "/admin/channels_app/pairingrequest/")
    row = admin.locator("#result_list tbody tr", has_text="555")
    expect(row).to_have_count(1, timeout=SERVER_WORK)
    row.locator("input.action-select").check()
    admin.select_option("select[name=action]", "approve_linking")
    admin.click("button[name=index]")
    expect(admin.locator("#id_member")).to_have_value(
        admin.locator("#id_member option", has_text="alice").get_attribute("value"))
    admin.click("input[type=submit][value='Approve and link']")
    expect(admin.locator(".messagelist")).to_contain_text("Approved 1 request", timeout=SERVER_WORK)

    # Now that account writes into her own chat: the page shows it live, badged.
    assert post_telegram(base, "linked now?", 2, user_id=555, first_name="Alice") == 200
    mine = page.locator(".msg--user", has_text="linked now?")
    expect(mine).to_be_visible(timeout=SERVER_WORK)
    expect(mine.locator("[data-badge='telegram']")).to_have_count(1)
    expect(page.locator(".msg--assistant", has_text="Hello from your other phone.")).to_be_visible(
        timeout=SERVER_WORK)
