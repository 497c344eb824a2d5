"""Opening a message the chat page's history search found, in a real browser under the
page's Content-Security-Policy: the message is shown in its place, with what was said
before it and what came after it (the Qor's answer, which is usually what was looked
for), scrolled into view, marked and focused; and a button goes back to the end of the
conversation going on."""
from __future__ import annotations

from ..fakes.model_server import reply
from .browser_support import ARTIFACTS, SERVER_WORK, send, sign_in
from .test_browser_policy import watched

ANSWERED = ".msg--assistant:not(.msg--streaming)"


def talk(page, question: str, answer: str) -> None:
    from playwright.sync_api import expect

    send(page, question)
    expect(page.locator(ANSWERED, has_text=answer)).to_be_visible(timeout=SERVER_WORK)


def search(page, words: str):
    from playwright.sync_api import expect

    if not page.locator("[data-archive]").evaluate("d => d.open"):
        page.click("[data-archive-open]")
    page.fill("[data-search-input]", words)
    page.press("[data-search-input]", "Enter")
    hits = page.locator("[data-search-hit]")
    expect(hits.first).to_be_visible(timeout=SERVER_WORK)
    return hits


def test_a_found_question_opens_with_its_answer_after_it_focused_and_a_way_back_to_the_live_end(chat_server, browser):
    from playwright.sync_api import expect

    base, model, platform = chat_server
    fillers = [(f"note {n}: buy item {n}", f"Noted item {n}.") for n in range(1, 9)]
    model.add(*[reply(a) for _, a in fillers[:4]], reply("The spare key is under the blue pot."),
              *[reply(a) for _, a in fillers[4:]], reply("The gym opens at six."), reply("You're welcome."))
    context, reports = watched(browser)
    page = sign_in(browser, base, context=context)
    for question, answer in fillers[:4]:
        talk(page, question, answer)
    talk(page, "where did I leave the spare key?", "The spare key is under the blue pot.")
    for question, answer in fillers[4:]:
        talk(page, question, answer)
    page.once("dialog", lambda dialog: dialog.accept())
    page.click("[data-new-conversation]")
    expect(page.locator(".divider--session")).to_be_visible(timeout=SERVER_WORK)
    talk(page, "when does the gym open?", "The gym opens at six.")
    talk(page, "thanks", "You're welcome.")

    hits = search(page, "spare key")
    expect(hits).to_have_count(2)
    question = page.locator("[data-search-hit]", has_text="You: where did I leave the spare key?")
    expect(question.locator("mark")).to_have_text(["spare", "key"])  # the words found, as written
    question.focus()
    page.keyboard.press("Enter")  # opened from the keyboard

    dialog = page.locator("[data-archive]")
    found = dialog.locator(".msg--found")
    expect(found).to_contain_text("where did I leave the spare key?", timeout=SERVER_WORK)
    shown = dialog.locator("[data-archive-body] .msg").all_inner_texts()
    at = next(i for i, text in enumerate(shown) if "where did I leave the spare key?" in text)
    assert "The spare key is under the blue pot." in shown[at + 1]  # its answer, right after it
    assert any("buy item 4" in text for text in shown[:at])  # what was said before it
    assert any("Noted item 8." in text for text in shown[at + 1:])  # and on to the end
    expect(found).to_have_attribute("aria-current", "true")
    expect(found).to_be_focused()
    expect(found).to_be_in_viewport()
    expect(dialog.locator(".msg", has_text="gym")).to_have_count(0)  # another conversation
    page.screenshot(path=str(ARTIFACTS / "search-found-in-context.png"))

    back = dialog.locator("[data-archive-live]")
    expect(back).to_have_text("Back to the conversation going on")
    back.click()
    expect(dialog).not_to_be_visible()
    expect(page.locator("[data-input]")).to_be_focused()
    expect(page.locator(ANSWERED, has_text="You're welcome.")).to_be_in_viewport()

    search(page, "gym")
    page.locator("[data-search-hit]", has_text="You: when does the gym open?").click()
    found = dialog.locator(".msg--found")
    expect(found).to_contain_text("when does the gym open?", timeout=SERVER_WORK)
    expect(found.locator("xpath=following-sibling::article[1]")).to_contain_text("The gym opens at six.")
    expect(dialog.locator(".msg", has_text="You're welcome.")).to_have_count(1)
    newest = dialog.locator("[data-archive-live]")
    expect(newest).to_have_text("Go to the newest message")
    newest.click()
    expect(dialog).not_to_be_visible()
    expect(page.locator("[data-input]")).to_be_focused()
    assert reports == [], reports


def test_a_slow_answer_for_a_view_you_left_does_not_replace_the_search_you_moved_to(chat_server, browser):
    """The dialog shows one thing at a time: the earlier conversations, one of them, or a
    search. Asking for one and then, before it came, for a search, the search is what stays,
    whenever the first answer turns up."""
    from playwright.sync_api import expect

    base, model, platform = chat_server
    model.add(reply("Under the blue pot."), reply("Noted."))
    page = sign_in(browser, base)
    talk(page, "where is the spare key?", "Under the blue pot.")
    page.once("dialog", lambda dialog: dialog.accept())
    page.click("[data-new-conversation]")
    expect(page.locator(".divider--session")).to_be_visible(timeout=SERVER_WORK)
    talk(page, "buy milk", "Noted.")
    held = []

    def hold(route):
        held.append((route, route.fetch()))  # the server answered; the page is not told yet

    def released(pattern: str) -> None:
        while not held:
            page.wait_for_timeout(50)
        route, response = held.pop()
        with page.expect_response(pattern):
            route.fulfill(response=response)
        page.evaluate("() => new Promise(r => setTimeout(r, 200))")  # its handlers have run
        page.unroute(pattern)

    dialog = page.locator("[data-archive]")
    # The list of earlier conversations asked for, then a search before the list came.
    page.route("**/conversations", hold)
    page.click("[data-archive-open]")
    hits = search(page, "spare key")
    expect(hits).to_have_count(1)
    released("**/conversations")
    expect(dialog.locator("[data-archived-session]")).to_have_count(0)
    expect(page.locator("[data-search-hit]", has_text="You: where is the spare key?")).to_have_count(1)

    # One earlier conversation opened, then a search before its messages came.
    page.fill("[data-search-input]", "")
    page.press("[data-search-input]", "Enter")  # an empty search is the list again
    page.route("**/messages?session=*", hold)
    dialog.locator("[data-archived-session]").click()
    hits = search(page, "milk")
    expect(hits).to_have_count(1)
    released("**/messages?session=*")
    expect(dialog.locator(".msg", has_text="Under the blue pot.")).to_have_count(0)
    expect(dialog.locator("[data-archive-title]")).to_have_text("Search")
    expect(page.locator("[data-search-hit]", has_text="You: buy milk")).to_have_count(1)


def test_a_long_search_found_nowhere_is_said_within_the_dialog_on_a_phone(chat_server, browser):
    from playwright.sync_api import expect

    base, model, platform = chat_server
    phone = browser.new_context(viewport={"width": 375, "height": 667}, is_mobile=True, has_touch=True)
    page = sign_in(browser, base, context=phone)
    page.click("[data-more]")
    page.click("[data-archive-open]")
    page.fill("[data-search-input]", "tracking" + "0123456789" * 10)  # a pasted code, say
    page.press("[data-search-input]", "Enter")
    none = page.locator(".archive__none")
    expect(none).to_contain_text("Nothing found for")
    body = page.locator("[data-archive-body]")
    assert body.evaluate("b => b.scrollWidth - b.clientWidth") == 0  # no sideways scrolling to read it
    line, dialog = none.bounding_box(), page.locator("[data-archive]").bounding_box()
    assert line["x"] + line["width"] <= dialog["x"] + dialog["width"]
    assert none.evaluate("p => { const r = document.createRange(); r.selectNodeContents(p); return r.getBoundingClientRect().right; }") <= dialog["x"] + dialog["width"]
