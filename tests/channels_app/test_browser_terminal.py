"""`qorven chat` beside an open chat page, on the embedded default: the terminal talks to
the running server, so the page sees the terminal's message and its reply live, and the
terminal sees the page's."""
from __future__ import annotations

import json
import subprocess
import sys
import threading
from pathlib import Path

from ..fakes.model_server import reply
from .browser_support import ROOT, SERVER_ENV, SERVER_WORK, send, sign_in


def test_the_page_shows_the_terminals_message_and_reply_live_and_the_terminal_the_pages(chat_server, browser):
    from playwright.sync_api import expect

    base, model, platform = chat_server
    # The first answer starts a new session: like a real model, it takes a moment before its
    # first token, by which time the terminal's socket follows the new session (with an
    # instant model the whole answer could be stored before, and arrive whole, not streamed).
    model.add(reply("Answered for the terminal.", delay=0.5), reply("Answered for the page."),
              reply("Answered after the clear."))
    qorven = str(Path(sys.executable).with_name("qorven"))
    terminal = subprocess.Popen(
        [qorven, "chat", "--json", "--tenant", "acme", "--qor", "aria", "--user", "alice", "--server", base,
         "--wait", "30"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
        env=SERVER_ENV[base],
    )
    lines: list[dict] = []
    reader = threading.Thread(target=lambda: lines.extend(json.loads(raw) for raw in terminal.stdout),
                              daemon=True)
    reader.start()
    try:
        page = sign_in(browser, base)
        terminal.stdin.write(json.dumps({"content": "typed in the terminal"}) + "\n")
        terminal.stdin.flush()

        # Live on the page (it is never reloaded), with the terminal's badge, and its answer
        # after it. The wait covers the terminal's own start-up, which takes seconds on a
        # busy machine before it reads what was typed.
        mine = page.locator('.msg--user[data-channel="tui"]', has_text="typed in the terminal")
        expect(mine).to_be_visible(timeout=SERVER_WORK)
        expect(mine.locator(".badge")).to_have_text("Terminal")
        expect(page.locator('.msg--assistant[data-channel="tui"]', has_text="Answered for the terminal.")
               ).to_be_visible(timeout=10_000)

        # And what the page sends reaches the terminal.
        send(page, "typed on the page")
        expect(page.locator(".msg--assistant", has_text="Answered for the page.")).to_be_visible(timeout=10_000)

        # A new conversation started on the page: the terminal follows it from the
        # socket's session frame (reading the new session from the database).
        page.once("dialog", lambda dialog: dialog.accept())
        page.locator("[data-new-conversation]").click()
        expect(page.locator(".divider--session")).to_have_text("New conversation", timeout=SERVER_WORK)
        send(page, "after the new conversation")
        expect(page.locator(".msg--assistant", has_text="Answered after the clear.")).to_be_visible(
            timeout=SERVER_WORK)
        page.wait_for_timeout(500)
    finally:
        terminal.stdin.close()
        code = terminal.wait(60)
    reader.join(10)
    assert code == 0, terminal.stderr.read()
    said = [(line["type"], line.get("channel"), line.get("content")) for line in lines if line["type"] == "message"]
    assert said[:2] == [("message", "tui", "typed in the terminal"), ("message", "tui", "Answered for the terminal.")]
    assert ("message", "web", "typed on the page") in said and ("message", "web", "Answered for the page.") in said
    chunks = "".join(line["delta"] for line in lines if line["type"] == "chunk"
                     and line["reply_to"] == lines[0]["seq"])
    assert chunks == "Answered for the terminal."  # streamed to the terminal through the server
    assert len(model.requests) == 3  # each answered once, by the server's worker
    moved = [i for i, line in enumerate(lines) if line["type"] == "session"]
    assert len(moved) == 1, lines  # one new conversation, announced once
    after = [(line["channel"], line["content"]) for line in lines[moved[0]:] if line["type"] == "message"]
    assert ("web", "after the new conversation") in after and ("web", "Answered after the clear.") in after
