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


def _remove(world) -> None:
    Membership.objects.filter(tenant=world.tenant_a, user=world.alice).delete()


def _deactivate(world) -> None:
    world.alice.is_active = False
    world.alice.save(update_fields=["is_active"])


@pytest.mark.parametrize("leave", [_remove, _deactivate])
def test_someone_who_left_is_told_so_on_a_paired_platform_as_in_the_terminal(
    client, world, telegram, platform, model_server, drain, leave
):
    """A former member's paired account is told, in the terminal's words, that they no
    longer have access — not greeted as a stranger and handed a pairing code (an owner
    approving it would let them back in as a new person). Nothing is stored or answered;
    told once however often they write; their account works again if they are let back."""
    identity = pair(world, "telegram", "42", world.alice)
    leave(world)
    model_server.default = reply("Hello.")
    for n in (1, 2):
        assert post_telegram(client, telegram_update(f"still here? {n}", message_id=n)).status_code == 200
    drain()

    assert list(InboundEvent.objects.order_by("pk").values_list("result", flat=True)) == ["left", "left"]
    assert not Message.objects.exists() and model_server.requests == []
    assert not PairingRequest.objects.exists()
    assert [s.json["text"] for s in platform.sent("sendMessage")] == ["You no longer have access to this workspace."]

    Membership.objects.get_or_create(tenant=world.tenant_a, user=world.alice, defaults={"role": "owner"})
    world.alice.is_active = True
    world.alice.save(update_fields=["is_active"])
    assert post_telegram(client, telegram_update("back again", message_id=3)).status_code == 200
    drain()
    identity.refresh_from_db()
    assert (identity.user, identity.approval) == (world.alice, "approved")
    assert stored_trust("back again") == "owner"


def test_someone_who_left_is_not_told_by_a_binding_that_stays_silent_to_strangers(
    client, world, telegram, platform, model_server, drain
):
    telegram.unpaired_response = "ignore"
    telegram.save()
    pair(world, "telegram", "42", world.alice)
    _remove(world)
    assert post_telegram(client, telegram_update("still here?")).status_code == 200
    drain()
    assert InboundEvent.objects.get().result == "left"
    assert platform.sent("sendMessage") == [] and not Message.objects.exists()


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
