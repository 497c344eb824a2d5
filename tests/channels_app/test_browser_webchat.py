"""The webchat embed in a real browser, on a host site of another origin: pasted as
printed, opened, and used where the browser blocks storage in third-party frames."""
from __future__ import annotations

import threading
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from ..fakes.model_server import reply
from .browser_support import ARTIFACTS, CHROMIUM, CHROMIUM_ARGS, SERVER_WORK

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
def host_site(base: str, tag_attributes: str = ""):
    """A shop's own site on another origin (and site: localhost, not 127.0.0.1) embedding
    the widget: a real HTTP server on loopback, as the Qorven server is (Chromium refuses
    a public page's requests to loopback)."""
    page = (f'<!doctype html><title>Shop</title><h1>A shop</h1>'
            f'<script src="{base}/webchat/{KEY}.js" {tag_attributes} async></script>').encode()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 (http.server's name)
            self.send_response(200)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Length", str(len(page)))
            self.end_headers()
            self.wfile.write(page)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://localhost:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()


def open_widget(browser, site: str, *, init_script: str = "", sockets: list | None = None):
    context = browser.new_context(viewport={"width": 1280, "height": 820})
    if init_script:
        context.add_init_script(init_script)
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


def test_a_visitor_chats_when_the_browser_blocks_storage_in_the_frame(chat_server):
    from playwright.sync_api import expect, sync_playwright

    base, model, platform = chat_server
    model.add(reply("We open at nine."))
    ARTIFACTS.mkdir(exist_ok=True)
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            with host_site(base) as site:
                page, frame, errors = open_widget(browser, site, init_script=STORAGE_BLOCKED_IN_FRAMES)
            # The frame's script has run (it focuses the box): an Enter before it would be a newline.
            expect(frame.locator("[data-input]")).to_be_focused()
            frame.locator("[data-input]").fill("When do you open?")
            frame.locator("[data-input]").press("Enter")

            expect(frame.locator(".msg--user .msg__body")).to_have_text("When do you open?", timeout=SERVER_WORK)
            expect(frame.locator(".msg--assistant:not(.msg--streaming)")).to_contain_text("We open at nine.",
                                                                                          timeout=SERVER_WORK)
            expect(frame.locator(".msg--streaming")).to_have_count(0)  # no thinking bubble left behind
            expect(frame.locator("[data-status]")).to_have_attribute("data-state", "live")
            page.screenshot(path=str(ARTIFACTS / "webchat-no-storage.png"))
            assert errors == []
        finally:
            browser.close()


def test_the_printed_snippet_pasted_with_a_placeholder_token_still_chats_and_opening_logs_no_error(chat_server):
    from playwright.sync_api import expect, sync_playwright

    base, model, platform = chat_server
    model.add(reply("Hello!"))
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            with host_site(base, tag_attributes='data-token="…"') as site:
                page, frame, errors = open_widget(browser, site)
            expect(frame.locator("[data-input]")).to_be_focused()  # the open message reached the loaded frame
            frame.locator("[data-input]").fill("hi")
            frame.locator("[data-input]").press("Enter")
            expect(frame.locator(".msg--assistant:not(.msg--streaming)")).to_contain_text("Hello!",
                                                                                          timeout=SERVER_WORK)
            assert not [e for e in errors if "ISO-8859-1" in e or "postMessage" in e], errors
            assert not [e for e in errors if "403" in e], errors
        finally:
            browser.close()


def test_a_visitor_attaches_an_image_in_the_widget_and_sees_it_in_the_chat(chat_server):
    import io

    from PIL import Image as PILImage
    from playwright.sync_api import expect, sync_playwright

    base, model, platform = chat_server
    model.add(reply("Thanks for the photo."))
    out = io.BytesIO()
    PILImage.new("RGB", (24, 16), "purple").save(out, format="JPEG")
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            with host_site(base) as site:
                page, frame, errors = open_widget(browser, site)
                # The file goes in once the frame's script listens for it: it has run once it
                # focuses the box (waiting for the frame's load could see its first, blank document).
                expect(frame.locator("[data-input]")).to_be_focused()
                frame.locator("[data-attach]").set_input_files(
                    files=[{"name": "receipt.jpg", "mimeType": "image/jpeg", "buffer": out.getvalue()}])
                expect(frame.locator("[data-attachment]")).to_have_count(1)
                frame.locator("[data-input]").fill("Here is my receipt")
                frame.locator("[data-input]").press("Enter")
                expect(frame.locator(".msg--assistant", has_text="Thanks for the photo.")).to_be_visible(
                    timeout=SERVER_WORK)
                image = frame.locator(".msg--user img[data-image]")
                expect(image).to_have_count(1)
                expect(image).to_have_js_property("naturalWidth", 24)  # read with the visitor's token
                assert not [e for e in errors if "404" in e or "403" in e], errors
        finally:
            browser.close()


def test_a_visitor_whose_signed_token_has_expired_is_told_so_and_the_widget_stops_trying(chat_server):
    """The host page's token will not get better by retrying: one refused socket, then a
    note that says why and what to do."""
    import time

    from playwright.sync_api import expect, sync_playwright

    from channels_app.webchat import webchat_token_sign

    base, model, platform = chat_server
    expired = webchat_token_sign(secret="wc-secret", user_id="alice", expires=int(time.time()) - 60)
    sockets: list[str] = []
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            with host_site(base, tag_attributes=f'data-token="{expired}"') as site:
                page, frame, errors = open_widget(browser, site, sockets=sockets)
                note = frame.locator("[data-refused]")
                expect(note).to_contain_text("the visitor token has expired", timeout=SERVER_WORK)
                expect(note).to_contain_text("Reload the page")
                expect(frame.locator("[data-status]")).to_have_attribute("data-state", "refused")
                expect(frame.locator("[data-input]")).to_be_disabled()
                page.wait_for_timeout(5000)  # retries would have come after ~1, ~2 and ~4 s
                assert len(sockets) == 1, sockets
        finally:
            browser.close()


def test_an_anonymous_visitor_the_server_forgot_starts_a_new_chat_on_their_next_message(chat_server):
    """The host cleared old anonymous visitors while a page stayed open: its socket is
    refused once, the widget drops the token and waits, and the next message starts anew."""
    import subprocess
    import sys
    from pathlib import Path

    from playwright.sync_api import expect, sync_playwright

    from .browser_support import ROOT, SERVER_ENV

    base, model, platform = chat_server
    model.add(reply("Hello there."))
    model.add(reply("Welcome back."))
    sockets: list[str] = []
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            with host_site(base) as site:
                page, frame, errors = open_widget(browser, site, sockets=sockets, init_script=SOCKETS_KEPT)
                expect(frame.locator("[data-input]")).to_be_focused()
                frame.locator("[data-input]").fill("Hello")
                frame.locator("[data-input]").press("Enter")
                expect(frame.locator(".msg--assistant:not(.msg--streaming)")).to_contain_text(
                    "Hello there.", timeout=SERVER_WORK)
                expect(frame.locator("[data-status]")).to_have_attribute("data-state", "live")
                qorven = str(Path(sys.executable).with_name("qorven"))
                subprocess.run([qorven, "shell", "-c", "from channels_app.models import Identity; "
                                "Identity.objects.filter(channel='webchat').delete()"],
                               cwd=ROOT, env=SERVER_ENV[base], check=True, capture_output=True, timeout=60)
                opened = len(sockets)
                frame.locator("body").evaluate("() => window.__sockets.forEach(s => s.close())")  # the line drops
                expect(frame.locator("[data-status]")).to_have_attribute("data-state", "idle", timeout=SERVER_WORK)
                page.wait_for_timeout(4000)
                assert len(sockets) == opened + 1, sockets  # refused once, then none until someone writes
                frame.locator("[data-input]").fill("Hello again")
                frame.locator("[data-input]").press("Enter")
                expect(frame.locator(".msg--assistant:not(.msg--streaming)", has_text="Welcome back.")).to_be_visible(
                    timeout=SERVER_WORK)
                expect(frame.locator("[data-status]")).to_have_attribute("data-state", "live")
                assert frame.locator("[data-refused]").count() == 0
        finally:
            browser.close()
