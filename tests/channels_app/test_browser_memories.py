"""The chat page's Memories dialog in a real browser: the signed-in person reads what their
Qor remembers about them (their own memories only, newest first, in pages) and has it
forget one, with the mouse or the keyboard alone, heard by a screen reader, on a phone;
the webchat frame has no such dialog."""
from __future__ import annotations

import json

import pytest

from ..fakes.model_server import reply
from .browser_support import SERVER_WORK, sign_in
from .test_browser_a11y import severe_violations
from .test_browser_keyboard import CONTRAST, FOCUSED
from .test_browser_webchat import on_server

DIALOG = "dialog[data-memories]"
ITEMS = "[data-memories] [data-memory]"

# Memories stored for alice with Aria (in this order, so the last is the newest), and some
# that are not hers to see: bob's with Aria, and hers with another Qor of the workspace.
SEED = """
import json
from datetime import datetime, timezone
from django.contrib.auth import get_user_model
from memory_app.models import Memory
from memory_app.services import memory_add
from tenancy.models import Membership, Qor, Tenant
acme = Tenant.objects.get(slug="acme")
aria = Qor.objects.get(tenant=acme, slug="aria")
alice = get_user_model().objects.get(username="alice")
bob = get_user_model().objects.create_user("bob")
Membership.objects.create(tenant=acme, user=bob, role="member")
nova = Qor.objects.create(tenant=acme, name="Nova", slug="nova")
ids = []
for kind, text, created in {mine!r}:
    memory, _ = memory_add(tenant=acme, qor=aria, user=alice, type=kind, content=text)
    if created:
        Memory.objects.filter(pk=memory.pk).update(created_at=datetime.fromisoformat(created))
    ids.append(memory.pk)
memory_add(tenant=acme, qor=aria, user=bob, type="fact", content="Bob keeps a spare key under the mat.")
memory_add(tenant=acme, qor=nova, user=alice, type="fact", content="Alice told Nova her PIN hint.")
print(json.dumps(ids))
"""


def seed(base: str, mine: list[tuple[str, str, str]]) -> list[int]:
    """Store `mine` ((type, content, created_at ISO or "")) as alice's memories with Aria,
    and the others'; their ids, oldest first."""
    return json.loads(on_server(base, SEED.format(mine=mine)))


def stored_memories(base: str) -> list[str]:
    return json.loads(on_server(base, "import json; from memory_app.models import Memory; "
                                      "print(json.dumps(sorted(Memory.objects.values_list('content', flat=True))))"))


def stored_and_searchable(base: str, word: str) -> tuple[list[str], int]:
    """Every memory's content (as `stored_memories`), and how many of alice's memories with
    Aria memory search finds for `word`: one `qorven shell` for both (each takes seconds
    to start)."""
    stored, found = json.loads(on_server(
        base, "import json; from django.contrib.auth import get_user_model; from memory_app.models import Memory; "
              "from memory_app.selectors import memory_search; from tenancy.models import Qor; "
              "aria = Qor.objects.get(slug='aria'); "
              "alice = get_user_model().objects.get(username='alice'); "
              "print(json.dumps([sorted(Memory.objects.values_list('content', flat=True)), "
              f"len(memory_search(tenant=aria.tenant, qor=aria, user=alice, query={word!r}))]))"))
    return stored, found


def exposed_to_screen_readers(page, selector: str) -> bool:
    """Whether the element is in the accessibility tree a screen reader reads (everything
    outside an open modal dialog is left out of it)."""
    cdp = page.context.new_cdp_session(page)
    root = cdp.send("DOM.getDocument", {"depth": 0})["root"]["nodeId"]
    node = cdp.send("DOM.querySelector", {"nodeId": root, "selector": selector})["nodeId"]
    return not cdp.send("Accessibility.getPartialAXTree", {"nodeId": node, "fetchRelatives": False})["nodes"][0]["ignored"]


def no_window_dialogs(page) -> list[str]:
    """window.confirm/alert/prompt the page opens (none expected): recorded, dismissed."""
    opened: list[str] = []

    def dismiss(dialog):
        opened.append(dialog.message)
        dialog.dismiss()

    page.on("dialog", dismiss)
    return opened


def open_memories(page):
    page.locator("[data-memories-open]").click()
    dialog = page.locator(DIALOG)
    from playwright.sync_api import expect

    expect(dialog).to_be_visible()
    expect(dialog.locator("[data-memories-body]")).not_to_contain_text("Loading")
    return dialog


def test_the_dialog_lists_the_persons_own_memories_newest_first_dated_in_their_locale(chat_server, browser):
    from playwright.sync_api import expect

    base, model, platform = chat_server
    seed(base, [("fact", "Alice is vegetarian.", "2026-03-14T23:30:00+00:00"),
                ("reminder", "Renew the passport.", ""),
                ("conversation_digest", "Talked about the trip to Lyon.", "")])
    context = browser.new_context(viewport={"width": 1280, "height": 820}, locale="en-GB",
                                  timezone_id="Asia/Tokyo")
    page = sign_in(browser, base, context=context)
    expect(page.locator("[data-memories-open]")).to_have_text("Memories")
    dialog = open_memories(page)

    expect(page.get_by_role("dialog", name="What Aria remembers about you")).to_be_visible()
    expect(dialog.locator(".memory__text")).to_have_text(
        ["Talked about the trip to Lyon.", "Renew the passport.", "Alice is vegetarian."])
    expect(dialog.locator(".memory__kind")).to_have_text(["Conversation digest", "Reminder", "Fact"])
    # 23:30 UTC on the 14th is the 15th in Tokyo, written the British way.
    expect(dialog.locator(".memory__when").last).to_have_text("15 Mar 2026")
    expect(dialog.locator("[data-memories-count]")).to_have_text("3 memories, newest first")
    expect(dialog.locator("[data-memories-more]")).to_have_count(0)
    expect(dialog).not_to_contain_text("Bob keeps a spare key")
    expect(dialog).not_to_contain_text("PIN hint")


def test_a_note_drawn_from_an_older_conversation_is_dated_when_it_was_said(chat_server, browser):
    """The memory flush stores in June what was said in March: the dialog said June, where
    /memories, /forget and the Qor's prompt say March."""
    from playwright.sync_api import expect

    base, model, platform = chat_server
    on_server(base, """
from datetime import datetime, timezone
from django.contrib.auth import get_user_model
from memory_app.models import Memory
from memory_app.services import memory_add
from tenancy.models import Qor
aria = Qor.objects.get(tenant__slug="acme", slug="aria")
alice = get_user_model().objects.get(username="alice")
memory, _ = memory_add(tenant=aria.tenant, qor=aria, user=alice, type="fact", content="Alice moved the piano.",
                       period_start=datetime(2026, 3, 14, 9, 0, tzinfo=timezone.utc),
                       period_end=datetime(2026, 3, 14, 10, 0, tzinfo=timezone.utc))
Memory.objects.filter(pk=memory.pk).update(created_at=datetime(2026, 6, 2, 12, 0, tzinfo=timezone.utc))
print("ok")
""")
    context = browser.new_context(viewport={"width": 1280, "height": 820}, locale="en-GB", timezone_id="UTC")
    page = sign_in(browser, base, context=context)
    dialog = open_memories(page)
    expect(dialog.locator(".memory__when")).to_have_text(["14 Mar 2026"])


def test_show_older_pages_through_the_memories_to_the_last(chat_server, browser):
    from playwright.sync_api import expect

    base, model, platform = chat_server
    seed(base, [("fact", f"Note number {n}.", "") for n in range(1, 46)])
    page = sign_in(browser, base)
    dialog = open_memories(page)
    texts = dialog.locator(".memory__text")
    expect(texts).to_have_count(20)
    expect(dialog.locator("[data-memories-count]")).to_have_text("45 memories, newest first")
    more = dialog.locator("[data-memories-more]")
    more.click()
    expect(texts).to_have_count(40)
    more.click()
    expect(texts).to_have_count(45)
    expect(more).to_have_count(0)
    assert texts.all_text_contents() == [f"Note number {n}." for n in range(45, 0, -1)]


def test_forgetting_a_memory_asks_first_then_removes_it_from_the_list_and_the_database_and_says_so(chat_server, browser):
    from playwright.sync_api import expect

    base, model, platform = chat_server
    seed(base, [("fact", "Alice likes green tea.", ""), ("fact", "Alice moved to Lyon.", ""),
                ("fact", "Alice plays the cello.", "")])
    page = sign_in(browser, base)
    window_dialogs = no_window_dialogs(page)
    dialog = open_memories(page)
    lyon = dialog.locator("[data-memory]", has_text="Alice moved to Lyon.")
    lyon.locator("[data-forget]").click()
    expect(lyon).to_contain_text("Forget this for good?")
    expect(lyon.locator("[data-forget-confirm]")).to_be_focused()
    stored, found = stored_and_searchable(base, "Lyon")
    assert "Alice moved to Lyon." in stored  # nothing is deleted before the yes
    assert found == 1

    lyon.locator("[data-forget-confirm]").click()
    expect(lyon).to_have_count(0)
    expect(dialog.locator(".memory__text")).to_have_text(["Alice plays the cello.", "Alice likes green tea."])
    expect(dialog.locator("[data-memories-count]")).to_have_text("2 memories, newest first")
    # The next memory's Forget button takes the focus; a screen reader hears it went.
    expect(dialog.locator("[data-memory]", has_text="green tea").locator("[data-forget]")).to_be_focused()
    expect(page.locator("[data-announcer]")).to_contain_text("Forgotten")
    assert exposed_to_screen_readers(page, "[data-announcer]")
    stored, found = stored_and_searchable(base, "Lyon")
    assert "Alice moved to Lyon." not in stored
    assert found == 0

    for text in ("green tea", "cello"):  # the last one, then the only one left
        item = dialog.locator("[data-memory]", has_text=text)
        item.locator("[data-forget]").click()
        item.locator("[data-forget-confirm]").click()
        expect(item).to_have_count(0)
    expect(dialog.locator("[data-memories-empty]")).to_have_text("Aria remembers nothing about you yet.")
    expect(dialog.locator("[data-memories-title]")).to_be_focused()
    assert window_dialogs == []
    assert [m for m in stored_memories(base) if m.startswith("Alice")] == ["Alice told Nova her PIN hint."]


def test_keep_it_and_escape_take_a_memory_back_from_forgetting(chat_server, browser):
    from playwright.sync_api import expect

    base, model, platform = chat_server
    seed(base, [("fact", "Alice likes green tea.", "")])
    page = sign_in(browser, base)
    dialog = open_memories(page)
    item = dialog.locator("[data-memory]")
    item.locator("[data-forget]").click()
    item.locator("[data-forget-cancel]").click()
    expect(item.locator("[data-forget-confirm]")).to_have_count(0)
    expect(item.locator("[data-forget]")).to_be_focused()

    page.keyboard.press("Enter")
    expect(item.locator("[data-forget-confirm]")).to_be_focused()
    page.keyboard.press("Escape")  # the question goes, the dialog stays
    expect(item.locator("[data-forget-confirm]")).to_have_count(0)
    expect(dialog).to_be_visible()
    expect(item.locator("[data-forget]")).to_be_focused()
    assert stored_memories(base).count("Alice likes green tea.") == 1


def test_a_memory_holding_html_is_shown_as_its_text(chat_server, browser):
    from playwright.sync_api import expect

    base, model, platform = chat_server
    text = '<img src=x onerror="window.__pwned = 1"> likes <b>bold</b> & <script>window.__pwned = 2</script>'
    seed(base, [("fact", text, "")])
    page = sign_in(browser, base)
    dialog = open_memories(page)
    expect(dialog.locator(".memory__text")).to_have_text(text)
    expect(dialog.locator("img, b, script")).to_have_count(0)
    dialog.locator("[data-forget]").click()  # the question does not bring it back as HTML
    expect(dialog.locator("img, b, script")).to_have_count(0)
    assert page.evaluate("() => window.__pwned") is None


def test_the_keyboard_alone_opens_the_dialog_forgets_a_memory_and_escape_returns_to_the_button(chat_server, browser):
    from playwright.sync_api import expect

    base, model, platform = chat_server
    seed(base, [("fact", "Alice likes green tea.", ""), ("fact", "Alice plays the cello.", "")])
    page = sign_in(browser, base)
    opener = page.locator("[data-memories-open]")
    opener.focus()
    page.keyboard.press("Enter")
    dialog = page.locator(DIALOG)
    expect(dialog.locator("[data-memory]")).to_have_count(2)
    newest = dialog.locator("[data-memory]", has_text="cello")
    for _ in range(4):  # from the dialog's first control to the first Forget button
        if newest.locator("[data-forget]").evaluate("(n) => n === document.activeElement"):
            break
        page.keyboard.press("Tab")
    expect(newest.locator("[data-forget]")).to_be_focused()
    expect(newest.locator("[data-forget]")).to_have_accessible_name("Forget: Alice plays the cello.")
    page.keyboard.press("Enter")
    expect(newest.locator("[data-forget-confirm]")).to_be_focused()
    page.keyboard.press("Enter")
    expect(newest).to_have_count(0)
    expect(dialog.locator("[data-memory] [data-forget]")).to_be_focused()
    assert page.evaluate(FOCUSED) != "body"

    page.keyboard.press("Escape")
    expect(dialog).to_be_hidden()
    expect(opener).to_be_focused()
    assert stored_memories(base).count("Alice plays the cello.") == 0


def test_a_memory_forgotten_elsewhere_leaves_the_list_with_a_notice(chat_server, browser):
    from playwright.sync_api import expect

    base, model, platform = chat_server
    ids = seed(base, [("fact", "Alice likes green tea.", ""), ("fact", "Alice plays the cello.", "")])
    page = sign_in(browser, base)
    dialog = open_memories(page)
    # Meanwhile /forget on Telegram (or another tab) took the cello away.
    on_server(base, f"from memory_app.models import Memory; Memory.objects.filter(pk={ids[1]}).delete()")
    cello = dialog.locator("[data-memory]", has_text="cello")
    cello.locator("[data-forget]").click()
    cello.locator("[data-forget-confirm]").click()

    notice = dialog.locator("[data-memories-notice]")
    expect(notice).to_have_text("That memory was already forgotten.")
    expect(notice).to_have_attribute("role", "alert")
    expect(cello).to_have_count(0)
    expect(dialog.locator("[data-memories-count]")).to_have_text("1 memory, newest first")
    expect(dialog.locator("[data-memory] [data-forget]")).to_be_focused()


@pytest.mark.parametrize("failure", ["unreachable", "proxy 502"])
def test_a_failed_forget_keeps_the_memory_listed_with_a_notice_of_ours(chat_server, failure, browser):
    from playwright.sync_api import expect

    base, model, platform = chat_server
    seed(base, [("fact", "Alice likes green tea.", "")])
    page = sign_in(browser, base)
    dialog = open_memories(page)

    def fail(route):
        if route.request.method != "DELETE":
            route.continue_()
        elif failure == "unreachable":
            route.abort("connectionrefused")
        else:  # what a proxy in front of a restarting server answers
            route.fulfill(status=502, content_type="text/html", body="<h1>502 Bad Gateway</h1> nginx")

    page.route("**/memories/*", fail)
    item = dialog.locator("[data-memory]")
    item.locator("[data-forget]").click()
    item.locator("[data-forget-confirm]").click()

    notice = dialog.locator("[data-memories-notice]")
    expect(notice).to_have_text(
        "Can't reach Qorven — the memory was not forgotten; try again in a moment." if failure == "unreachable"
        else "Qorven could not forget that just now; try again in a moment.")
    expect(item.locator(".memory__text")).to_have_text("Alice likes green tea.")
    expect(item.locator("[data-forget]")).to_be_focused()
    expect(dialog.locator("[data-memories-count]")).to_have_text("1 memory, newest first")
    expect(page.locator("[data-announcer]")).not_to_contain_text("Forgotten")
    assert "Alice likes green tea." in stored_memories(base)

    page.unroute("**/memories/*")  # back again: the same button works
    item.locator("[data-forget]").click()
    item.locator("[data-forget-confirm]").click()
    expect(dialog.locator("[data-memories-empty]")).to_be_visible()
    expect(notice).to_have_count(0)


def test_a_list_that_cannot_be_read_says_so_and_opens_again(chat_server, browser):
    from playwright.sync_api import expect

    base, model, platform = chat_server
    seed(base, [("fact", "Alice likes green tea.", "")])
    page = sign_in(browser, base)
    page.route("**/memories", lambda route: route.abort("connectionrefused"))
    page.locator("[data-memories-open]").click()
    dialog = page.locator(DIALOG)
    expect(dialog.locator("[data-memories-notice]")).to_have_text(
        "Can't reach Qorven — try again in a moment.")
    expect(dialog.locator("[data-memories-empty]")).to_have_count(0)  # not "remembers nothing"
    page.unroute("**/memories")
    page.keyboard.press("Escape")
    open_memories(page)
    expect(dialog.locator(".memory__text")).to_have_text(["Alice likes green tea."])
    expect(dialog.locator("[data-memories-notice]")).to_have_count(0)


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_the_dialog_is_readable_fits_a_phone_and_keeps_still(chat_server, scheme, browser):
    """WCAG AA contrast for its greys, its question and its notice; nothing wider than a
    375 px phone; no animation where reduced motion is asked for; no serious axe finding."""
    from playwright.sync_api import expect

    base, model, platform = chat_server
    seed(base, [("fact", "Alice's favourite word is " + "supercalifragilistic" * 4 + ".", ""),
                ("reminder", "Renew the passport before the trip to Lyon in May.", "")])
    context = browser.new_context(viewport={"width": 375, "height": 740}, color_scheme=scheme,
                                  reduced_motion="reduce", is_mobile=True, has_touch=True)
    page = sign_in(browser, base, context=context)
    page.locator("[data-more]").click()  # on a phone the header's actions are a menu
    expect(page.locator("[data-memories-open]")).to_be_in_viewport()
    dialog = open_memories(page)
    item = dialog.locator("[data-memory]").first
    item.locator("[data-forget]").click()
    page.route("**/memories/*", lambda route: route.abort("connectionrefused"))
    item.locator("[data-forget-confirm]").click()
    expect(dialog.locator("[data-memories-notice]")).to_be_visible()
    item.locator("[data-forget]").click()  # the question again, to measure it

    ratios = {
        "kind and date": dialog.locator(".memory__meta").first.evaluate(CONTRAST),
        "text": dialog.locator(".memory__text").first.evaluate(CONTRAST),
        "count": dialog.locator("[data-memories-count]").evaluate(CONTRAST),
        "question": dialog.locator(".memory__confirm").evaluate(CONTRAST),
        "keep it": dialog.locator("[data-forget-cancel]").evaluate(CONTRAST),
        "yes": dialog.locator("[data-forget-confirm]").evaluate(CONTRAST),
        "notice": dialog.locator("[data-memories-notice]").evaluate(CONTRAST),
        "forget": dialog.locator("[data-memory]").last.locator("[data-forget]").evaluate(CONTRAST),
    }
    assert {k: v for k, v in ratios.items() if v < 4.5} == {}

    overflow = dialog.evaluate("""(d) => [d, ...d.querySelectorAll('*')]
        .filter(n => n.getBoundingClientRect().right > innerWidth + 0.5 && n.getClientRects().length)
        .map(n => n.className || n.tagName)""")
    assert overflow == []
    assert page.evaluate("() => document.documentElement.scrollWidth") <= 375
    moving = dialog.evaluate("""(d) => [d, ...d.querySelectorAll('*')].filter(n => {
        const s = getComputedStyle(n);
        return s.animationName !== 'none' || parseFloat(s.transitionDuration) > 0;
      }).map(n => n.className || n.tagName)""")
    assert moving == []
    assert severe_violations(page) == []


def test_the_webchat_frame_has_no_memories_and_still_chats(chat_server, browser):
    from playwright.sync_api import expect

    base, model, platform = chat_server
    seed(base, [("fact", "Alice likes green tea.", "")])
    model.add(reply("We open at nine."))
    page = browser.new_page(viewport={"width": 390, "height": 700})
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.goto(base + "/webchat/wc_browser/frame")
    page.locator("[data-input]").fill("When do you open?")
    page.locator("[data-input]").press("Enter")
    expect(page.locator(".msg--assistant:not(.msg--streaming)")).to_contain_text("We open at nine.",
                                                                                 timeout=SERVER_WORK)
    expect(page.locator("[data-memories-open], [data-memories]")).to_have_count(0)
    assert "memories" not in json.loads(page.locator("#chat-config").text_content())
    assert errors == []
