"""The row of channel filters on a phone, where it is wider than the screen: the edge with
more filters beyond it fades out, only while there is more that way; a filter reached by
Tab is scrolled fully into the part that does not fade. Where the row fits (a desktop)
nothing fades."""
from __future__ import annotations

import pytest

from .browser_support import ARTIFACTS, console_errors, sign_in
from .test_browser_webchat import on_server

# Aria on the other chat platforms too (the test database binds Telegram and the webchat),
# so the page has a filter for each: eight in all.
MORE_PLATFORMS = """
from channels_app.models import ChannelBinding
from tenancy.models import Qor
aria = Qor.objects.get(slug="aria")
for kind in ("whatsapp", "slack", "discord"):
    ChannelBinding.objects.create(tenant=aria.tenant, qor=aria, kind=kind, lookup_key="filters-" + kind)
"""

# What the browser paints of the row's edges: the row's computed mask read as the linear
# gradient it is, its first and last stops' alpha being what is left of the left and right
# edges (1: not faded), and how wide each fade is (the next stop's offset in px).
# Also the row's scroll position and its box; a mask of another shape is returned as it is.
ROW = """(row) => {
  const style = getComputedStyle(row);
  const mask = style.maskImage || style.webkitMaskImage || "none";
  const box = row.getBoundingClientRect();
  let left = {alpha: 1, width: 0}, right = {alpha: 1, width: 0};
  if (mask !== "none") {
    const m = mask.match(/^linear-gradient\\((to (?:left|right)), (.*)\\)$/);
    if (!m) return {mask: mask};
    const stops = [...m[2].matchAll(/rgba?\\(([^)]*)\\)(?: ([^,]+))?/g)].map(s => {
      const c = s[1].split(",").map(Number);
      return {alpha: c.length === 4 ? c[3] : 1, at: s[2] || ""};
    });
    const px = (at) => at.endsWith("px") && !at.startsWith("calc") ? parseFloat(at)
      : parseFloat((at.match(/- ([\\d.]+)px/) || [0, 0])[1]);
    let first = {alpha: stops[0].alpha, width: px(stops[1].at)};
    let last = {alpha: stops[stops.length - 1].alpha, width: px(stops[stops.length - 2].at)};
    if (m[1] === "to left") [first, last] = [last, first];
    [left, right] = [first, last];
  }
  return {
    mask: mask, left: left, right: right,
    scrollLeft: row.scrollLeft, end: row.scrollWidth - row.clientWidth,
    box: {left: box.left, right: box.right},
  };
}"""


def faded(page) -> tuple[bool, bool]:
    """Whether the row's left and right edges fade out."""
    shape = page.locator(".filters").evaluate(ROW)
    return shape["left"]["alpha"] < 0.5, shape["right"]["alpha"] < 0.5


def settle(page, left: bool, right: bool) -> None:
    """Waits until the row's edges fade as given (a scroll is reported after a frame)."""
    page.wait_for_function(f"""() => {{ const r = ({ROW})(document.querySelector(".filters"));
      return (r.left.alpha < 0.5) === {str(left).lower()} && (r.right.alpha < 0.5) === {str(right).lower()}; }}""")


# Clear of the fades: the filter's box within the row's, less the width of a fade on
# either edge that fades.
CLEAR = """([row, chip]) => {
  const r = (%s)(row), c = chip.getBoundingClientRect();
  const from = r.box.left + (r.left.alpha < 0.5 ? r.left.width : 0);
  const to = r.box.right - (r.right.alpha < 0.5 ? r.right.width : 0);
  return from - 0.5 <= c.left && c.right <= to + 0.5;
}""" % ROW


def clear_of_the_fades(page, chip) -> bool:
    return page.evaluate(CLEAR, [page.locator(".filters").element_handle(), chip.element_handle()])


@pytest.mark.parametrize(("scheme", "motion"), [("light", "no-preference"), ("dark", "reduce")])
def test_on_a_phone_the_filters_beyond_the_screen_are_shown_to_be_there(chat_server, scheme, motion, browser):
    from playwright.sync_api import expect

    base, model, platform = chat_server
    on_server(base, MORE_PLATFORMS)
    phone = browser.new_context(viewport={"width": 375, "height": 667}, has_touch=True, is_mobile=True,
                                color_scheme=scheme, reduced_motion=motion)
    errors = console_errors(phone)
    page = sign_in(browser, base, context=phone)
    row = page.locator(".filters")
    expect(row.locator(".chip")).to_have_count(8)
    shape = row.evaluate(ROW)
    assert shape["end"] > 0, shape  # wider than the screen: what this is about
    assert shape["scrollLeft"] == 0
    # At the start: the right edge fades (more that way), the left does not.
    assert faded(page) == (False, True), shape
    page.screenshot(path=str(ARTIFACTS / f"chat-phone-filters-start-{scheme}.png"))

    row.evaluate("(r) => { r.scrollLeft = r.scrollWidth; }")
    settle(page, left=True, right=False)  # at the end: only the left fades
    page.screenshot(path=str(ARTIFACTS / f"chat-phone-filters-end-{scheme}.png"))
    row.evaluate("(r) => { r.scrollLeft = Math.round((r.scrollWidth - r.clientWidth) / 2); }")
    settle(page, left=True, right=True)  # between: both
    row.evaluate("(r) => { r.scrollLeft = 0; }")
    settle(page, left=False, right=True)

    # By keyboard, from "All" to the last filter: each one focused comes wholly into the
    # row's box, clear of a fade on either edge: in two frames where reduced motion is
    # asked for (no smooth scrolling), else once the row has scrolled to it.
    chips = row.locator(".chip")
    chips.first.focus()
    for n in range(1, 8):
        page.keyboard.press("Tab")
        expect(chips.nth(n)).to_be_focused()
        if motion == "reduce":
            # The row is where it goes at once; its fades follow on the scroll event, next frame.
            row.evaluate("() => new Promise(done => requestAnimationFrame(() => requestAnimationFrame(done)))")
            assert clear_of_the_fades(page, chips.nth(n)), (n, chips.nth(n).bounding_box(), row.evaluate(ROW))
        else:
            page.wait_for_function(CLEAR, arg=[row.element_handle(), chips.nth(n).element_handle()])
    settle(page, left=True, right=False)  # the last one: the row is at its end
    page.screenshot(path=str(ARTIFACTS / f"chat-phone-filters-focus-{scheme}.png"))
    assert errors == []


def test_on_a_desktop_where_the_filters_fit_nothing_fades(chat_server, browser):
    from playwright.sync_api import expect

    base, model, platform = chat_server
    on_server(base, MORE_PLATFORMS)
    page = sign_in(browser, base)  # 1280 px wide
    row = page.locator(".filters")
    expect(row.locator(".chip")).to_have_count(8)
    shape = row.evaluate(ROW)
    assert shape["end"] == 0, shape
    assert shape["mask"] == "none", shape
    row.locator(".chip").last.focus()
    assert row.evaluate(ROW)["mask"] == "none"
