"""A long reply as the reader sees it on the chat page, in a real browser: a table is a
table, scrolling inside its bubble on a phone, readable in the person's own bubble too, and
"Copy code" covers none of the code;
nothing logs an error in the browser's console meanwhile."""
from __future__ import annotations

import pytest

from ..fakes.model_server import reply
from .browser_support import SERVER_WORK, console_errors, send, sign_in
from .test_browser_keyboard import CONTRAST

TABLE = """Your team:

| Name | Role | Email address | Notes |
|------|:----:|---------------|------:|
| Alice | Owner | alice@example.com | the one who signs in every morning |
| Bob | `member` | bob@example.com | reads **only** |

That is all."""

CODE = """Here it is:

```python
def a_very_long_function_name_that_goes_on(argument_one, argument_two, argument_three, argument_four):
    return argument_one + argument_two
```"""

PAGE_OVERFLOW = "() => document.scrollingElement.scrollWidth - document.scrollingElement.clientWidth"
DONE = ".msg--assistant:not(.msg--streaming)"


def test_a_table_in_a_reply_is_shown_as_a_table_that_scrolls_inside_its_bubble_on_a_phone(chat_server, browser):
    from playwright.sync_api import expect

    base, model, platform = chat_server
    model.add(reply(TABLE))
    phone = browser.new_context(viewport={"width": 375, "height": 667}, is_mobile=True, has_touch=True)
    errors = console_errors(phone)
    page = sign_in(browser, base, context=phone)
    send(page, "who is on my team?")
    answer = page.locator(DONE, has_text="That is all.")
    expect(answer).to_be_visible(timeout=SERVER_WORK)

    table = answer.locator("table")
    expect(table).to_have_count(1)
    assert table.locator("th").all_inner_texts() == ["Name", "Role", "Email address", "Notes"]
    rows = table.locator("tbody tr")
    assert [r.locator("td").all_inner_texts() for r in rows.all()] == [
        ["Alice", "Owner", "alice@example.com", "the one who signs in every morning"],
        ["Bob", "member", "bob@example.com", "reads only"],
    ]
    assert table.locator("tbody code").inner_text() == "member"
    assert table.locator("tbody strong").inner_text() == "only"
    # The delimiter row's colons: centred, right-aligned.
    aligns = table.locator("tbody tr").first.locator("td").evaluate_all(
        "cells => cells.map(c => getComputedStyle(c).textAlign)")
    assert aligns[1] == "center" and aligns[3] == "right"
    assert "|" not in answer.locator(".msg__body").inner_text()

    # Wider than the phone: it scrolls in its own box, the bubble and the page stay put,
    # and words are not cut letter by letter to fit.
    body = answer.locator(".msg__body").bounding_box()
    box = answer.locator(".msg__table").bounding_box()
    assert box["x"] >= body["x"] and box["x"] + box["width"] <= body["x"] + body["width"] + 0.5
    assert answer.locator(".msg__table").evaluate("w => w.scrollWidth > w.clientWidth")
    assert page.evaluate(PAGE_OVERFLOW) == 0
    email = table.locator("td", has_text="alice@example.com")
    assert email.evaluate("c => { const r = document.createRange(); r.selectNodeContents(c); return r.getClientRects().length; }") == 1
    assert errors == []


def test_copy_code_covers_none_of_the_code(chat_server, browser):
    from playwright.sync_api import expect

    base, model, platform = chat_server
    model.add(reply(CODE), reply(CODE))
    for viewport in ({"width": 1280, "height": 820}, {"width": 375, "height": 667}):
        context = browser.new_context(viewport=viewport)
        errors = console_errors(context)
        page = sign_in(browser, base, context=context)
        send(page, "show me the function")
        answer = page.locator(DONE, has_text="Here it is:").last  # on the phone, below the first one
        expect(answer).to_be_visible(timeout=SERVER_WORK)
        expect(page.locator(DONE, has_text="Here it is:")).to_have_count(1 if viewport["width"] > 600 else 2)
        button = answer.locator("[data-copy-code]").bounding_box()
        first_line = answer.locator("pre code").evaluate("""code => {
            const r = document.createRange(); r.setStart(code.firstChild, 0); r.setEnd(code.firstChild, 3);
            const box = r.getBoundingClientRect(); return {top: box.top, bottom: box.bottom};
        }""")
        pre = answer.locator("pre").bounding_box()
        # The button sits above the first line, inside the code's box.
        assert button["y"] + button["height"] <= first_line["top"], (viewport, button, first_line)
        assert pre["y"] <= button["y"] and button["x"] + button["width"] <= pre["x"] + pre["width"] + 0.5
        assert page.evaluate(PAGE_OVERFLOW) == 0
        assert errors == []


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_a_table_the_person_sends_is_readable_in_their_bubble(chat_server, scheme, browser):
    from playwright.sync_api import expect

    base, model, platform = chat_server
    model.add(reply("Thanks."))
    context = browser.new_context(viewport={"width": 1280, "height": 820}, color_scheme=scheme)
    page = sign_in(browser, base, context=context)
    send(page, "| Day | Task |\n|---|---|\n| Monday | `call` the bank |")
    sent = page.locator(".msg--user", has_text="Monday")
    expect(sent.locator("table")).to_be_visible()
    expect(page.locator(".msg--assistant", has_text="Thanks.")).to_be_visible(timeout=SERVER_WORK)
    contrast = {cell: sent.locator(cell).first.evaluate(CONTRAST) for cell in ("th", "td", "td code")}
    assert all(ratio >= 4.5 for ratio in contrast.values()), contrast
