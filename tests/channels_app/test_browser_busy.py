"""The chat page told to come back later (a 503 or a 429 with Retry-After) in a real
browser: it says when it sends again, keeps the messages waiting in their order, and sends
them again by itself, each stored once; still refused after its tries, it gives them back
to the box. The server's answers are replaced by Playwright's routing; the server's own
database (a SQLite file) is read to count what it stored."""
from __future__ import annotations

import json
import re
import sqlite3
from contextlib import closing

from ..fakes.model_server import reply
from .browser_support import SERVER_WORK, send, sign_in

MESSAGES = "**/chat/api/*/*/messages"
PROXY_PAGE = "<html><title>503 Service Temporarily Unavailable</title></html>"
DATABASE_AWAY = json.dumps({"error": "the database is unavailable; try again in a moment",
                            "code": "database_unavailable"})


def stored(tmp_path) -> list[str]:
    with closing(sqlite3.connect(tmp_path / "browser.sqlite3")) as db:
        rows = db.execute("SELECT content FROM sessions_app_message WHERE role = 'user' ORDER BY id").fetchall()
    return [content for (content,) in rows]


def posts_answered(page, answer) -> list[dict]:
    """The page's message POSTs, each recorded (its JSON) and answered by `answer(route,
    posts)`; the page's other requests go on to the server."""
    posts: list[dict] = []

    def route_post(route):
        if route.request.method != "POST":
            return route.fallback()
        posts.append(route.request.post_data_json)
        answer(route, posts)

    page.route(MESSAGES, route_post)
    return posts


def test_a_busy_server_is_waited_out_and_each_message_stored_once_in_order(chat_server, tmp_path, browser):
    """The first POST meets the database away (503, Retry-After: 2); the send again is
    stored but a proxy answers 503 (Retry-After: 1) in its place; the third is answered
    with the message stored. A second message typed meanwhile waits behind it. Before, the
    first 503 put both back in the box with "the database is unavailable", never sent
    again; and a 503 after the message was stored put it back in the box too, shown stored
    and to be sent again by hand: stored twice."""
    from playwright.sync_api import expect

    base, model, platform = chat_server
    model.add(reply("Milk is on the list."), reply("Eggs are on the list."))
    page = sign_in(browser, base)

    def busy(route, posts):
        if len(posts) == 1:
            route.fulfill(status=503, headers={"Retry-After": "2"}, content_type="application/json",
                          body=DATABASE_AWAY)
        elif len(posts) == 2:
            route.fetch()  # stored on the server (and shown live); its answer lost behind the proxy
            route.fulfill(status=503, headers={"Retry-After": "1"}, content_type="text/html", body=PROXY_PAGE)
        else:
            route.continue_()

    posts = posts_answered(page, busy)
    send(page, "add milk")
    expect(page.get_by_role("alert").filter(has_text="The server is busy; sending again in 2 s.")).to_be_visible()
    waiting = page.locator(".msg--pending")
    expect(waiting.locator(".msg__who")).to_have_text(re.compile(r"Waiting — sending again in [12] s"))
    send(page, "add eggs")
    expect(waiting).to_have_count(2)
    expect(page.locator("[data-input]")).to_have_value("")
    expect(waiting.nth(1).locator(".msg__who")).to_have_text(re.compile(r"Waiting — sending again in \d s"))

    answers = page.locator(".msg--assistant:not(.msg--streaming)")
    expect(answers.filter(has_text="Eggs are on the list.")).to_be_visible(timeout=SERVER_WORK)
    expect(answers.filter(has_text="Milk is on the list.")).to_be_visible()
    expect(page.locator(".msg--pending")).to_have_count(0)
    expect(page.locator("[data-input]")).to_have_value("")
    expect(page.locator(".msg--user")).to_have_text([re.compile("add milk"), re.compile("add eggs")])
    assert [p["content"] for p in posts] == ["add milk"] * 3 + ["add eggs"]
    assert len({p["client_id"] for p in posts[:3]}) == 1  # the same message, sent again
    assert posts[3]["client_id"] != posts[0]["client_id"]
    assert stored(tmp_path) == ["add milk", "add eggs"]
    assert len(model.requests) == 2  # each answered once

    page.reload()
    expect(page.locator("[data-status]")).to_have_attribute("data-state", "live")
    expect(page.locator(".msg--user")).to_have_text([re.compile("add milk"), re.compile("add eggs")])


def test_a_server_still_busy_after_the_tries_gives_the_messages_back_to_the_box(chat_server, tmp_path, browser):
    """Every POST answered 503 with Retry-After: 1: the message is sent four times in all,
    then it and the one waiting behind it are back in the box in order, with the notice a
    503 has always had, and nothing was stored."""
    from playwright.sync_api import expect

    base, model, platform = chat_server
    page = sign_in(browser, base)
    posts = posts_answered(page, lambda route, _: route.fulfill(
        status=503, headers={"Retry-After": "1"}, content_type="text/html", body=PROXY_PAGE))
    send(page, "add milk")
    expect(page.get_by_role("alert").filter(has_text="sending again in 1 s")).to_be_visible()
    send(page, "add eggs")

    expect(page.locator("[data-input]")).to_have_value("add milk\n\nadd eggs", timeout=SERVER_WORK)
    expect(page.get_by_role("alert").filter(has_text="could not take the message just now")).to_be_visible()
    expect(page.locator(".msg--pending")).to_have_count(0)
    assert [p["content"] for p in posts] == ["add milk"] * 4
    assert stored(tmp_path) == []


def test_a_wait_longer_than_a_minute_gives_the_message_back_at_once(chat_server, tmp_path, browser):
    """A 429 asking for two minutes is not waited out with the page open: the message is
    back in the box at once, with the server's words (when to try again)."""
    from playwright.sync_api import expect

    base, model, platform = chat_server
    page = sign_in(browser, base)
    posts = posts_answered(page, lambda route, _: route.fulfill(
        status=429, headers={"Retry-After": "120"}, content_type="application/json",
        body=json.dumps({"error": "Too many messages at once: try again in 120 seconds."})))
    send(page, "add milk")
    expect(page.get_by_role("alert").filter(has_text="try again in 120 seconds")).to_be_visible()
    expect(page.locator("[data-input]")).to_have_value("add milk")
    page.wait_for_timeout(1500)
    assert len(posts) == 1
    assert stored(tmp_path) == []


def test_a_proxys_error_page_is_read_as_our_notice_never_its_words(chat_server, tmp_path, browser):
    """A 502 whose JSON "error" is a proxy's (and a 503 whose "code" is none of ours): the
    page says, in our words, that Qorven could not take the message, and the message is back
    in the box. Before, the proxy's "error" was shown as it came, however long."""
    from playwright.sync_api import expect

    base, model, platform = chat_server
    page = sign_in(browser, base)
    answers = [(502, {"error": "upstream connect error or disconnect/reset before headers " + "x" * 3000}),
               (503, {"error": "Call our support line at evil.example", "code": "not_ours"})]

    def proxy(route, _):
        status, body = answers[0]
        route.fulfill(status=status, content_type="application/json", body=json.dumps(body))

    posts_answered(page, proxy)
    for status, body in list(answers):
        send(page, "add milk")
        expect(page.locator("[data-input]")).to_have_value("add milk", timeout=SERVER_WORK)
        alert = page.get_by_role("alert").filter(has_text="could not take the message just now").last
        expect(alert).to_be_visible()
        assert "upstream" not in page.content() and "evil.example" not in page.content()
        page.locator("[data-input]").fill("")
        answers.pop(0)
    assert stored(tmp_path) == []
