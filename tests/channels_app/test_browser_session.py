"""The chat page in a real browser across the things that end a conversation or a
sign-in: /clear starts a new session under the old one, in order; signing out in one tab
signs the other out too, and a page whose sign-in ended says so instead of retrying."""
from __future__ import annotations

from ..fakes.model_server import reply
from .browser_support import ARTIFACTS, SERVER_WORK, post_telegram, send, sign_in

# Keeps the page's sockets reachable, so a test can drop the connection.
SOCKETS_SEEN = """
window.__sockets = [];
const Native = window.WebSocket;
window.WebSocket = function (url, protocols) { const s = new Native(url, protocols); window.__sockets.push(s); return s; };
window.WebSocket.prototype = Native.prototype;
Object.assign(window.WebSocket, { CONNECTING: 0, OPEN: 1, CLOSING: 2, CLOSED: 3 });
"""


def test_after_clear_the_new_conversation_appears_below_the_old_one_in_order(chat_server, browser):
    from playwright.sync_api import expect

    base, model, platform = chat_server
    model.add(reply("One."), reply("Two."), reply("Three."), reply("Fresh start, noted."))
    ARTIFACTS.mkdir(exist_ok=True)

    page = sign_in(browser, base)
    for n, answer in enumerate(("One.", "Two.", "Three."), start=1):
        send(page, f"question {n}")
        expect(page.locator(".msg--assistant:not(.msg--streaming)", has_text=answer)).to_be_visible(
            timeout=SERVER_WORK)
    send(page, "/clear")
    expect(page.locator(".divider--session")).to_have_text("New conversation", timeout=SERVER_WORK)
    send(page, "a new topic")
    expect(page.locator(".msg--assistant:not(.msg--streaming)", has_text="Fresh start, noted.")).to_be_visible(
        timeout=SERVER_WORK)

    # Reading the page top to bottom: the old conversation, the divider, the new one.
    order = page.evaluate("""() => Array.from(document.querySelectorAll(
        '[data-timeline] .msg:not(.msg--streaming), [data-timeline] .divider--session'))
        .map(n => n.classList.contains('divider--session') ? '---' : n.querySelector('.msg__body, .notice__text').textContent.trim())""")
    divider = order.index("---")
    before, after = order[:divider], order[divider + 1:]
    assert [t for t in before if t.startswith("question")] == ["question 1", "question 2", "question 3"]
    assert before.index("question 1") < before.index("One.") < before.index("question 2") < before.index("Three.")
    assert after[-2:] == ["a new topic", "Fresh start, noted."], order
    assert not any(t.startswith("question") or t in ("One.", "Two.", "Three.") for t in after), order
    page.screenshot(path=str(ARTIFACTS / "chat-after-clear.png"))

    # A reload shows only the new conversation.
    page.reload()
    expect(page.locator(".msg--assistant", has_text="Fresh start, noted.")).to_be_visible()
    expect(page.locator(".msg", has_text="question 1")).to_have_count(0)


def test_signing_out_in_one_tab_signs_the_other_out_and_it_hears_nothing_more(chat_server, browser):
    from playwright.sync_api import expect

    base, model, platform = chat_server
    model.default = reply("Noted.")
    ARTIFACTS.mkdir(exist_ok=True)

    first = sign_in(browser, base)
    second = first.context.new_page()
    second.goto(base + "/chat/aria/")
    expect(second.locator("[data-status]")).to_have_attribute("data-state", "live")

    second.click("text=Sign out")
    second.wait_for_url("**/accounts/**")

    notice = first.locator("[data-signed-out]")
    expect(notice).to_contain_text("You are signed out.", timeout=5_000)
    expect(first.locator("[data-status]")).to_have_attribute("data-state", "signed-out")
    expect(notice.locator("a")).to_have_attribute("href", "/accounts/login/?next=%2Fchat%2Faria%2F")
    expect(first.locator("[data-input]")).to_be_disabled()
    first.screenshot(path=str(ARTIFACTS / "chat-signed-out.png"))

    # A private message arriving after that never reaches the signed-out page.
    assert post_telegram(base, "my private note", message_id=701) == 200
    first.wait_for_timeout(2_000)
    expect(first.locator(".msg", has_text="my private note")).to_have_count(0)

    notice.locator("a").click()
    first.wait_for_url("**/accounts/login/**")


def test_a_page_whose_sign_in_ended_while_it_was_away_asks_to_sign_in_instead_of_retrying(chat_server, browser):
    from playwright.sync_api import expect

    base, model, platform = chat_server
    context = browser.new_context()
    context.add_init_script(SOCKETS_SEEN)
    page = sign_in(browser, base, context=context)
    # The sign-in ends while the connection is down (the cookie is gone, as after an
    # expiry or a restart that re-hashed the password), then the socket drops.
    context.clear_cookies()
    page.evaluate("window.__sockets.forEach((s) => s.close())")

    expect(page.locator("[data-signed-out]")).to_contain_text("You are signed out.", timeout=10_000)
    expect(page.locator("[data-status]")).to_have_attribute("data-state", "signed-out")


def test_earlier_conversations_are_listed_and_read_from_the_page(chat_server, browser):
    from playwright.sync_api import expect

    base, model, platform = chat_server
    model.add(reply("Lisbon in May, noted."), reply("Today's list is empty."))
    page = sign_in(browser, base)
    send(page, "plan the trip to Lisbon")
    expect(page.locator(".msg--assistant:not(.msg--streaming)", has_text="Lisbon in May")).to_be_visible(
        timeout=SERVER_WORK)
    send(page, "/clear")
    expect(page.locator(".divider--session")).to_be_visible(timeout=SERVER_WORK)
    page.reload()
    expect(page.locator(".msg", has_text="plan the trip to Lisbon")).to_have_count(0)

    page.click("[data-archive-open]")
    item = page.locator("[data-archived-session]")
    expect(item).to_have_count(1)
    expect(item).to_contain_text("plan the trip to Lisbon")
    item.click()
    dialog = page.locator("[data-archive]")
    expect(dialog.locator(".msg--assistant")).to_contain_text("Lisbon in May, noted.")
    expect(dialog.locator(".msg--user").first).to_contain_text("plan the trip to Lisbon")
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "chat-earlier-conversation.png"))
    page.click("[data-archive-close]")
    expect(dialog).to_be_hidden()

    send(page, "what is on today?")  # the current conversation carries on underneath
    expect(page.locator(".msg--assistant", has_text="Today's list is empty.")).to_be_visible(
        timeout=SERVER_WORK)
