"""The chat page as a keyboard and screen-reader user meets it, in a real browser: where the
focus goes after Stop and in the earlier conversations, text contrast of the notices and
the failure marks (computed from the colours the browser renders), and animations that
stop where the system asks for reduced motion."""
from __future__ import annotations

import pytest

from ..fakes.model_server import error, reply
from .browser_support import SERVER_WORK, send, sign_in

FOCUSED = "() => { const a = document.activeElement; return a === document.body ? 'body' : a.outerHTML.slice(0, 80); }"

# The contrast of an element's text over the backgrounds behind it, with the opacity of
# the element and its ancestors applied (WCAG 2 relative luminance).
CONTRAST = """(node) => {
  const probe = document.createElement("canvas").getContext("2d");
  function rgba(css) {
    probe.clearRect(0, 0, 1, 1); probe.fillStyle = "#000"; probe.fillStyle = css; probe.fillRect(0, 0, 1, 1);
    const d = probe.getImageData(0, 0, 1, 1).data; return [d[0], d[1], d[2], d[3] / 255];
  }
  function over(top, under) { return [0, 1, 2].map(i => top[i] * top[3] + under[i] * (1 - top[3])).concat([1]); }
  const layers = [];
  let alpha = 1;
  for (let n = node; n; n = n.parentElement) {
    alpha *= Number(getComputedStyle(n).opacity);
    const c = rgba(getComputedStyle(n).backgroundColor);
    if (c[3] > 0) layers.push(c);
    if (c[3] === 1) break;
  }
  let back = [255, 255, 255, 1];
  for (let i = layers.length - 1; i >= 0; i--) back = over(layers[i], back);
  const text = rgba(getComputedStyle(node).color);
  const fore = over([text[0], text[1], text[2], text[3] * alpha], back);
  const lum = c => [0, 1, 2].reduce((s, i) => {
    const v = c[i] / 255; return s + [0.2126, 0.7152, 0.0722][i] * (v <= 0.03928 ? v / 12.92 : Math.pow((v + 0.055) / 1.055, 2.4));
  }, 0);
  const a = lum(fore), b = lum(back);
  return Math.round((Math.max(a, b) + 0.05) / (Math.min(a, b) + 0.05) * 100) / 100;
}"""


def test_stop_pressed_from_the_keyboard_leaves_the_focus_in_the_composer(chat_server, browser):
    from playwright.sync_api import expect

    base, model, platform = chat_server
    model.add(reply(" ".join(f"word{n}" for n in range(200)), chunk_delay=0.1))
    page = sign_in(browser, base)
    send(page, "say many words")
    expect(page.locator(".msg--streaming .msg__body")).to_contain_text("word3", timeout=SERVER_WORK)
    page.locator("[data-stop]").focus()
    page.keyboard.press("Enter")

    expect(page.locator(".msg--assistant .msg__mark")).to_have_text("Stopped", timeout=SERVER_WORK)
    expect(page.locator("[data-stop]")).to_be_hidden()
    expect(page.locator("[data-input]")).to_be_focused()


def test_choosing_an_earlier_conversation_by_keyboard_moves_the_focus_to_it_and_back(chat_server, browser):
    from playwright.sync_api import expect

    base, model, platform = chat_server
    model.add(reply("First answer."), reply("Second answer."))
    page = sign_in(browser, base)
    send(page, "first question")
    expect(page.locator(".msg--assistant", has_text="First answer.")).to_be_visible(timeout=SERVER_WORK)
    send(page, "/clear")
    expect(page.locator(".divider--session")).to_be_visible(timeout=SERVER_WORK)

    page.locator("[data-archive-open]").focus()
    page.keyboard.press("Enter")
    item = page.locator(".archive__item").first
    expect(item).to_be_visible()
    item.focus()
    page.keyboard.press("Enter")
    expect(page.locator("[data-archive-body] .msg", has_text="first question")).to_be_visible()
    assert page.evaluate(FOCUSED) != "body"
    expect(page.locator("[data-archive-body]")).to_be_focused()

    page.locator("[data-archive-back]").focus()
    page.keyboard.press("Enter")
    expect(page.locator(".archive__item").first).to_be_focused()

# The same for a field's placeholder (its ::placeholder colour over the field's background).
PLACEHOLDER_CONTRAST = CONTRAST.replace(
    "const text = rgba(getComputedStyle(node).color);",
    "const text = rgba(getComputedStyle(node, '::placeholder').color);")


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_notices_their_times_and_failure_marks_are_readable(chat_server, scheme, browser):
    from playwright.sync_api import expect

    base, model, platform = chat_server
    model.add(error(401, "bad key"))
    context = browser.new_context(viewport={"width": 1280, "height": 820}, color_scheme=scheme)
    page = sign_in(browser, base, context=context)
    send(page, "are you there?")
    # The server's notice: the page's own (below) is a .msg--notice too, and while it
    # showed, `.last` found it, with no .notice__text, until it went 8 s later.
    notice = page.locator(".msg--notice:not(.msg--error)").last
    expect(notice).to_be_visible(timeout=SERVER_WORK)
    expect(page.locator(".msg__mark--answer")).to_be_visible()
    page.evaluate("() => document.querySelector('.msg__mark--answer').scrollIntoView()")
    # An error of the page's own (a file it cannot take), shown as a notice too.
    page.locator("[data-attach]").set_input_files(
        files=[{"name": "tool.exe", "mimeType": "application/x-msdownload", "buffer": b"MZ"}])
    flash = page.locator(".msg--error[role=alert]")
    ratios = {
        "error": flash.evaluate(CONTRAST),  # before it goes, 8 s on
        "notice text": notice.locator(".notice__text").evaluate(CONTRAST),
        "notice time": notice.locator(".msg__time").evaluate(CONTRAST),
        "not answered": page.locator(".msg__mark--answer").evaluate(CONTRAST),
        "a message's name and time": page.locator(".msg--user .msg__meta").first.evaluate(CONTRAST),
        # The grey of hints, on the composer's background (4.44:1 in the light scheme).
        "the composer's placeholder": page.locator("[data-input]").evaluate(PLACEHOLDER_CONTRAST),
    }
    assert {k: v for k, v in ratios.items() if v < 4.5} == {}


def test_animations_stop_where_reduced_motion_is_asked_for(chat_server, browser):
    from playwright.sync_api import expect

    base, model, platform = chat_server
    model.add(reply(" ".join(f"word{n}" for n in range(100)), chunk_delay=0.1))
    context = browser.new_context(viewport={"width": 1280, "height": 820}, reduced_motion="reduce")
    page = sign_in(browser, base, context=context)
    send(page, "say many words")
    body = page.locator(".msg--streaming .msg__body")
    expect(body).to_contain_text("word3", timeout=SERVER_WORK)
    cursor = body.evaluate("(n) => getComputedStyle(n, '::after').animationName")
    status = page.locator("[data-status]")
    status.evaluate("(n) => n.setAttribute('data-state', 'connecting')")  # as while it reconnects
    dot = page.locator(".status__dot").evaluate("(n) => getComputedStyle(n).animationName")
    assert (cursor, dot) == ("none", "none")

