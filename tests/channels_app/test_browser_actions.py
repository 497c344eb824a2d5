"""What people expect of a chat page beyond reading and typing, in a real browser: copy a
message or a code block, start a new conversation with a button, an unread count and a
notification while the tab is in the background, heartbeat messages marked as sent on
the Qor's own."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from ..fakes.model_server import reply
from .browser_support import (
    ARTIFACTS,
    ROOT,
    SERVER_ENV,
    SERVER_WORK,
    post_telegram,
    send,
    sign_in,
)

CODE_REPLY = "Run this:\n\n```\nmake run\nmake test\n```\n\nThen open the page."

HIDE_TAB = """(hidden) => {
  Object.defineProperty(document, "hidden", { configurable: true, get: () => hidden });
  document.dispatchEvent(new Event("visibilitychange"));
}"""
RECORD_NOTIFICATIONS = """() => {
  window.__notified = [];
  window.Notification = function (title, options) { window.__notified.push([title, options.body]); };
  window.Notification.permission = "granted";
  window.Notification.requestPermission = () => Promise.resolve("granted");
}"""

RUN_A_BEAT = """
from django.contrib.auth import get_user_model
from qorven.agent.heartbeat_runs import run_heartbeat
from heartbeats_app.services import heartbeat_create
from tenancy.models import Qor, Tenant
tenant = Tenant.objects.get(slug="acme")
alice = get_user_model().objects.get(username="alice")
beat = heartbeat_create(tenant=tenant, qor=Qor.objects.get(tenant=tenant, slug="aria"), name="morning brief",
                        cron="0 8 * * *", prompt="Brief me.", owner=alice, deliver_to=alice, deliver_channel="web")
run_heartbeat(tenant_id=tenant.pk, heartbeat_id=beat.pk, manual=True)
"""


def test_copy_a_message_and_a_code_block_and_start_a_new_conversation_with_a_button(chat_server, browser):
    from playwright.sync_api import expect

    base, model, platform = chat_server
    model.add(reply(CODE_REPLY))
    page = sign_in(browser, base)
    page.context.grant_permissions(["clipboard-read", "clipboard-write"], origin=base)
    send(page, "how do I start?")
    answer = page.locator(".msg--assistant:not(.msg--streaming)", has_text="Then open the page.")
    expect(answer).to_be_visible(timeout=SERVER_WORK)

    answer.hover()
    answer.locator("[data-copy]").click()
    expect(answer.locator("[data-copy]")).to_have_text("Copied")
    assert page.evaluate("navigator.clipboard.readText()") == CODE_REPLY  # the text as written

    answer.locator("[data-copy-code]").click()
    assert page.evaluate("navigator.clipboard.readText()") == "make run\nmake test"
    assert answer.locator("pre").get_attribute("tabindex") == "0"  # reachable by keyboard to scroll

    page.once("dialog", lambda dialog: dialog.accept())
    page.click("[data-new-conversation]")
    expect(page.locator(".divider--session")).to_have_text("New conversation", timeout=SERVER_WORK)
    expect(page.locator(".timeline__session").last.locator(".msg", has_text="Started a fresh conversation")
           ).to_be_visible()


def test_a_background_tab_counts_unread_replies_notifies_and_marks_heartbeat_messages(chat_server, browser):
    from playwright.sync_api import expect

    base, model, platform = chat_server
    model.add(reply("Bought, noted."), reply("Good morning: three meetings today."))
    page = sign_in(browser, base)
    page.evaluate(RECORD_NOTIFICATIONS)
    title = page.title()
    page.click("[data-notify]")
    expect(page.locator("[data-notify]")).to_have_attribute("aria-pressed", "true")

    page.evaluate(HIDE_TAB, True)
    assert post_telegram(base, "bought the milk", message_id=901) == 200
    # The stored reply, not its streaming bubble: the count and the notice come with the message.
    stored = page.locator(".msg--assistant:not(.msg--streaming)", has_text="Bought, noted.")
    expect(stored).to_have_count(1, timeout=SERVER_WORK)
    assert page.title() == f"(1) {title}"  # the reply; the Telegram message itself was the person's
    assert page.evaluate("window.__notified") == [["Aria", "Bought, noted."]]

    page.evaluate(HIDE_TAB, False)
    assert page.title() == title

    # A heartbeat's message (run in another process) shows, after a reload, as the Qor's own.
    qorven = str(Path(sys.executable).with_name("qorven"))
    subprocess.run([qorven, "shell", "-c", RUN_A_BEAT], cwd=ROOT, env=SERVER_ENV[base], check=True,
                   capture_output=True, timeout=120)
    page.reload()
    brief = page.locator(".msg--assistant", has_text="Good morning: three meetings today.")
    expect(brief).to_have_class(__import__("re").compile(r"\bmsg--proactive\b"))
    expect(brief.locator(".msg__proactive")).to_have_text("Scheduled · morning brief")
    expect(page.locator(".msg--proactive")).to_have_count(1)
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "chat-proactive.png"))


def test_stop_ends_a_streaming_reply_and_keeps_what_was_written(chat_server, browser):
    from playwright.sync_api import expect

    base, model, platform = chat_server
    words = " ".join(f"word{n}" for n in range(200))
    model.add(reply(words, chunk_delay=0.1))
    page = sign_in(browser, base)
    stop = page.locator("[data-stop]")
    expect(stop).to_be_hidden()
    send(page, "say many words")
    expect(stop).to_be_visible()  # from the thinking bubble on
    expect(page.locator(".msg--streaming .msg__body")).to_contain_text("word3", timeout=SERVER_WORK)
    stop.click()

    kept = page.locator(".msg--assistant:not(.msg--streaming)")
    expect(kept.locator(".msg__mark")).to_have_text("Stopped", timeout=SERVER_WORK)
    expect(page.locator(".msg--streaming")).to_have_count(0)
    expect(stop).to_be_hidden()
    text = kept.locator(".msg__body").inner_text()
    assert text.startswith("word0 word1 word2 word3") and "word199" not in text

    page.reload()  # as stored
    expect(page.locator(".msg--assistant .msg__mark")).to_have_text("Stopped")


def test_regenerate_writes_the_newest_answer_again_in_place_of_the_old(chat_server, browser):
    from playwright.sync_api import expect

    base, model, platform = chat_server
    model.add(reply("A first try."), reply("A better answer.", chunk_delay=0.05, chunk_size=4))
    page = sign_in(browser, base)
    send(page, "explain leases")
    first = page.locator(".msg--assistant:not(.msg--streaming)", has_text="A first try.")
    expect(first).to_be_visible(timeout=SERVER_WORK)
    expect(page.locator("[data-regenerate]")).to_have_count(1)
    first.locator("[data-regenerate]").click()

    expect(page.locator(".msg--streaming")).to_be_visible(timeout=SERVER_WORK)  # the new one is written
    expect(first).to_have_count(0)
    expect(page.locator("[data-regenerate]")).to_have_count(0)  # not while writing
    better = page.locator(".msg--assistant:not(.msg--streaming)", has_text="A better answer.")
    expect(better).to_be_visible(timeout=SERVER_WORK)
    expect(better.locator("[data-regenerate]")).to_have_count(1)

    page.reload()
    expect(page.locator(".msg--assistant", has_text="A better answer.")).to_be_visible(timeout=SERVER_WORK)
    expect(page.locator(".msg", has_text="A first try.")).to_have_count(0)
    assert page.locator(".msg--user").count() == 1


def test_search_finds_words_in_earlier_conversations_and_opens_the_message_found(chat_server, browser):
    from playwright.sync_api import expect

    base, model, platform = chat_server
    model.add(reply("Noted the locker code."), reply("The gym opens at six."))
    page = sign_in(browser, base)
    send(page, "my locker code is 4312")
    stored = page.locator(".msg--assistant:not(.msg--streaming)", has_text="Noted the locker code.")
    expect(stored).to_be_visible(timeout=SERVER_WORK)  # stored before the conversation is archived
    page.once("dialog", lambda dialog: dialog.accept())
    page.click("[data-new-conversation]")
    expect(page.locator(".divider--session")).to_be_visible(timeout=SERVER_WORK)
    send(page, "when does the gym open?")
    expect(page.locator(".msg--assistant", has_text="The gym opens at six.")).to_be_visible(timeout=SERVER_WORK)

    page.click("[data-archive-open]")
    page.fill("[data-search-input]", "lockers")
    page.press("[data-search-input]", "Enter")
    hits = page.locator("[data-search-hit]")
    expect(hits).to_have_count(2, timeout=SERVER_WORK)
    expect(hits.first).to_contain_text("Aria: Noted the locker code.")
    expect(hits.first).to_contain_text("earlier conversation")
    expect(hits.nth(1).locator("mark")).to_have_text("locker")

    hits.nth(1).click()
    found = page.locator("[data-archive-body] .msg--found")
    expect(found).to_contain_text("my locker code is 4312", timeout=SERVER_WORK)
    expect(page.locator("[data-archive-body] .msg", has_text="gym")).to_have_count(0)  # another conversation
    page.click("[data-archive-back]")
    expect(page.locator("[data-search-hit]")).to_have_count(2, timeout=SERVER_WORK)

    page.fill("[data-search-input]", "gym")
    page.press("[data-search-input]", "Enter")
    expect(page.locator("[data-search-hit]")).to_have_count(2, timeout=SERVER_WORK)
    expect(page.locator("[data-search-hit]").first).to_contain_text("this conversation")
    page.fill("[data-search-input]", "volcano")
    page.press("[data-search-input]", "Enter")
    expect(page.locator("[data-archive-body]")).to_contain_text("Nothing found for “volcano”.",
                                                                 timeout=SERVER_WORK)


def _png(color: str) -> bytes:
    import io

    from PIL import Image as PILImage

    out = io.BytesIO()
    PILImage.new("RGB", (40, 30), color).save(out, format="PNG")
    return out.getvalue()


def test_an_attached_image_is_previewed_sent_stored_and_shown_as_a_thumbnail(chat_server, browser):
    from playwright.sync_api import expect

    base, model, platform = chat_server
    model.add(reply("A green rectangle."))
    page = sign_in(browser, base)
    page.set_input_files("[data-attach]", files=[
        {"name": "green.png", "mimeType": "image/png", "buffer": _png("green")},
        {"name": "backup.zip", "mimeType": "application/zip", "buffer": b"PK\x03\x04 not an image"},
    ])
    expect(page.locator("[data-attachment]")).to_have_count(1)  # the archive is refused at once
    expect(page.locator(".msg--error", has_text="backup.zip is not an image (JPEG, PNG, GIF, WebP), a PDF")
           ).to_be_visible()
    send(page, "what is in this picture?")
    expect(page.locator("[data-attachment]")).to_have_count(0)
    mine = page.locator(".msg--user[data-seq]", has_text="what is in this picture?")
    expect(mine.locator("img[data-image]")).to_have_count(1, timeout=SERVER_WORK)
    page.wait_for_function("() => { const i = document.querySelector('.msg--user img[data-image]');"
                           " return i && i.naturalWidth === 40; }", timeout=SERVER_WORK)
    expect(page.locator(".msg--assistant", has_text="A green rectangle.")).to_be_visible(timeout=SERVER_WORK)
    # The composer holds one line again without a scrollbar.
    assert page.eval_on_selector("[data-input]", "i => i.scrollHeight <= i.clientHeight") is True

    page.reload()
    page.wait_for_function("() => { const i = document.querySelector('.msg--user img[data-image]');"
                           " return i && i.naturalWidth === 40 && i.naturalHeight === 30; }",
                           timeout=SERVER_WORK)
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "chat-image.png"))


def test_an_error_page_from_in_front_of_qorven_is_told_in_our_words_and_the_text_kept(chat_server, browser):
    """A proxy answers with its own HTML (a 502 while the server restarts, a 413 for an
    image over its body limit): the page says what happened in words, never a JSON
    parser's complaint, and what was typed is back in the box."""
    from playwright.sync_api import expect

    base, model, platform = chat_server
    page = sign_in(browser, base)
    def proxy_page(status: int):
        return lambda route: (route.fulfill(status=status, content_type="text/html",
                                            body="<html><title>nginx</title></html>")
                              if route.request.method == "POST" else route.continue_())

    for status, says in ((502, "could not take the message just now"), (413, "too large to send")):
        page.route("**/chat/api/*/*/messages", proxy_page(status))
        send(page, f"are you there? ({status})")
        alert = page.get_by_role("alert").last
        expect(alert).to_contain_text(says)
        assert "JSON" not in alert.inner_text() and "token" not in alert.inner_text()
        expect(page.locator("[data-input]")).to_have_value(f"are you there? ({status})")
        page.unroute("**/chat/api/*/*/messages")


def test_on_a_phone_the_header_names_the_qor_and_shows_the_status_and_the_copy_button_hides_no_time(chat_server, browser):
    from playwright.sync_api import expect

    base, model, platform = chat_server
    model.add(reply("Hi!"))
    phone = browser.new_context(viewport={"width": 390, "height": 844}, has_touch=True, is_mobile=True)
    page = sign_in(browser, base, context=phone)
    send(page, "hello")
    expect(page.locator(".msg--assistant:not(.msg--streaming)", has_text="Hi!")).to_be_visible(
        timeout=SERVER_WORK)
    title = page.locator(".topbar__title h1").bounding_box()
    assert title and title["width"] >= 30, title  # the Qor's name is there to read

    def overlap(a, b) -> bool:
        return not (a["x"] + a["width"] <= b["x"] or b["x"] + b["width"] <= a["x"]
                    or a["y"] + a["height"] <= b["y"] or b["y"] + b["height"] <= a["y"])

    status = page.locator("[data-status]").bounding_box()
    for action in page.locator(".topbar__actions > *:visible").all():
        assert not overlap(status, action.bounding_box()), action.inner_text()
    for message in page.locator(".msg--user, .msg--assistant").all():
        copy, time = message.locator("> .msg__copy"), message.locator(".msg__time").first
        if copy.count() and time.count():
            assert not overlap(copy.bounding_box(), time.bounding_box()), message.inner_text()
    page.screenshot(path=str(ARTIFACTS / "chat-phone-header.png"))


def test_files_waiting_to_be_sent_stay_within_a_phone_screen(chat_server, browser):
    from playwright.sync_api import expect

    base, model, platform = chat_server
    phone = browser.new_context(viewport={"width": 375, "height": 667}, is_mobile=True, has_touch=True)
    page = sign_in(browser, base, context=phone)
    page.set_input_files("[data-attach]", files=[
        {"name": f"quarterly-report-{n}-final-version-signed.pdf", "mimeType": "application/pdf",
         "buffer": b"%PDF-1.4 a report"} for n in range(1, 4)])
    expect(page.locator("[data-attachment]")).to_have_count(3)
    assert page.evaluate("document.scrollingElement.scrollWidth - document.scrollingElement.clientWidth") == 0
    for n in range(3):  # each one's remove button on the screen, to be tapped
        remove = page.locator("[data-attachment] .attachment__remove").nth(n).bounding_box()
        assert 0 <= remove["x"] and remove["x"] + remove["width"] <= 375, (n, remove)
    composer = page.locator("[data-composer]").bounding_box()
    assert composer["x"] + composer["width"] <= 375
