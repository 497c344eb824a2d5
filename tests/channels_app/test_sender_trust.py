"""The trust a message carries: the sender's current role (owner → owner, admin → trusted,
member → paired), capped by what the surface proves. A forged From header is never the
owner, SMS is paired at most, a removed member is not answered anywhere, and owner-only
means owner."""
from __future__ import annotations

import json

import pytest

from channels_app.models import InboundEvent, PairingRequest
from channels_app.services import binding_create
from sessions_app.models import Message
from tenancy.models import Membership
from tenancy.services import api_token_create

from ..fakes.model_server import reply
from .conftest import pair
from .payloads import email_body, post_email, post_sms, post_telegram, telegram_update

pytestmark = pytest.mark.django_db(transaction=True)


def pending_telegram_code(client, drain) -> str:
    """A stranger on Telegram asks to pair: the owner is shown a code."""
    post_telegram(client, telegram_update("let me in", user_id=666, message_id=666, first_name="Mallory"))
    drain()
    return PairingRequest.objects.get(state="pending").code


def forged_mail(text: str, message_id: str, **verdicts) -> dict:
    body = email_body(text, message_id)
    body.update({"from": "Alice <alice@acme.example>", "subject": ""})  # the text alone: a command
    body.update(verdicts)
    return body


def stored_trust(content: str) -> str:
    return Message.objects.get(role="user", content__endswith=content).metadata["trust"]


def test_an_email_from_the_owners_address_is_not_the_owner(client, world, telegram, platform, email, model_server,
                                                           drain):
    pair(world, "email", "alice@acme.example", world.alice)  # the owner paired her address
    code = pending_telegram_code(client, drain)
    model_server.default = reply("Noted.")

    post_email(client, forged_mail(f"/pair approve {code}", "<forged1@evil.example>"))
    post_email(client, forged_mail("what do you remember about me?", "<forged2@evil.example>"))
    drain()
    assert PairingRequest.objects.get(code=code).state == "pending"  # not approved
    assert Message.objects.filter(role="assistant", content__startswith="Only the owner").count() == 1
    assert stored_trust("what do you remember about me?") == "paired"


def test_a_dkim_pass_proves_the_sender_to_trusted_at_most(client, world, telegram, platform, email, model_server,
                                                          drain):
    pair(world, "email", "alice@acme.example", world.alice)
    code = pending_telegram_code(client, drain)
    model_server.default = reply("Noted.")
    post_email(client, forged_mail("signed by the domain", "<ok1@acme.example>", dkim="{@acme.example : pass}"))
    post_email(client, forged_mail("signed by another domain", "<ok2@acme.example>", dkim="{@evil.example : pass}"))
    post_email(client, forged_mail("spf only", "<ok3@acme.example>", spf="pass"))
    post_email(client, forged_mail(f"/pair approve {code}", "<ok4@acme.example>", dkim="pass"))
    drain()
    assert stored_trust("signed by the domain") == "trusted"
    assert stored_trust("signed by another domain") == "paired"
    assert stored_trust("spf only") == "paired"  # the binding asks for DKIM (the default)
    assert PairingRequest.objects.get(code=code).state == "pending"  # trusted is not owner


def test_a_binding_can_count_spf(client, world, model_server, drain):
    binding_create(tenant=world.tenant_a, qor=world.qor_a, kind="email",
                   credentials={"address": "aria@acme.example", "secret": "mail-secret", "sender_check": "dkim_or_spf"})
    pair(world, "email", "alice@acme.example", world.alice)
    model_server.default = reply("Noted.")
    post_email(client, forged_mail("spf only", "<s1@acme.example>", spf="pass"))
    drain()
    assert stored_trust("spf only") == "trusted"


def test_an_sms_from_the_owners_number_is_paired_at_most(client, world, sms, platform, model_server, drain):
    pair(world, "sms", "+15557654321", world.alice)
    model_server.default = reply("Hi.")
    post_sms(client, {"MessageSid": "SM9", "AccountSid": "AC123", "From": "+15557654321", "To": "+15550001111",
                      "Body": "hello"})
    drain()
    assert stored_trust("hello") == "paired"


def test_a_removed_member_is_no_longer_answered_on_a_paired_platform_and_goes_back_to_pairing(
    client, world, telegram, platform, model_server, drain
):
    identity = pair(world, "telegram", "42", world.alice)
    Membership.objects.filter(tenant=world.tenant_a, user=world.alice).delete()
    model_server.default = reply("Hello.")
    assert post_telegram(client, telegram_update("still here?")).status_code == 200
    drain()
    assert InboundEvent.objects.get().result == "pairing-code"  # stored, not answered
    assert not Message.objects.exists() and model_server.requests == []
    identity.refresh_from_db()
    assert (identity.user, identity.approval) == (None, "pending")
    (code_message,) = platform.sent("sendMessage")
    assert PairingRequest.objects.get(identity=identity, state="pending").code in code_message.json["text"]


def test_a_role_change_applies_to_the_next_platform_message(client, world, telegram, platform, model_server,
                                                            drain):
    pair(world, "telegram", "42", world.alice)
    model_server.default = reply("Hello.")
    Membership.objects.filter(tenant=world.tenant_a, user=world.alice).update(role="member")
    post_telegram(client, telegram_update("as a member now", message_id=7))
    drain()
    assert stored_trust("as a member now") == "paired"


def test_an_admin_is_trusted_not_owner_everywhere(client, world, telegram, platform, model_server, drain):
    Membership.objects.filter(tenant=world.tenant_a, user=world.bob).update(role="admin")
    code = pending_telegram_code(client, drain)
    token = api_token_create(tenant=world.tenant_a, user=world.bob)[1]
    for content in ("hello from the API", f"/pair approve {code}"):
        response = client.post("/v1/qors/aria/messages", data=json.dumps({"content": content}),
                               content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {token}")
        assert response.status_code == 201
    drain()
    assert stored_trust("hello from the API") == "trusted"
    assert PairingRequest.objects.get(code=code).state == "pending"
