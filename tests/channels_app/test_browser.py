"""The chat page in a real browser: Debian's chromium driven by Playwright, against a real
`qorven serve` subprocess on its own database, a scripted model server and a
fake Telegram API. Screenshots go to test-artifacts/."""
from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from ..fakes.model_server import error, reply
from ..fakes.platform_server import Canned
from .browser_support import (
    ARTIFACTS,
    CHROMIUM,
    NOT_ANSWERED,
    PASSWORD,
    SERVER_WORK,
    post_telegram,
    send,
    sign_in,
)


def test_the_chat_page_streams_replies_shows_other_channels_live_and_filters(chat_server, browser):
    from playwright.sync_api import expect

    base, model, platform = chat_server
    answer = "Good morning! Here is **today**: a standup at 10 and lunch with Sam."
    model.add(reply(answer, chunk_delay=0.12), reply("Milk is on the list."))
    model.default = reply("Noted.")
    ARTIFACTS.mkdir(exist_ok=True)

    page = browser.new_page(viewport={"width": 1280, "height": 820})
    page.set_default_timeout(20_000)
    page.goto(base + "/chat/")
    assert "/accounts/login/" in page.url
    page.fill("#id_username", "alice")
    page.fill("#id_password", PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_url("**/chat/aria/")
    expect(page.locator("[data-status]")).to_have_attribute("data-state", "live")

    # Send with Enter; the reply streams in token by token, then is stored.
    composer = page.locator("[data-input]")
    composer.fill("What's on today?")
    composer.press("Enter")
    expect(page.locator(".msg--user .msg__body").last).to_have_text("What's on today?")
    streaming = page.locator(".msg--streaming .msg__body")
    page.wait_for_function(
        "(full) => { const b = document.querySelector('.msg--streaming .msg__body');"
        " return b && b.textContent.length > 0 && b.textContent.length < full.length; }",
        arg=answer.replace("**", ""),
    )
    assert streaming.count() == 1
    final = page.locator(".msg--assistant:not(.msg--streaming) .msg__body").last
    expect(final).to_contain_text("Good morning! Here is today: a standup at 10")
    expect(final.locator("strong")).to_have_text("today")
    expect(streaming).to_have_count(0)

    # Shift+Enter is a new line, not a send.
    composer.fill("line one")
    composer.press("Shift+Enter")
    composer.type("line two")
    assert composer.input_value() == "line one\nline two"
    composer.fill("")

    # A Telegram message arrives live, with its badge, and is answered there.
    assert post_telegram(base, "add milk to the list", message_id=501) == 200
    telegram_msg = page.locator('.msg[data-channel="telegram"]', has_text="add milk to the list")
    expect(telegram_msg.locator(".badge")).to_have_text("Telegram")
    expect(page.locator('.msg--assistant[data-channel="telegram"]').last).to_contain_text("Milk is on the list.")
    web_msg = page.locator('.msg[data-channel="web"]').first
    expect(web_msg.locator(".badge")).to_have_count(0)

    # The Telegram filter hides web messages, All brings them back.
    page.click('[data-filter="telegram"]')
    expect(page.locator('.msg[data-channel="web"]').first).to_be_hidden()
    expect(telegram_msg).to_be_visible()
    page.screenshot(path=str(ARTIFACTS / "chat-filter-telegram.png"))
    page.click('[data-filter=""]')
    expect(page.locator('.msg[data-channel="web"]').first).to_be_visible()

    # Markup in a message is text, never HTML.
    evil = '<script>window.__xss = 1</script><img src=x onerror="window.__xss = 2"> **still bold**'
    composer.fill(evil)
    composer.press("Enter")
    mine = page.locator(".msg--user .msg__body").last
    expect(mine).to_contain_text('<script>window.__xss = 1</script><img src=x onerror="window.__xss = 2">')
    expect(mine.locator("strong")).to_have_text("still bold")
    assert mine.locator("script, img").count() == 0
    expect(page.locator(".msg--assistant:not(.msg--streaming)").last).to_contain_text("Noted.")
    assert page.evaluate("window.__xss") is None

    # A refresh shows the same timeline, from the database.
    page.reload()
    expect(page.locator("[data-status]")).to_have_attribute("data-state", "live")
    expect(page.locator(".msg", has_text="add milk to the list")).to_have_count(1)
    expect(page.locator(".msg--user", has_text="What's on today?")).to_have_count(1)
    page.screenshot(path=str(ARTIFACTS / "chat-desktop.png"))
    page.set_viewport_size({"width": 390, "height": 844})
    page.screenshot(path=str(ARTIFACTS / "chat-phone.png"))
    sent = platform.sent(r"/telegram/bot111:AAA/sendMessage")
    assert [s.json["text"] for s in sent] == ["Milk is on the list."]


def test_a_refused_message_is_marked_not_answered_until_retry_answers_it_live_and_after_a_reload(chat_server, browser):
    from playwright.sync_api import expect

    base, model, platform = chat_server
    model.add(error(400, "Flagged by the content filter.", code="content_filter", delay=2.0),
              reply("Saturday: the market at 9, then a long walk.", delay=2.0))
    ARTIFACTS.mkdir(exist_ok=True)

    page = sign_in(browser, base)
    thinking = page.locator(".msg--streaming")
    question = page.locator(".msg--user", has_text="Plan my Saturday")
    mark = question.locator(".msg__mark")

    # The Qor thinks, the model refuses: the notice says why, the question is marked
    # and the thinking stops.
    send(page, "Plan my Saturday")
    expect(thinking).to_have_count(1)
    expect(page.locator(".msg--notice")).to_contain_text("The model refused to answer this message",
                                                          timeout=SERVER_WORK)
    expect(mark).to_contain_text(NOT_ANSWERED)
    expect(mark).to_be_visible()
    expect(question).to_have_attribute("data-answer-state", "failed")
    expect(question).to_have_class(re.compile(r"\bmsg--answer-failed\b"))
    expect(thinking).to_have_count(0)
    page.screenshot(path=str(ARTIFACTS / "chat-not-answered.png"))

    # A reload reads the same from the history.
    page.reload()
    expect(page.locator("[data-status]")).to_have_attribute("data-state", "live")
    expect(mark).to_contain_text(NOT_ANSWERED)
    expect(question).to_have_attribute("data-answer-state", "failed")
    expect(page.locator(".msg__mark")).to_have_count(1)
    expect(thinking).to_have_count(0)

    # Try again (the mark's button sends /retry) with the model answering again: the
    # mark goes, the Qor thinks, the answer lands.
    mark.locator("[data-retry]").click()
    expect(page.locator(".msg", has_text="Trying again to answer 1 message")).to_be_visible()
    expect(mark).to_have_count(0)
    expect(thinking).to_have_count(1)
    answer = page.locator(".msg--assistant:not(.msg--streaming)", has_text="Saturday: the market at 9")
    expect(answer).to_be_visible(timeout=SERVER_WORK)
    expect(thinking).to_have_count(0)
    expect(question).to_have_attribute("data-answer-state", "answered")
    expect(question).not_to_have_class(re.compile(r"\bmsg--answer-failed\b"))

    page.reload()
    expect(page.locator("[data-status]")).to_have_attribute("data-state", "live")
    expect(answer).to_be_visible()
    expect(question).to_have_attribute("data-answer-state", "answered")
    expect(page.locator(".msg__mark")).to_have_count(0)
    expect(page.get_by_text("Not answered")).to_have_count(0)


def test_a_reply_telegram_refuses_is_marked_not_delivered_on_the_web_page_live_and_after_a_reload(chat_server, browser):
    from playwright.sync_api import expect

    base, model, platform = chat_server
    platform.default(r"sendMessage", Canned(body={"ok": True, "result": {"message_id": 9}}))
    platform.script(r"sendMessage", Canned(status=400, body={
        "ok": False, "error_code": 400, "description": "Bad Request: message is too long"}))
    model.add(reply("The dentist is on Tuesday at 3."))
    ARTIFACTS.mkdir(exist_ok=True)

    page = sign_in(browser, base)
    assert post_telegram(base, "when is the dentist?", message_id=601) == 200
    answer = page.locator('.msg--assistant[data-channel="telegram"]', has_text="The dentist is on Tuesday")
    expect(answer.locator(".msg__mark")).to_have_text("Not delivered to Telegram", timeout=SERVER_WORK)
    expect(answer.locator(".msg__mark")).to_be_visible()
    expect(answer).to_have_attribute("data-delivery", "failed")
    expect(answer).to_have_class(re.compile(r"\bmsg--delivery-failed\b"))
    question = page.locator('.msg--user[data-channel="telegram"]', has_text="when is the dentist?")
    expect(question.locator(".msg__mark")).to_have_count(0)  # the question was answered
    # Our notice that it did not reach Telegram, which Telegram took, shows here too.
    notice = page.locator('.msg--system[data-channel="telegram"]', has_text="My last reply may not have")
    expect(notice).to_be_visible(timeout=SERVER_WORK)
    page.screenshot(path=str(ARTIFACTS / "chat-not-delivered.png"))

    page.reload()
    expect(page.locator("[data-status]")).to_have_attribute("data-state", "live")
    expect(answer.locator(".msg__mark")).to_have_text("Not delivered to Telegram")
    expect(answer).to_have_attribute("data-delivery", "failed")
    expect(page.locator(".msg__mark")).to_have_count(1)
    # A 400 is not tried again: the reply once, then our notice.
    assert [r.json["text"] for r in platform.sent(r"/telegram/bot111:AAA/sendMessage")][0] == (
        "The dentist is on Tuesday at 3.")
    assert len(platform.sent(r"/telegram/bot111:AAA/sendMessage")) == 2


def test_chromium_is_the_debian_package():
    """Playwright must never download a browser: the suite uses the system chromium."""
    if not Path(CHROMIUM).exists():
        pytest.skip("chromium is not installed")
    assert shutil.which("chromium") == CHROMIUM


def test_reasoning_streamed_without_an_opening_tag_gives_way_to_the_answer_on_the_chat_page(chat_server, browser):
    """The page shows the reasoning as it streams (nothing marks it yet), then, at its
    closing tag, the reply starting again: it ends holding the answer alone."""
    from dataclasses import replace

    from playwright.sync_api import expect

    from .test_model_thinking import BARE

    base, model, _platform = chat_server
    model.add(replace(BARE, chunk_delay=0.3))
    page = sign_in(browser, base)
    send(page, "hi")
    expect(page.locator(".msg--streaming .msg__body")).to_contain_text("greets")
    final = page.locator(".msg--assistant:not(.msg--streaming) .msg__body").last
    expect(final).to_have_text("Hello Priya!")
    expect(page.locator(".msg--streaming")).to_have_count(0)
    expect(page.locator(".msg", has_text="greets")).to_have_count(0)


def hold_the_first_post(page) -> list:
    """The page's first POST to its messages, held (not sent on) until the test answers it."""
    held = []

    def hold(route):
        if route.request.method == "POST" and not held:
            held.append(route)
        else:
            route.fallback()

    page.route(re.compile(r"/messages"), hold)
    return held


def send_while_held(page, held, first: str, second: str) -> None:
    send(page, first)
    for _ in range(250):  # the route's handler runs while the page is waited on
        if held:
            break
        page.wait_for_timeout(20)
    assert len(held) == 1
    send(page, second)


def test_a_message_sent_while_the_one_before_it_is_still_on_its_way_follows_it(chat_server, browser):
    """Enter pressed again before the server has taken the message before: the second
    leaves the box at once, shown as sending, and goes once the first is taken, in order.
    Before, the second Enter did nothing: the text stayed in the box, unsent."""
    from playwright.sync_api import expect

    base, model, platform = chat_server
    model.add(reply("Milk is on the list."), reply("Eggs are on the list."))
    page = sign_in(browser, base)
    held = hold_the_first_post(page)
    send_while_held(page, held, "add milk", "add eggs")
    expect(page.locator("[data-input]")).to_have_value("")
    expect(page.locator(".msg--pending")).to_have_count(2)
    held[0].continue_()

    answers = page.locator(".msg--assistant:not(.msg--streaming)")
    expect(answers.filter(has_text="Eggs are on the list.")).to_be_visible(timeout=SERVER_WORK)
    expect(answers.filter(has_text="Milk is on the list.")).to_be_visible()
    expect(page.locator(".msg--pending")).to_have_count(0)
    questions = page.locator(".msg--user")
    expect(questions).to_have_text([re.compile("add milk"), re.compile("add eggs")])
    page.reload()
    expect(page.locator("[data-status]")).to_have_attribute("data-state", "live")
    expect(questions).to_have_text([re.compile("add milk"), re.compile("add eggs")])


def test_messages_waiting_behind_one_that_could_not_go_come_back_to_the_box_in_order(chat_server, browser):
    """The first of two messages cannot reach the server: neither is sent (the second would
    arrive out of its order); both are back in the box as written, before what was typed
    since, and nothing was stored."""
    from playwright.sync_api import expect

    base, model, platform = chat_server
    page = sign_in(browser, base)
    held = hold_the_first_post(page)
    send_while_held(page, held, "add milk", "add eggs")
    page.locator("[data-input]").fill("and bread")
    held[0].abort()

    expect(page.locator("[data-input]")).to_have_value("add milk\n\nadd eggs\n\nand bread")
    expect(page.get_by_text("Can't reach Qorven")).to_be_visible()
    expect(page.locator(".msg--pending")).to_have_count(0)
    expect(page.locator(".msg--user")).to_have_count(0)
    page.reload()
    expect(page.locator("[data-status]")).to_have_attribute("data-state", "live")
    expect(page.locator(".msg--user")).to_have_count(0)
    assert model.requests == []
