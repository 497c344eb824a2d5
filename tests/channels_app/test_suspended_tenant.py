"""A workspace the host suspends (an unpaid bill) is served nowhere — pages, API tokens,
sockets, the terminal, the webchat embed, beats — and what its platforms send is kept
unanswered; nothing of it is deleted, and resuming it serves everyone as before. The other
tenant never notices."""
from __future__ import annotations

import io
import json
import time
from datetime import datetime, timezone as tz

import pytest
from asgiref.sync import async_to_sync, sync_to_async
from django.core.management import call_command
from django.urls import reverse

from channels_app.chat import chat_owner, chat_send
from channels_app.models import ChannelBinding, Identity, InboundEvent, PairingRequest
from channels_app.services import binding_create
from channels_app.webchat import webchat_token_sign
from heartbeats_app.models import HeartbeatRun
from qorven.agent.heartbeat_runs import run_heartbeat
from sessions_app.models import Message
from tenancy.errors import NotFound
from tenancy.models import ApiToken, Membership, Tenant
from tenancy.services import api_token_create

from ..factories.heartbeats_app import beat
from ..fakes.model_server import reply
from .conftest import pair
from .live_helpers import communicator, receive_until, session_cookie
from .payloads import post_telegram, telegram_update

pytestmark = pytest.mark.django_db(transaction=True)

SENT = r"/telegram/bot111:AAA/sendMessage"
TICK = datetime(2025, 3, 3, 8, 0, tzinfo=tz.utc)


def tenant_cli(*args: str) -> str:
    out = io.StringIO()
    call_command("tenant", *args, stdout=out)
    return out.getvalue()


def export_cli(*args: str) -> str:
    out = io.StringIO()
    call_command("export", *args, stdout=out, stderr=io.StringIO())
    return out.getvalue()


def kept(world) -> dict:
    """What the workspace holds: none of it may go while it is suspended."""
    return {
        "memberships": Membership.objects.filter(tenant=world.tenant_a).count(),
        "tokens": ApiToken.objects.filter(tenant=world.tenant_a, revoked_at__isnull=True).count(),
        "bindings": ChannelBinding.objects.filter(tenant=world.tenant_a, enabled=True).count(),
        "identities": Identity.objects.filter(tenant=world.tenant_a, approval="approved").count(),
        "qors": world.tenant_a.qors.count(),
    }


def test_a_suspended_workspace_is_served_nowhere_keeps_everything_and_comes_back_on_resume(
        client, world, telegram, platform, model_server, drain):
    token = api_token_create(tenant=world.tenant_a, user=world.alice)[1]
    binding_create(tenant=world.tenant_a, qor=world.qor_a, kind="webchat",
                   credentials={"key": "wc_k", "secret": "site-secret", "origins": "https://a.example"})
    pair(world, "telegram", "42", world.alice)
    terminal = chat_owner(user=world.alice, tenant_slug="acme", qor_slug="aria", surface="tui")  # opened before
    checkin = beat(world.qor_a)
    model_server.default = reply("Hello.")
    before = kept(world)

    assert "suspended acme" in tenant_cli("suspend", "acme")

    def api():
        return client.post("/v1/qors/aria/messages", data=json.dumps({"content": "api"}),
                           content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {token}")

    def page():
        client.force_login(world.alice)
        return client.post("/chat/api/acme/aria/messages", data=json.dumps({"content": "page"}),
                           content_type="application/json")

    visitor = webchat_token_sign(secret="site-secret", user_id="alice", expires=int(time.time()) + 600)
    signed = client.post("/webchat/wc_k/messages", data=json.dumps({"content": "embed"}),
                         content_type="application/json", HTTP_X_QORVEN_VISITOR=visitor)
    anonymous = client.post("/webchat/wc_k/messages", data=json.dumps({"content": "hi"}),
                            content_type="application/json")
    with pytest.raises(NotFound):
        chat_send(owner=terminal, content="terminal", channel="tui")
    refused = (api().status_code, page().status_code, signed.status_code, anonymous.status_code)
    assert post_telegram(client, telegram_update("are you there?", message_id=1)).status_code == 200
    assert post_telegram(client, telegram_update("hello?", user_id=77, first_name="Eve")).status_code == 200
    drain()

    download = client.get("/chat/export/acme")  # signed in as alice by page()
    assert refused == (401, 404, 404, 404) and download.status_code == 404
    # The host can still hand a person their data.
    assert '"messages":1' in export_cli("--tenant", "acme", "--user", "alice")
    assert run_heartbeat(tenant_id=world.tenant_a.pk, heartbeat_id=checkin.pk, tick=TICK) is None
    assert not HeartbeatRun.objects.exists()
    # The paired owner's message is kept in her chat, unanswered; the stranger gets no code.
    (stored,) = Message.objects.filter(session__tenant=world.tenant_a)
    assert (stored.content, stored.channel, stored.session.user, stored.answer_state) == (
        "are you there?", "telegram", world.alice, None)
    assert sorted(InboundEvent.objects.values_list("result", flat=True)) == ["suspended", "suspended"]
    assert platform.sent(SENT) == [] and model_server.requests == []
    assert not PairingRequest.objects.exists()
    assert kept(world) == before
    # The other tenant is served as ever.
    client.force_login(world.charlie)
    assert client.post("/chat/api/globex/aria/messages", data=json.dumps({"content": "hi"}),
                       content_type="application/json").status_code == 201
    drain()

    assert "resumed acme" in tenant_cli("resume", "acme")
    answered = (api().status_code, page().status_code)
    assert post_telegram(client, telegram_update("now?", message_id=2)).status_code == 200
    drain()

    assert answered == (201, 201) and client.get("/chat/export/acme").status_code == 200
    assert [sent.json["text"] for sent in platform.sent(SENT)] == ["Hello."]
    stored.refresh_from_db()
    assert stored.answer_state is None  # not answered after the fact
    assert run_heartbeat(tenant_id=world.tenant_a.pk, heartbeat_id=checkin.pk, tick=TICK) is not None


def test_suspending_closes_the_workspaces_open_sockets_and_no_one_elses(world):
    alices = session_cookie(world.alice)
    charlies = session_cookie(world.charlie)

    async def scenario():
        page = communicator("/ws/chat/acme/aria/", cookie=alices)
        other = communicator("/ws/chat/globex/aria/", cookie=charlies)
        for comm in (page, other):
            assert (await comm.connect())[0]
            await receive_until(comm, lambda e: e["type"] == "session")
        await sync_to_async(tenant_cli)("suspend", "acme")
        from qorven.runtime.publisher import broadcast_flush

        await sync_to_async(broadcast_flush)()
        assert await receive_until(page, lambda e: e["type"] == "signed_out", timeout=10)
        await other.send_json_to({"type": "ping"})
        assert await receive_until(other, lambda e: e["type"] == "pong")
        await other.disconnect()
        reconnect = communicator("/ws/chat/acme/aria/", cookie=alices)
        assert not (await reconnect.connect())[0]

    async_to_sync(scenario)()


def test_the_host_suspends_and_resumes_in_the_admin_and_a_workspace_admin_cannot(client, world, host):
    listing = reverse("admin:qorven_tenant_changelist")
    response = host.post(listing, {"action": "suspend", "_selected_action": [world.tenant_a.pk]})
    assert response.status_code == 302
    assert Tenant.objects.get(slug="acme").suspended and not Tenant.objects.get(slug="globex").suspended
    host.post(listing, {"action": "resume", "_selected_action": [world.tenant_a.pk]})
    assert not Tenant.objects.get(slug="acme").suspended

    world.alice.is_staff = True
    world.alice.save(update_fields=["is_staff"])
    client.force_login(world.alice)
    assert 'value="suspend"' not in client.get(listing).content.decode()
    client.post(listing, {"action": "suspend", "_selected_action": [world.tenant_a.pk]})
    assert not Tenant.objects.get(slug="acme").suspended
    tenant_cli("suspend", "acme")
    # Suspended, it is the host's alone to administer.
    assert client.get(reverse("admin:qorven_tenant_change", args=[world.tenant_a.pk])).status_code in (403, 404)


def test_the_tenant_command_says_what_it_did_and_what_it_would_do(world):
    assert tenant_cli("status", "acme") == "acme: active\n"
    assert "Dry run: nothing changed" in tenant_cli("suspend", "acme", "--dry-run")
    assert not Tenant.objects.get(slug="acme").suspended
    tenant_cli("suspend", "acme")
    assert "already suspended" in tenant_cli("suspend", "acme")
    assert tenant_cli("status", "acme").startswith("acme: suspended since ")


def test_a_suspended_workspaces_group_chat_is_kept_unanswered(client, world, telegram, platform, model_server,
                                                               drain):
    """A paired member's mention and a stranger's in the group: kept as the group's
    context, neither answered nor told anything; a command is not run either."""
    pair(world, "telegram", "42", world.alice)
    model_server.default = reply("answered")
    tenant_cli("suspend", "acme")
    group = {"chat_id": -100123, "chat_type": "supergroup"}
    for number, (sender, text) in enumerate([(42, "@aria_bot dinner?"), (77, "@aria_bot who are you?"),
                                             (42, "/status@aria_bot")], start=1):
        post_telegram(client, telegram_update(text, user_id=sender, message_id=number, **group))
    drain()

    assert platform.sent(SENT) == [] and model_server.requests == []
    kept_here = Message.objects.filter(session__tenant=world.tenant_a, session__kind="group")
    assert sorted((m.role, m.content, m.answer_state) for m in kept_here) == [  # two senders: any order
        ("user", "/status@aria_bot", None), ("user", "@aria_bot dinner?", None),
        ("user", "@aria_bot who are you?", None)]
