"""A chat socket the client closes while the server is still writing to it (the catch-up
page, a pong) is let go of like one closed politely: it leaves the live hub and the count
of open sockets. Against a real uvicorn in this process, whose send raises once the
client is gone (channels' test communicator never does)."""
from __future__ import annotations

import threading
import time

import pytest
import uvicorn
from websockets.sync.client import connect

from qorven.asgi import application
from qorven.runtime import hub as hub_module
from qorven.runtime import metrics
from qorven.runtime.publisher import chat_group
from sessions_app.services.append import message_append
from sessions_app.services.resolve import session_resolve
from tenancy.services import api_token_create

from ..ports import free_port

pytestmark = pytest.mark.django_db(transaction=True)


class Uvicorn:
    """`qorven serve`'s uvicorn (the same WebSocket implementation) on a thread of its own."""

    def __init__(self) -> None:
        self.port = free_port()
        config = uvicorn.Config(application, host="127.0.0.1", port=self.port, lifespan="off",
                                ws="websockets-sansio", log_config=None)
        self.server = uvicorn.Server(config)
        self.server.install_signal_handlers = lambda: None  # not the main thread
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self) -> Uvicorn:
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            assert time.monotonic() < deadline, "uvicorn did not start"
            time.sleep(0.05)
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(30)


# Seconds the client waits for the server's answer to its close before it drops the
# connection. A server whose send to the closed socket failed may leave the closing
# handshake unanswered, though the socket has left the hub already; the client's default
# (10 s) was then waited out in full, once or more a run.
CLOSE_TIMEOUT = 1


def subscribers(group: str) -> int:
    with hub_module._hubs_lock:
        hubs = list(hub_module._hubs.values())
    return sum(len(found.members.get(group, ())) for found in hubs)


def eventually(condition, timeout: float = 20.0) -> bool:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def test_sockets_closed_while_their_catch_up_is_sent_leave_the_hub(world):
    session = session_resolve(tenant=world.tenant_a, qor=world.qor_a, channel="web", user=world.alice)
    for n in range(40):  # a page of catch-up for each new socket to be sent
        message_append(session=session, role="user", content=f"message {n} " + "x" * 2000, channel="web",
                       sender_name="Alice", notify=False)
    _, token = api_token_create(tenant=world.tenant_a, user=world.alice)
    group = chat_group(world.tenant_a.pk, world.qor_a.pk, world.alice.pk)
    open_before = metrics.live_sockets._value.get()
    with Uvicorn() as server:
        for _ in range(30):
            with connect(f"ws://127.0.0.1:{server.port}/ws/chat/acme/aria/",
                         additional_headers={"Authorization": f"Bearer {token}"}, open_timeout=10,
                         close_timeout=CLOSE_TIMEOUT) as ws:
                ws.recv(timeout=10)  # the session frame; the page follows, to a client already gone
        assert eventually(lambda: subscribers(group) == 0), f"{subscribers(group)} closed sockets still subscribed"
        assert eventually(lambda: metrics.live_sockets._value.get() == open_before)


def test_a_socket_closed_before_its_pong_leaves_the_hub(world):
    session_resolve(tenant=world.tenant_a, qor=world.qor_a, channel="web", user=world.alice)
    _, token = api_token_create(tenant=world.tenant_a, user=world.alice)
    group = chat_group(world.tenant_a.pk, world.qor_a.pk, world.alice.pk)
    with Uvicorn() as server:
        for _ in range(30):
            with connect(f"ws://127.0.0.1:{server.port}/ws/chat/acme/aria/",
                         additional_headers={"Authorization": f"Bearer {token}"}, open_timeout=10,
                         close_timeout=CLOSE_TIMEOUT) as ws:
                ws.recv(timeout=10)
                ws.send('{"type": "ping"}')
        assert eventually(lambda: subscribers(group) == 0), f"{subscribers(group)} closed sockets still subscribed"

