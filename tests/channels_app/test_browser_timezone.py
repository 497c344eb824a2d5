"""The person's own timezone on the chat page, in a real browser: a browser in another zone
than the workspace's is offered it once (taken in one click, or dismissed for good), and
"Your timezone" in the header shows theirs and changes it, on a desktop and on a 360 px
phone — under the page's Content-Security-Policy, with no serious axe finding."""
from __future__ import annotations

from .browser_support import ARTIFACTS, sign_in
from .test_browser_a11y import severe_violations
from .test_browser_policy import refused_injection, watched
from .test_browser_webchat import on_server

OFFER = "[data-zone-offer]"
DIALOG = "dialog[data-zone]"


def alices_zone(base: str) -> str:
    return on_server(base, "from tenancy.models import Membership; "
                           "print(repr(Membership.objects.get(tenant__slug='acme', user__username='alice').timezone))")


def overflowing(page, selector: str) -> list[str]:
    return page.locator(selector).evaluate("""(root) => [root, ...root.querySelectorAll('*')]
        .filter(n => n.getClientRects().length && n.getBoundingClientRect().right > innerWidth + 0.5)
        .map(n => n.className || n.tagName)""")


def test_a_browser_in_another_zone_is_offered_it_once_and_takes_it_in_one_click(chat_server, browser):
    from playwright.sync_api import expect

    base, model, platform = chat_server
    # In the workspace's own zone there is nothing to offer.
    same = sign_in(browser, base, context=browser.new_context(timezone_id="UTC"))
    expect(same.locator("[data-zone-open]")).to_have_text("UTC", use_inner_text=True)
    expect(same.locator(OFFER)).to_be_hidden()
    same.context.close()

    # Dismissed, it stays away: the person's zone is unchanged.
    context, reports = watched(browser, timezone_id="Europe/Paris")
    page = sign_in(browser, base, context=context)
    offer = page.locator(OFFER)
    expect(offer).to_be_visible()
    expect(offer).to_contain_text("UTC")
    expect(offer.get_by_role("button", name="Use Europe/Paris")).to_be_visible()
    assert severe_violations(page) == []
    page.screenshot(path=str(ARTIFACTS / "chat-timezone-offer.png"))
    offer.get_by_role("button", name="No thanks").click()
    expect(offer).to_be_hidden()
    expect(page.locator("[data-input]")).to_be_focused()
    page.reload()
    expect(page.locator("[data-status]")).to_have_attribute("data-state", "live")
    expect(page.locator(OFFER)).to_be_hidden()
    assert alices_zone(base) == "''"
    refused_injection(page, reports)
    context.close()

    # Taken: one click, the server's answer in its place, the header's item too.
    context, reports = watched(browser, timezone_id="Europe/Paris")
    page = sign_in(browser, base, context=context)
    offer = page.locator(OFFER)
    offer.get_by_role("button", name="Use Europe/Paris").click()
    expect(offer).to_contain_text("Your timezone is now Europe/Paris (it is ")
    expect(offer.get_by_role("button", name="OK")).to_be_focused()
    expect(page.locator("[data-announcer]")).to_contain_text("Your timezone is now Europe/Paris")
    assert alices_zone(base) == "'Europe/Paris'"
    zone_item = page.locator("[data-zone-open]")
    expect(zone_item).to_have_text("Paris", use_inner_text=True)
    expect(zone_item).to_have_accessible_name("Your timezone: Europe/Paris")
    assert severe_violations(page) == []
    offer.get_by_role("button", name="OK").click()
    expect(offer).to_be_hidden()
    page.reload()
    expect(page.locator("[data-status]")).to_have_attribute("data-state", "live")
    expect(page.locator(OFFER)).to_be_hidden()  # it is theirs now: nothing to offer
    refused_injection(page, reports)


def test_a_zone_the_server_does_not_know_is_refused_with_a_clear_message(chat_server, browser):
    from playwright.sync_api import expect

    base, model, platform = chat_server
    page = sign_in(browser, base, context=browser.new_context(timezone_id="Europe/Paris"))
    page.route("**/timezone", lambda route: route.continue_(post_data='{"timezone": "Mars/Olympus"}'))
    page.locator(OFFER).get_by_role("button", name="Use Europe/Paris").click()
    expect(page.locator(OFFER)).to_contain_text("I don't know the timezone 'Mars/Olympus'")
    assert alices_zone(base) == "''"
    expect(page.locator("[data-zone-open]")).to_have_text("UTC", use_inner_text=True)


def test_on_a_360_px_phone_your_timezone_is_in_the_menu_and_changed_in_a_dialog(chat_server, browser):
    from playwright.sync_api import expect

    base, model, platform = chat_server
    context, reports = watched(browser, viewport={"width": 360, "height": 740}, timezone_id="Asia/Tokyo",
                               is_mobile=True, has_touch=True)
    page = sign_in(browser, base, context=context)
    expect(page.locator(OFFER)).to_be_visible()
    assert overflowing(page, OFFER) == []
    assert page.evaluate("() => document.documentElement.scrollWidth") <= 360
    page.screenshot(path=str(ARTIFACTS / "chat-phone-360-timezone-offer.png"))

    more = page.locator("[data-more]")
    more.tap()
    item = page.locator("[data-zone-open]")
    expect(item).to_be_in_viewport(ratio=1)
    expect(item).to_have_text("Your timezone: UTC (the workspace's)", use_inner_text=True)
    item.tap()
    dialog = page.locator(DIALOG)
    expect(dialog).to_be_visible()
    expect(page.get_by_role("dialog", name="Your timezone")).to_be_visible()
    expect(more).to_have_attribute("aria-expanded", "false")
    expect(dialog.locator("[data-zone-now]")).to_contain_text("UTC, the workspace's")
    expect(dialog.locator("datalist option[value='Europe/Lisbon']")).to_have_count(1)  # the list to search

    field = dialog.get_by_label("Timezone (an IANA name, such as Europe/Paris)")
    field.fill("Mars/Olympus")
    field.press("Enter")
    expect(dialog.get_by_role("alert")).to_have_text(
        "I don't know the timezone 'Mars/Olympus'. Use an IANA name such as Europe/Paris, "
        "America/New_York or Asia/Tokyo.")
    expect(field).to_have_attribute("aria-invalid", "true")
    assert alices_zone(base) == "''"

    field.fill("europe/lisbon")
    dialog.get_by_role("button", name="Save").tap()
    expect(dialog.locator("[data-zone-said]")).to_contain_text("Your timezone is now Europe/Lisbon")
    expect(dialog.get_by_role("alert")).to_have_count(0)
    expect(field).not_to_have_attribute("aria-invalid", "true")
    expect(dialog.locator("[data-zone-now]")).to_contain_text("Europe/Lisbon, your own")
    assert alices_zone(base) == "'Europe/Lisbon'"
    expect(page.locator(OFFER)).to_be_hidden()  # set: the offer has nothing left to offer
    assert overflowing(page, DIALOG) == []
    assert severe_violations(page) == []
    page.screenshot(path=str(ARTIFACTS / "chat-phone-360-timezone.png"))

    dialog.get_by_role("button", name="Use this browser's: Asia/Tokyo").tap()
    expect(dialog.locator("[data-zone-said]")).to_contain_text("Your timezone is now Asia/Tokyo")
    assert alices_zone(base) == "'Asia/Tokyo'"
    dialog.get_by_role("button", name="Follow the workspace's: UTC").tap()
    expect(dialog.locator("[data-zone-said]")).to_have_text("You now follow the workspace's timezone, UTC.")
    assert alices_zone(base) == "''"

    page.keyboard.press("Escape")
    expect(dialog).to_be_hidden()
    expect(more).to_be_focused()
    more.tap()
    expect(item).to_have_text("Your timezone: UTC (the workspace's)", use_inner_text=True)
    # The browser logs the refused name's 400 as a failed load; no policy complaint.
    refusal = "the server responded with a status of 400"
    assert len([r for r in reports if refusal in r]) == 1, reports
    reports[:] = [r for r in reports if refusal not in r]
    refused_injection(page, reports)


def test_on_a_desktop_the_item_is_in_the_header_and_the_dialog_works_by_keyboard(chat_server, browser):
    from playwright.sync_api import expect

    base, model, platform = chat_server
    on_server(base, "from tenancy.models import Membership; Membership.objects.filter(user__username='alice')"
                    ".update(timezone='America/Argentina/Buenos_Aires')")
    context, reports = watched(browser, timezone_id="Europe/Paris")
    page = sign_in(browser, base, context=context)
    expect(page.locator(OFFER)).to_be_hidden()  # a zone of their own: no offer
    item = page.locator("[data-zone-open]")
    expect(item).to_have_text("Buenos Aires", use_inner_text=True)
    expect(item).to_have_accessible_name("Your timezone: America/Argentina/Buenos_Aires")
    assert overflowing(page, ".topbar") == []
    item.focus()
    page.keyboard.press("Enter")
    dialog = page.locator(DIALOG)
    expect(dialog).to_be_visible()
    field = dialog.locator("[data-zone-input]")
    expect(field).to_have_value("America/Argentina/Buenos_Aires")
    field.fill("Pacific/Auckland")
    field.press("Enter")
    expect(dialog.locator("[data-zone-said]")).to_contain_text("Your timezone is now Pacific/Auckland")
    assert alices_zone(base) == "'Pacific/Auckland'"
    page.keyboard.press("Escape")
    expect(dialog).to_be_hidden()
    expect(item).to_be_focused()
    expect(item).to_have_text("Auckland", use_inner_text=True)
    refused_injection(page, reports)
