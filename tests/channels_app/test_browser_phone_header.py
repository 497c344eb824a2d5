"""The chat page's header on a phone: one line (the Qor, its status, the Qor picker and a
button for the rest), nothing wider than the screen; the rest a tap away."""
from __future__ import annotations

from .browser_support import ARTIFACTS, sign_in
from .test_browser_webchat import on_server

SECOND_QOR = ("from tenancy.models import Qor, Tenant; "
              "Qor.objects.create(tenant=Tenant.objects.get(slug='acme'), name='Iris', slug='iris')")
ONE_ROW = """(header) => {
  const kids = [...header.children].filter(n => n.getClientRects().length);
  const boxes = kids.map(n => n.getBoundingClientRect());
  const style = getComputedStyle(header);
  const inner = header.getBoundingClientRect().height - parseFloat(style.paddingTop)
    - parseFloat(style.paddingBottom) - parseFloat(style.borderTopWidth) - parseFloat(style.borderBottomWidth);
  return {
    tallest: Math.max(...boxes.map(b => b.height)),
    inner: inner,
    // Every child beside every other: each starts above where each other one ends.
    oneRow: boxes.every(a => boxes.every(b => a.top < b.bottom && b.top < a.bottom)),
    wider: [header, ...header.querySelectorAll('*')]
      .filter(n => n.getClientRects().length && n.getBoundingClientRect().right > innerWidth + 0.5)
      .map(n => n.className || n.tagName),
  };
}"""


def test_on_a_360_px_phone_with_two_qors_the_header_is_one_line_and_the_rest_a_tap_away(chat_server, browser):
    from playwright.sync_api import expect

    base, model, platform = chat_server
    on_server(base, SECOND_QOR)
    phone = browser.new_context(viewport={"width": 360, "height": 740}, has_touch=True, is_mobile=True)
    page = sign_in(browser, base, context=phone)
    header = page.locator(".topbar")
    expect(page.locator("[data-switcher]")).to_be_visible()
    shape = header.evaluate(ONE_ROW)
    assert shape["oneRow"] and shape["inner"] <= shape["tallest"] + 0.5, shape
    assert shape["wider"] == [], shape
    assert page.evaluate("() => document.documentElement.scrollWidth") <= 360
    title = page.locator(".topbar__title h1").bounding_box()
    assert title and title["width"] >= 30, title  # the Qor's name is there to read
    page.screenshot(path=str(ARTIFACTS / "chat-phone-360-header.png"))

    # The other actions: behind one button, each within the screen once it is opened.
    more = page.locator("[data-more]")
    expect(more).to_have_attribute("aria-expanded", "false")
    more.tap()
    expect(more).to_have_attribute("aria-expanded", "true")
    for action in ("[data-archive-open]", "[data-memories-open]", "[data-new-conversation]", "[data-notify]",
                   "text=Download my data", "text=Sign out"):
        expect(page.locator(action)).to_be_in_viewport(ratio=1)
    page.screenshot(path=str(ARTIFACTS / "chat-phone-360-menu.png"))
    page.locator("[data-memories-open]").tap()  # an action closes the menu and does its work
    expect(page.locator("dialog[data-memories]")).to_be_visible()
    expect(more).to_have_attribute("aria-expanded", "false")
    page.locator("[data-memories-close]").tap()
    more.tap()
    page.keyboard.press("Escape")  # Escape closes it, back to the button
    expect(page.locator("[data-archive-open]")).to_be_hidden()
    expect(more).to_be_focused()

    page.select_option("[data-switcher]", label="Iris")
    page.wait_for_url("**/chat/iris/**")
    assert page.locator(".topbar").evaluate(ONE_ROW)["oneRow"]
