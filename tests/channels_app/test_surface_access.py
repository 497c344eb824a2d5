"""Every surface asks the one access rule (tenancy.access.surface_access) for each message:
an owner removed from the workspace is refused everywhere at once, and a paired account
follows its member's role up as well as down."""
from __future__ import annotations

import json
import time

import pytest
from asgiref.sync import async_to_sync

from channels_app.chat import chat_owner, chat_send
from channels_app.models import InboundEvent
from channels_app.pairing import identity_get_or_create, pairing_approve, pairing_request_for
from channels_app.services import binding_create
from channels_app.webchat import webchat_token_sign
from sessions_app.models import Message
from tenancy.errors import NotFound
from tenancy.models import Membership
from tenancy.services import api_token_create

from ..fakes.model_server import reply
from .conftest import pair
from .live_helpers import communicator, session_cookie
from .payloads import post_telegram, telegram_update

pytestmark = pytest.mark.django_db(transaction=True)


def remove_alice(world) -> None:
    Membership.objects.filter(tenant=world.tenant_a, user=world.alice).delete()


def test_a_removed_owner_is_refused_on_every_surface_at_once(client, world, telegram, platform, model_server,
                                                             drain):
    refused_everywhere(client, world, model_server, drain, remove_alice, page_status=404)


def test_a_deactivated_owner_is_refused_on_every_surface_at_once(client, world, telegram, platform, model_server,
                                                                 drain):
    """Deactivation keeps the membership row: every surface must read the account too.
    The page's sign-in ends with the account (401, as for anyone signed out)."""
    def deactivate(world) -> None:
        world.alice.is_active = False
        world.alice.save(update_fields=["is_active"])

    refused_everywhere(client, world, model_server, drain, deactivate, page_status=401)


def refused_everywhere(client, world, model_server, drain, end_access, *, page_status: int) -> None:
    token = api_token_create(tenant=world.tenant_a, user=world.alice)[1]
    webchat = binding_create(tenant=world.tenant_a, qor=world.qor_a, kind="webchat",
                             credentials={"key": "wc_k", "secret": "site-secret", "origins": "https://a.example"})
    pair(world, "telegram", "42", world.alice)
    terminal = chat_owner(user=world.alice, tenant_slug="acme", qor_slug="aria", surface="tui")  # opened before
    client.force_login(world.alice)
    model_server.default = reply("Hello.")

    end_access(world)

    api = client.post("/v1/qors/aria/messages", data=json.dumps({"content": "api"}),
                      content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {token}")
    page = client.post("/chat/api/acme/aria/messages", data=json.dumps({"content": "page"}),
                       content_type="application/json")
    visitor = webchat_token_sign(secret="site-secret", user_id="alice", expires=int(time.time()) + 600)
    embed = client.post("/webchat/wc_k/messages", data=json.dumps({"content": "embed"}),
                        content_type="application/json", HTTP_X_QORVEN_VISITOR=visitor)
    with pytest.raises(NotFound):
        chat_send(owner=terminal, content="terminal", channel="tui")
    post_telegram(client, telegram_update("telegram"))
    drain()

    assert (api.status_code, page.status_code, embed.status_code) == (401, page_status, 403), (api.content, page.content,
                                                                                       embed.content)
    assert not Message.objects.filter(role="user").exists() and model_server.requests == []
    assert InboundEvent.objects.get().result == "left"  # told they no longer have access
    assert webchat.enabled


def test_a_removed_owners_open_socket_is_refused_on_its_next_connect(world):
    cookie = session_cookie(world.alice)

    async def connects() -> bool:
        comm = communicator("/ws/chat/acme/aria/", cookie=cookie)
        connected, _ = await comm.connect()
        await comm.disconnect()
        return connected

    assert async_to_sync(connects)()
    remove_alice(world)
    assert not async_to_sync(connects)()


def test_a_paired_account_follows_its_members_promotion(client, world, telegram, platform, model_server, drain):
    identity = identity_get_or_create(tenant=world.tenant_a, channel="telegram", external_id="42",
                                      display_name="Bob")
    pairing_approve(tenant=world.tenant_a, code=pairing_request_for(identity=identity, text="hi").request.code, user=world.bob)
    model_server.default = reply("Hello.")
    post_telegram(client, telegram_update("as a member", message_id=1))
    drain()
    Membership.objects.filter(tenant=world.tenant_a, user=world.bob).update(role="owner")
    post_telegram(client, telegram_update("as the owner", message_id=2))
    drain()
    trust = dict(Message.objects.filter(role="user").values_list("content", "metadata__trust"))
    assert trust == {"as a member": "paired", "as the owner": "owner"}
