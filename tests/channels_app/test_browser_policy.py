"""The pages under their Content-Security-Policy in a real browser: everything a person
does on the chat page (sign in, send, attach, the Memories and Earlier dialogs, the
channel filter, the assistant switcher), the admin, and the webchat widget framed by a
shop on another origin, with not one violation reported — and an injected image from
elsewhere is refused, so the policy is there to report one."""
from __future__ import annotations

import io

from ..fakes.model_server import reply
from .browser_support import PASSWORD, SERVER_WORK, post_telegram, send, sign_in
from .test_browser_webchat import KEY, host_site, on_server, say

# Every violation the browser reports, in any frame of any page of the context.
LISTEN = """
document.addEventListener("securitypolicyviolation", (e) => {
  window.__qorvenViolation(`${location.pathname}: ${e.violatedDirective} blocked ${e.blockedURI || "inline"}`
                           + ` (${e.sourceFile || ""}:${e.lineNumber || 0})`);
});
"""
# What the browser's console says when a policy or a header is wrong.
POLICY_WORDS = ("Content Security Policy", "Content-Security-Policy", "Permissions-Policy", "Refused to")
# An image from another site, as an injected tag would load it: img-src refuses it.
INJECTED = ("() => { const i = document.createElement('img'); i.src = 'https://elsewhere.example/pixel.png';"
            " document.body.appendChild(i); }")


def watched(browser, viewport=None, **options):
    """A browser context whose pages report every violation and policy complaint into the
    list it returns with it."""
    context = browser.new_context(viewport=viewport or {"width": 1280, "height": 820}, **options)
    reports: list[str] = []
    context.expose_function("__qorvenViolation", lambda report: reports.append(report))
    context.add_init_script(LISTEN)

    def console(message) -> None:
        if message.type == "error" or any(words in message.text for words in POLICY_WORDS):
            reports.append(f"console {message.type}: {message.text}")

    context.on("page", lambda page: page.on("console", console))
    return context, reports


def refused_injection(page, reports: list[str], frame=None) -> None:
    """An image from another site is refused, and that is the only report: the policy is
    in force, the listener hears it, and nothing else was reported before."""
    (frame or page).locator("body").evaluate(INJECTED.replace("() =>", "(body) =>"))
    for _ in range(100):  # the report crosses from the browser as an event: wait for it
        if any("img-src blocked" in report for report in reports):
            break
        page.wait_for_timeout(50)
    assert [r for r in reports if "elsewhere.example" not in r] == [], reports
    assert any("img-src blocked https://elsewhere.example/pixel.png" in r for r in reports), reports


def _png() -> bytes:
    from PIL import Image as PILImage

    out = io.BytesIO()
    PILImage.new("RGB", (24, 18), "teal").save(out, format="PNG")
    return out.getvalue()


def test_the_chat_page_works_end_to_end_with_no_policy_violation(chat_server, browser):
    from playwright.sync_api import expect

    base, model, platform = chat_server
    on_server(base, "from tenancy.models import Qor, Tenant; "
                    "Qor.objects.create(tenant=Tenant.objects.get(slug='acme'), name='Iris', slug='iris')")
    model.add(reply("Hello from **Aria**."))
    model.add(reply("A teal rectangle."))
    assert post_telegram(base, "sent from my phone", 1) == 200
    context, reports = watched(browser)
    page = sign_in(browser, base, context=context)  # the sign-in page, then the chat
    send(page, "hello there")
    expect(page.locator(".msg--assistant", has_text="Hello from Aria.")).to_be_visible(timeout=SERVER_WORK)
    expect(page.locator(".msg--assistant strong", has_text="Aria")).to_have_count(1)

    page.set_input_files("[data-attach]", files=[{"name": "teal.png", "mimeType": "image/png",
                                                  "buffer": _png()}])
    page.wait_for_function("() => { const i = document.querySelector('[data-attachment] img');"
                           " return i && i.naturalWidth === 24; }")  # the preview, from a blob: URL
    send(page, "what is this?")
    page.wait_for_function("() => { const i = document.querySelector('.msg--user img[data-image]');"
                           " return i && i.naturalWidth === 24; }", timeout=SERVER_WORK)
    expect(page.locator(".msg--assistant", has_text="A teal rectangle.")).to_be_visible(timeout=SERVER_WORK)

    page.click("[data-memories-open]")
    expect(page.locator("dialog[data-memories]")).to_be_visible()
    page.click("[data-memories-close]")
    page.click("[data-archive-open]")
    expect(page.locator("dialog[data-archive]")).to_be_visible()
    page.fill("[data-search-input]", "hello")
    page.press("[data-search-input]", "Enter")
    expect(page.locator("dialog[data-archive]")).to_contain_text("hello there", timeout=SERVER_WORK)
    page.click("[data-archive-close]")

    page.click("[data-filter='telegram']")
    expect(page.locator(".msg", has_text="sent from my phone")).to_be_visible()
    expect(page.locator(".msg", has_text="hello there")).to_be_hidden()
    page.click("[data-filter='']")

    page.select_option("[data-switcher]", label="Iris")  # its handler was inline
    page.wait_for_url("**/chat/iris/**")
    expect(page.locator("[data-status]")).to_have_attribute("data-state", "live")
    refused_injection(page, reports)


def test_the_admin_signs_in_and_shows_its_lists_and_forms_with_no_policy_violation(chat_server, browser):
    from playwright.sync_api import expect

    base, model, platform = chat_server
    context, reports = watched(browser)
    page = context.new_page()
    page.set_default_timeout(20_000)
    page.goto(base + "/admin/")
    page.fill("#id_username", "alice")
    page.fill("#id_password", PASSWORD)
    page.click("input[type=submit]")
    expect(page.locator("#site-name")).to_be_visible()
    # Lists with inline-styled cells (the beats') and a form with inlines and widgets.
    for path in ("heartbeats_app/heartbeat/", "qorven/qor/", "channels_app/channelbinding/"):
        page.goto(f"{base}/admin/{path}")
        expect(page.locator("#result_list, .paginator").first).to_be_visible()
    page.goto(base + "/admin/qorven/tenant/")
    page.locator("#result_list tbody th a").first.click()
    expect(page.locator("#content-main form")).to_be_visible()
    page.goto(base + "/admin/heartbeats_app/heartbeat/add/")
    expect(page.locator("#content-main form")).to_be_visible()
    refused_injection(page, reports)


def test_the_webchat_widget_on_a_shop_of_another_origin_chats_with_no_policy_violation(chat_server, browser):
    from playwright.sync_api import expect

    base, model, platform = chat_server
    model.add(reply("We open at *nine*."))
    with host_site(base) as site:
        context, reports = watched(browser)
        page = context.new_page()
        page.set_default_timeout(20_000)
        page.goto(site)
        page.click(".qorven-bubble")
        frame = page.frame_locator(".qorven-frame")
        expect(frame.locator("[data-input]")).to_be_focused()
        frame.locator("[data-attach]").set_input_files(
            files=[{"name": "teal.png", "mimeType": "image/png", "buffer": _png()}])
        expect(frame.locator("[data-attachment]")).to_have_count(1)
        say(frame, "When do you open?")
        expect(frame.locator(".msg--assistant", has_text="We open at nine.")).to_be_visible(timeout=SERVER_WORK)
        expect(frame.locator(".msg--user img[data-image]")).to_have_js_property("naturalWidth", 24)
        refused_injection(page, reports, frame=frame)


def test_a_webchat_bound_to_other_sites_is_not_shown_on_this_one(chat_server, browser):
    """The frame-ancestors of the binding's sites: a shop not named gets no chat in the frame."""

    base, model, platform = chat_server
    on_server(base, "from channels_app.models import ChannelBinding; b = ChannelBinding.objects.get(kind='webchat'); "
                    "b.credentials = {**b.credentials, 'origins': 'https://shop.example'}; "
                    "b.save(update_fields=['credentials'])")
    with host_site(base) as site:
        context, _reports = watched(browser)
        page = context.new_page()
        page.set_default_timeout(20_000)
        page.goto(site)
        with page.expect_console_message(lambda m: "frame-ancestors" in m.text):
            page.click(".qorven-bubble")
        assert page.frame_locator(".qorven-frame").locator("[data-input]").count() == 0
        assert f"/webchat/{KEY}/frame" in page.locator(".qorven-frame").get_attribute("src")
