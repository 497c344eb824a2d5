"""Ctrl-C's Stop refused by the server a `qorven chat --server` talks to, for something
other than its cache: the person reads why, and when to press Ctrl-C again; pressed as
told, it stops again instead of leaving. The server is a fake over real HTTP, answering
the stop as the real one does with its database away (DatabaseDownMiddleware), or as a
proxy in front of it does."""
from __future__ import annotations

import io

import pytest

from channels_app.management.commands.chat import SEND_TIMEOUT
from channels_app.chat import chat_owner
from channels_app.terminal_chat import TerminalChat
from channels_app.terminal_client import ServerLink
from qorven.agent.stop import STOP_UNAVAILABLE
from qorven.runtime.database import DATABASE_DOWN_CODE, DATABASE_DOWN_NOTICE

from ..fakes.platform_server import Canned
from ..ports import free_port
from ..processes import wait_for

pytestmark = pytest.mark.django_db(transaction=True)


def _pressed_twice(world, base: str) -> tuple[str, list[str]]:
    """Ctrl-C while the reply to message 1 streams, and again once told it was not stopped:
    what the terminal showed, and what each press did."""
    out = io.StringIO()
    owner = chat_owner(user=world.alice, tenant_slug="acme", qor_slug="aria", surface="tui")
    link = ServerLink(owner, base, timeout=SEND_TIMEOUT)
    try:
        chat = TerminalChat(owner, link, out, on_screen=False, color=False)
        chat.replies.expect(1)
        done = [chat.interrupt("")]
        assert wait_for(lambda: "could not be stopped" in out.getvalue(), 40), out.getvalue()
        done.append(chat.interrupt(""))
        assert wait_for(lambda: out.getvalue().count("could not be stopped") == 2, 40), out.getvalue()
    finally:
        link.close()
    return out.getvalue(), done


def test_a_stop_refused_with_the_database_away_says_so_and_when_to_try_again(world, platform):
    """Before, every 503 read as the cache's: "try again in a moment", whatever the server
    said, its Retry-After unread; and the Ctrl-C pressed for it within 1.5 s left."""
    platform.default(r"/stop$", Canned(503, {"error": DATABASE_DOWN_NOTICE, "code": DATABASE_DOWN_CODE},
                                       {"Retry-After": "1"}))
    shown, done = _pressed_twice(world, platform.url)
    assert done == ["stop", "stop"]
    assert shown.count("The reply could not be stopped: the database is unavailable; "
                       "try again in a moment. Press Ctrl-C to try again in 1 s; Ctrl-D or /quit leaves.") == 2
    assert STOP_UNAVAILABLE not in shown and "just now" not in shown
    assert len(platform.sent(r"/v1/qors/aria/stop$")) == 2


@pytest.mark.parametrize("canned", [
    Canned(503, raw=b"<html>Service Unavailable</html>"),
    Canned(503, {"error": "upstream connect error: call +1 555 0100 " + "x" * 4000}),
    Canned(503, {"error": DATABASE_DOWN_NOTICE}),  # a code of ours or none: the words are no sign
])
def test_a_stop_refused_by_a_proxy_says_the_server_is_unavailable(world, platform, canned):
    """Before, the "error" of a proxy's JSON page was shown as it came, at any length."""
    platform.default(r"/stop$", canned)
    shown, done = _pressed_twice(world, platform.url)
    assert done == ["stop", "stop"]
    assert shown.count("The reply could not be stopped: the server is unavailable just now. "
                       "Press Ctrl-C to try again; Ctrl-D or /quit leaves.") == 2
    assert "upstream" not in shown and "database" not in shown


def test_a_stop_the_server_did_not_answer_may_be_pressed_again(world):
    """Nothing listens at the address (the server restarting): the notice said "Try Ctrl-C
    again", and the Ctrl-C pressed for it within 1.5 s left."""
    shown, done = _pressed_twice(world, f"http://127.0.0.1:{free_port()}")
    assert done == ["stop", "stop"]
    assert shown.count("The reply could not be stopped: the server did not answer. "
                       "Press Ctrl-C to try again; Ctrl-D or /quit leaves.") == 2
