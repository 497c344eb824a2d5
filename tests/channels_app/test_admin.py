from __future__ import annotations

import pytest

from channels_app.models import ChannelBinding, PairingRequest

from .payloads import post_telegram, telegram_update


@pytest.fixture
def admin_client(client, world):
    world.alice.is_staff = world.alice.is_superuser = True
    world.alice.save(update_fields=["is_staff", "is_superuser"])
    client.force_login(world.alice)
    return client


def test_binding_secrets_never_appear_in_the_admin(admin_client, world, telegram):
    listing = admin_client.get("/admin/channels_app/channelbinding/").content.decode()
    page = admin_client.get(f"/admin/channels_app/channelbinding/{telegram.pk}/change/").content.decode()
    for html in (listing, page):
        assert "111:AAA" not in html and "tg-secret-a" not in html
    assert "secret, token, username" in page  # which keys are set, not their values


def test_admin_can_replace_one_credential_and_keep_the_others(admin_client, world, telegram):
    response = admin_client.post(f"/admin/channels_app/channelbinding/{telegram.pk}/change/", {
        "tenant": world.tenant_a.pk, "qor": world.qor_a.pk, "kind": "telegram", "name": telegram.name,
        "lookup_key": telegram.lookup_key, "unpaired_response": "code", "enabled": "on",
        "new_credentials": '{"token": "222:BBB"}',
    })
    assert response.status_code == 302, response.content.decode()[:2000]
    telegram.refresh_from_db()
    assert telegram.credentials == {"token": "222:BBB", "secret": "tg-secret-a", "username": "aria_bot"}


@pytest.mark.django_db(transaction=True)
def test_the_admin_approve_action_admits_the_sender(admin_client, world, telegram, platform, drain):
    post_telegram(admin_client, telegram_update("hi", first_name="Ravi"))
    drain()
    pairing = PairingRequest.objects.get()
    admin_client.post("/admin/channels_app/pairingrequest/", {
        "action": "approve", "_selected_action": [pairing.pk]})
    pairing.refresh_from_db()
    assert (pairing.state, pairing.decided_by, pairing.decided_via) == ("approved", world.alice, "admin")
    assert pairing.identity.user.username == "telegram-ravi"
    assert ChannelBinding.objects.count() == 1
