"""A webhook's signature is checked once under `qorven serve`: the screening on the event
loop verifies it against the binding the process's cache keeps fresh, and the storing
thread takes that verdict instead of computing the signature again; what the screening
could not vouch for (a binding not kept, or kept past its time) the thread still verifies
against the binding as it is now (channels_app.webhook_ingest)."""
from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat
from django.db import connection

from channels_app.adapters.base import hmac_hex
from channels_app.models import ChannelBinding, InboundEvent
from channels_app.services import binding_create

from .held_inserts import inserts_held
from .payloads import telegram_update, whatsapp_body
from .test_webhook_ingest import asgi_post, posting, tg, waiting_reaches

pytestmark = pytest.mark.django_db(transaction=True)

Request = tuple[str, bytes, dict[str, str]]


def _public(key: Ed25519PrivateKey) -> str:
    return key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw).hex()


_DISCORD_KEYS = {"old": Ed25519PrivateKey.generate(), "new": Ed25519PrivateKey.generate()}


@dataclass(frozen=True)
class Platform:
    kind: str
    credentials: dict[str, str]
    secret: str  # the credential its signatures are checked with
    rotated: dict[str, str]  # the old secret's value and the new one's, by "old" / "new"
    signed: Callable[[str, int], Request]  # (which secret: "old" / "new", a message number) → request


def _slack(which: str, n: int) -> Request:
    body = json.dumps({"type": "event_callback", "api_app_id": "A0APP", "event_id": f"Ev{n}",
                       "event": {"type": "message", "channel": "D0DM", "user": "U0PRIYA", "text": f"hi {n}",
                                 "ts": f"1712345678.{n:06d}", "channel_type": "im"}}).encode()
    stamp = str(int(time.time()))
    secret = {"old": "slack-signing", "new": "slack-signing-rotated"}[which]
    return ("/v1/webhooks/slack", body, {
        "content-type": "application/json", "x-slack-request-timestamp": stamp,
        "x-slack-signature": "v0=" + hmac_hex(secret, b"v0:" + stamp.encode() + b":" + body)})


def _whatsapp(which: str, n: int) -> Request:
    body = json.dumps(whatsapp_body(f"hi {n}", message_id=f"wamid.{n}")).encode()
    secret = {"old": "wa-app-secret", "new": "wa-app-secret-rotated"}[which]
    return ("/v1/webhooks/whatsapp", body, {"content-type": "application/json",
                                            "x-hub-signature-256": "sha256=" + hmac_hex(secret, body)})


def _discord(which: str, n: int) -> Request:
    body = json.dumps({
        "id": str(1000 + n), "application_id": "9001", "type": 2, "token": f"token-{n}", "version": 1,
        "channel_id": "555", "user": {"id": "80351110224678912", "username": "priya"},
        "data": {"id": "77", "name": "ask", "type": 1, "options": [{"name": "question", "type": 3, "value": f"q{n}"}]},
    }).encode()
    stamp = str(int(time.time()))
    return ("/v1/webhooks/discord", body, {
        "content-type": "application/json", "x-signature-timestamp": stamp,
        "x-signature-ed25519": _DISCORD_KEYS[which].sign(stamp.encode() + body).hex()})


PLATFORMS = [
    Platform("slack", {"app_id": "A0APP", "bot_token": "xoxb-1", "signing_secret": "slack-signing",
                       "bot_user_id": "UBOT"},
             "signing_secret", {"old": "slack-signing", "new": "slack-signing-rotated"}, _slack),
    Platform("whatsapp", {"phone_number_id": "1055", "token": "wa-token", "app_secret": "wa-app-secret",
                          "verify_token": "wa-verify"},
             "app_secret", {"old": "wa-app-secret", "new": "wa-app-secret-rotated"}, _whatsapp),
    Platform("discord", {"application_id": "9001", "public_key": _public(_DISCORD_KEYS["old"]),
                         "bot_token": "discord-bot-token"},
             "public_key", {"old": _public(_DISCORD_KEYS["old"]), "new": _public(_DISCORD_KEYS["new"])}, _discord),
]


@contextmanager
def held_while_changed_elsewhere(binding: ChannelBinding) -> Iterator[Callable[[dict[str, str]], None]]:
    """The storing thread waits at its INSERT (held_inserts); what it is given writes a
    binding's credentials as another process would (this process's cache hears nothing of
    it), committed with the lock's release."""
    with inserts_held(commit=True) as cursor:

        def change(credentials: dict[str, str]) -> None:
            cast = "CAST(%s AS jsonb)" if connection.vendor == "postgresql" else "%s"
            cursor.execute(f"UPDATE channels_app_channelbinding SET credentials = {cast} WHERE id = %s",
                           [json.dumps(credentials), binding.pk])

        yield change


def _stored(kind: str) -> int:
    return InboundEvent.objects.filter(binding__kind=kind).count()


@pytest.mark.parametrize("signing", PLATFORMS, ids=[p.kind for p in PLATFORMS])
def test_a_webhook_the_screening_verified_is_stored_on_that_verdict_without_a_second_check(
        world, telegram, platform, settings, signing):
    """The signature is computed once, by the screening: a secret rotated elsewhere after
    the webhook was screened, and seen by this process before the storing thread takes it,
    does not turn it away (the thread checking it again against the new secret answered
    401 and stored nothing)."""
    ttl = 3.0
    settings.QORVEN_ROUTE_CACHE_SECONDS = ttl
    binding = binding_create(tenant=world.tenant_b, qor=world.qor_b, kind=signing.kind,
                             credentials=dict(signing.credentials))
    assert [r.status_code for r in asgi_post(signing.signed("old", 1))] == [200]  # this process has read it
    read_by = time.monotonic() + ttl
    assert _stored(signing.kind) == 1
    with held_while_changed_elsewhere(binding) as change:
        acme, acme_answers = posting(tg(telegram_update("acme, while it is slow", message_id=3)))
        waiting_reaches(1)
        time.sleep(0.3)  # the storing thread has taken it and waits at its INSERT
        screened, screened_answers = posting(signing.signed("old", 2))
        waiting_reaches(2)
        assert time.monotonic() < read_by, "screened after the cache's entry aged out: the test proves nothing"
        change({**signing.credentials, signing.secret: signing.rotated["new"]})
        time.sleep(max(0.0, read_by - time.monotonic()) + 0.2)  # the entry ages: the thread would read it again
    for thread in (acme, screened):
        thread.join(30)
    assert [r.status_code for r in acme_answers + screened_answers] == [200, 200]
    assert _stored(signing.kind) == 2
    # The binding as it is now is what later webhooks are checked against.
    assert [r.status_code for r in asgi_post(signing.signed("old", 4))] == [401]
    assert [r.status_code for r in asgi_post(signing.signed("new", 5))] == [200]
    assert _stored(signing.kind) == 3


@pytest.mark.parametrize("signing", PLATFORMS, ids=[p.kind for p in PLATFORMS])
def test_a_webhook_signed_with_a_rotated_secret_is_refused_though_a_stale_entry_vouched_for_it(
        world, platform, settings, signing):
    """The screening reads an entry past its time to tell whose a webhook is, not whether
    it is genuine: the thread verifies it against the binding as it is now."""
    settings.QORVEN_ROUTE_CACHE_SECONDS = 0.001
    binding = binding_create(tenant=world.tenant_b, qor=world.qor_b, kind=signing.kind,
                             credentials=dict(signing.credentials))
    assert [r.status_code for r in asgi_post(signing.signed("old", 1))] == [200]
    ChannelBinding.objects.filter(pk=binding.pk).update(
        credentials={**signing.credentials, signing.secret: signing.rotated["new"]})  # no signal: as elsewhere
    time.sleep(0.01)
    assert [r.status_code for r in asgi_post(signing.signed("old", 2))] == [401]
    assert [r.status_code for r in asgi_post(signing.signed("new", 3))] == [200]
    assert _stored(signing.kind) == 2


@pytest.mark.parametrize("signing", PLATFORMS, ids=[p.kind for p in PLATFORMS])
def test_a_forged_webhook_for_a_binding_this_process_has_not_read_is_refused_by_the_storing_thread(
        world, platform, signing):
    binding_create(tenant=world.tenant_b, qor=world.qor_b, kind=signing.kind, credentials=dict(signing.credentials))
    assert [r.status_code for r in asgi_post(signing.signed("new", 1))] == [401]
    assert [r.status_code for r in asgi_post(signing.signed("old", 2))] == [200]
    assert _stored(signing.kind) == 1
