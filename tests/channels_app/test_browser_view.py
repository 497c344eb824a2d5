"""The chat page's view in a real browser: a streaming reply keeps the bottom in view
however much one paint adds (on a phone too), unless the reader scrolled up, to earlier
pages too; the channel filter never hides what you send, and an empty filter says so."""
from __future__ import annotations

from ..fakes.model_server import reply
from .browser_support import ARTIFACTS, SERVER_WORK, console_errors, post_telegram, send, sign_in
from .test_browser_webchat import on_server

# Big pieces: each paint adds several lines, more than the 80 px "near the bottom" margin.
LONG = "\n\n".join(f"Step {n}: " + "walk the dog, water the plants, call the bank. " * 3 for n in range(1, 25))

WATCH_JUMP = """() => {
  window.__jumpShown = false;
  const jump = document.querySelector('[data-jump]');
  new MutationObserver(() => { if (!jump.hidden) window.__jumpShown = true; })
    .observe(jump, { attributes: true, attributeFilter: ['hidden'] });
}"""
DISTANCE_FROM_BOTTOM = "() => { const s = document.querySelector('[data-scroller]'); return s.scrollHeight - s.scrollTop - s.clientHeight; }"


def test_a_long_reply_streams_with_the_bottom_in_view_on_a_phone_unless_the_reader_scrolls_up(chat_server, browser):
    from playwright.sync_api import expect

    base, model, platform = chat_server
    # The second reply streams for about 4 s: still streaming once the reader has scrolled up,
    # however late under load this test sees its first line.
    model.add(reply(LONG, chunk_size=300, chunk_delay=0.15), reply(LONG, chunk_size=300, chunk_delay=0.3))
    ARTIFACTS.mkdir(exist_ok=True)
    phone = browser.new_context(viewport={"width": 390, "height": 844}, is_mobile=True, has_touch=True,
                                device_scale_factor=3)
    page = sign_in(browser, base, context=phone)
    page.evaluate(WATCH_JUMP)
    send(page, "plan my day in detail")
    done = page.locator(".msg--assistant:not(.msg--streaming)", has_text="Step 24:")
    expect(done).to_be_visible(timeout=SERVER_WORK)
    page.wait_for_timeout(300)  # the last paint
    assert page.evaluate(DISTANCE_FROM_BOTTOM) < 5
    assert page.evaluate("window.__jumpShown") is False  # never "↓ New messages" while following
    page.screenshot(path=str(ARTIFACTS / "chat-phone-long-reply.png"))

    # Scrolled up to read while the next reply streams: the view stays, the jump appears.
    send(page, "and tomorrow?")
    expect(page.locator(".msg--streaming .msg__body")).to_contain_text("Step 1:", timeout=SERVER_WORK)
    page.evaluate("() => { const s = document.querySelector('[data-scroller]'); s.scrollTop = 200; }")
    page.wait_for_timeout(500)
    expect(page.locator("[data-jump]")).to_be_visible()
    expect(page.locator(".msg--assistant:not(.msg--streaming)", has_text="Step 24:")).to_have_count(
        2, timeout=SERVER_WORK)
    assert page.evaluate("document.querySelector('[data-scroller]').scrollTop") < 400
    # On the screen, above the composer, and a tap (not a mouse click) takes the reader down.
    jump = page.locator("[data-jump]").bounding_box()
    composer = page.locator("[data-composer]").bounding_box()
    assert 0 < jump["y"] and jump["y"] + jump["height"] <= composer["y"] and jump["x"] + jump["width"] <= 390
    page.tap("[data-jump]")
    page.wait_for_function(f"() => ({DISTANCE_FROM_BOTTOM})() < 5", timeout=5000)
    expect(page.locator("[data-jump]")).to_be_hidden()


# A hundred messages after the first exchange: the older fifty long, the newer fifty short,
# so the earlier page the reader scrolls up to is taller than the page they read.
SEED_HISTORY = """
from sessions_app.models import Session
from sessions_app.services.append import message_append
session = Session.objects.order_by('-pk').first()
for n in range(100):
    text = f'old message {n}. ' + ('a long line of what was said that day. ' * 12 if n < 50 else 'short')
    message_append(session=session, role='user' if n % 2 == 0 else 'assistant', content=text, channel='web',
                   notify=False)
"""
SCROLL_TOP = "document.querySelector('[data-scroller]').scrollTop"


def test_a_reply_streaming_while_the_reader_reads_an_earlier_page_leaves_them_there(chat_server, browser):
    from playwright.sync_api import expect

    base, model, platform = chat_server
    model.add(reply("Hello."), reply(LONG, chunk_size=100, chunk_delay=0.3))
    context = browser.new_context(viewport={"width": 1280, "height": 820})
    errors = console_errors(context)
    page = sign_in(browser, base, context=context)
    send(page, "hi")
    expect(page.locator(".msg--assistant", has_text="Hello.")).to_be_visible(timeout=SERVER_WORK)
    on_server(base, SEED_HISTORY)
    page.reload()
    expect(page.locator(".msg", has_text="old message 99.")).to_be_visible()
    assert page.locator(".msg", has_text="old message 49.").count() == 0  # on the earlier page

    send(page, "plan my day in detail")
    streaming = page.locator(".msg--streaming .msg__body")
    expect(streaming).to_contain_text("Step 1:", timeout=SERVER_WORK)
    page.evaluate(f"() => {{ {SCROLL_TOP} = 0; }}")  # up to the top: the earlier page loads
    expect(page.locator(".msg", has_text="old message 49.")).to_be_attached()
    page.wait_for_timeout(300)  # the scroll that keeps the reader's place
    reading = page.evaluate(SCROLL_TOP)
    expect(page.locator(".msg--streaming")).to_have_count(1)  # still streaming while they read

    expect(page.locator(".msg--assistant:not(.msg--streaming)", has_text="Step 24:")).to_be_visible(
        timeout=SERVER_WORK)
    page.wait_for_timeout(300)  # the last paint
    assert abs(page.evaluate(SCROLL_TOP) - reading) < 5  # not taken down to the reply
    assert page.evaluate(DISTANCE_FROM_BOTTOM) > 1000
    expect(page.locator("[data-jump]")).to_be_visible()
    assert errors == []


def test_the_filter_never_hides_what_you_send_and_an_empty_filter_says_so(chat_server, browser):
    from playwright.sync_api import expect

    base, model, platform = chat_server
    model.add(reply("Noted from Telegram."), reply("Here is your answer."))
    page = sign_in(browser, base)
    assert post_telegram(base, "from my phone", message_id=801) == 200
    expect(page.locator(".msg--assistant", has_text="Noted from Telegram.")).to_be_visible(timeout=SERVER_WORK)

    # Only channels that can speak here have a chip.
    chips = page.locator("[data-filter]").evaluate_all("cs => cs.map(c => c.dataset.filter)")
    assert chips == ["", "web", "tui", "telegram", "webchat"]  # bound: Telegram and the embed

    # A filter nothing matches says so; no stray day label, no "say hello".
    page.click('[data-filter="tui"]')
    expect(page.locator("[data-empty-filter]")).to_have_text(
        "No Terminal messages in this conversation yet.")
    expect(page.locator("[data-empty]")).to_be_hidden()
    expect(page.locator(".divider:not(.divider--session):visible")).to_have_count(0)

    # Sending from the page with another channel's filter on shows everything again.
    page.click('[data-filter="telegram"]')
    expect(page.locator(".msg", has_text="from my phone")).to_be_visible()
    send(page, "and from the web")
    expect(page.locator(".msg--user", has_text="and from the web")).to_be_visible()
    expect(page.locator(".msg--assistant", has_text="Here is your answer.")).to_be_visible(
        timeout=SERVER_WORK)
    expect(page.locator('[data-filter=""]')).to_have_attribute("aria-pressed", "true")
    expect(page.locator("[data-empty-filter]")).to_be_hidden()


def test_a_message_shown_live_before_its_post_is_answered_is_shown_once(chat_server, browser):
    """The socket can bring what you sent before the POST that sent it is answered (the
    live layer is faster than the response): the "Sending…" bubble gives way to it."""
    from playwright.sync_api import expect

    base, model, platform = chat_server
    model.add(reply("First."), reply("Second."))
    page = sign_in(browser, base)
    send(page, "hello there")  # the chat's session exists, and the socket follows it
    expect(page.locator(".msg--assistant", has_text="First.")).to_be_visible(timeout=SERVER_WORK)

    held = []

    def hold_the_answer(route):
        if route.request.method != "POST":
            return route.continue_()
        held.append((route, route.fetch()))  # stored and broadcast; its answer not given yet

    page.route("**/messages*", hold_the_answer)
    send(page, "only once please")
    live = page.locator(".msg--user[data-seq]", has_text="only once please")
    expect(live).to_be_visible(timeout=SERVER_WORK)  # while the POST's answer is held
    expect(page.locator(".msg--user", has_text="only once please")).to_have_count(1)

    while not held:
        page.wait_for_timeout(50)
    route, response = held[0]
    route.fulfill(response=response)
    expect(page.locator(".msg--assistant", has_text="Second.")).to_be_visible(timeout=SERVER_WORK)
    expect(page.locator(".msg--user", has_text="only once please")).to_have_count(1)


def test_a_message_that_cannot_reach_the_server_says_so_and_stays_in_the_box(chat_server, browser):
    from playwright.sync_api import expect

    base, model, platform = chat_server
    page = sign_in(browser, base)
    page.route("**/chat/api/*/*/messages",
               lambda route: route.abort() if route.request.method == "POST" else route.continue_())
    send(page, "are you there?")
    expect(page.get_by_role("alert")).to_have_text(
        "Can't reach Qorven — check the connection; your message is back in the box to send again.")
    expect(page.locator("[data-input]")).to_have_value("are you there?")
    stamp = page.locator(".msg__time").count()
    assert stamp == 0  # nothing was stored, nothing shown as sent
