"""What a screen reader is told on the chat page: the message list is a labelled region,
not a live one; one hidden live announcer says, once each, only what is new while the
page is open (a whole reply, a message from another channel), never the history a load or
a reconnect shows, nor what the person just sent; each message is named by who and when."""
from __future__ import annotations

import re

from ..fakes.model_server import reply
from .browser_support import SERVER_WORK, post_telegram, send, sign_in

ANNOUNCER = "[data-announcer]"
STORED_REPLY = ".msg--assistant:not(.msg--streaming)"

# Keeps the page's sockets reachable, and lets a test make the next one start afresh (no
# session, no last seq): the server then resets the list and sends the history again.
SOCKETS_SEEN = """
window.__sockets = [];
window.__fresh = false;
const Native = window.WebSocket;
window.WebSocket = function (url, protocols) {
  const s = new Native(window.__fresh ? url.split("?")[0] : url, protocols);
  window.__sockets.push(s);
  return s;
};
window.WebSocket.prototype = Native.prototype;
Object.assign(window.WebSocket, { CONNECTING: 0, OPEN: 1, CLOSING: 2, CLOSED: 3 });
"""


def announcements(page) -> list[str]:
    return page.locator(ANNOUNCER + " > *").all_inner_texts()


def test_history_shown_on_load_is_not_announced_and_each_message_is_named(chat_server, browser):
    from playwright.sync_api import expect

    base, model, platform = chat_server
    model.add(reply("Hello, Alice."))
    page = sign_in(browser, base)
    send(page, "hello there")
    expect(page.locator(STORED_REPLY, has_text="Hello, Alice.")).to_be_visible(timeout=SERVER_WORK)

    page.reload()
    expect(page.locator(STORED_REPLY, has_text="Hello, Alice.")).to_be_visible()
    expect(page.locator(".msg--user", has_text="hello there")).to_be_visible()
    expect(page.locator(ANNOUNCER)).to_have_attribute("aria-live", "polite")
    expect(page.locator(ANNOUNCER)).to_have_text("")

    timeline = page.locator("[data-timeline]")
    assert timeline.get_attribute("aria-live") is None
    expect(timeline).to_have_attribute("role", "region")
    expect(timeline).to_have_attribute("aria-label", "Conversation")
    assert page.locator("[aria-live]:has([data-timeline])").count() == 0

    # Each message is an article named by who wrote it and when.
    expect(page.get_by_role("article", name=re.compile(r"^Aria, \S"))).to_have_count(1)
    names = page.locator("[data-timeline] article").evaluate_all("(ns) => ns.map((n) => n.getAttribute('aria-label'))")
    assert len(names) == 2 and all(name and re.match(r"^\S.*, \S", name) for name in names), names


def test_a_streamed_reply_is_announced_once_when_whole_and_the_own_message_not_at_all(chat_server, browser):
    from playwright.sync_api import expect

    base, model, platform = chat_server
    answer = "Good morning! Here is **today**: a standup at 10 and lunch with Sam."
    model.add(reply(answer, chunk_delay=0.12))
    page = sign_in(browser, base)
    send(page, "What's on today?")
    expect(page.locator(".msg--streaming .msg__body")).to_contain_text("Good morning", timeout=SERVER_WORK)
    expect(page.locator(".msg--streaming")).to_have_attribute("aria-label", re.compile("^Aria"))
    # While it streams, nothing of it is said (and the message sent never is).
    assert page.locator(ANNOUNCER).text_content() == ""

    expect(page.locator(STORED_REPLY, has_text="lunch with Sam.")).to_be_visible(timeout=SERVER_WORK)
    expect(page.locator(ANNOUNCER)).to_have_text("Aria: " + answer.replace("**", ""))
    assert announcements(page) == ["Aria: " + answer.replace("**", "")]


def test_a_telegram_message_arriving_live_is_announced_with_its_reply(chat_server, browser):
    from playwright.sync_api import expect

    base, model, platform = chat_server
    model.add(reply("Noted from Telegram."))
    page = sign_in(browser, base)
    assert post_telegram(base, "and from my phone", message_id=961) == 200
    expect(page.locator(STORED_REPLY, has_text="Noted from Telegram.")).to_be_visible(timeout=SERVER_WORK)
    expect(page.locator(ANNOUNCER + " > *")).to_have_text(
        ["Priya on Telegram: and from my phone", "Aria: Noted from Telegram."])
    expect(page.get_by_role("article", name=re.compile(r"^Priya on Telegram, \S"))).to_have_count(1)


def test_after_a_reconnect_that_resets_the_list_the_history_is_not_announced_again(chat_server, browser):
    from playwright.sync_api import expect

    base, model, platform = chat_server
    model.add(reply("One."), reply("Back on Telegram."))
    context = browser.new_context(viewport={"width": 1280, "height": 820})
    context.add_init_script(SOCKETS_SEEN)
    page = sign_in(browser, base, context=context)
    send(page, "question one")
    expect(page.locator(STORED_REPLY, has_text="One.")).to_be_visible(timeout=SERVER_WORK)
    expect(page.locator(ANNOUNCER + " > *")).to_have_text(["Aria: One."])

    # The connection drops; the next one starts afresh and the server sends the
    # history again into an emptied list.
    page.evaluate("document.querySelectorAll('[data-timeline] article').forEach((n) => n.dataset.before = '1')")
    page.evaluate("window.__fresh = true; window.__sockets.forEach((s) => s.close())")
    expect(page.locator(STORED_REPLY + ":not([data-before])", has_text="One.")).to_be_visible(
        timeout=SERVER_WORK)
    expect(page.locator("[data-status]")).to_have_attribute("data-state", "live")

    # What is new after it still is said, and the history was not said again.
    assert post_telegram(base, "back from my phone", message_id=962) == 200
    expect(page.locator(STORED_REPLY, has_text="Back on Telegram.")).to_be_visible(timeout=SERVER_WORK)
    expect(page.locator(ANNOUNCER + " > *")).to_have_text(
        ["Aria: One.", "Priya on Telegram: back from my phone", "Aria: Back on Telegram."])


def test_what_arrives_while_earlier_conversations_is_open_is_still_heard(chat_server, browser):
    """A modal dialog leaves the rest of the page out of what a screen reader reads: the
    announcer must be inside the open dialog, and back in the page once it closes."""
    from playwright.sync_api import expect

    from .test_browser_memories import exposed_to_screen_readers

    base, model, platform = chat_server
    model.add(reply("Noted from Telegram."))
    page = sign_in(browser, base)
    page.click("[data-archive-open]")
    expect(page.locator("[data-archive]")).to_be_visible()
    assert post_telegram(base, "and from my phone", message_id=963) == 200
    expect(page.locator(ANNOUNCER + " > *")).to_have_text(
        ["Priya on Telegram: and from my phone", "Aria: Noted from Telegram."], timeout=SERVER_WORK)
    assert exposed_to_screen_readers(page, ANNOUNCER)

    page.keyboard.press("Escape")
    expect(page.locator("[data-archive]")).to_be_hidden()
    # A dialog's close event comes a task after it is hidden: the announcer goes
    # home then.
    page.wait_for_function("(s) => !document.querySelector(s).closest('dialog')", arg=ANNOUNCER,
                           timeout=SERVER_WORK)
    assert exposed_to_screen_readers(page, ANNOUNCER)
    expect(page.locator(ANNOUNCER)).to_have_count(1)
