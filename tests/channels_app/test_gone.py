"""A Qor or a whole workspace deleted: every way in answers as for something that never
existed (404, or the platform's refusal), never a server error, and nothing is stored."""
from __future__ import annotations

import json
import time

import pytest
from asgiref.sync import async_to_sync

from channels_app.models import InboundEvent
from channels_app.services import binding_create
from channels_app.webchat import webchat_token_sign
from sessions_app.models import Message
from tenancy.models import Tenant
from tenancy.services import api_token_create

from .live_helpers import communicator, session_cookie
from .payloads import post_telegram, telegram_update

pytestmark = pytest.mark.django_db(transaction=True)


def socket_opens(user, path: str) -> bool:
    cookie = session_cookie(user)

    async def connects() -> bool:
        comm = communicator(path, cookie=cookie)
        connected, _ = await comm.connect()
        await comm.disconnect()
        return connected

    return async_to_sync(connects)()


@pytest.mark.parametrize("gone", ["qor", "tenant"])
def test_every_way_into_a_deleted_qor_or_workspace_is_not_found(client, world, telegram, platform, model_server,
                                                                 drain, gone):
    token = api_token_create(tenant=world.tenant_a, user=world.alice)[1]
    binding_create(tenant=world.tenant_a, qor=world.qor_a, kind="webchat",
                   credentials={"key": "wc_k", "secret": "site-secret", "origins": "https://a.example"})
    cookie_client = client
    cookie_client.force_login(world.alice)
    (world.qor_a if gone == "qor" else Tenant.objects.get(pk=world.tenant_a.pk)).delete()

    page = cookie_client.get("/chat/aria/?tenant=acme")
    api_page = cookie_client.post("/chat/api/acme/aria/messages", data=json.dumps({"content": "page"}),
                                  content_type="application/json")
    api = cookie_client.post("/v1/qors/aria/messages", data=json.dumps({"content": "api"}),
                             content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {token}")
    visitor = webchat_token_sign(secret="site-secret", user_id="alice", expires=int(time.time()) + 600)
    embed = cookie_client.post("/webchat/wc_k/messages", data=json.dumps({"content": "embed"}),
                               content_type="application/json", HTTP_X_QORVEN_VISITOR=visitor)
    hook = post_telegram(cookie_client, telegram_update("hello"))
    drain()

    # The token went with its workspace (401); a Telegram secret no binding holds is refused (403).
    assert (page.status_code, api_page.status_code, embed.status_code, hook.status_code) == (404, 404, 404, 403)
    assert api.status_code == (404 if gone == "qor" else 401)
    assert not socket_opens(world.alice, "/ws/chat/acme/aria/")
    assert not Message.objects.exists() and not InboundEvent.objects.exists()
    assert model_server.requests == [] and platform.sent(r"sendMessage") == []
