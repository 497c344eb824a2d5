"""A forged webhook is answered alike whether the account it names is bound here or not.

WhatsApp, Discord and Twilio name the account in the clear (the phone number id, the
application id, our number in To). An unbound one was answered 403 "no … binding for this
request" and a bound one with a bad signature 401 "bad … signature": anyone could post
forged webhooks and learn which accounts this server serves. Now both get the platform's
answer to a bad signature (WhatsApp 401, Discord 401, Twilio 403); the log tells them apart."""
from __future__ import annotations

import hashlib
import hmac
import json
import time
from urllib.parse import urlencode

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from channels_app.adapters.sms import twilio_signature
from channels_app.models import InboundEvent
from channels_app.webhooks import webhook_bindings_warm

from .payloads import whatsapp_body
from .test_slack_discord_email_sms import discord, discord_key  # noqa: F401 (fixtures)
from .test_webhook_ingest import asgi_post

pytestmark = pytest.mark.django_db(transaction=True)

# kind: (the id its binding is bound by, an id bound nowhere, the answer to a forged one)
PLATFORMS = {
    "whatsapp": ("1055", "2066", 401),
    "discord": ("9001", "9002", 401),
    "sms": ("+15550001111", "+15550009999", 403),
}


def forged(kind: str, named: str) -> tuple[str, bytes, dict[str, str]]:
    """A webhook of `kind` naming the account `named`, signed with a key that is not its own."""
    path = f"/v1/webhooks/{kind}"
    if kind == "whatsapp":
        raw = json.dumps(whatsapp_body("hello", phone_number_id=named)).encode()
        return path, raw, {"content-type": "application/json",
                           "x-hub-signature-256": "sha256=" + hmac.new(b"guess", raw, hashlib.sha256).hexdigest()}
    if kind == "discord":
        raw = json.dumps({"id": "1", "application_id": named, "type": 1, "token": "t", "version": 1}).encode()
        stamp = str(int(time.time()))
        return path, raw, {"content-type": "application/json", "x-signature-timestamp": stamp,
                           "x-signature-ed25519": Ed25519PrivateKey.generate().sign(stamp.encode() + raw).hex()}
    params = {"MessageSid": "SM1", "AccountSid": "AC123", "From": "+15557654321", "To": named, "Body": "hi"}
    return path, urlencode(params).encode(), {
        "content-type": "application/x-www-form-urlencoded",
        "x-twilio-signature": twilio_signature("guess", "https://qorven.example" + path, params)}


@pytest.fixture(params=sorted(PLATFORMS))
def platform_bound(request, world, whatsapp, sms, discord):  # noqa: F811 (a fixture)
    return request.param


def test_a_forged_webhook_gets_one_answer_whether_the_account_it_names_is_bound_or_not(client, platform_bound):
    kind = platform_bound
    bound_id, unbound_id, status = PLATFORMS[kind]
    answers = []
    for named in (bound_id, unbound_id):
        path, body, headers = forged(kind, named)
        answers.append(client.generic("POST", path, body, content_type=headers.pop("content-type"), headers=headers))
    bound, unbound = answers
    assert (bound.status_code, bound.json()) == (unbound.status_code, unbound.json())
    assert bound.status_code == status
    assert not InboundEvent.objects.exists()


def test_through_the_server_a_forged_webhook_screened_from_the_cache_gets_the_answer_an_unbound_one_does(
    platform_bound,
):
    """Under `qorven serve` a bound account's forged webhook is refused on the event loop,
    from the binding cache (warmed as the server starts); an unbound one is left to the
    storing thread. The answers are the same all the same."""
    kind = platform_bound
    bound_id, unbound_id, status = PLATFORMS[kind]
    assert webhook_bindings_warm() == 3
    bound, unbound = asgi_post(forged(kind, bound_id), forged(kind, unbound_id))
    assert (bound.status_code, bound.json()) == (unbound.status_code, unbound.json())
    assert bound.status_code == status
    assert not InboundEvent.objects.exists()
