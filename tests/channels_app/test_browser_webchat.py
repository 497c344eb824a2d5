"""The webchat embed in a real browser, on a host site of another origin: pasted as
printed, opened, and used where the browser blocks storage in third-party frames."""
from __future__ import annotations

import json
import threading
import time
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from ..fakes.model_server import reply
from .browser_support import ARTIFACTS, SERVER_WORK

KEY = "wc_browser"  # bound by browser_support's set-up

# As browsers that partition or block third-party storage do: any use of it throws.
STORAGE_BLOCKED_IN_FRAMES = """
if (window.top !== window) {
  Object.defineProperty(window, "localStorage", {
    get() { throw new DOMException("The operation is insecure.", "SecurityError"); },
  });
}
"""


# The frame's WebSockets, kept where a test can close them (as a dropped line would).
SOCKETS_KEPT = """
if (window.top !== window) {
  const Native = window.WebSocket;
  window.__sockets = [];
  window.WebSocket = function (url, protocols) {
    const socket = new Native(url, protocols);
    window.__sockets.push(socket);
    return socket;
  };
  window.WebSocket.prototype = Native.prototype;
}
"""


@contextmanager
def host_site(base: str, tag_attributes: str = "", *, head: str = "", tokens=None):
    """A shop's own site on another origin (and site: localhost, not 127.0.0.1) embedding
    the widget: a real HTTP server on loopback, as the Qorven server is (Chromium refuses
    a public page's requests to loopback). `head` goes before the tag; with `tokens` (a
    list of answers: a token, or an int for an error status) `GET /token` gives the next
    one, as the shop's server signs a fresh token for its signed-in visitor."""
    page = (f'<!doctype html><title>Shop</title>{head}<h1>A shop</h1>'
            f'<script src="{base}/webchat/{KEY}.js" {tag_attributes} async></script>').encode()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 (http.server's name)
            status, body, kind = 200, page, "text/html; charset=utf-8"
            if self.path == "/token":
                answer = tokens.pop(0) if tokens else 404
                status, body, kind = ((answer, b"no", "text/plain") if isinstance(answer, int)
                                      else (200, answer.encode(), "text/plain"))
            self.send_response(status)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://localhost:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()


def on_server(base: str, code: str) -> str:
    """Run `code` in `qorven shell` against the database of the server at `base`; its last
    line of output."""
    import subprocess
    import sys
    from pathlib import Path

    from .browser_support import ROOT, SERVER_ENV

    qorven = str(Path(sys.executable).with_name("qorven"))
    done = subprocess.run([qorven, "shell", "-c", code], cwd=ROOT, env=SERVER_ENV[base], check=True,
                          capture_output=True, text=True, timeout=60)
    return (done.stdout.strip().splitlines() or [""])[-1]


def say(frame, text: str) -> None:
    """The visitor types `text` into the widget and sends it."""
    frame.locator("[data-input]").fill(text)
    frame.locator("[data-input]").press("Enter")


def open_widget(browser, site: str, *, init_script: str = "", sockets: list | None = None, routes=()):
    """`routes`: (URL glob, handler) pairs routed on the browser context before the shop's
    page opens. The widget's frame is of another site, in a process of its own: a route
    added once it runs reached it late, and under load its first POST went past it."""
    context = browser.new_context(viewport={"width": 1280, "height": 820})
    if init_script:
        context.add_init_script(init_script)
    for pattern, handler in routes:
        context.route(pattern, handler)
    page = context.new_page()
    page.set_default_timeout(20_000)
    if sockets is not None:
        page.on("websocket", lambda socket: sockets.append(socket.url))
    errors: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(site)
    page.click(".qorven-bubble")
    frame = page.frame_locator(".qorven-frame")
    return page, frame, errors


def test_a_visitor_chats_when_the_browser_blocks_storage_in_the_frame(chat_server, browser):
    from playwright.sync_api import expect

    base, model, platform = chat_server
    model.add(reply("We open at nine."))
    ARTIFACTS.mkdir(exist_ok=True)
    with host_site(base) as site:
        page, frame, errors = open_widget(browser, site, init_script=STORAGE_BLOCKED_IN_FRAMES)
        # The frame's script has run (it focuses the box): an Enter before it would be a newline.
        expect(frame.locator("[data-input]")).to_be_focused()
        say(frame, "When do you open?")

        expect(frame.locator(".msg--user .msg__body")).to_have_text("When do you open?", timeout=SERVER_WORK)
        expect(frame.locator(".msg--assistant:not(.msg--streaming)")).to_contain_text("We open at nine.",
                                                                                      timeout=SERVER_WORK)
        expect(frame.locator(".msg--streaming")).to_have_count(0)  # no thinking bubble left behind
        expect(frame.locator("[data-status]")).to_have_attribute("data-state", "live")
        page.screenshot(path=str(ARTIFACTS / "webchat-no-storage.png"))
        assert errors == []


def test_the_printed_snippet_pasted_with_a_placeholder_token_still_chats_and_opening_logs_no_error(chat_server, browser):
    from playwright.sync_api import expect

    base, model, platform = chat_server
    model.add(reply("Hello!"))
    with host_site(base, tag_attributes='data-token="…"') as site:
        page, frame, errors = open_widget(browser, site)
        expect(frame.locator("[data-input]")).to_be_focused()  # the open message reached the loaded frame
        say(frame, "hi")
        expect(frame.locator(".msg--assistant:not(.msg--streaming)")).to_contain_text("Hello!",
                                                                                      timeout=SERVER_WORK)
        assert not [e for e in errors if "ISO-8859-1" in e or "postMessage" in e], errors
        assert not [e for e in errors if "403" in e], errors


def test_a_visitor_attaches_an_image_in_the_widget_and_sees_it_in_the_chat(chat_server, browser):
    import io

    from PIL import Image as PILImage
    from playwright.sync_api import expect

    base, model, platform = chat_server
    model.add(reply("Thanks for the photo."))
    out = io.BytesIO()
    PILImage.new("RGB", (24, 16), "purple").save(out, format="JPEG")
    with host_site(base) as site:
        page, frame, errors = open_widget(browser, site)
        # The file goes in once the frame's script listens for it: it has run once it
        # focuses the box (waiting for the frame's load could see its first, blank document).
        expect(frame.locator("[data-input]")).to_be_focused()
        frame.locator("[data-attach]").set_input_files(
            files=[{"name": "receipt.jpg", "mimeType": "image/jpeg", "buffer": out.getvalue()}])
        expect(frame.locator("[data-attachment]")).to_have_count(1)
        say(frame, "Here is my receipt")
        expect(frame.locator(".msg--assistant", has_text="Thanks for the photo.")).to_be_visible(
            timeout=SERVER_WORK)
        image = frame.locator(".msg--user img[data-image]")
        expect(image).to_have_count(1)
        expect(image).to_have_js_property("naturalWidth", 24)  # read with the visitor's token
        assert not [e for e in errors if "404" in e or "403" in e], errors


def test_a_visitor_whose_signed_token_has_expired_is_told_so_and_the_widget_stops_trying(chat_server, browser):
    """The host page's token will not get better by retrying: one refused socket, then a
    note that says why and what to do."""
    import time

    from playwright.sync_api import expect

    from channels_app.webchat import webchat_token_sign

    base, model, platform = chat_server
    expired = webchat_token_sign(secret="wc-secret", user_id="alice", expires=int(time.time()) - 60)
    sockets: list[str] = []
    with host_site(base, tag_attributes=f'data-token="{expired}"') as site:
        page, frame, errors = open_widget(browser, site, sockets=sockets)
        note = frame.locator("[data-refused]")
        expect(note).to_contain_text("the visitor token has expired", timeout=SERVER_WORK)
        expect(note).to_contain_text("Reload the page")
        expect(frame.locator("[data-status]")).to_have_attribute("data-state", "refused")
        expect(frame.locator("[data-input]")).to_be_disabled()
        page.wait_for_timeout(5000)  # retries would have come after ~1, ~2 and ~4 s
        assert len(sockets) == 1, sockets


def test_an_anonymous_visitor_the_server_forgot_starts_a_new_chat_on_their_next_message(chat_server, browser):
    """The host cleared old anonymous visitors while a page stayed open: its socket is
    refused once, the widget drops the token and waits, and the next message starts anew."""

    from playwright.sync_api import expect


    base, model, platform = chat_server
    model.add(reply("Hello there."))
    model.add(reply("Welcome back."))
    sockets: list[str] = []
    with host_site(base) as site:
        page, frame, errors = open_widget(browser, site, sockets=sockets, init_script=SOCKETS_KEPT)
        expect(frame.locator("[data-input]")).to_be_focused()
        say(frame, "Hello")
        expect(frame.locator(".msg--assistant:not(.msg--streaming)")).to_contain_text(
            "Hello there.", timeout=SERVER_WORK)
        expect(frame.locator("[data-status]")).to_have_attribute("data-state", "live")
        on_server(base, "from channels_app.models import Identity; "
                  "Identity.objects.filter(channel='webchat').delete()")
        opened = len(sockets)
        frame.locator("body").evaluate("() => window.__sockets.forEach(s => s.close())")  # the line drops
        expect(frame.locator("[data-status]")).to_have_attribute("data-state", "idle", timeout=SERVER_WORK)
        page.wait_for_timeout(4000)
        assert len(sockets) == opened + 1, sockets  # refused once, then none until someone writes
        say(frame, "Hello again")
        expect(frame.locator(".msg--assistant:not(.msg--streaming)", has_text="Welcome back.")).to_be_visible(
            timeout=SERVER_WORK)
        expect(frame.locator("[data-status]")).to_have_attribute("data-state", "live")
        assert frame.locator("[data-refused]").count() == 0


def signed(seconds: float, user: str = "alice") -> str:
    """A visitor token for `user` signed as the shop's server does, expiring in `seconds`."""
    import time

    from channels_app.webchat import webchat_token_sign

    return webchat_token_sign(secret="wc-secret", user_id=user, expires=int(time.time() + seconds))


def past(moment: float) -> float:
    """Milliseconds from now until a second after `moment` (time.time()): a token signed to
    expire then has expired (it was signed for the whole second before)."""
    return max(0.0, moment + 1 - time.time()) * 1000


def test_a_signed_visitor_keeps_chatting_past_the_first_token_with_fresh_ones_from_the_shop(chat_server, browser):
    """The page stays open longer than its token lasts: the widget asks the shop's
    token URL for a fresh one before it runs out, and a dropped line reconnects with it."""
    from playwright.sync_api import expect

    base, model, platform = chat_server
    model.add(reply("Hello Alice."))
    model.add(reply("Still here."))
    tokens = [signed(3600)]
    sockets: list[str] = []
    first_expires = time.time() + 4
    with host_site(base, f'data-token="{signed(4)}" data-token-url="/token"', tokens=tokens) as site:
        page, frame, errors = open_widget(browser, site, sockets=sockets, init_script=SOCKETS_KEPT)
        expect(frame.locator("[data-input]")).to_be_focused()
        say(frame, "Hi")
        expect(frame.locator(".msg--assistant:not(.msg--streaming)")).to_contain_text(
            "Hello Alice.", timeout=SERVER_WORK)
        page.wait_for_timeout(past(first_expires))  # the first token has expired by now
        assert tokens == []  # asked for (once) before it ran out
        frame.locator("body").evaluate("() => window.__sockets.forEach(s => s.close())")  # the line drops
        # The status reads "live" until the page notices the close: wait for its new socket first.
        if len(sockets) < 2:
            page.wait_for_event("websocket", timeout=SERVER_WORK)
        expect(frame.locator("[data-status]")).to_have_attribute("data-state", "live", timeout=SERVER_WORK)
        assert len(sockets) == 2, sockets  # reconnected at once, with the fresh token
        say(frame, "Are you there?")
        expect(frame.locator(".msg--assistant:not(.msg--streaming)", has_text="Still here.")).to_be_visible(
            timeout=SERVER_WORK)
        expect(frame.locator(".msg--user")).to_have_count(2)
        assert frame.locator("[data-refused]").count() == 0
        assert errors == []


def test_a_message_refused_for_an_expired_token_goes_again_once_the_shop_signs_a_fresh_one(chat_server, browser):
    """The shop could not sign a token when first asked (its server was busy); the
    visitor's next message is refused for the expired token, the widget asks again, gets
    one and sends the message with it: stored and answered once."""
    from playwright.sync_api import expect

    base, model, platform = chat_server
    model.add(reply("Hello Alice."))
    model.add(reply("Got it."))
    tokens = [503, signed(3600)]
    first_expires = time.time() + 6
    with host_site(base, f'data-token="{signed(6)}" data-token-url="/token"', tokens=tokens) as site:
        page, frame, errors = open_widget(browser, site)
        expect(frame.locator("[data-input]")).to_be_focused()
        say(frame, "Hi")
        expect(frame.locator(".msg--assistant:not(.msg--streaming)")).to_contain_text(
            "Hello Alice.", timeout=SERVER_WORK)
        page.wait_for_timeout(past(first_expires))  # expired; the first ask (at half its life) got an error
        assert len(tokens) == 1  # the error was the answer to the first ask
        say(frame, "Order 1234, please")
        expect(frame.locator(".msg--assistant:not(.msg--streaming)", has_text="Got it.")).to_be_visible(
            timeout=SERVER_WORK)
        expect(frame.locator(".msg--user", has_text="Order 1234, please")).to_have_count(1)
        assert tokens == []
        expect(frame.locator("[data-input]")).to_have_value("")
        assert frame.locator("[data-refused]").count() == 0
        asked = [r for r in model.requests if "Order 1234" in json.dumps(r.get("messages", []))]
        assert len(asked) == 1  # answered once


def test_an_expired_token_is_renewed_before_the_widget_connects(chat_server, browser):
    """The shop's page was cached with a token that has expired since: the widget gets a
    fresh one first, and no socket is refused."""
    from playwright.sync_api import expect

    base, model, platform = chat_server
    model.add(reply("Welcome back."))
    sockets: list[str] = []
    head = "<script>window.QorvenWebchat = {refreshToken: () => fetch('/token').then(r => r.text())};</script>"
    with host_site(base, f'data-token="{signed(-60)}"', head=head, tokens=[signed(3600)]) as site:
        page, frame, errors = open_widget(browser, site, sockets=sockets)
        expect(frame.locator("[data-status]")).to_have_attribute("data-state", "live", timeout=SERVER_WORK)
        say(frame, "Hello")
        expect(frame.locator(".msg--assistant:not(.msg--streaming)")).to_contain_text(
            "Welcome back.", timeout=SERVER_WORK)
        assert len(sockets) == 1, sockets
        assert frame.locator("[data-refused]").count() == 0


def test_when_the_shop_signs_no_fresh_token_the_widget_says_to_reload_and_stops(chat_server, browser):
    from playwright.sync_api import expect

    base, model, platform = chat_server
    sockets: list[str] = []
    with host_site(base, f'data-token="{signed(-60)}" data-token-url="/token"', tokens=[500, 500]) as site:
        page, frame, errors = open_widget(browser, site, sockets=sockets)
        note = frame.locator("[data-refused]")
        expect(note).to_contain_text("the visitor token has expired", timeout=SERVER_WORK)
        expect(note).to_contain_text("Reload the page")
        expect(frame.locator("[data-input]")).to_be_disabled()
        page.wait_for_timeout(4000)
        assert len(sockets) == 1, sockets


def test_a_fresh_token_for_another_visitor_reloads_the_widget_on_their_own_chat(chat_server, browser):
    """Someone else signed in on the shop meanwhile: the fresh token is theirs, and the
    widget starts over on their chat instead of showing the first visitor's."""

    from playwright.sync_api import expect


    base, model, platform = chat_server
    on_server(base, "from django.contrib.auth import get_user_model; "
              "from tenancy.models import Membership, Tenant; "
              "bob = get_user_model().objects.create_user('bob'); "
              "Membership.objects.create(tenant=Tenant.objects.get(slug='acme'), user=bob, role='member')")
    model.add(reply("Hello Alice."))
    model.add(reply("Hello Bob."))
    with host_site(base, f'data-token="{signed(6)}" data-token-url="/token"',
                   tokens=[signed(3600, user="bob")]) as site:
        page, frame, errors = open_widget(browser, site)
        expect(frame.locator("[data-input]")).to_be_focused()
        say(frame, "I am Alice")
        expect(frame.locator(".msg--assistant:not(.msg--streaming)")).to_contain_text(
            "Hello Alice.", timeout=SERVER_WORK)
        expect(frame.locator(".msg--user")).to_have_count(0, timeout=SERVER_WORK)  # reloaded for bob
        expect(frame.locator("[data-status]")).to_have_attribute("data-state", "live", timeout=SERVER_WORK)
        say(frame, "I am Bob")
        expect(frame.locator(".msg--assistant:not(.msg--streaming)")).to_contain_text(
            "Hello Bob.", timeout=SERVER_WORK)
        expect(frame.locator(".msg--user .msg__body")).to_have_text(["I am Bob"])
    shown = on_server(base, "from sessions_app.models import Message; "
                      "print(sorted(Message.objects.filter(role='user').values_list('session__user__username', "
                      "'content')))")
    assert shown == "[('alice', 'I am Alice'), ('bob', 'I am Bob')]"


def test_the_widget_says_whether_it_is_open_and_escape_closes_it_back_to_its_button(chat_server, browser):
    """For keyboard and screen-reader users: the button says whether the chat is open, and
    Escape (in the chat or on the page) closes it and puts the focus back on the button."""
    from playwright.sync_api import expect

    base, model, platform = chat_server
    with host_site(base) as site:
        page, frame, errors = open_widget(browser, site)
        bubble = page.locator(".qorven-bubble")
        expect(bubble).to_have_attribute("aria-expanded", "true")
        assert bubble.get_attribute("aria-controls") == page.locator(".qorven-frame").get_attribute("id")
        expect(frame.locator("[data-input]")).to_be_focused()
        frame.locator("[data-input]").press("Escape")
        expect(bubble).to_have_attribute("aria-expanded", "false")
        expect(page.locator(".qorven-frame")).to_be_hidden()
        expect(bubble).to_be_focused()
        bubble.press("Enter")
        expect(bubble).to_have_attribute("aria-expanded", "true")
        page.keyboard.press("Escape")
        expect(bubble).to_have_attribute("aria-expanded", "false")
        assert errors == []


def test_a_new_visitors_first_message_met_by_a_503_after_it_was_stored_is_kept_once(chat_server, browser):
    """The first send of a new anonymous visitor is stored, but a proxy answers 503 in its
    place; the widget sends it again and the visitor sees it and its answer, stored once,
    with one visitor. Before, the send again carried no visitor token: the server made a
    second anonymous visitor, and the first kept an orphaned copy of the message."""
    from playwright.sync_api import expect

    base, model, platform = chat_server
    model.add(reply("We open at nine."))
    posts: list[dict] = []

    def proxy(route):
        if route.request.method != "POST":
            return route.fallback()
        posts.append(route.request.headers)
        if len(posts) == 1:
            route.fetch()  # stored on the server; its answer lost behind the proxy
            route.fulfill(status=503, headers={"Retry-After": "1"}, content_type="text/html", body="<html>503</html>")
        else:
            route.continue_()

    with host_site(base) as site:
        page, frame, errors = open_widget(browser, site, routes=[(f"**/webchat/{KEY}/messages", proxy)])
        expect(frame.locator("[data-input]")).to_be_focused()
        say(frame, "When do you open?")
        expect(frame.locator(".msg--assistant:not(.msg--streaming)")).to_contain_text("We open at nine.",
                                                                                      timeout=SERVER_WORK)
        expect(frame.locator(".msg--user .msg__body")).to_have_text(["When do you open?"])
        assert len(posts) == 2 and "x-qorven-visitor" not in posts[1]
        counted = on_server(base, "from channels_app.models import Identity; from sessions_app.models import Message; "
                                  "print(Identity.objects.filter(channel='webchat').count(), "
                                  "Message.objects.filter(role='user', content='When do you open?').count())")
        assert counted == "1 1"
