"""A new anonymous visitor's first message sent again (the frame met a 503 that came after
the server stored it, a proxy's): the frame names the visitor it is starting before the
first send (a secret of its own, X-Qorven-New-Visitor), so the second send lands with the
same visitor and the message is stored once. The secret only finds a visitor it started,
on the same webchat, within NEW_VISITOR_REUSE; the token the frame then keeps is ours."""
from __future__ import annotations

import json
import secrets

import pytest
from django.contrib.auth import get_user_model

from channels_app.models import Identity
from channels_app.services import binding_create
from sessions_app.models import Message

from .test_webchat import KEY, SECRET, URL  # noqa: F401

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def webchat(world):
    return binding_create(tenant=world.tenant_a, qor=world.qor_a, kind="webchat",
                          credentials={"key": KEY, "secret": SECRET, "origins": "https://acme.example"})


def first_send(client, content, *, new_visitor, client_id="c-1", url=URL):
    return client.post(url, data=json.dumps({"content": content, "client_id": client_id}),
                       content_type="application/json", HTTP_X_QORVEN_NEW_VISITOR=new_visitor)


def test_a_first_message_sent_again_lands_with_the_same_visitor_and_is_stored_once(client, world, webchat, drain):
    """Before, each send without a token made a visitor of its own: two anonymous users,
    the message stored in each one's chat, the first's an orphan nobody would see again."""
    users = get_user_model().objects.count()
    chosen = secrets.token_hex(24)
    first = first_send(client, "hello?", new_visitor=chosen)
    again = first_send(client, "hello?", new_visitor=chosen)  # the first's answer lost behind a proxy
    assert (first.status_code, again.status_code) == (201, 200), again.content
    assert again.json()["message"]["seq"] == first.json()["message"]["seq"]
    drain()
    assert Message.objects.filter(content="hello?").count() == 1
    assert get_user_model().objects.count() == users + 1
    assert Identity.objects.filter(channel="webchat").count() == 1
    timeline = client.get(URL, HTTP_X_QORVEN_VISITOR=again.json()["visitor"]).json()["messages"]
    assert [m["content"] for m in timeline if m["role"] == "user"] == ["hello?"]


def test_another_secret_or_another_webchat_never_finds_that_visitor(client, world, webchat, drain):
    chosen = secrets.token_hex(24)
    mine = first_send(client, "mine", new_visitor=chosen).json()
    theirs = first_send(client, "theirs", new_visitor=secrets.token_hex(24), client_id="c-2").json()
    binding_create(tenant=world.tenant_b, qor=world.qor_b, kind="webchat", credentials={"key": "wc_other"})
    elsewhere = first_send(client, "elsewhere", new_visitor=chosen, url="/webchat/wc_other/messages")
    assert elsewhere.status_code == 201
    drain()
    sessions = {Message.objects.get(content=c).session_id for c in ("mine", "theirs", "elsewhere")}
    assert len(sessions) == 3
    assert mine["visitor"] != theirs["visitor"] != elsewhere.json()["visitor"]


def test_a_short_secret_is_no_name_and_a_stale_one_starts_anew(client, world, webchat, drain):
    weak = [first_send(client, f"weak {i}", new_visitor="1234", client_id=f"w{i}").json()["visitor"] for i in range(2)]
    assert weak[0] != weak[1]  # too short to be anyone's secret: each send a visitor of its own
    chosen = secrets.token_hex(24)
    first_send(client, "long ago", new_visitor=chosen)
    from datetime import timedelta

    from django.utils import timezone

    Identity.objects.update(created_at=timezone.now() - timedelta(hours=1))  # its window has passed
    later = first_send(client, "a new chat", new_visitor=chosen, client_id="c-9")
    assert later.status_code == 201
    drain()
    assert (Message.objects.get(content="long ago").session_id
            != Message.objects.get(content="a new chat").session_id)
